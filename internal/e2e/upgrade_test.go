package e2e_test

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/devcluster"
	"github.com/gantryhq/gantry/internal/devcluster/clustertest"
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
	build := exec.Command("go", "build", "-trimpath", "-tags", "dev", "-o", bin, "./cmd/gantry")
	build.Dir = oldRoot
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
// service stopping.
func TestRollingUpgrade(t *testing.T) {
	if cluster == nil {
		t.Skip(clustertest.ErrNotRequested)
	}
	t.Parallel() // see the note on TestMain
	dsn := storetest.PostgresDSN(t)
	root, err := devcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	oldRoot, oldBin := buildPrevious(t, root)
	data := t.TempDir() // one development signing key for both
	ns := "gantry-upgrade-" + strings.ToLower(rand.Text()[:6])
	grantLease(t, ns)
	env := []string{"GANTRY_NAMESPACE=" + ns, "GANTRY_LEASE_DURATION=3s"}
	team := "up" + strings.ToLower(rand.Text()[:4])
	launch := func(url, tok string) wl {
		t.Helper()
		s, w := post(url, tok, rand.Text(), mustJSON(t, map[string]any{"template": "vllm-inference", "team": team}))
		if s != 201 {
			t.Fatalf("launch at %s: %d", url, s)
		}
		return w
	}
	waitStatus := func(url, tok, id, want string) {
		t.Helper()
		waitfor.Until(t, 90*time.Second, id+" "+want+" at "+url, func() error {
			if got := getWorkload(t, url, tok, id); got.Status != want {
				return fmt.Errorf("status %s (%s)", got.Status, got.Reason)
			}
			return nil
		})
	}

	old := startServe(t, oldRoot, oldBin, data, env, "--db-driver", "postgres", "--db", dsn)
	tok := signInToken(t, old.URL, "ada")
	w1 := launch(old.URL, tok)
	waitStatus(old.URL, tok, w1.ID, "Running")

	// The new release starts beside it: its migrations run on the live
	// database while the old one serves.
	cur := startServe(t, "", "", data, env, "--db-driver", "postgres", "--db", dsn)
	if got := getWorkload(t, cur.URL, tok, w1.ID); got.Status != "Running" || got.Name != w1.Name {
		t.Fatalf("the new release reads the old one's launch as %+v", got)
	}
	w2 := launch(cur.URL, tok)
	for _, url := range []string{old.URL, cur.URL} {
		waitStatus(url, tok, w2.ID, "Running")
		req, _ := http.NewRequest("GET", url+"/api/v1/workloads?team="+team, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("list at %s after the migration: %v %v", url, err, resp)
		}
		resp.Body.Close()
	}
	// The old release acts on the new one's launch while both serve.
	if s := act(t, old.URL, tok, w2.ID, "stop"); s != 200 && s != 202 {
		t.Fatalf("stop through the old release: %d", s)
	}
	waitStatus(cur.URL, tok, w2.ID, "Stopped")

	// The old pod goes; the new one carries on alone, with the lead.
	if err := old.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-old.Exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the old release did not stop within 30 s of SIGTERM")
	}
	if s := act(t, cur.URL, tok, w1.ID, "stop"); s != 200 && s != 202 {
		t.Fatalf("stop through the new release: %d", s)
	}
	waitStatus(cur.URL, tok, w1.ID, "Stopped")
}

// act posts one of a workload's actions (stop, start) and returns the status.
func act(t *testing.T, url, tok, id, action string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/api/v1/workloads/"+id+"/"+action, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
