package governance

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/notify"
	"github.com/gantryhq/gantry/internal/quarantine"
	"github.com/gantryhq/gantry/internal/store"
)

var _ quarantine.Store = (*Store)(nil)

const moveColumns = `workload_id, node, mark_at, gpu, gpu_index, reason, kind, phase, detail, at, resumed_at, resumed_on, resumed_from, updated_at`

// RecordMove implements quarantine.Store: the move and its webhook in one
// transaction, only if the workload has no move off that node for that
// mark yet (recorded false then, and nothing written).
func (s *Store) RecordMove(ctx context.Context, m quarantine.Move, msg notify.Message) (recorded bool, err error) {
	err = s.db.Tx(ctx, func(tx *sql.Tx) error {
		res, err := s.db.TxExec(ctx, tx, s.db.Q(`INSERT INTO moves (`+moveColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`),
			moveArgs(m)...)
		if err != nil {
			return fmt.Errorf("record the move of workload %s: %w", m.Workload, err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		recorded = true
		return s.db.InsertNotification(ctx, tx, msg)
	})
	return recorded, err
}

func moveArgs(m quarantine.Move) []any {
	return []any{m.Workload, m.Node, m.MarkAt.UnixMicro(), m.GPU, m.Index, m.Reason, m.Kind, string(m.Phase), m.Detail, m.At.UnixMicro(),
		store.Micros(m.ResumedAt), m.ResumedOn, m.ResumedFrom, m.UpdatedAt.UnixMicro()}
}

func scanMove(r store.Scanner) (quarantine.Move, error) {
	var m quarantine.Move
	var markAt, at, resumedAt, updated int64
	var phase string
	if err := r.Scan(&m.Workload, &m.Node, &markAt, &m.GPU, &m.Index, &m.Reason, &m.Kind, &phase, &m.Detail, &at,
		&resumedAt, &m.ResumedOn, &m.ResumedFrom, &updated); err != nil {
		return m, err
	}
	m.Phase = quarantine.Phase(phase)
	m.MarkAt, m.At, m.UpdatedAt = time.UnixMicro(markAt).UTC(), time.UnixMicro(at).UTC(), time.UnixMicro(updated).UTC()
	if resumedAt != 0 {
		m.ResumedAt = time.UnixMicro(resumedAt).UTC()
	}
	return m, nil
}

// UpdateMove implements quarantine.Store.
func (s *Store) UpdateMove(ctx context.Context, workloadID string, markAt time.Time, node string, fn func(quarantine.Move) (quarantine.Move, *notify.Message, error)) error {
	return s.db.Tx(ctx, func(tx *sql.Tx) error {
		old, err := scanMove(s.db.TxQueryRow(ctx, tx, s.db.Q(`SELECT `+moveColumns+` FROM moves WHERE workload_id = ? AND node = ? AND mark_at = ?`+s.db.ForUpdate()),
			workloadID, node, markAt.UnixMicro()))
		if errors.Is(err, sql.ErrNoRows) {
			return &fault.NotFound{Kind: "move", Name: workloadID + " off " + node}
		}
		if err != nil {
			return fmt.Errorf("read the move of workload %s off %s: %w", workloadID, node, err)
		}
		m, msg, err := fn(old)
		if err != nil {
			return err
		}
		if m == old {
			return nil
		}
		// The key stays the row's, whatever fn did to it.
		m.Workload, m.Node, m.MarkAt = old.Workload, old.Node, old.MarkAt
		if _, err := s.db.TxExec(ctx, tx, s.db.Q(`UPDATE moves SET gpu = ?, gpu_index = ?, reason = ?, kind = ?, phase = ?, detail = ?, at = ?,
			resumed_at = ?, resumed_on = ?, resumed_from = ?, updated_at = ? WHERE workload_id = ? AND node = ? AND mark_at = ?`),
			append(moveArgs(m)[3:], old.Workload, old.Node, old.MarkAt.UnixMicro())...); err != nil {
			return fmt.Errorf("update the move of workload %s off %s: %w", workloadID, node, err)
		}
		if msg == nil {
			return nil
		}
		return s.db.InsertNotification(ctx, tx, *msg)
	})
}

// OpenMoves implements quarantine.Store.
func (s *Store) OpenMoves(ctx context.Context, limit int) ([]quarantine.Move, error) {
	open := quarantine.OpenPhases() // the partial index moves_open lists the same
	args := make([]any, 0, len(open)+1)
	for _, p := range open {
		args = append(args, string(p))
	}
	rows, err := s.db.Read().QueryContext(ctx, s.db.Q(`SELECT `+moveColumns+` FROM moves WHERE phase IN (`+strings.TrimSuffix(strings.Repeat("?, ", len(open)), ", ")+`)
		ORDER BY at, workload_id LIMIT ?`), append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("list open moves: %w", err)
	}
	return store.Collect(rows, scanMove)
}

// Moves implements quarantine.Store.
func (s *Store) Moves(ctx context.Context, workloadID string) ([]quarantine.Move, error) {
	rows, err := s.db.Read().QueryContext(ctx, s.db.Q(`SELECT `+moveColumns+` FROM moves WHERE workload_id = ? ORDER BY at DESC, node`), workloadID)
	if err != nil {
		return nil, fmt.Errorf("list the moves of workload %s: %w", workloadID, err)
	}
	return store.Collect(rows, scanMove)
}
