package audit_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/audit"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/store/auditlog"
)

// TestCheckpointSignature: a checkpoint verifies with its key only, and any
// change to what it says breaks it.
func TestCheckpointSignature(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	other, _, _ := ed25519.GenerateKey(nil)
	at := time.Date(2026, 11, 30, 9, 0, 0, 123456789, time.FixedZone("CET", 3600))
	c := audit.Sign(priv, 42, strings.Repeat("ab", 32), at)
	if !c.At.Equal(at.Truncate(time.Microsecond)) || c.At.Location() != time.UTC || c.KeyID != audit.KeyID(pub) || len(c.KeyID) != 16 {
		t.Fatalf("signed: %+v", c)
	}
	if err := c.Verify(pub); err != nil {
		t.Fatalf("verify: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*audit.Checkpoint)
		pub  ed25519.PublicKey
		want string
	}{
		{"another record", func(c *audit.Checkpoint) { c.Seq = 43 }, pub, "forged or altered"},
		{"another hash", func(c *audit.Checkpoint) { c.Hash = strings.Repeat("cd", 32) }, pub, "forged or altered"},
		{"another time", func(c *audit.Checkpoint) { c.At = c.At.Add(time.Microsecond) }, pub, "forged or altered"},
		{"not base64", func(c *audit.Checkpoint) { c.Signature = "!" }, pub, "not a base64 ed25519 signature"},
		{"another key", func(*audit.Checkpoint) {}, other, "it is not signed by key " + audit.KeyID(other)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := c
			tc.edit(&d)
			if err := d.Verify(tc.pub); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("verify: %v, want %q", err, tc.want)
			}
		})
	}
}

// TestKeyFiles: keygen's files load; they are not overwritten; a private key
// every user can read, a key of another kind and the halves swapped are
// refused, naming the file.
func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	prefix := filepath.Join(dir, "ck")
	pub, err := audit.GenerateKeyFiles(prefix)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := audit.LoadPrivateKey(prefix + ".key")
	if err != nil || !pub.Equal(priv.Public()) {
		t.Fatalf("private key: %v", err)
	}
	if back, err := audit.LoadPublicKey(prefix + ".pub"); err != nil || !pub.Equal(back) {
		t.Fatalf("public key: %v", err)
	}
	if fi, _ := os.Stat(prefix + ".key"); fi.Mode().Perm() != 0o600 {
		t.Errorf("private key file mode %v", fi.Mode())
	}
	if _, err := audit.GenerateKeyFiles(prefix); err == nil || !strings.Contains(err.Error(), "exists already") {
		t.Errorf("second keygen at one prefix: %v", err)
	}
	if again, err := audit.LoadPrivateKey(prefix + ".key"); err != nil || !again.Equal(priv) {
		t.Errorf("the key changed after a refused keygen: %v", err)
	}
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKCS8PrivateKey(ec)
	ecKey := filepath.Join(dir, "ec.key")
	os.WriteFile(ecKey, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
	der, _ = x509.MarshalPKIXPublicKey(&ec.PublicKey)
	ecPub := filepath.Join(dir, "ec.pub")
	os.WriteFile(ecPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644)
	open := filepath.Join(dir, "open.key")
	b, _ := os.ReadFile(prefix + ".key")
	os.WriteFile(open, b, 0o644)
	os.Chmod(open, 0o644)
	for _, tc := range []struct {
		name string
		load func() error
		want string
	}{
		{"readable by everyone", func() error { _, err := audit.LoadPrivateKey(open); return err }, open + " is readable by every user (mode 0644): chmod 600"},
		{"ECDSA private key", func() error { _, err := audit.LoadPrivateKey(ecKey); return err }, ecKey + " is a ECDSA key, not ed25519"},
		{"ECDSA public key", func() error { _, err := audit.LoadPublicKey(ecPub); return err }, ecPub + " is a ECDSA public key, not ed25519"},
		{"public key as private", func() error { _, err := audit.LoadPrivateKey(prefix + ".pub"); return err }, "holds a \"PUBLIC KEY\""},
		{"private key as public", func() error { _, err := audit.LoadPublicKey(prefix + ".key"); return err }, "holds a \"PRIVATE KEY\", not a \"PUBLIC KEY\""},
		{"missing", func() error { _, err := audit.LoadPrivateKey(filepath.Join(dir, "none.key")); return err }, "none.key: no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.load(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("load: %v, want %q", err, tc.want)
			}
		})
	}
	// The development key: made once, then kept, its public half rewritten.
	dev := filepath.Join(dir, "state", "dev")
	k1, err := audit.EnsureKeyFiles(dev)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(dev + ".pub")
	k2, err := audit.EnsureKeyFiles(dev)
	if err != nil || !k1.Equal(k2) {
		t.Fatalf("second EnsureKeyFiles: %v, same key %v", err, k1.Equal(k2))
	}
	if p, err := audit.LoadPublicKey(dev + ".pub"); err != nil || !p.Equal(k1.Public()) {
		t.Errorf("development public key: %v", err)
	}
}

// openLog is the audit log of a fresh SQLite database, with n records.
func openLog(t *testing.T, n int) *auditlog.Store {
	t.Helper()
	db, err := store.Open(context.Background(), store.SQLite, filepath.Join(t.TempDir(), "g.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	st := auditlog.New(db)
	appendN(t, st, n)
	return st
}

func appendN(t *testing.T, st *auditlog.Store, n int) {
	t.Helper()
	for range n {
		if _, err := st.AppendAudit(context.Background(), audit.Record{At: time.Now(), Actor: "a", Action: "POST /api/v1/tokens", Decision: audit.Allow, Status: 201}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCheckpointer: the head is signed when it has moved, to the log (both
// formats, read back by ReadCheckpoints), the file and the database; a
// second replica signing the same head is no error.
func TestCheckpointer(t *testing.T) {
	ctx := context.Background()
	_, priv, _ := ed25519.GenerateKey(nil)
	pub := priv.Public().(ed25519.PublicKey)
	st := openLog(t, 0)
	var jsonLog, textLog bytes.Buffer
	file := filepath.Join(t.TempDir(), "sink", "checkpoints.jsonl")
	if _, err := audit.NewCheckpointer(audit.CheckpointerOptions{Store: st, Key: priv, Log: slog.Default(), File: file, Now: time.Now}); err == nil {
		t.Fatal("a checkpoint file in a missing directory was accepted")
	}
	file = filepath.Join(t.TempDir(), "checkpoints.jsonl")
	now := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	cp, err := audit.NewCheckpointer(audit.CheckpointerOptions{Store: st, Key: priv, Log: slog.New(slog.NewJSONHandler(&jsonLog, nil)), File: file, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("checkpoint file: %v %v", fi, err)
	}
	if _, ok, err := cp.Checkpoint(ctx); ok || err != nil {
		t.Fatalf("checkpoint of an empty log: %v %v", ok, err)
	}
	appendN(t, st, 3)
	first, ok, err := cp.Checkpoint(ctx)
	if !ok || err != nil || first.Seq != 3 || first.Verify(pub) != nil {
		t.Fatalf("first checkpoint: %+v %v %v", first, ok, err)
	}
	if _, ok, err := cp.Checkpoint(ctx); ok || err != nil {
		t.Fatalf("checkpoint of an unmoved head: %v %v", ok, err)
	}
	appendN(t, st, 2)
	now = now.Add(time.Minute)
	second, ok, err := cp.Checkpoint(ctx)
	if !ok || err != nil || second.Seq != 5 {
		t.Fatalf("second checkpoint: %+v %v %v", second, ok, err)
	}
	// Another replica, logging as text, signs the same head.
	replica, _ := audit.NewCheckpointer(audit.CheckpointerOptions{Store: st, Key: priv, Log: slog.New(slog.NewTextHandler(&textLog, nil)), Now: func() time.Time { return now.Add(time.Second) }})
	third, ok, err := replica.Checkpoint(ctx)
	if !ok || err != nil || third.Seq != 5 {
		t.Fatalf("another replica's checkpoint of the same head: %+v %v %v", third, ok, err)
	}
	want := []audit.Checkpoint{first, second}
	if got, err := st.Checkpoints(ctx); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("in the database:\n got %+v %v\nwant %+v", got, err, want)
	}
	fileData, _ := os.ReadFile(file)
	for _, tc := range []struct {
		name, data string
		want       []audit.Checkpoint
		other      int
	}{
		{"file", string(fileData), want, 0},
		{"JSON log", `{"level":"INFO","msg":"gantry is serving"}` + "\n" + jsonLog.String(), want, 1},
		{"text log", "time=x level=INFO msg=\"gantry is serving\"\n\n" + textLog.String(), []audit.Checkpoint{third}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, other, err := audit.ReadCheckpoints(strings.NewReader(tc.data))
			if err != nil || other != tc.other || len(got) != len(tc.want) {
				t.Fatalf("read %d checkpoints, %d other lines, %v from:\n%s", len(got), other, err, tc.data)
			}
			for i := range got {
				if got[i].Seq != tc.want[i].Seq || got[i].Hash != tc.want[i].Hash || !got[i].At.Equal(tc.want[i].At) || got[i].Signature != tc.want[i].Signature || got[i].Verify(pub) != nil {
					t.Errorf("checkpoint %d:\n got %+v\nwant %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
	if strings.Contains(jsonLog.String()+textLog.String(), "PRIVATE") {
		t.Error("the log mentions the private key")
	}
	if _, _, err := audit.ReadCheckpoints(strings.NewReader("{}\n{\"seq\":\"x\",\"signature\":\"s\"}\n")); err == nil || !strings.Contains(err.Error(), "line 2: not a checkpoint") {
		t.Errorf("a broken checkpoint line: %v", err)
	}
}

// TestVerifyAgainst: what the checkpoint check finds beyond the chain — a
// record a checkpoint covers missing from the middle, a log emptied, no valid
// checkpoint at all — and that the same checkpoint from two places counts
// once.
func TestVerifyAgainst(t *testing.T) {
	ctx := context.Background()
	pub, priv, _ := ed25519.GenerateKey(nil)
	st := openLog(t, 4)
	var cps []audit.Checkpoint
	if err := st.EachAudit(ctx, func(r audit.Record) error {
		cps = append(cps, audit.Sign(priv, r.Seq, r.Hash, r.At))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	got, err := audit.VerifyAgainst(ctx, st, append(cps, cps...), pub)
	if err != nil || len(got.Problems) != 0 || got.Valid != 4 || got.Latest != cps[3] {
		t.Fatalf("intact: %+v %v", got, err)
	}
	if got, _ := audit.VerifyAgainst(ctx, st, nil, pub); len(got.Problems) != 1 || got.Problems[0].String() != "no checkpoints to check the log against" {
		t.Errorf("no checkpoints: %v", got.Problems)
	}
	other, _, _ := ed25519.GenerateKey(nil)
	if got, _ := audit.VerifyAgainst(ctx, st, cps, other); len(got.Problems) != 5 || !strings.Contains(got.Problems[0].String(), "none of 4 checkpoint(s) carries a valid signature") {
		t.Errorf("another key: %v", got.Problems)
	}
	// Key rotation: checkpoints of the old key verify with it given too.
	_, newKey, _ := ed25519.GenerateKey(nil)
	head, _, _ := st.LatestAudit(ctx)
	rotated := append(cps[:3:3], audit.Sign(newKey, head.Seq, head.Hash, time.Now()))
	if got, _ := audit.VerifyAgainst(ctx, st, rotated, pub, newKey.Public().(ed25519.PublicKey)); len(got.Problems) != 0 || got.Valid != 4 {
		t.Errorf("two keys: %+v", got)
	}
	// The same log with record 2 gone.
	var recs []audit.Record
	st.EachAudit(ctx, func(r audit.Record) error { recs = append(recs, r); return nil })
	missing := memLog{recs[0], recs[2], recs[3]}
	if got, _ := audit.VerifyAgainst(ctx, missing, cps, pub); len(got.Problems) != 1 || got.Problems[0].Seq != 2 || !strings.Contains(got.Problems[0].Message, "is missing, though the checkpoint signed at") {
		t.Errorf("record 2 missing: %v", got.Problems)
	}
	if got, _ := audit.VerifyAgainst(ctx, memLog{}, cps, pub); len(got.Problems) != 1 || !strings.Contains(got.Problems[0].String(), "record 4: the log is empty but a checkpoint signed at") {
		t.Errorf("emptied: %v", got.Problems)
	}
}

// memLog is a log in memory, as rewritten by hand.
type memLog []audit.Record

func (m memLog) AppendAudit(context.Context, audit.Record) (audit.Record, error) {
	panic("read only")
}

func (m memLog) AuditRecords(context.Context, audit.Filter) ([]audit.Record, error) { return m, nil }

func (m memLog) EachAudit(_ context.Context, fn func(audit.Record) error) error {
	for _, r := range m {
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}
