package audit

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"sort"
	"time"
)

// Checkpoint is a signed statement that record Seq of the log had hash Hash at
// time At. The hash of a record covers every record before it, so a checkpoint
// pins the whole log up to Seq: with the signing key kept away from the
// database, whoever can write the database can no longer rewrite, truncate or
// recompute the chain up to the latest checkpoint unnoticed.
type Checkpoint struct {
	Seq   int64     `json:"seq"`
	Hash  string    `json:"hash"`
	At    time.Time `json:"at"`
	KeyID string    `json:"key_id"` // KeyID of the signing key (a hint: not signed)
	// Signature is the ed25519 signature of the checkpoint's message, in
	// standard base64.
	Signature string `json:"signature"`
}

// checkpointMessage is the byte string a checkpoint signs: fixed and
// versioned, so that a signature means one thing only.
func checkpointMessage(seq int64, hash string, at time.Time) []byte {
	return fmt.Appendf(nil, "gantry-audit-checkpoint/v1\n%d\n%s\n%d", seq, hash, at.UnixMicro())
}

// Sign makes the checkpoint of record seq with hash at time at (kept to the
// microsecond, in UTC).
func Sign(priv ed25519.PrivateKey, seq int64, hash string, at time.Time) Checkpoint {
	at = at.UTC().Truncate(time.Microsecond)
	sig := ed25519.Sign(priv, checkpointMessage(seq, hash, at))
	return Checkpoint{Seq: seq, Hash: hash, At: at, KeyID: KeyID(priv.Public().(ed25519.PublicKey)),
		Signature: base64.StdEncoding.EncodeToString(sig)}
}

// Verify checks c's signature with pub.
func (c Checkpoint) Verify(pub ed25519.PublicKey) error {
	sig, err := base64.StdEncoding.DecodeString(c.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return errors.New("its signature is not a base64 ed25519 signature")
	}
	if !ed25519.Verify(pub, checkpointMessage(c.Seq, c.Hash, c.At), sig) {
		if c.KeyID != KeyID(pub) {
			return fmt.Errorf("it is not signed by key %s (it names key %q)", KeyID(pub), c.KeyID)
		}
		return errors.New("its signature does not match its contents: forged or altered")
	}
	return nil
}

// when is how a checkpoint's time is said in problems.
func (c Checkpoint) when() string { return c.At.UTC().Format(time.RFC3339) }

// CheckpointStore keeps signed checkpoints beside the log.
type CheckpointStore interface {
	Store
	// LatestAudit returns the newest record; false when the log is empty.
	LatestAudit(ctx context.Context) (Record, bool, error)
	// AddCheckpoint stores c; one of the same record already stored is a
	// *fault.Conflict.
	AddCheckpoint(ctx context.Context, c Checkpoint) error
	// Checkpoints lists the stored checkpoints in sequence order.
	Checkpoints(ctx context.Context) ([]Checkpoint, error)
}

// Checked is what VerifyAgainst found.
type Checked struct {
	Valid    int        // checkpoints whose signature verified
	Latest   Checkpoint // the valid checkpoint covering the most records (zero: none)
	Problems []Problem
}

// VerifyAgainst checks the log against signed checkpoints (those kept outside
// the database, and those in it). A checkpoint no key in pubs signed is a
// problem (forged or altered). For every valid one, the record it covers must
// be there with the hash it signed — a record recomputed along with the whole
// chain after an edit no longer has it — and the log must reach at least as
// far as the latest one (otherwise its newest records were deleted).
// VerifyAgainst does not walk the chain's links: run Verify as well, which
// ties every earlier record to the one a checkpoint covers.
func VerifyAgainst(ctx context.Context, s Store, cps []Checkpoint, pubs ...ed25519.PublicKey) (Checked, error) {
	var out Checked
	if len(pubs) == 0 {
		return out, errors.New("no public key to verify checkpoints with")
	}
	type key struct {
		seq  int64
		hash string
		at   int64
	}
	seen := map[key]bool{}
	covers := map[int64][]Checkpoint{} // valid checkpoints by the record they cover
	for _, c := range cps {
		if err := verifyAny(c, pubs); err != nil {
			out.Problems = append(out.Problems, Problem{c.Seq, fmt.Sprintf("the checkpoint dated %s is not valid: %v", c.when(), err)})
			continue
		}
		k := key{c.Seq, c.Hash, c.At.UnixMicro()}
		if seen[k] {
			continue // the same checkpoint from the database and from outside it
		}
		seen[k] = true
		out.Valid++
		covers[c.Seq] = append(covers[c.Seq], c)
		if c.Seq > out.Latest.Seq || (c.Seq == out.Latest.Seq && c.At.After(out.Latest.At)) {
			out.Latest = c
		}
	}
	if out.Valid == 0 {
		msg := "no checkpoints to check the log against"
		if len(cps) > 0 {
			msg = fmt.Sprintf("none of %d checkpoint(s) carries a valid signature by the given key(s): nothing to check the log against", len(cps))
		}
		out.Problems = append([]Problem{{0, msg}}, out.Problems...)
		return out, nil
	}
	var last int64
	found := map[int64]bool{}
	err := s.EachAudit(ctx, func(r Record) error {
		last = max(last, r.Seq)
		for _, c := range covers[r.Seq] {
			found[r.Seq] = true
			if r.Hash != c.Hash {
				out.Problems = append(out.Problems, Problem{r.Seq, fmt.Sprintf("does not match the signed checkpoint of %s: the log was rewritten", c.when())})
				break
			}
		}
		return nil
	})
	if err != nil {
		return out, err
	}
	if l := out.Latest; l.Seq > last {
		end := fmt.Sprintf("the log ends at record %d", last)
		if last == 0 {
			end = "the log is empty"
		}
		out.Problems = append(out.Problems, Problem{l.Seq, fmt.Sprintf("%s but a checkpoint signed at %s covers record %d: records were deleted", end, l.when(), l.Seq)})
	}
	for seq, cs := range covers {
		if seq <= last && !found[seq] {
			out.Problems = append(out.Problems, Problem{seq, fmt.Sprintf("is missing, though the checkpoint signed at %s covers it: deleted", cs[0].when())})
		}
	}
	sort.SliceStable(out.Problems, func(i, j int) bool { return out.Problems[i].Seq < out.Problems[j].Seq })
	return out, nil
}

// verifyAny checks c against every key; the error is the one for the key c
// names (or the first).
func verifyAny(c Checkpoint, pubs []ed25519.PublicKey) error {
	var first error
	for _, pub := range pubs {
		err := c.Verify(pub)
		if err == nil {
			return nil
		}
		if first == nil || KeyID(pub) == c.KeyID {
			first = err
		}
	}
	return first
}
