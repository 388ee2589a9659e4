package store_test

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/store"
)

// TestUnavailable: the drivers' own errors for a database that went away
// or filled its disk are typed *fault.Unavailable, by type and never by
// text — an error that only quotes the words is left as it is.
func TestUnavailable(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want string // the What of the *fault.Unavailable; "" for none
	}{
		{"nil", nil, ""},
		{"server shutting down (57P01)", fmt.Errorf("insert: %w", &pgconn.PgError{Code: "57P01"}), "the database (connection lost)"},
		{"server starting (57P03)", &pgconn.PgError{Code: "57P03"}, "the database (connection lost)"},
		{"connection exception (08006)", &pgconn.PgError{Code: "08006"}, "the database (connection lost)"},
		{"disk full (53100)", &pgconn.PgError{Code: "53100"}, "the database (disk full)"},
		{"a unique violation", &pgconn.PgError{Code: "23505"}, ""},
		{"a bad connection", fmt.Errorf("query: %w", driver.ErrBadConn), "the database (connection lost)"},
		{"pgx's closed connection", fmt.Errorf("begin: %w", pgconn.ErrConnClosed), "the database (connection lost)"},
		{"an answer cut short", fmt.Errorf("get workload: %w", io.ErrUnexpectedEOF), "the database (connection lost)"},
		{"a socket reset", fmt.Errorf("insert: %w", &net.OpError{Op: "read", Net: "unix", Err: errors.New("connection reset by peer")}), "the database (connection lost)"},
		{"the words conn closed only", errors.New("begin: conn closed"), ""},
		{"the words unexpected EOF only", errors.New("unexpected EOF"), ""},
		{"already typed", &fault.Unavailable{What: "the registry", Err: errors.New("down")}, "the registry"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := store.Unavailable(c.err)
			var un *fault.Unavailable
			switch {
			case c.want == "" && errors.As(got, &un):
				t.Fatalf("Unavailable(%v) = %q, want it left as it was", c.err, un.What)
			case c.want != "" && !errors.As(got, &un):
				t.Fatalf("Unavailable(%v) = %v, want %q", c.err, got, c.want)
			case c.want != "" && un.What != c.want:
				t.Fatalf("Unavailable(%v) says %q, want %q", c.err, un.What, c.want)
			case !errors.Is(got, c.err) && c.err != nil:
				t.Fatalf("Unavailable(%v) = %v: the cause is lost", c.err, got)
			}
		})
	}
}
