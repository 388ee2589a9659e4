package authz_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/internal/access"
	"github.com/gantryhq/gantry/internal/authz"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/team"
)

func starter(t testing.TB) *authz.Policy {
	t.Helper()
	p, err := authz.Load(authz.InDir("../../policy"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// user signed in with a second factor (what platform roles need).
func user(sub string, groups ...string) identity.Identity {
	return identity.Identity{Issuer: "https://idp.example", Subject: sub, Groups: groups, SecondFactor: true}
}

// TestSecondFactorRoles: a role the policy marks (platform-admin,
// platform-engineer) holds only for a sign-in with a second factor; without
// one the person keeps their other roles, and NeedsSecondFactor says a
// refusal would be lifted by one.
func TestSecondFactorRoles(t *testing.T) {
	p := starter(t)
	weakAdmin := user("admin", "gantry-admins", "ml-vision")
	weakAdmin.SecondFactor = false
	weakEngineer := user("pe", "platform-team")
	weakEngineer.SecondFactor = false
	for _, tc := range []struct {
		who        identity.Identity
		team, perm string
		want, step bool
	}{
		{weakAdmin, authz.AnyTeam, "audit:read", false, true},
		{weakAdmin, "nlp", "workloads:manage", false, true},
		{weakAdmin, "vision", "workloads:launch", true, false}, // a member of vision all the same
		{weakEngineer, authz.AnyTeam, "templates:write", false, true},
		{user("pe", "platform-team"), authz.AnyTeam, "templates:write", true, false},
		{user("viewer", "auditors"), "vision", "workloads:read", true, false},
	} {
		perm, _ := access.Parse(tc.perm)
		if got := p.Allowed(tc.who, team.Name(tc.team), perm); got != tc.want {
			t.Errorf("%s (second factor %v) %s in %s: %v, want %v", tc.who.Subject, tc.who.SecondFactor, tc.perm, tc.team, got, tc.want)
		}
		if tc.team == authz.AnyTeam {
			if got := p.NeedsSecondFactor(tc.who, perm); got != tc.step {
				t.Errorf("%s %s: needs a second factor %v, want %v", tc.who.Subject, tc.perm, got, tc.step)
			}
		}
	}
	if roles := p.SecondFactorRoles(); !slices.Equal(roles, []string{"platform-admin", "platform-engineer"}) {
		t.Errorf("second-factor roles %v", roles)
	}
}

func TestStarterPolicy(t *testing.T) {
	p := starter(t)
	tests := []struct {
		who        identity.Identity
		team, perm string
		want       bool
	}{
		{user("admin", "gantry-admins"), "vision", "workloads:manage", true},
		{user("admin", "gantry-admins"), authz.AnyTeam, "audit:read", true},
		{user("pe", "platform-team"), authz.AnyTeam, "templates:write", true},
		{user("pe", "platform-team"), "vision", "workloads:launch", false},
		{user("ann", "ml-vision"), "vision", "workloads:launch", true},
		{user("ann", "ml-vision"), "vision", "own-workloads:manage", true},
		{user("ann", "ml-vision"), "vision", "workloads:manage", false},
		{user("ann", "ml-vision"), "nlp", "workloads:launch", false},
		{user("ann", "ml-vision"), "vision", "templates:write", false},
		{user("lead", "ml-vision-leads"), "vision", "workloads:manage", true},
		{user("lead", "ml-vision-leads"), "nlp", "workloads:read", false},
		{user("aud", "auditors"), "nlp", "workloads:read", true},
		{user("aud", "auditors"), "nlp", "workloads:launch", false},
		{user("nobody"), "vision", "workloads:read", false},
		{user("admin", "gantry-admins"), "vision", "bogus:read", false},
	}
	for _, tc := range tests {
		perm, _ := access.Parse(tc.perm) // bogus:read: the zero Permission, denied
		if got := p.Allowed(tc.who, team.Name(tc.team), perm); got != tc.want {
			t.Errorf("%s %v in %s: %s = %v, want %v", tc.who, tc.who.Groups, tc.team, tc.perm, got, tc.want)
		}
	}
	if err := p.MayUse("nlp", access.Use{Template: "pytorch-train", GPUClass: "H100-80GB"}); err == nil || !strings.Contains(err.Error(), `may not use template "pytorch-train"`) {
		t.Errorf("nlp pytorch-train: %v", err)
	}
	if err := p.MayUse("vision", access.Use{Template: "pytorch-train", GPUClass: "H200-141GB"}); err == nil || !strings.Contains(err.Error(), "gpu.class") {
		t.Errorf("vision H200: %v", err)
	}
	if err := p.MayUse("vision", access.Use{Template: "pytorch-train", GPUClass: "H100-80GB"}); err != nil {
		t.Error(err)
	}
}

// Storage classes and VM users are the platform's decision: a named storage
// class only when the team's entitlements list it, root only by name.
func TestMayUseStorageAndVMUsers(t *testing.T) {
	dir := copyPolicy(t)
	f := authz.InDir(dir)
	edit(t, f.Bindings, "  nlp:\n", "  lab:\n    templates: [\"*\"]\n    gpuClasses: [\"*\"]\n    vmUsers: [root, \"*\"]\n    storageClasses: [\"*\"]\n  nlp:\n")
	p, err := authz.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	use := func(storage []string, user string) access.Use {
		return access.Use{Template: "gpu-vm", GPUClass: "H100-80GB", StorageClasses: storage, VMUser: user}
	}
	tests := []struct {
		team string
		use  access.Use
		want string // "" for allowed, else a fragment of the problem
	}{
		{"vision", use([]string{""}, "gantry"), ""},
		{"vision", use([]string{"standard", ""}, ""), ""},
		{"vision", use([]string{"fast-nvme"}, ""), `spec.volumes.storageClass: team "vision" may not use storage class "fast-nvme"`},
		{"vision", use(nil, "root"), `spec.vm.user: team "vision" may not create VMs with user root`},
		{"vision", use(nil, "ubuntu"), `spec.vm.user: team "vision" may not create VMs with user "ubuntu"`},
		{"nlp", use([]string{"standard"}, ""), `may not use storage class "standard"`},
		{"nlp", use(nil, "root"), "user root"},
		{"lab", use([]string{"anything"}, "root"), ""},
		{"lab", use(nil, "ubuntu"), ""},
	}
	for _, tc := range tests {
		err := p.MayUse(team.Name(tc.team), tc.use)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s %+v: %v", tc.team, tc.use, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s %+v: %v, want %q", tc.team, tc.use, err, tc.want)
		}
	}
	edit(t, f.Bindings, "vmUsers: [root, \"*\"]", "vmUsers: [Root!]")
	if _, err := authz.Load(f); err == nil || !strings.Contains(err.Error(), `teams.lab.vmUsers[0]: "Root!" is not a Linux user name`) {
		t.Fatalf("bad vm user: %v", err)
	}
}

// copyPolicy copies policy/ to a temporary directory for editing.
func copyPolicy(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"model.conf", "roles.csv", "bindings.yaml"} {
		b, err := os.ReadFile(filepath.Join("../../policy", f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, f), b, 0o644)
	}
	return dir
}

func edit(t *testing.T, path, from, to string) {
	t.Helper()
	b, _ := os.ReadFile(path)
	if !strings.Contains(string(b), from) {
		t.Fatalf("%s lacks %q", path, from)
	}
	os.WriteFile(path, []byte(strings.Replace(string(b), from, to, 1)), 0o644)
}

// lineOf is the line of path where s begins, as error messages number it.
func lineOf(t *testing.T, path, s string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(b), s)
	if i < 0 {
		t.Fatalf("%s lacks %q", path, s)
	}
	return fmt.Sprint(strings.Count(string(b[:i]), "\n") + 1)
}

func TestBrokenFilesNamed(t *testing.T) {
	dir := copyPolicy(t)
	f := authz.InDir(dir)
	roles, _ := os.ReadFile(f.Roles)
	line := fmt.Sprint(strings.Count(strings.Split(string(roles), "p, viewer, *, images, read")[0], "\n") + 1)
	edit(t, f.Roles, "p, viewer, *, images, read", "p, wizard, vision, images, fly")
	bindingLine := lineOf(t, f.Bindings, "{group: ml-nlp, team: nlp, role: member}")
	edit(t, f.Bindings, "{group: ml-nlp, team: nlp, role: member}", "{group: ml-nlp, team: NLP, role: boss}")
	_, err := authz.Load(f)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		f.Roles + `:` + line + `: unknown role "wizard"`,
		f.Roles + `:` + line + `: role rules apply in every team`,
		f.Roles + `:` + line + `: unknown permission "images:fly"`,
		f.Bindings + `:` + bindingLine + `: groups[4].role: unknown role "boss"`,
		f.Bindings + `:` + bindingLine + `: groups[4].team: "NLP" is not a team name`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in %v", want, err)
		}
	}
}

// TestTeamRolesHoldNoPlatformPermission: a team role is bound in one team;
// the permissions that act on the whole platform (the catalog, the policy,
// the audit log, people), or every permission at once, given to one are
// refused with the file and line.
func TestTeamRolesHoldNoPlatformPermission(t *testing.T) {
	for _, line := range []string{"p, team-admin, *, templates, write", "p, member, *, audit, read", "p, team-admin, *, *, *"} {
		dir := copyPolicy(t)
		f := authz.InDir(dir)
		edit(t, f.Roles, "p, team-admin, *, templates, read", line)
		_, err := authz.Load(f)
		want := f.Roles + ":" + lineOf(t, f.Roles, line) + ": "
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "only platform-admin and platform-engineer may hold it") {
			t.Errorf("%q: %v, want refused at %s", line, err, want)
		}
	}
}

func TestReload(t *testing.T) {
	dir := copyPolicy(t)
	f := authz.InDir(dir)
	a, err := authz.New(f)
	if err != nil {
		t.Fatal(err)
	}
	ann := user("ann", "ml-vision")
	if !a.Policy().Allowed(ann, "vision", access.WorkloadsLaunch) {
		t.Fatal("ann cannot launch before the change")
	}
	if err := a.Reload(); !errors.Is(err, authz.ErrUnchanged) {
		t.Fatalf("reload without a change: %v", err)
	}
	// A broken file keeps the policy in force.
	line := lineOf(t, f.Bindings, "role: member}\n  - {group: ml-vision-leads")
	edit(t, f.Bindings, "role: member}\n  - {group: ml-vision-leads", "role: memberr}\n  - {group: ml-vision-leads")
	if err := a.Reload(); err == nil || !strings.Contains(err.Error(), "bindings.yaml:"+line+":") {
		t.Fatalf("broken reload: %v", err)
	}
	if !a.Policy().Allowed(ann, "vision", access.WorkloadsLaunch) {
		t.Fatal("a broken file changed the policy")
	}
	// Removing the binding denies on the very next decision.
	edit(t, f.Bindings, "  - {group: ml-vision, team: vision, role: memberr}\n", "")
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if a.Policy().Allowed(ann, "vision", access.WorkloadsLaunch) {
		t.Fatal("stale allow after the binding was removed")
	}
}

// BenchmarkAllowed: 1,000 users, 100 teams, 10,000 user bindings, warm, a user
// in 5 groups; every call is a decision (nothing is cached).
func BenchmarkAllowed(b *testing.B) {
	dir := b.TempDir()
	for _, f := range []string{"model.conf", "roles.csv"} {
		data, _ := os.ReadFile(filepath.Join("../../policy", f))
		os.WriteFile(filepath.Join(dir, f), data, 0o644)
	}
	var sb strings.Builder
	sb.WriteString("apiVersion: gantry.dev/v1alpha1\nkind: Policy\ngroups:\n")
	for t := 0; t < 100; t++ {
		fmt.Fprintf(&sb, "  - {group: team%d-members, team: team%d, role: member}\n", t, t)
	}
	sb.WriteString("users:\n")
	roles := []string{"member", "viewer", "team-admin"}
	for i := 0; i < 10000; i++ {
		fmt.Fprintf(&sb, "  - {user: 'https://idp.example#u%d', team: team%d, role: %s}\n", i%1000, (i*7)%100, roles[i%3])
	}
	sb.WriteString("teams: {}\n")
	os.WriteFile(filepath.Join(dir, "bindings.yaml"), []byte(sb.String()), 0o644)
	p, err := authz.Load(authz.InDir(dir))
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	ids := make([]identity.Identity, 1000)
	for i := range ids {
		ids[i] = user(fmt.Sprintf("u%d", i), "g1", "g2", "g3", "g4", fmt.Sprintf("team%d-members", i%100))
	}
	perms := []access.Permission{access.WorkloadsLaunch, access.WorkloadsRead, access.OwnWorkloadsManage, access.TemplatesWrite}
	teams := make([]string, 100)
	for i := range teams {
		teams[i] = fmt.Sprintf("team%d", i)
	}
	// Any user, any team: most decisions are denials of users bound elsewhere.
	b.Run("random", func(b *testing.B) {
		allowed := 0
		for b.Loop() {
			if p.Allowed(ids[r.IntN(1000)], team.Name(teams[r.IntN(100)]), perms[r.IntN(4)]) {
				allowed++
			}
		}
		if allowed == 0 {
			b.Fatal("nothing allowed: only denials measured")
		}
	})
	// A user in a team they are bound in, warm: every (subject, team,
	// permission) was decided once before timing starts.
	b.Run("bound-warm", func(b *testing.B) {
		for i := 0; i < 10000; i++ {
			for _, perm := range perms {
				p.Allowed(ids[i%1000], team.Name(teams[(i*7)%100]), perm)
			}
		}
		b.ResetTimer()
		for b.Loop() {
			i := r.IntN(10000)
			p.Allowed(ids[i%1000], team.Name(teams[(i*7)%100]), perms[r.IntN(4)])
		}
	})
}

// TestQuotas: a team's quota is its own, else the default entry's; a bad
// quota is refused at file:line with its field path.
func TestQuotas(t *testing.T) {
	classes, err := gpu.LoadFile("../../templates/gpu-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := copyPolicy(t)
	f := authz.InDir(dir)
	f.Classes = classes
	p, err := authz.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	if q := p.Quota("vision"); q.For("H100-80GB") != 8 || q.For("H200-141GB") != 0 || q.Cohort != "research" {
		t.Errorf("vision: %+v", q)
	}
	if q := p.Quota("nlp"); q.For("H200-141GB") != 4 || q.BorrowingLimit["H100-80GB"] != 4 {
		t.Errorf("nlp (\"*\": 4): %+v", q)
	}
	if q := p.Quota("robotics"); q.For("H100-80GB") != 0 {
		t.Errorf("a team the policy does not name has no quota: %+v", q)
	}
	if qs := p.Quotas(); len(qs) != 2 {
		t.Errorf("quotas of the named teams: %v", qs)
	}
	edit(t, f.Bindings, "gpus: {H100-80GB: 8, A100-80GB: 8, A100-40GB: 8, L4: 8}\n      cohort: research",
		"gpus: {H100-80GB: -1, B300: 8}\n      cohort: Research\n      borrowingLimit: {L4: 2}\n      cores: -2")
	edit(t, f.Bindings, "      cohort: research\n      borrowingLimit: {H100-80GB: 4}", "      borrowingLimit: {H100-80GB: 4}")
	_, err = authz.Load(f)
	for _, want := range []string{
		`teams.vision.quota.gpus.H100-80GB: -1 GPUs: must be a number from 0 to 1000000`,
		`teams.vision.quota.gpus.B300: unknown GPU class "B300"`,
		`teams.vision.quota.cohort: "Research" must be a lowercase DNS label`,
		`teams.vision.quota.cores: -2 cores: must be a number from 0 to 1000000`,
		`teams.nlp.quota.borrowingLimit: borrowing needs a cohort to borrow from`,
		f.Bindings + `:`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in %v", want, err)
		}
	}
}
