// Package store is Gantry's database: SQLite (pure Go, modernc.org/sqlite)
// as the embedded default and PostgreSQL (pgx) for several replicas, with
// one schema, versioned migrations applied at open, and every multi-row
// change in one transaction. It knows no domain type: the stores the domain
// packages declare are its sub-packages, one per aggregate, each built on
// one DB (workloads, accounts, auditlog, telemetrydb, governance,
// changefeed). What they share is here: the transaction, the placeholder
// rewrite for PostgreSQL, the reads through kept statements (Read), row
// scanning (Collect), the change feed's writing half (AppendChange,
// TxChanges) and the clock.
package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers driver "pgx"
	"modernc.org/sqlite"               // registers driver "sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/gantryhq/gantry/internal/fault"
)

// Drivers.
const (
	SQLite   = "sqlite"
	Postgres = "postgres"
)

//go:embed migrations/*.sql
var migrations embed.FS

// DB is a Gantry database, shared by the aggregate stores built on it.
type DB struct {
	db *sql.DB // writes and transactions
	// read serves single reads outside transactions. On SQLite it is a pool
	// of read-only connections beside db's one writer (WAL lets readers run
	// while a write is in progress); on PostgreSQL it is db. Its statements
	// are prepared once and kept.
	read   *Reader
	driver string
	// changed wakes this process's change-feed follower (TxChanges).
	changed chan struct{}
	// now is the clock the store stamps and expires by (UseClock).
	now atomic.Pointer[func() time.Time]
	// writes are the write statements kept prepared on SQLite's writer
	// (WriteStmts), by their text.
	writesMu sync.Mutex
	writes   map[string]*sql.Stmt
	// want are queries a transaction ran (TxExec, TxQueryRow) that are not
	// kept yet: prepared before the next transaction begins, when the
	// writer is free (preparing needs its one connection). unpreparable are
	// those that failed to prepare: never asked for again.
	want, unpreparable map[string]bool
	// crash counts down the writes left before this handle acts as a
	// killed process's (CrashAfter); negative: never.
	crash atomic.Int64
}

// ErrCrashed is every write of a handle past its CrashAfter.
var ErrCrashed = errors.New("store: this handle's process is dead (CrashAfter)")

// CrashAfter makes this handle act as the database of a process killed
// after n more writes (transactions, and ExecContext statements): each
// later one fails with ErrCrashed before it changes anything, a
// transaction rolled back whole. Reads go on. The fault suite kills a
// leader this way at each point of a pass, deterministically; n < 0 undoes
// it. Nothing else calls it.
func (s *DB) CrashAfter(n int) { s.crash.Store(int64(n)) }

// write counts one write against CrashAfter; false: the process is dead.
func (s *DB) write() bool {
	for {
		n := s.crash.Load()
		switch {
		case n < 0:
			return true
		case n == 0:
			return false
		case s.crash.CompareAndSwap(n, n-1):
			return true
		}
	}
}

// UseClock makes the store stamp and expire by now (the server's clock)
// instead of the wall clock it opens with.
func (s *DB) UseClock(now func() time.Time) {
	if now != nil {
		s.now.Store(&now)
	}
}

// Now is the time by the store's clock (UseClock).
func (s *DB) Now() time.Time {
	if f := s.now.Load(); f != nil {
		return (*f)()
	}
	return time.Now() //clock:allow a store opened by a tool or a test, without the server's clock
}

// Open connects to the database and applies pending migrations. For SQLite, dsn
// is a file path (created with its directory if missing); for PostgreSQL, a
// connection string.
func Open(ctx context.Context, driver, dsn string) (*DB, error) {
	var db, read *sql.DB
	var err error
	switch driver {
	case SQLite:
		if dsn == "" {
			return nil, errors.New("sqlite: database path is empty")
		}
		if dir := filepath.Dir(dsn); dsn != ":memory:" {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return nil, fmt.Errorf("sqlite: create %s: %w", dir, err)
			}
		}
		// temp_store(MEMORY): the writer's statement journals (a
		// statement's undo within a transaction: every upsert and
		// multi-row insert has one) stay in memory rather than spill to a
		// temporary file past 64 KiB, and so do its sorts. Its statements
		// are small (batched writes, deletes by index with a LIMIT; the
		// large reads go to the readers, which keep temporary files);
		// migrations, which may index or rewrite a whole table, run with
		// temporary files (migrate).
		db, err = sql.Open("sqlite", sqliteURI(dsn)+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)&_pragma=temp_store(MEMORY)&_txlock=immediate")
		if err == nil {
			// One writer at a time is SQLite's model; one connection keeps it simple.
			db.SetMaxOpenConns(1)
			read = db
		}
		if err == nil && dsn != ":memory:" {
			// Readers get connections of their own, read-only, so that
			// reads neither wait for the writer nor for each other.
			read, err = sql.Open("sqlite", sqliteURI(dsn)+"?_pragma=busy_timeout(5000)&_pragma=query_only(1)")
			if err == nil {
				read.SetMaxOpenConns(readers)
				read.SetMaxIdleConns(readers)
			}
		}
	case Postgres:
		db, err = sql.Open("pgx", dsn)
		if err == nil {
			db.SetMaxOpenConns(20)
			db.SetMaxIdleConns(20)
			db.SetConnMaxIdleTime(5 * time.Minute)
			read = db
		}
	default:
		return nil, fmt.Errorf("unknown database driver %q (want %s or %s)", driver, SQLite, Postgres)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", driver, err)
	}
	s := &DB{db: db, read: newReader(read, driver == SQLite), driver: driver, changed: make(chan struct{}, 1)}
	s.crash.Store(-1)
	if err := db.PingContext(ctx); err != nil {
		s.Close()
		return nil, &fault.Unavailable{What: driver + " database", Err: err}
	}
	if err := s.migrate(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// readers is the size of SQLite's pool of read-only connections.
const readers = 8

// Close closes the database.
func (s *DB) Close() error {
	err := s.read.close(s.read.db != s.db)
	s.writesMu.Lock()
	for _, st := range s.writes {
		err = errors.Join(err, st.Close())
	}
	s.writes = nil
	s.writesMu.Unlock()
	return errors.Join(err, s.db.Close())
}

// Ping checks that the database answers.
func (s *DB) Ping(ctx context.Context) error { return s.db.PingContext(ctx) }

// Driver is the database's driver: SQLite or Postgres.
func (s *DB) Driver() string { return s.driver }

// ForUpdate is the clause that locks the rows a SELECT in a transaction
// reads until it ends: " FOR UPDATE" on PostgreSQL, "" on SQLite, whose
// write transactions are serial already (BEGIN IMMEDIATE).
func (s *DB) ForUpdate() string {
	if s.driver == Postgres {
		return " FOR UPDATE"
	}
	return ""
}

// migrate applies every embedded migration not yet recorded, each in its own
// transaction; on PostgreSQL an advisory lock keeps concurrent replicas apart.
func (s *DB) migrate(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	if s.driver == SQLite {
		// A migration may sort or rewrite a whole table: let SQLite spill
		// to temporary files, as the writer otherwise does not (Open).
		if _, err := s.db.ExecContext(ctx, `PRAGMA temp_store = FILE`); err != nil {
			return fmt.Errorf("temp_store for the migrations: %w", err)
		}
		defer s.db.ExecContext(ctx, `PRAGMA temp_store = MEMORY`)
	}
	sort.Strings(names)
	for _, name := range names {
		base := filepath.Base(name)
		// NNNN_what.sqlite.sql and NNNN_what.postgres.sql are one
		// migration in two dialects (triggers): each database runs its own.
		if other := map[string]string{SQLite: Postgres, Postgres: SQLite}[s.driver]; strings.HasSuffix(base, "."+other+".sql") {
			continue
		}
		version, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return fmt.Errorf("migration %s: name must start with a number", base)
		}
		body, err := migrations.ReadFile(name)
		if err != nil {
			return err
		}
		err = s.Tx(ctx, func(tx *sql.Tx) error {
			if s.driver == Postgres {
				if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(7286152)`); err != nil {
					return err
				}
			}
			var n int
			if err := tx.QueryRowContext(ctx, s.Q(`SELECT COUNT(*) FROM schema_migrations WHERE version = ?`), version).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return nil
			}
			for _, stmt := range strings.Split(string(body), ";\n") {
				if strings.TrimSpace(stripComments(stmt)) == "" {
					continue
				}
				if _, err := tx.ExecContext(ctx, stmt); err != nil {
					return err
				}
			}
			_, err := tx.ExecContext(ctx, s.Q(`INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`), version, s.Now().UnixMicro())
			return err
		})
		if err != nil {
			return fmt.Errorf("migration %s: %w", base, err)
		}
	}
	return nil
}

func stripComments(stmt string) string {
	var b strings.Builder
	for _, line := range strings.Split(stmt, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// Tx runs fn in a transaction, committing when it returns nil. A failure
// that is no fault of the change — the database's disk full, its
// connection lost — is *fault.Unavailable (try again later); the
// transaction is rolled back whole either way.
func (s *DB) Tx(ctx context.Context, fn func(*sql.Tx) error) error {
	s.prepareWanted(ctx)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Unavailable(fmt.Errorf("begin: %w", err))
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return Unavailable(err)
	}
	if !s.write() {
		tx.Rollback()
		return ErrCrashed
	}
	if err := tx.Commit(); err != nil {
		return Unavailable(fmt.Errorf("commit: %w", err))
	}
	return nil
}

// sqliteURI is a file path as an SQLite URI filename: a "?" or "#" in the
// path (a test's directory named after a subtest "#00") would otherwise
// end the path there and open another file.
func sqliteURI(path string) string {
	return "file:" + strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
}

// Unavailable types err as *fault.Unavailable when the database refused
// for a reason of its own rather than the request's: its disk full
// (SQLite's SQLITE_FULL, PostgreSQL's disk_full) or its connection lost (a
// restart, an administrator's termination). Other errors are as they
// were.
func Unavailable(err error) error {
	var un *fault.Unavailable
	switch {
	case err == nil || errors.As(err, &un):
		return err
	case diskFull(err):
		return &fault.Unavailable{What: "the database (disk full)", Err: err}
	case connectionLost(err):
		return &fault.Unavailable{What: "the database (connection lost)", Err: err}
	}
	return err
}

// diskFull and connectionLost match the drivers' own error types, never
// an error's text: an error that only quotes such words (a forged
// token's header, say) is not the database's.
func diskFull(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code == "53100" // disk_full
	}
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_FULL
}

func connectionLost(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		// Class 08: connection exception; 57P01–57P03: the server shut
		// down, crashed or is starting.
		return strings.HasPrefix(pg.Code, "08") || pg.Code == "57P01" || pg.Code == "57P02" || pg.Code == "57P03"
	}
	var ce *pgconn.ConnectError
	// pgconn.SafeToRetry: pgx's own errors for a connection that was
	// closed before the statement was sent; ErrConnClosed: a statement
	// asked of a connection pgx had already closed (the server went away);
	// io.ErrUnexpectedEOF and a socket's *net.OpError: the server closed
	// it while pgx wrote or read (pgx returns them bare). The API asks
	// this only of an error that would otherwise be a 500, so a request
	// body cut short stays a 400.
	var ne *net.OpError
	return errors.Is(err, driver.ErrBadConn) || errors.As(err, &ce) || pgconn.SafeToRetry(err) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne)
}

// WriteStmts are queries prepared on the writer, once each and kept (at
// most maxStatements of them, whose texts may differ only in how many rows
// a statement carries: a batch's shapes), for a transaction to run through
// tx.StmtContext: on
// SQLite's one writer connection, a statement of a shape that recurs is
// parsed once. Call it before the transaction begins (the writer is its
// one connection). On PostgreSQL, where a statement prepared on one
// connection would be prepared again on another, it keeps none and the
// map is empty: run the query as it is.
func (s *DB) WriteStmts(ctx context.Context, queries ...string) (map[string]*sql.Stmt, error) {
	out := map[string]*sql.Stmt{}
	if s.driver != SQLite {
		return out, nil
	}
	for _, q := range queries {
		s.writesMu.Lock()
		st, full := s.writes[q], len(s.writes) >= maxStatements
		s.writesMu.Unlock()
		if st == nil && !full {
			// Prepared without the lock: a transaction holding the writer
			// may be waiting for it (TxExec).
			prepared, err := s.db.PrepareContext(ctx, q)
			if err != nil {
				return nil, fmt.Errorf("prepare: %w", err)
			}
			s.writesMu.Lock()
			if s.writes == nil {
				s.writes = map[string]*sql.Stmt{}
			}
			if st = s.writes[q]; st == nil && len(s.writes) < maxStatements {
				s.writes[q], st, prepared = prepared, prepared, nil
			}
			s.writesMu.Unlock()
			if prepared != nil {
				prepared.Close() // another kept one first, or no room
			}
		}
		if st != nil {
			out[q] = st
		}
	}
	return out, nil
}

// TxExec runs query in tx. On SQLite, a query of a shape that recurs is
// parsed once: prepared on the writer when first seen (before the next
// transaction begins) and kept, at most maxStatements of them, never one
// whose text varies with its arguments (varies); parsing the same UPDATE
// in every transaction was a tenth of a busy server's CPU.
func (s *DB) TxExec(ctx context.Context, tx *sql.Tx, query string, args ...any) (sql.Result, error) {
	if st := s.txStmt(ctx, tx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return tx.ExecContext(ctx, query, args...)
}

// TxQueryRow runs a query of one row in tx, parsed once as TxExec's are.
func (s *DB) TxQueryRow(ctx context.Context, tx *sql.Tx, query string, args ...any) *sql.Row {
	if st := s.txStmt(ctx, tx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return tx.QueryRowContext(ctx, query, args...)
}

// txStmt is query's kept statement as tx's (nil when none is kept: on
// PostgreSQL, where a statement prepared on one connection would be
// prepared again on another, or the first time, which asks for it).
func (s *DB) txStmt(ctx context.Context, tx *sql.Tx, query string) *sql.Stmt {
	if s.driver != SQLite || varies(query) {
		return nil
	}
	s.writesMu.Lock()
	st := s.writes[query]
	if st == nil && !s.unpreparable[query] && len(s.writes)+len(s.want) < maxStatements {
		if s.want == nil {
			s.want = map[string]bool{}
		}
		s.want[query] = true
	}
	s.writesMu.Unlock()
	if st == nil {
		return nil
	}
	// Prepared on the writer's one connection, which tx holds: reused,
	// not prepared again (database/sql keeps it with st).
	return tx.StmtContext(ctx, st)
}

// prepareWanted prepares the queries transactions asked for, outside any
// transaction and without the lock (a transaction holding the writer may
// be waiting for it). One that fails to prepare runs as it is.
func (s *DB) prepareWanted(ctx context.Context) {
	s.writesMu.Lock()
	if len(s.want) == 0 {
		s.writesMu.Unlock()
		return
	}
	qs := slices.Collect(maps.Keys(s.want))
	clear(s.want)
	s.writesMu.Unlock()
	for _, q := range qs {
		st, err := s.db.PrepareContext(ctx, q)
		if err != nil {
			if ctx.Err() == nil {
				s.writesMu.Lock()
				if s.unpreparable == nil {
					s.unpreparable = map[string]bool{}
				}
				if len(s.unpreparable) < maxStatements {
					s.unpreparable[q] = true
				}
				s.writesMu.Unlock()
			}
			continue
		}
		s.writesMu.Lock()
		if s.writes == nil {
			s.writes = map[string]*sql.Stmt{}
		}
		if s.writes[q] == nil && len(s.writes) < maxStatements {
			s.writes[q], st = st, nil
		}
		s.writesMu.Unlock()
		if st != nil {
			st.Close() // kept by another, or no room
		}
	}
}

// ExecContext runs a statement outside a transaction, on the writer.
func (s *DB) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if !s.write() {
		return nil, ErrCrashed
	}
	return s.db.ExecContext(ctx, query, args...)
}

// QueryContext runs a query on the writer (a read that must see every
// write before it; other reads go through Read).
func (s *DB) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return s.db.QueryContext(ctx, query, args...)
}

// QueryRowContext runs a query of one row on the writer (a statement that
// writes and returns, or a read that must see every write before it).
func (s *DB) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return s.db.QueryRowContext(ctx, query, args...)
}

// Scanner is a *sql.Row or *sql.Rows.
type Scanner interface{ Scan(...any) error }

// Collect scans every row with scan and closes rows.
func Collect[T any](rows *sql.Rows, scan func(Scanner) (T, error)) ([]T, error) {
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// Each scans every row with scan, calls fn with it, and closes rows; it
// stops at the first error.
func Each[T any](rows *sql.Rows, scan func(Scanner) (T, error), fn func(T) error) error {
	defer rows.Close()
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return err
		}
		if err := fn(v); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Upsert runs fn, a transaction whose INSERT … ON CONFLICT (key) DO
// UPDATE writes a row that another unique index also covers (a row whose
// id is derived from its natural key), and runs it once more if it lost a
// race. PostgreSQL's ON CONFLICT covers its arbiter index only: when two
// transactions insert the same new row at once, the one that waits on the
// other's index entry is refused by the other index (23505) instead of
// updating. The winner has committed by then, so the second try takes the
// update path. A violation on the second try is the caller's.
func Upsert(fn func() error) error {
	err := fn()
	if err != nil && UniqueViolation(err) {
		err = fn()
	}
	return err
}

// UniqueViolation reports whether err is a unique or primary key violation.
func UniqueViolation(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code == "23505"
	}
	return strings.Contains(err.Error(), "UNIQUE constraint failed") // SQLite
}

// Q rewrites ? placeholders as $1, $2... for PostgreSQL.
func (s *DB) Q(query string) string {
	if s.driver != Postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Micros is t as the database keeps a time: Unix microseconds, 0 for the
// zero time.
func Micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

// BoolInt is b as the database keeps it: 1 or 0.
func BoolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
