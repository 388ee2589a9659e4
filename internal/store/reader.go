package store

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
)

// Reader runs the single reads outside transactions, on SQLite through
// prepared statements kept by their text: SQLite parses a statement anew on
// every query otherwise, about a tenth of the CPU a page of 100 workloads
// costs (database/sql prepares each statement once on each connection that
// runs it). PostgreSQL's driver (pgx) keeps its own statement cache, and
// database/sql's statements on top of it measured slower there.
type Reader struct {
	db    *sql.DB
	cache bool

	mu    sync.Mutex
	stmts map[string]*sql.Stmt
}

// maxStatements bounds the statements kept; queries past it run
// unprepared. Texts that vary with their arguments (varies) are never
// kept, so the bound holds the fixed queries.
const maxStatements = 256

// varies reports whether a query's text is one of many shapes of the same
// statement, built from its arguments: an IN list, or an INSERT of several
// rows whose count changes (a batch's last chunk). Kept, they would fill
// the bound with one-offs.
func varies(query string) bool {
	return strings.Contains(query, " IN (") || strings.Contains(query, "), (")
}

func newReader(db *sql.DB, cache bool) *Reader {
	return &Reader{db: db, cache: cache, stmts: map[string]*sql.Stmt{}}
}

// Read is the database's Reader: the single reads outside transactions
// (on SQLite, a pool of read-only connections with the statements kept).
func (s *DB) Read() *Reader { return s.read }

// stmt is query's prepared statement, or nil when none is kept for it.
func (r *Reader) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if !r.cache || varies(query) {
		return nil, nil
	}
	r.mu.Lock()
	st, full := r.stmts[query], len(r.stmts) >= maxStatements
	r.mu.Unlock()
	if st != nil || full {
		return st, nil
	}
	st, err := r.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if kept := r.stmts[query]; kept != nil {
		st.Close() // another request prepared it first
		return kept, nil
	}
	if len(r.stmts) >= maxStatements {
		st.Close()
		return nil, nil
	}
	r.stmts[query] = st
	return st, nil
}

// QueryContext is sql.DB's, through the statement kept for query.
func (r *Reader) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := r.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return r.db.QueryContext(ctx, query, args...)
	}
	return st.QueryContext(ctx, args...)
}

// QueryRowContext is sql.DB's, through the statement kept for query; a
// statement that cannot be prepared is the row's error.
func (r *Reader) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	st, err := r.stmt(ctx, query)
	if err != nil || st == nil {
		return r.db.QueryRowContext(ctx, query, args...)
	}
	return st.QueryRowContext(ctx, args...)
}

// close closes the statements; closeDB also the pool (when it is not the
// writer's).
func (r *Reader) close(closeDB bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var err error
	for q, st := range r.stmts {
		err = errors.Join(err, st.Close())
		delete(r.stmts, q)
	}
	if closeDB {
		err = errors.Join(err, r.db.Close())
	}
	return err
}
