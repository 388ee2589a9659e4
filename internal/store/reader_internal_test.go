package store

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
)

// TestReaderStatements: concurrent reads through the kept statements answer
// what they were asked; a text is prepared once, IN lists are never kept,
// and past maxStatements queries still run, unprepared.
func TestReaderStatements(t *testing.T) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "r.db"))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(4)
	r := newReader(db, true)
	defer r.close(true)
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 50 {
				var got int
				if err := r.QueryRowContext(ctx, `SELECT ? + 1`, g*100+i).Scan(&got); err != nil || got != g*100+i+1 {
					t.Errorf("SELECT %d + 1: %d, %v", g*100+i, got, err)
					return
				}
				rows, err := r.QueryContext(ctx, `SELECT value FROM json_each(?)`, fmt.Sprintf("[%d,%d]", i, i+1))
				if err != nil {
					t.Error(err)
					return
				}
				n := 0
				for rows.Next() {
					n++
				}
				rows.Close()
				if n != 2 {
					t.Errorf("rows: %d, want 2", n)
				}
			}
		})
	}
	wg.Wait()
	if len(r.stmts) != 2 {
		t.Fatalf("%d statements kept, want the 2 texts", len(r.stmts))
	}
	var got int
	if err := r.QueryRowContext(ctx, `SELECT 1 WHERE 1 IN (?, ?)`, 1, 2).Scan(&got); err != nil || got != 1 || len(r.stmts) != 2 {
		t.Fatalf("an IN list: %d, %v; %d kept", got, err, len(r.stmts))
	}
	for i := len(r.stmts); i < maxStatements+5; i++ {
		if err := r.QueryRowContext(ctx, fmt.Sprintf(`SELECT %d`, i)).Scan(&got); err != nil || got != i {
			t.Fatalf("SELECT %d: %d, %v", i, got, err)
		}
	}
	if len(r.stmts) != maxStatements {
		t.Fatalf("%d statements kept, want at most %d", len(r.stmts), maxStatements)
	}
}

// TestTxStatements: a write a transaction runs through TxExec or TxQueryRow
// is prepared before the next transaction and kept, each text once; the
// kept statements answer as plain ones do; transactions using them run
// beside WriteStmts preparing others without waiting on each other (both
// need the writer's one connection); past maxStatements queries still run.
func TestTxStatements(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, SQLite, filepath.Join(t.TempDir(), "w.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.ExecContext(ctx, `CREATE TABLE kv (k INTEGER PRIMARY KEY, v INTEGER)`); err != nil {
		t.Fatal(err)
	}
	kept := func() int { s.writesMu.Lock(); defer s.writesMu.Unlock(); return len(s.writes) }
	before := kept()
	put := func(k, v int) error {
		return s.Tx(ctx, func(tx *sql.Tx) error {
			if _, err := s.TxExec(ctx, tx, `INSERT INTO kv (k, v) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v`, k, v); err != nil {
				return err
			}
			var got int
			if err := s.TxQueryRow(ctx, tx, `SELECT v FROM kv WHERE k = ?`, k).Scan(&got); err != nil || got != v {
				return fmt.Errorf("read back %d: %d, %v", k, got, err)
			}
			return nil
		})
	}
	if err := put(1, 10); err != nil {
		t.Fatal(err)
	}
	if kept() != before {
		t.Fatalf("%d kept after the first transaction, want %d: prepared before the next", kept(), before)
	}
	// An INSERT of several rows, whose text varies with their count, is
	// never kept.
	multi := `INSERT INTO kv (k, v) VALUES (?, ?), (?, ?)`
	for range 2 {
		if err := s.Tx(ctx, func(tx *sql.Tx) error {
			_, err := s.TxExec(ctx, tx, multi, 500, 1, 501, 1)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ExecContext(ctx, `DELETE FROM kv WHERE k >= 500 AND k < 600`); err != nil {
			t.Fatal(err)
		}
	}
	s.writesMu.Lock()
	isKept, asked := s.writes[multi] != nil, s.want[multi]
	s.writesMu.Unlock()
	if isKept || asked {
		t.Fatal("a several-row INSERT was kept")
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 25 {
				if err := put(g*100+i, i); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 20 {
			if _, err := s.WriteStmts(ctx, fmt.Sprintf(`UPDATE kv SET v = v + %d WHERE k = ?`, i)); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Wait()
	if got := kept(); got != before+2+20 {
		t.Fatalf("%d kept, want %d: the two texts once each and WriteStmts' 20", got, before+2+20)
	}
	for i := kept(); i < maxStatements+5; i++ {
		q := fmt.Sprintf(`INSERT INTO kv (k, v) VALUES (?, %d)`, i)
		if err := s.Tx(ctx, func(tx *sql.Tx) error { _, err := s.TxExec(ctx, tx, q, 1000+i); return err }); err != nil {
			t.Fatalf("past the kept statements: %v", err)
		}
	}
	if err := s.Tx(ctx, func(*sql.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if got := kept(); got != maxStatements {
		t.Fatalf("%d kept, want at most %d", got, maxStatements)
	}
	var n int
	if err := s.QueryRowContext(ctx, `SELECT COUNT(*) FROM kv`).Scan(&n); err != nil || n != 100+maxStatements+5-(before+22) {
		t.Fatalf("%d rows, %v; want every write kept", n, err)
	}
}
