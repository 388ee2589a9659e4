package store_test

import (
	"context"
	"testing"
	"time"

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

// TestTemplateVersionStatusKept (every backend): a replica answers a
// version's status from memory for catalog.StatusTTL; a change it makes
// itself shows at once, one another replica makes once that has passed.
func TestTemplateVersionStatusKept(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := open(t)
			classes, tpls, _ := starter(t)
			now := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
			clock := func() time.Time { return now }
			replica := func() *catalog.Service {
				c, err := catalog.New(catalog.Options{Store: s.Governance, Classes: classes, Now: clock})
				if err != nil {
					t.Fatal(err)
				}
				return c
			}
			a, b := replica(), replica()
			if _, err := a.Create(ctx, "alice", tpls["jupyter-notebook"]); err != nil {
				t.Fatal(err)
			}
			status := func(c *catalog.Service) string {
				st, why, err := c.Status(ctx, "jupyter-notebook", 1)
				if err != nil {
					t.Fatal(err)
				}
				return string(st) + " " + why
			}
			set := func(c *catalog.Service, st catalog.Status, why string) func() {
				return func() {
					if _, err := c.SetStatus(ctx, "jupyter-notebook", 1, st, why); err != nil {
						t.Fatal(err)
					}
				}
			}
			for _, step := range []struct {
				what string
				do   func()
				on   *catalog.Service
				want string
			}{
				{"a new version on a", nil, a, "active "},
				{"b, which deprecated it", set(b, catalog.Deprecated, "use 2"), b, "deprecated use 2"},
				{"a, within the TTL of what it read", nil, a, "active "},
				{"a, a TTL later", func() { now = now.Add(catalog.StatusTTL) }, a, "deprecated use 2"},
				{"a, which revoked it", set(a, catalog.Revoked, "CVE"), a, "revoked CVE"},
			} {
				if step.do != nil {
					step.do()
				}
				if got := status(step.on); got != step.want {
					t.Fatalf("%s: %q, want %q", step.what, got, step.want)
				}
			}
			if _, _, err := a.Status(ctx, "jupyter-notebook", 9); !isNotFound(err) {
				t.Fatalf("no such version: %v", err)
			}
		})
	}
}
