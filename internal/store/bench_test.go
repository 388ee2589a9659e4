package store_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/catalog"
	"github.com/gantryhq/gantry/internal/workload"
)

// BenchmarkStore measures store writes and reads on both backends, next to the
// natural baseline: the same INSERT and SELECT issued directly with database/sql
// on the same database, without Gantry's encoding and checks.
func BenchmarkStore(b *testing.B) {
	ctx := context.Background()
	for name, open := range backends(b) {
		b.Run(name, func(b *testing.B) {
			s := open(b)
			classes, tpls, files := starter(b)
			cat := newCatalog(b, s.Governance, classes)
			if _, err := cat.Seed(ctx, "bench", files); err != nil {
				b.Fatal(err)
			}
			w := workload.Workload{Name: "vllm-inference-x", Team: "vision", Owner: "alice", Template: "vllm-inference", TemplateVersion: 1,
				Kind: "service", GPUClass: "H100-80GB", GPUCount: 1, Parameters: map[string]string{"model": "m", "maxModelLen": "8192"},
				ObjectsHash: strings.Repeat("a", 64), Status: workload.Pending}
			var ids []string
			b.Run("CreateWorkload", func(b *testing.B) {
				for b.Loop() {
					w.ID = workload.NewID()
					w.CreatedAt = time.Now().UTC()
					w.UpdatedAt = w.CreatedAt
					if err := s.CreateWorkload(ctx, w); err != nil {
						b.Fatal(err)
					}
					ids = append(ids, w.ID)
				}
			})
			b.Run("GetWorkload", func(b *testing.B) {
				i := 0
				for b.Loop() {
					if _, err := s.Workload(ctx, ids[i%len(ids)]); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
			b.Run("ListWorkloads50", func(b *testing.B) {
				for b.Loop() {
					if _, err := s.ListWorkloads(ctx, workload.Filter{Team: "vision", Limit: 50}); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("GetTemplate", func(b *testing.B) {
				for b.Loop() {
					if _, err := s.TemplateVersion(ctx, "pytorch-train", 0); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("UpdateTemplate", func(b *testing.B) {
				t := *tpls["dev-environment"]
				live, err := s.TemplateVersion(ctx, t.Metadata.Name, 0)
				if err != nil {
					b.Fatal(err)
				}
				cur := live.Version
				for i := 0; b.Loop(); i++ {
					t.Metadata.Title = fmt.Sprint("dev ", i)
					vs, err := s.ApplyTemplates(ctx, []catalog.Change{{Name: t.Metadata.Name, Template: &t, Digest: t.Digest(), Expect: cur, Actor: "b", At: time.Now()}})
					if err != nil {
						b.Fatal(err)
					}
					cur = vs[0].Version
				}
			})
			raw := rawDB(b, name)
			b.Run("BaselineRawInsert", func(b *testing.B) {
				params, _ := json.Marshal(w.Parameters)
				for b.Loop() {
					if _, err := raw.Exec(rebind(name, `INSERT INTO workloads (id, name, team, owner, template, template_version, kind, gpu_class, mig_profile, gpu_count, parameters, objects_hash, status, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
						workload.NewID(), w.Name, w.Team, w.Owner, w.Template, 1, w.Kind, w.GPUClass, "", 1, string(params), w.ObjectsHash, "Pending", time.Now().UnixMicro(), time.Now().UnixMicro()); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("BaselineRawSelect", func(b *testing.B) {
				i := 0
				for b.Loop() {
					var cols [15]any
					ptrs := make([]any, len(cols))
					for j := range cols {
						ptrs[j] = &cols[j]
					}
					if err := raw.QueryRow(rebind(name, `SELECT id, name, team, owner, template, template_version, kind, gpu_class, mig_profile, gpu_count, parameters, objects_hash, status, created_at, updated_at FROM workloads WHERE id = ?`), ids[i%len(ids)]).Scan(ptrs...); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		})
	}
}

// rawDB opens a second, plain connection to the database the last open() made.
func rawDB(b *testing.B, backend string) *sql.DB {
	var db *sql.DB
	var err error
	switch backend {
	case "sqlite":
		db, err = sql.Open("sqlite", "file:"+lastSQLite+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=temp_store(MEMORY)") // as the store's writer
		db.SetMaxOpenConns(1)
	default:
		db, err = sql.Open("pgx", lastPostgres)
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	return db
}

func rebind(backend, q string) string {
	if backend == "sqlite" {
		return q
	}
	n := 0
	var out strings.Builder
	for _, r := range q {
		if r == '?' {
			n++
			fmt.Fprintf(&out, "$%d", n)
			continue
		}
		out.WriteRune(r)
	}
	return out.String()
}
