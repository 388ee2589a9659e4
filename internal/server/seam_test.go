package server_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/workload"
)

// TestServicesAuthorizeThemselves calls the services the API is built on
// directly — no handler, no route gate — as each role of the starter policy
// and as narrowed tokens: each service takes the identity from the context
// and refuses or filters by itself, so a handler that forgets a check
// cannot leak. (api/matrix_test.go checks the same roles route by route.)
func TestServicesAuthorizeThemselves(t *testing.T) {
	g := servertest.New(t)
	admin := identity.Identity{Issuer: "https://idp", Subject: "ada", Groups: []string{"gantry-admins"}, SecondFactor: true}
	ctx := func(id identity.Identity) context.Context { return identity.With(context.Background(), id) }
	launch := func(tm team.Name) string {
		w, _, err := g.Workloads.Create(ctx(admin), admin.String(), workload.Request{Template: "dev-environment", Team: tm})
		if err != nil {
			t.Fatal(err)
		}
		return w.ID
	}
	vision, nlp := launch("vision"), launch("nlp")

	type who struct {
		name string
		id   identity.Identity
		// what it may read: the teams' workloads, budgets and reports
		reads []team.Name
		// whether it may stop the vision workload (ada's)
		manages bool
	}
	member := identity.Identity{Issuer: "https://idp", Subject: "alice", Groups: []string{"ml-vision"}}
	lead := identity.Identity{Issuer: "https://idp", Subject: "lee", Groups: []string{"ml-vision-leads"}}
	narrowed := admin
	narrowed.TokenID, narrowed.TokenTeam, narrowed.Via = "tok1", "nlp", identity.ViaToken
	readOnly := lead
	readOnly.TokenID, readOnly.ReadOnly, readOnly.Via = "tok2", true, identity.ViaToken
	weakAdmin := admin
	weakAdmin.SecondFactor = false
	for _, c := range []who{
		{"platform admin", admin, []team.Name{"nlp", "vision"}, true},
		{"platform admin without a second factor", weakAdmin, nil, false},
		{"platform engineer", identity.Identity{Issuer: "https://idp", Subject: "pat", Groups: []string{"platform-team"}, SecondFactor: true}, []team.Name{"nlp", "vision"}, false},
		{"team-admin of vision", lead, []team.Name{"vision"}, true},
		{"member of vision", member, []team.Name{"vision"}, false},
		{"viewer", identity.Identity{Issuer: "https://idp", Subject: "vic", Groups: []string{"auditors"}}, []team.Name{"nlp", "vision"}, false},
		{"member of nlp", identity.Identity{Issuer: "https://idp", Subject: "nina", Groups: []string{"ml-nlp"}}, []team.Name{"nlp"}, false},
		{"nobody", identity.Identity{Issuer: "https://idp", Subject: "nobody"}, nil, false},
		{"admin's token narrowed to nlp", narrowed, []team.Name{"nlp"}, false},
		{"lead's read-only token", readOnly, []team.Name{"vision"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cx := ctx(c.id)
			reads := func(tm team.Name) bool {
				for _, r := range c.reads {
					if r == tm {
						return true
					}
				}
				return false
			}
			for tm, id := range map[team.Name]string{"vision": vision, "nlp": nlp} {
				_, err := g.Workloads.Get(cx, id)
				if reads(tm) != (err == nil) || err != nil && !isNotFound(err) {
					t.Errorf("Workloads.Get(%s's workload): %v, want readable %v (else 404)", tm, err, reads(tm))
				}
				_, err = g.Workloads.TeamReport(cx, tm, time.Now())
				if reads(tm) != (err == nil) || err != nil && !isNotFound(err) {
					t.Errorf("Workloads.TeamReport(%s): %v, want readable %v (else 404)", tm, err, reads(tm))
				}
			}
			page, err := g.Workloads.List(cx, workload.Filter{}, "")
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range page.Items {
				if !reads(w.Team) {
					t.Errorf("Workloads.List showed %s's workload %s", w.Team, w.ID)
				}
			}
			if len(page.Items) != len(c.reads) {
				t.Errorf("Workloads.List: %d workloads, want %d (one per readable team)", len(page.Items), len(c.reads))
			}
			costs, err := g.Workloads.Costs(cx, time.Now().Add(-time.Hour), time.Now(), "team")
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range costs.Lines {
				if !reads(team.Name(l.Key)) {
					t.Errorf("Workloads.Costs showed team %s", l.Key)
				}
			}
			budgets, err := g.Budgets.List(cx, "")
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range budgets {
				if !reads(team.Name(b.Status.Team)) {
					t.Errorf("Budgets.List showed team %s", b.Status.Team)
				}
			}
			_, err = g.Workloads.Manageable(cx, vision)
			if c.manages != (err == nil) {
				t.Errorf("Workloads.Manageable(vision's workload): %v, want allowed %v", err, c.manages)
			}
		})
	}
}

func isNotFound(err error) bool {
	var nf *fault.NotFound
	return errors.As(err, &nf)
}
