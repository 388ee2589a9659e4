package e2e_test

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/devcluster"
	"github.com/gantryhq/gantry/internal/devcluster/clustertest"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/store/storetest"
	"github.com/gantryhq/gantry/internal/waitfor"
)

// previousRelease reads testdata/previous-release ("<tag> <commit>"): the
// release a rolling upgrade comes from.
func previousRelease(t *testing.T) (tag, commit string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "previous-release"))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(data))
	if len(f) != 2 {
		t.Fatalf("testdata/previous-release: want \"<tag> <commit>\", got %q", data)
	}
	return f[0], f[1]
}

// buildPrevious extracts the previous release's tree from git history (git
// archive: the checkout is not touched) and builds its development binary.
func buildPrevious(t *testing.T, root string) (oldRoot, bin string) {
	t.Helper()
	tag, commit := previousRelease(t)
	if err := exec.Command("git", "-C", root, "cat-file", "-e", commit+"^{commit}").Run(); err != nil {
		msg := "the previous release " + tag + " (" + commit + ") is not in this clone's history: fetch it (git fetch --unshallow)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	oldRoot = t.TempDir()
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", commit)
	var tarball bytes.Buffer
	archive.Stdout = &tarball
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v", commit, err)
	}
	untar := exec.Command("tar", "-x", "-C", oldRoot)
	untar.Stdin = &tarball
	if out, err := untar.CombinedOutput(); err != nil {
		t.Fatalf("untar: %v\n%s", err, out)
	}
	bin = filepath.Join(t.TempDir(), "gantry-"+tag)
	// -trimpath: the tree's packages build from the cache when they are
	// as they were at the last run (a temporary directory each time).
	// Without cgo, as CI builds the tree's own binary: the dependencies
	// both releases share come from the cache too.
	build := exec.Command("go", "build", "-trimpath", "-tags", "dev", "-o", bin, "./cmd/gantry")
	build.Dir = oldRoot
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", tag, err, out)
	}
	return oldRoot, bin
}

// TestRollingUpgrade: the previous release and this tree's gantry serve one
// PostgreSQL database together, as a rolling upgrade of the chart's
// Deployment has them (maxSurge 1, maxUnavailable 0): the old one serves, the
// new one starts and migrates the schema under it, both serve — each reads
// and acts on what the other launched — and the old one stops without the
// service stopping. Both run with quota.kueue off: the previous release
// (v0.1.0) writes queues that do not cover cpu, which this cluster's Kueue
// counts, and its queue sync would fight the other tests' servers over
// them; off, neither touches Kueue's objects and their launches run
// unqueued. What this test holds is the schema and the shared database.
func TestRollingUpgrade(t *testing.T) {
	if cluster == nil {
		t.Skip(clustertest.ErrNotRequested)
	}
	beside(t)
	dsn := storetest.PostgresDSN(t)
	root, err := devcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	oldRoot, oldBin := buildPrevious(t, root)
	data := t.TempDir() // one development signing key for both
	ns := "gantry-upgrade-" + strings.ToLower(rand.Text()[:6])
	grantLease(t, ns)
	env := []string{"GANTRY_NAMESPACE=" + ns, "GANTRY_LEASE_DURATION=3s", "GANTRY_QUOTA_KUEUE=false",
		"GANTRY_POLICY_DIR=" + policyTeams(t, testTeams)} // after startServe's own: it wins
	team := "up" + strings.ToLower(rand.Text()[:4])
	deleteDeploymentsAtEnd(t, team)
	launch := func(url, tok string) model.Workload {
		t.Helper()
		s, w := launchAt(url, tok, rand.Text(), model.LaunchRequest{Template: "vllm-inference", Team: team})
		if s != 201 {
			t.Fatalf("launch at %s: %d", url, s)
		}
		return w
	}
	waitStatus := func(url, tok, id string, want model.WorkloadStatus) {
		t.Helper()
		waitfor.Until(t, 90*time.Second, id+" "+string(want)+" at "+url, func() error {
			if got := getWorkload(t, url, tok, id); got.Status != want {
				return fmt.Errorf("status %s (%s)", got.Status, servertest.Deref(got.Reason))
			}
			return nil
		})
	}

	old := startServe(t, oldRoot, oldBin, data, env, "--db-driver", "postgres", "--db", dsn)
	tok := signInToken(t, old.URL, "ada")
	w1 := launch(old.URL, tok)
	waitStatus(old.URL, tok, w1.Id, "Running")

	// The new release starts beside it: its migrations run on the live
	// database while the old one serves.
	cur := startServe(t, "", "", data, env, "--db-driver", "postgres", "--db", dsn)
	if got := getWorkload(t, cur.URL, tok, w1.Id); got.Status != "Running" || got.Name != w1.Name {
		t.Fatalf("the new release reads the old one's launch as %s", asJSON(got))
	}
	w2 := launch(cur.URL, tok)
	for _, url := range []string{old.URL, cur.URL} {
		waitStatus(url, tok, w2.Id, "Running")
		if r := servertest.Must(servertest.Client(url, tok).ListWorkloadsWithResponse(t.Context(), &model.ListWorkloadsParams{Team: &team}))(t); r.StatusCode() != 200 {
			t.Fatalf("list at %s after the migration: %d %s", url, r.StatusCode(), r.Body)
		}
	}
	// The old release acts on the new one's launch while both serve.
	if s := stopAt(t, old.URL, tok, w2.Id); s != 200 && s != 202 {
		t.Fatalf("stop through the old release: %d", s)
	}
	waitStatus(cur.URL, tok, w2.Id, "Stopped")
	// The new release listed w2 Running, and keeps the rows it listed: its
	// next list shows the old release's stop (the database bumps a row's
	// version on the old release's UPDATE too).
	listed := servertest.Deref(servertest.Must(servertest.Client(cur.URL, tok).ListWorkloadsWithResponse(t.Context(), &model.ListWorkloadsParams{Team: &team}))(t).JSON200)
	for _, it := range listed.Items {
		if it.Id == w2.Id && it.Status != "Stopped" {
			t.Fatalf("the new release lists %s as %s after the old one stopped it", w2.Id, it.Status)
		}
	}

	// The old pod goes; the new one carries on alone, with the lead.
	if err := old.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-old.Exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the old release did not stop within 30 s of SIGTERM")
	}
	if s := stopAt(t, cur.URL, tok, w1.Id); s != 200 && s != 202 {
		t.Fatalf("stop through the new release: %d", s)
	}
	waitStatus(cur.URL, tok, w1.Id, "Stopped")
}

// stopAt stops a workload at url with tok and returns the status.
func stopAt(t *testing.T, url, tok, id string) int {
	t.Helper()
	return servertest.Must(servertest.Client(url, tok).StopWorkloadWithResponse(t.Context(), id))(t).StatusCode()
}
