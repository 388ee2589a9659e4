// Package storetest gives tests a database of their own on the test
// PostgreSQL server that make test starts (GANTRY_TEST_POSTGRES_DSN): a fresh
// schema per test, dropped when it ends.
package storetest

import (
	"crypto/rand"
	"database/sql"
	"os"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // registers driver "pgx"
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
