package store_test

import (
	"context"
	"testing"

	"github.com/gantryhq/gantry/internal/catalog"
)

// TestTemplateVersionStatus (every backend): a version is deprecated, then
// revoked; a revocation is final; the status comes back on every read path.
func TestTemplateVersionStatus(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := open(t)
			classes, tpls, _ := starter(t)
			cat := newCatalog(t, s.Governance, classes)
			if _, err := cat.Create(ctx, "alice", tpls["jupyter-notebook"]); err != nil {
				t.Fatal(err)
			}
			if v, err := cat.Get(ctx, "jupyter-notebook", 1); err != nil || v.Status != catalog.Active {
				t.Fatalf("new version: %q %v, want active", v.Status, err)
			}
			if st, why, err := cat.Status(ctx, "jupyter-notebook", 1); err != nil || st != catalog.Active || why != "" {
				t.Fatalf("new version's status alone: %q %q %v, want active", st, why, err)
			}
			if v, err := cat.SetStatus(ctx, "jupyter-notebook", 1, catalog.Deprecated, "use 2"); err != nil || v.Status != catalog.Deprecated || v.StatusReason != "use 2" {
				t.Fatalf("deprecate: %+v %v", v, err)
			}
			if st, why, err := cat.Status(ctx, "jupyter-notebook", 1); err != nil || st != catalog.Deprecated || why != "use 2" {
				t.Fatalf("deprecated version's status alone: %q %q %v", st, why, err)
			}
			if _, _, err := cat.Status(ctx, "jupyter-notebook", 7); !isNotFound(err) {
				t.Fatalf("status of no such version: %v", err)
			}
			if v, err := cat.SetStatus(ctx, "jupyter-notebook", 1, catalog.Revoked, "CVE"); err != nil || v.Status != catalog.Revoked {
				t.Fatalf("revoke: %+v %v", v, err)
			}
			for _, st := range []catalog.Status{catalog.Active, catalog.Deprecated, catalog.Revoked} {
				if _, err := cat.SetStatus(ctx, "jupyter-notebook", 1, st, "again"); !isConflict(err) {
					t.Fatalf("revoked -> %s: %v, want conflict", st, err)
				}
			}
			if _, err := cat.SetStatus(ctx, "jupyter-notebook", 7, catalog.Deprecated, "x"); !isNotFound(err) {
				t.Fatalf("no such version: %v", err)
			}
			list, err := cat.List(ctx)
			if err != nil || len(list) != 1 || list[0].Status != catalog.Revoked || list[0].StatusReason != "CVE" {
				t.Fatalf("list: %+v %v", list, err)
			}
			h, err := cat.History(ctx, "jupyter-notebook")
			if err != nil || h[0].Status != catalog.Revoked {
				t.Fatalf("history: %+v %v", h, err)
			}
		})
	}
}
