// Package audit owns the audit log: what a record holds (actor, action, object,
// decision, reason, time, request id, source address), the hash chain that makes
// the log tamper-evident (each record's hash covers its fields and the hash of
// the record before), and verifying a log: any changed, deleted or inserted
// record is found and named. The chain alone binds records to each other, not
// to anything outside the database: whoever can write the database can delete
// the newest records, or edit one and recompute every hash after it. Signed
// checkpoints of the chain's head (checkpoint.go), kept outside the database,
// close that: VerifyAgainst finds such rewrites up to the latest checkpoint.
package audit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
)

// Decisions.
const (
	Allow = "allow"
	Deny  = "deny"
)

// Record is one audited event.
type Record struct {
	Seq       int64
	At        time.Time
	Actor     string
	Action    string // e.g. "POST /api/v1/workloads"
	Object    string // the request path
	Decision  string
	Status    int
	Reason    string
	RequestID string
	Source    string
	PrevHash  string
	Hash      string
}

// Genesis is the previous hash of the first record.
const Genesis = "0000000000000000000000000000000000000000000000000000000000000000"

// Sum is the chain hash of r given the previous record's hash.
func Sum(r Record, prev string) string {
	b, _ := json.Marshal([]any{prev, r.Seq, r.At.UTC().UnixMicro(), r.Actor, r.Action, r.Object, r.Decision, r.Status, r.Reason, r.RequestID, r.Source})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Store keeps the log.
type Store interface {
	// AppendAudit numbers, chains and stores r (in one transaction with reading
	// the last record) and returns it as stored.
	AppendAudit(ctx context.Context, r Record) (Record, error)
	// AuditRecords lists records matching f, in sequence order.
	AuditRecords(ctx context.Context, f Filter) ([]Record, error)
	// EachAudit calls fn for every record in sequence order.
	EachAudit(ctx context.Context, fn func(Record) error) error
}

// Filter selects records.
type Filter struct {
	Actor    string
	Decision string
	After    int64 // seq: oldest first, after it
	// Newest lists newest first, before Before (0: from the newest).
	Newest bool
	Before int64
	Limit  int
}

// Problem is one break in the chain, or a disagreement with a checkpoint.
type Problem struct {
	Seq     int64 // the record concerned; 0: the log as a whole
	Message string
}

func (p Problem) String() string {
	if p.Seq == 0 {
		return p.Message
	}
	return fmt.Sprintf("record %d: %s", p.Seq, p.Message)
}

// Verify walks the whole log and reports every break: a record whose fields no
// longer give its hash (changed), a gap in the sequence (deleted), a record that
// does not follow from the one before (inserted, or a neighbour deleted).
func Verify(ctx context.Context, s Store) (records int64, problems []Problem, err error) {
	prev, next := Genesis, int64(1)
	err = s.EachAudit(ctx, func(r Record) error {
		records++
		if r.Seq != next {
			problems = append(problems, Problem{r.Seq, fmt.Sprintf("expected record %d here: records %d to %d were deleted, or this one inserted", next, next, r.Seq-1)})
		}
		if r.PrevHash != prev {
			problems = append(problems, Problem{r.Seq, "does not follow from the record before it (inserted, or its predecessor changed or deleted)"})
		}
		if Sum(r, r.PrevHash) != r.Hash {
			problems = append(problems, Problem{r.Seq, "its fields do not match its hash: changed after it was written"})
		}
		prev, next = r.Hash, r.Seq+1
		return nil
	})
	return records, problems, err
}
