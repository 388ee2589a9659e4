// Package storetest gives tests a database of their own: a fresh schema per
// test on the test PostgreSQL server that make test starts
// (GANTRY_TEST_POSTGRES_DSN), dropped when it ends, or a migrated SQLite file.
package storetest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // registers driver "pgx"

	"github.com/gantryhq/gantry/internal/store"
)

// PostgresDSN returns a connection string for a fresh schema on the test
// PostgreSQL server (GANTRY_TEST_POSTGRES_DSN; make test starts one). Without
// one the test is skipped, except in CI, where it fails.
func PostgresDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv("GANTRY_TEST_POSTGRES_DSN")
	if dsn == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("GANTRY_TEST_POSTGRES_DSN is not set: CI must test PostgreSQL (make test starts one)")
		}
		t.Skip("GANTRY_TEST_POSTGRES_DSN not set: PostgreSQL skipped (make test starts one)")
	}
	schema := "t_" + strings.ToLower(rand.Text()[:12])
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Exec("CREATE SCHEMA " + schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if a, err := sql.Open("pgx", dsn); err == nil {
			a.Exec("DROP SCHEMA " + schema + " CASCADE")
			a.Close()
		}
	})
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + "search_path=" + schema
}

// migrated is the file of an empty SQLite database with every migration
// applied, made once per test process.
var migrated struct {
	once sync.Once
	data []byte
	err  error
}

// SQLitePath returns the path of a new SQLite database in t's temporary
// directory with every migration applied: a copy of one migrated once per
// test process. Migrating is the largest cost of starting Gantry in a test
// (about a fifth of the API tests' CPU under the race detector, SQLite being
// C translated to Go); store.Open then finds nothing left to do.
func SQLitePath(t testing.TB) string {
	t.Helper()
	migrated.once.Do(func() {
		dir, err := os.MkdirTemp("", "gantry-storetest-")
		if err != nil {
			migrated.err = err
			return
		}
		defer os.RemoveAll(dir)
		path := filepath.Join(dir, "gantry.db")
		db, err := store.Open(context.Background(), store.SQLite, path)
		if err != nil {
			migrated.err = err
			return
		}
		if migrated.err = db.Close(); migrated.err != nil {
			return
		}
		// The last connection's close checkpoints the write-ahead log into
		// the file and removes it: the file alone is the database.
		if _, err := os.Stat(path + "-wal"); err == nil {
			migrated.err = fmt.Errorf("%s-wal is left after closing: the copy would miss its writes", path)
			return
		}
		migrated.data, migrated.err = os.ReadFile(path)
	})
	if migrated.err != nil {
		t.Fatalf("a migrated SQLite database: %v", migrated.err)
	}
	path := filepath.Join(t.TempDir(), "gantry.db")
	if err := os.WriteFile(path, migrated.data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
