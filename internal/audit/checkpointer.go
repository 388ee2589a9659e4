package audit

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
)

// Checkpointer signs the head of the log whenever it has moved and writes the
// checkpoint where the database's writers cannot reach it: the structured log
// (message "audit checkpoint"; ship it somewhere append-only) and, when set, a
// file of JSON lines opened for appending only; then to the database, for
// convenience. The private key is never logged.
type Checkpointer struct {
	store CheckpointStore
	key   ed25519.PrivateKey
	log   *slog.Logger
	file  string
	now   func() time.Time

	mu   sync.Mutex
	last int64 // the record this checkpointer last signed
}

// CheckpointerOptions configure a Checkpointer.
type CheckpointerOptions struct {
	Store CheckpointStore
	Key   ed25519.PrivateKey
	Log   *slog.Logger
	// File, when set, gets every checkpoint as one JSON line (created 0600,
	// opened for appending only, at each write).
	File string
	Now  func() time.Time // default time.Now
}

// NewCheckpointer checks that the file sink can be appended to.
func NewCheckpointer(o CheckpointerOptions) (*Checkpointer, error) {
	if o.Store == nil || o.Key == nil || o.Log == nil {
		return nil, errors.New("checkpointer: store, key and log are required")
	}
	if o.Now == nil {
		return nil, errors.New("audit: Now (the server's clock) is required")
	}
	if o.File != "" {
		if err := appendLine(o.File, nil); err != nil {
			return nil, err // names the file
		}
	}
	return &Checkpointer{store: o.Store, key: o.Key, log: o.Log, file: o.File, now: o.Now}, nil
}

// KeyID is the id of the signing key.
func (c *Checkpointer) KeyID() string { return KeyID(c.key.Public().(ed25519.PublicKey)) }

// Checkpoint signs the newest record unless this checkpointer already signed
// it (or the log is empty), and writes the checkpoint to every sink. A
// checkpoint of the same record already in the database (another replica's)
// is no error.
func (c *Checkpointer) Checkpoint(ctx context.Context) (Checkpoint, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	head, ok, err := c.store.LatestAudit(ctx)
	if err != nil {
		return Checkpoint{}, false, fmt.Errorf("read the audit log's head: %w", err)
	}
	if !ok || head.Seq == c.last {
		return Checkpoint{}, false, nil
	}
	cp := Sign(c.key, head.Seq, head.Hash, c.now())
	c.log.Info("audit checkpoint", "seq", cp.Seq, "hash", cp.Hash, "at", cp.At.Format(time.RFC3339Nano), "key_id", cp.KeyID, "signature", cp.Signature)
	if c.file != "" {
		line, err := json.Marshal(cp)
		if err != nil {
			return cp, false, err
		}
		if err := appendLine(c.file, append(line, '\n')); err != nil {
			return cp, false, fmt.Errorf("audit checkpoint file: %w", err)
		}
	}
	var conflict *fault.Conflict
	if err := c.store.AddCheckpoint(ctx, cp); err != nil && !errors.As(err, &conflict) {
		return cp, false, err
	}
	c.last = cp.Seq
	return cp, true, nil
}

// Run is one pass of the checkpoint loop: Checkpoint, with failures logged.
func (c *Checkpointer) Run(ctx context.Context) {
	if _, _, err := c.Checkpoint(ctx); err != nil && ctx.Err() == nil {
		c.log.Error("audit checkpoint not written; trying again at the next interval", "err", err)
	}
}

// appendLine appends b to the file at path, creating it (0600) if missing; it
// is opened for appending only, never truncated or rewritten.
func appendLine(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	return errors.Join(err, f.Close())
}

// ReadCheckpoints reads checkpoints from a stream of lines: the checkpoint
// file (JSON lines), or Gantry's own log in either format — a JSON line with
// a "signature" field, or a text line with msg="audit checkpoint". Other
// lines are counted and skipped; a checkpoint line that does not parse is an
// error naming its line.
func ReadCheckpoints(r io.Reader) (cps []Checkpoint, other int, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		var c Checkpoint
		switch {
		case strings.HasPrefix(line, "{"):
			var probe struct {
				Signature *string `json:"signature"`
			}
			if json.Unmarshal([]byte(line), &probe) != nil || probe.Signature == nil {
				other++
				continue
			}
			if err := json.Unmarshal([]byte(line), &c); err != nil {
				return cps, other, fmt.Errorf("line %d: not a checkpoint: %w", n, err)
			}
		case strings.Contains(line, `msg="audit checkpoint"`):
			if c, err = parseTextCheckpoint(line); err != nil {
				return cps, other, fmt.Errorf("line %d: not a checkpoint: %w", n, err)
			}
		default:
			other++
			continue
		}
		cps = append(cps, c)
	}
	return cps, other, sc.Err()
}

// parseTextCheckpoint reads a checkpoint from a line of slog's text format
// (key=value, values quoted when they need it).
func parseTextCheckpoint(line string) (Checkpoint, error) {
	kv := map[string]string{}
	for line != "" {
		eq := strings.IndexByte(line, '=')
		if eq < 0 {
			break
		}
		k, rest := line[:eq], line[eq+1:]
		var v string
		if strings.HasPrefix(rest, `"`) {
			q, err := strconv.QuotedPrefix(rest)
			if err != nil {
				return Checkpoint{}, fmt.Errorf("value of %s: %w", k, err)
			}
			v, _ = strconv.Unquote(q)
			rest = rest[len(q):]
		} else {
			end := strings.IndexByte(rest, ' ')
			if end < 0 {
				end = len(rest)
			}
			v, rest = rest[:end], rest[end:]
		}
		kv[k] = v
		line = strings.TrimLeft(rest, " ")
	}
	seq, err := strconv.ParseInt(kv["seq"], 10, 64)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("seq: %w", err)
	}
	at, err := time.Parse(time.RFC3339Nano, kv["at"])
	if err != nil {
		return Checkpoint{}, fmt.Errorf("at: %w", err)
	}
	return Checkpoint{Seq: seq, Hash: kv["hash"], At: at, KeyID: kv["key_id"], Signature: kv["signature"]}, nil
}
