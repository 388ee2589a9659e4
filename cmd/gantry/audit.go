package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/gantryhq/gantry/internal/audit"
	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/store/auditlog"
)

// maxCheckpointDownload bounds what verify reads from a checkpoint URL.
const maxCheckpointDownload = 256 << 20

// auditVerifyCmd walks the audit log and names every record that was changed,
// deleted or inserted behind Gantry's back, and with --checkpoints and --key
// every disagreement with the signed checkpoints (a rewrite with every hash
// recomputed, the newest records deleted); exit 1 if any.
func auditVerifyCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("gantry audit verify", stderr)
	cfgPath := fs.String("config", "", "configuration file (YAML); also $GANTRY_CONFIG")
	db := fs.String("db", "", "database: SQLite file or PostgreSQL URL (default: from the configuration)")
	dbDriver := fs.String("db-driver", "", "database driver: sqlite or postgres")
	from := fs.String("checkpoints", "", "signed checkpoints kept outside the database: a file, an http(s) URL or - (stdin) of JSON lines (audit.checkpointFile) or Gantry's log")
	var keys []string
	fs.Func("key", "public key checkpoints are signed with (PEM; gantry audit keygen wrote PREFIX.pub); repeat it for keys rotated out", func(v string) error {
		keys = append(keys, v)
		return nil
	})
	if pos, err := parse(fs, args); err != nil {
		return err
	} else if len(pos) > 0 {
		return usageError{"verify takes no arguments"}
	}
	if *from != "" && len(keys) == 0 {
		return usageError{"--checkpoints needs --key: the public key the checkpoints are signed with"}
	}
	var pubs []ed25519.PublicKey
	for _, path := range keys {
		pub, err := audit.LoadPublicKey(path)
		if err != nil {
			return fmt.Errorf("--key: %w", err)
		}
		pubs = append(pubs, pub)
	}
	var outside []audit.Checkpoint
	if *from != "" {
		var other int
		var err error
		if outside, other, err = readCheckpoints(ctx, *from); err != nil {
			return fmt.Errorf("--checkpoints %s: %w", *from, err)
		}
		if len(outside) == 0 {
			return fmt.Errorf("--checkpoints %s: no checkpoints in it (%d other lines)", *from, other)
		}
		fmt.Fprintf(stdout, "%d checkpoints read from %s (%d other lines skipped)\n", len(outside), *from, other)
	}
	cfg, err := loadConfig(*cfgPath, config.Flags{"db": *db, "db-driver": *dbDriver})
	if err != nil {
		return err
	}
	database, err := store.Open(ctx, cfg.Database.Driver, string(cfg.Database.DSN))
	if err != nil {
		return err
	}
	defer database.Close()
	st := auditlog.New(database)
	n, problems, err := audit.Verify(ctx, st)
	if err != nil {
		return err
	}
	var checked audit.Checked
	if len(pubs) > 0 {
		inside, err := st.Checkpoints(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%d checkpoints in the database\n", len(inside))
		if checked, err = audit.VerifyAgainst(ctx, st, append(outside, inside...), pubs...); err != nil {
			return err
		}
		problems = append(problems, checked.Problems...)
	}
	for _, p := range problems {
		fmt.Fprintln(stdout, p)
	}
	if len(problems) > 0 {
		return fmt.Errorf("audit log tampered with: %d problem(s) in %d records", len(problems), n)
	}
	fmt.Fprintf(stdout, "audit log intact: %d records, hash chain verified\n", n)
	switch l := checked.Latest; {
	case len(pubs) == 0:
		fmt.Fprintln(stdout, "not checked against signed checkpoints (--checkpoints, --key): without them, a rewrite by whoever can write the database (records deleted, or edited with every hash recomputed) cannot be detected")
	case *from == "":
		fmt.Fprintf(stdout, "matches %d signed checkpoints, the latest of record %d signed at %s; they were read from the database only, so deleting them with the newest records would go unnoticed: pass --checkpoints\n", checked.Valid, l.Seq, l.At.Format(time.RFC3339))
	default:
		fmt.Fprintf(stdout, "matches %d signed checkpoints, the latest of record %d signed at %s; records after it are not covered\n", checked.Valid, l.Seq, l.At.Format(time.RFC3339))
	}
	return nil
}

// readCheckpoints reads checkpoints from a file, an http(s) URL (at most
// maxCheckpointDownload bytes) or stdin (-).
func readCheckpoints(ctx context.Context, from string) ([]audit.Checkpoint, int, error) {
	var r io.Reader
	switch {
	case from == "-":
		r = os.Stdin
	case strings.HasPrefix(from, "http://") || strings.HasPrefix(from, "https://"):
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, from, nil)
		if err != nil {
			return nil, 0, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, 0, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, 0, fmt.Errorf("answered %s", resp.Status)
		}
		lr := &io.LimitedReader{R: resp.Body, N: maxCheckpointDownload + 1}
		cps, other, err := audit.ReadCheckpoints(lr)
		if lr.N <= 0 {
			err = fmt.Errorf("larger than %d MiB", maxCheckpointDownload>>20)
		}
		return cps, other, err
	default:
		f, err := os.Open(from)
		if err != nil {
			return nil, 0, errors.Unwrap(err) // the flag names the file
		}
		defer f.Close()
		r = f
	}
	return audit.ReadCheckpoints(r)
}

// auditKeygenCmd makes a checkpoint signing key pair: PREFIX.key for Gantry
// (audit.checkpointKey) and PREFIX.pub for gantry audit verify --key.
func auditKeygenCmd(args []string, stdout, stderr io.Writer) error {
	fs := flags("gantry audit keygen", stderr)
	out := fs.String("out", "", "write PREFIX.key (private, 0600) and PREFIX.pub (public)")
	if pos, err := parse(fs, args); err != nil {
		return err
	} else if len(pos) > 0 || *out == "" {
		return usageError{"keygen takes --out PREFIX and no arguments"}
	}
	pub, err := audit.GenerateKeyFiles(*out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, `key %s:
  %s.key  private: Gantry's audit.checkpointKey (a file or Secret only Gantry reads; never in the database)
  %s.pub  public: gantry audit verify --key %s.pub
`, audit.KeyID(pub), *out, *out, *out)
	return nil
}
