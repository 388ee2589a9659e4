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
