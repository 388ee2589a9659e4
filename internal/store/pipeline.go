package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// Stmt is one statement of a PipelinedTx: its text in the store's "?"
// form, and its arguments.
type Stmt struct {
	Query string
	Args  []any
}

// Rows are a statement's rows as a PipelinedTx reads them.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// ErrNotPipelined is PipelinedTx's answer on SQLite, whose transactions
// are on the process's own file and gain nothing from it.
var ErrNotPipelined = errors.New("store: pipelined transactions are PostgreSQL's")

// PipelinedTx runs a transaction of reads and then writes on PostgreSQL in
// two round trips however many statements it holds (once pgx has their
// shapes prepared on the connection: a shape new to it costs a round trip
// to prepare first). BEGIN goes with the reads, whose rows read is given in
// their order and must read before it returns; then write gives the
// writes, which go with COMMIT. An error from read or write, from any
// statement or from the commit rolls the transaction back whole. Failures
// are typed as Tx's are (Unavailable), and a handle past its CrashAfter
// commits nothing.
func (s *DB) PipelinedTx(ctx context.Context, reads []Stmt, read func(Rows) error, write func() ([]Stmt, error)) error {
	if s.driver != Postgres {
		return ErrNotPipelined
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return Unavailable(fmt.Errorf("a connection: %w", err))
	}
	defer conn.Close()
	var txErr error
	err = conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("store: a PostgreSQL connection of type %T", dc)
		}
		pc := c.Conn()
		txErr = s.pipelined(ctx, pc, reads, read, write)
		if pc.PgConn().TxStatus() != 'I' {
			// Still in the transaction, failed: ended here, so the pool
			// keeps the connection (pgx's driver would close one handed
			// back in a transaction, and the transaction with it).
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			pc.Exec(ctx, "ROLLBACK")
			cancel()
		}
		return nil
	})
	return Unavailable(errors.Join(txErr, err))
}

func (s *DB) pipelined(ctx context.Context, pc *pgx.Conn, reads []Stmt, read func(Rows) error, write func() ([]Stmt, error)) error {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	for _, st := range reads {
		b.Queue(s.Q(st.Query), st.Args...)
	}
	br := pc.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return fmt.Errorf("begin: %w", err)
	}
	for range reads {
		rows, err := br.Query()
		if err == nil {
			err = read(rows)
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		if err != nil {
			br.Close()
			return err
		}
	}
	if err := br.Close(); err != nil {
		return err
	}
	writes, err := write()
	if err != nil {
		return err
	}
	if !s.write() {
		return ErrCrashed
	}
	b = &pgx.Batch{}
	for _, st := range writes {
		b.Queue(s.Q(st.Query), st.Args...)
	}
	b.Queue("COMMIT")
	br = pc.SendBatch(ctx, b)
	for range writes {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return err
		}
	}
	_, err = br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}
