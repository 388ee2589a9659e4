package governance

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gantryhq/gantry/internal/catalog"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/store"
	"github.com/gantryhq/gantry/internal/template"
)

const versionColumns = `v.name, v.version, v.document, v.digest, v.created_at, v.created_by, v.status, v.status_reason`

func scanVersion(row store.Scanner) (catalog.Version, error) {
	var v catalog.Version
	var doc string
	var at int64
	if err := row.Scan(&v.Name, &v.Version, &doc, &v.Digest, &at, &v.CreatedBy, &v.Status, &v.StatusReason); err != nil {
		return v, err
	}
	v.CreatedAt = time.UnixMicro(at).UTC()
	v.Template = new(template.Template)
	if err := json.Unmarshal([]byte(doc), v.Template); err != nil {
		return v, fmt.Errorf("template %s version %d: stored document is corrupt: %w", v.Name, v.Version, err)
	}
	// Parameter defaults come back from JSON as float64; restore integers.
	for i := range v.Template.Spec.Parameters {
		if f, ok := v.Template.Spec.Parameters[i].Default.(float64); ok && f == float64(int64(f)) {
			v.Template.Spec.Parameters[i].Default = int64(f)
		}
	}
	return v, nil
}

// CurrentTemplates implements catalog.Store.
func (s *Store) CurrentTemplates(ctx context.Context) ([]catalog.Version, error) {
	rows, err := s.db.Read().QueryContext(ctx, `SELECT `+versionColumns+` FROM templates t
		JOIN template_versions v ON v.name = t.name AND v.version = t.current_version
		ORDER BY t.name`)
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	return collectVersions(rows)
}

func collectVersions(rows *sql.Rows) ([]catalog.Version, error) {
	return store.Collect(rows, scanVersion)
}

// TemplateVersion implements catalog.Store.
func (s *Store) TemplateVersion(ctx context.Context, name string, version int) (catalog.Version, error) {
	var row *sql.Row
	if version == 0 {
		row = s.db.Read().QueryRowContext(ctx, s.db.Q(`SELECT `+versionColumns+` FROM templates t
			JOIN template_versions v ON v.name = t.name AND v.version = t.current_version
			WHERE t.name = ?`), name)
	} else {
		row = s.db.Read().QueryRowContext(ctx, s.db.Q(`SELECT `+versionColumns+` FROM template_versions v WHERE v.name = ? AND v.version = ?`), name, version)
	}
	v, err := scanVersion(row)
	if errors.Is(err, sql.ErrNoRows) {
		if version == 0 {
			return v, &fault.NotFound{Kind: "template", Name: name}
		}
		return v, &fault.NotFound{Kind: "template version", Name: fmt.Sprintf("%s@%d", name, version)}
	}
	if err != nil {
		return v, fmt.Errorf("get template %s: %w", name, err)
	}
	return v, nil
}

// TemplateVersionStatus implements catalog.Store.
func (s *Store) TemplateVersionStatus(ctx context.Context, name string, version int) (catalog.Status, string, error) {
	var status catalog.Status
	var reason string
	err := s.db.Read().QueryRowContext(ctx, s.db.Q(`SELECT status, status_reason FROM template_versions WHERE name = ? AND version = ?`), name, version).Scan(&status, &reason)
	if errors.Is(err, sql.ErrNoRows) {
		return "", "", &fault.NotFound{Kind: "template version", Name: fmt.Sprintf("%s@%d", name, version)}
	}
	if err != nil {
		return "", "", fmt.Errorf("status of template %s version %d: %w", name, version, err)
	}
	return status, reason, nil
}

// TemplateHistory implements catalog.Store.
func (s *Store) TemplateHistory(ctx context.Context, name string) ([]catalog.Version, error) {
	rows, err := s.db.Read().QueryContext(ctx, s.db.Q(`SELECT `+versionColumns+` FROM template_versions v WHERE v.name = ? ORDER BY v.version`), name)
	if err != nil {
		return nil, fmt.Errorf("template history %s: %w", name, err)
	}
	return collectVersions(rows)
}

// AnyTemplateEver implements catalog.Store.
func (s *Store) AnyTemplateEver(ctx context.Context) (bool, error) {
	var n int
	if err := s.db.Read().QueryRowContext(ctx, `SELECT COUNT(*) FROM templates`).Scan(&n); err != nil {
		return false, fmt.Errorf("count templates: %w", err)
	}
	return n > 0, nil
}

// ApplyTemplates implements catalog.Store: all changes or none.
func (s *Store) ApplyTemplates(ctx context.Context, changes []catalog.Change) ([]catalog.Version, error) {
	// Rows are locked in one order, by name, whatever order the changes
	// came in: two applies touching the same templates take turns instead
	// of each holding one the other waits for (a deadlock PostgreSQL
	// breaks by failing one).
	changes = slices.Clone(changes)
	slices.SortStableFunc(changes, func(a, b catalog.Change) int { return strings.Compare(a.Name, b.Name) })
	var out []catalog.Version
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		out = out[:0]
		for _, c := range changes {
			v, err := s.applyOne(ctx, tx, c)
			if err != nil {
				return err
			}
			if v != nil {
				out = append(out, *v)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (s *Store) applyOne(ctx context.Context, tx *sql.Tx, c catalog.Change) (*catalog.Version, error) {
	var current, last int
	var exists bool
	// The row locked: concurrent writers take turns.
	err := s.db.TxQueryRow(ctx, tx, s.db.Q(`SELECT current_version, last_version FROM templates WHERE name = ?`+s.db.ForUpdate()), c.Name).Scan(&current, &last)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return nil, fmt.Errorf("read template %s: %w", c.Name, err)
	default:
		exists = true
	}
	if current != c.Expect {
		reason := fmt.Sprintf("changed concurrently: live version is %d, expected %d", current, c.Expect)
		if c.Expect == 0 {
			reason = "already exists"
		}
		return nil, &fault.Conflict{Kind: "template", Name: c.Name, Reason: reason}
	}
	if c.Template == nil { // delete
		if !exists || current == 0 {
			return nil, &fault.NotFound{Kind: "template", Name: c.Name}
		}
		_, err := s.db.TxExec(ctx, tx, s.db.Q(`UPDATE templates SET current_version = 0 WHERE name = ?`), c.Name)
		return nil, err
	}
	doc, err := json.Marshal(c.Template)
	if err != nil {
		return nil, err
	}
	next := last + 1
	if exists {
		_, err = s.db.TxExec(ctx, tx, s.db.Q(`UPDATE templates SET current_version = ?, last_version = ? WHERE name = ?`), next, next, c.Name)
	} else {
		_, err = s.db.TxExec(ctx, tx, s.db.Q(`INSERT INTO templates (name, current_version, last_version) VALUES (?, ?, ?)`), c.Name, next, next)
	}
	if err != nil {
		if store.UniqueViolation(err) { // created concurrently since we read
			return nil, &fault.Conflict{Kind: "template", Name: c.Name, Reason: "already exists"}
		}
		return nil, fmt.Errorf("write template %s: %w", c.Name, err)
	}
	at := c.At.UTC().Truncate(time.Microsecond)
	if _, err := s.db.TxExec(ctx, tx, s.db.Q(`INSERT INTO template_versions (name, version, document, digest, created_at, created_by) VALUES (?, ?, ?, ?, ?, ?)`),
		c.Name, next, string(doc), c.Digest, at.UnixMicro(), c.Actor); err != nil {
		return nil, fmt.Errorf("write template %s version %d: %w", c.Name, next, err)
	}
	return &catalog.Version{Name: c.Name, Version: next, Template: c.Template, Digest: c.Digest, CreatedAt: at, CreatedBy: c.Actor, Status: catalog.Active}, nil
}

// SetTemplateVersionStatus implements catalog.Store: one statement, so a
// revoked version (final) is never changed back, whoever races.
func (s *Store) SetTemplateVersionStatus(ctx context.Context, name string, version int, status catalog.Status, reason string) error {
	res, err := s.db.ExecContext(ctx, s.db.Q(`UPDATE template_versions SET status = ?, status_reason = ?
		WHERE name = ? AND version = ? AND status <> ?`), string(status), reason, name, version, string(catalog.Revoked))
	if err != nil {
		return fmt.Errorf("set status of template %s version %d: %w", name, version, err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return nil
	}
	if _, err := s.TemplateVersion(ctx, name, version); err != nil {
		return err // not found
	}
	return &fault.Conflict{Kind: "template version", Name: fmt.Sprintf("%s@%d", name, version), Reason: "is revoked, and a revocation is final: publish a fixed version"}
}
