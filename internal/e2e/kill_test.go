package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantryhq/gantry/api/client"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/devcluster/clustertest"
	"github.com/gantryhq/gantry/internal/devidp"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/store/storetest"
	"github.com/gantryhq/gantry/internal/waitfor"
)

// TestKill9MidLaunch kills the real gantry binary with SIGKILL at different
// moments of a launch, restarts it on the same database, and has the client
// retry with its Idempotency-Key: each time there is exactly one workload, and
// it is fully applied (one Deployment), whatever the moment of the kill.
func TestKill9MidLaunch(t *testing.T) {
	if cluster == nil {
		t.Skip(clustertest.ErrNotRequested)
	}
	beside(t)
	deleteDeploymentsAtEnd(t, "kill0", "kill1", "kill2", "kill3")
	db := storetest.SQLitePath(t)
	ctx := context.Background()
	// A platform admin signs in through the portal once and makes a token;
	// it lives in the database, so it outlives every process below.
	p := startProcess(t, db)
	tok := signInToken(t, p.URL, "ada")
	p.Cmd.Process.Signal(syscall.SIGTERM)
	<-p.Exited
	for i, delay := range []time.Duration{0, 3 * time.Millisecond, 10 * time.Millisecond, 30 * time.Millisecond} {
		team := fmt.Sprintf("kill%d", i)
		key := "launch-" + team
		req := model.LaunchRequest{Template: "vllm-inference", Team: team}

		first := startProcess(t, db)
		go launchAt(first.URL, tok, key, req) // outcome unknown: the process dies
		time.Sleep(delay)
		first.Stop()

		second := startProcess(t, db)
		url := second.URL
		var w model.Workload
		waitfor.Until(t, 30*time.Second, team+": the retried launch", func() error {
			status, got := launchAt(url, tok, key, req)
			if status != 200 && status != 201 {
				return fmt.Errorf("retry answered %d", status)
			}
			w = got
			return nil
		})
		waitfor.Until(t, 30*time.Second, fmt.Sprintf("%s (kill after %v) to be applied after restart", team, delay), func() error {
			if w = getWorkload(t, url, tok, w.Id); !w.Applied {
				return fmt.Errorf("%s", asJSON(w))
			}
			return nil
		})
		list := servertest.Deref(servertest.Must(servertest.Client(url, tok).ListWorkloadsWithResponse(ctx, &model.ListWorkloadsParams{Team: &team}))(t).JSON200)
		deps, err := cluster.Client.AppsV1().Deployments("gantry-"+team).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 1 || len(deps.Items) != 1 || deps.Items[0].Labels["gantry.dev/workload-id"] != w.Id {
			t.Fatalf("%s (kill after %v): %d workloads, %d deployments; want exactly one of each", team, delay, len(list.Items), len(deps.Items))
		}
		second.Cmd.Process.Signal(syscall.SIGTERM)
		<-second.Exited
	}
}

// signInToken signs a development user in through the portal, as a browser
// would, and makes a personal access token with the session.
func signInToken(t testing.TB, url, user string) string {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	b := &http.Client{Jar: jar, Timeout: 20 * time.Second}
	_, page, err := devidp.SignIn(context.Background(), b, url+"/auth/login", user, user)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)">`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token on the signed-in page:\n%s", page)
	}
	// The session's cookie through b, its CSRF token with the call.
	r := servertest.Must(servertest.Client(url, "", client.WithHTTPClient(b)).CreateTokenWithResponse(context.Background(), model.TokenRequest{Name: "e2e", ExpiresInDays: 1},
		func(_ context.Context, req *http.Request) error { req.Header.Set("X-CSRF-Token", m[1]); return nil }))(t)
	if r.StatusCode() != 201 {
		t.Fatalf("token: %d %s", r.StatusCode(), r.Body)
	}
	return r.JSON201.Token
}

// launchAt launches req at url with tok under an Idempotency-Key; it does
// not fail the test (a launch may be cut off by a kill): no answer is
// status 0.
func launchAt(url, tok, key string, req model.LaunchRequest) (int, model.Workload) {
	r, err := servertest.Client(url, tok).CreateWorkloadWithResponse(context.Background(), &model.CreateWorkloadParams{IdempotencyKey: &key}, req)
	if err != nil {
		return 0, model.Workload{}
	}
	w := r.JSON201 // the launch; a replay of its key answers 200 with it
	if w == nil {
		w = r.JSON200
	}
	return r.StatusCode(), servertest.Deref(w)
}

func getWorkload(t *testing.T, url, tok, id string) model.Workload {
	t.Helper()
	return servertest.Deref(servertest.Must(servertest.Client(url, tok).GetWorkloadWithResponse(context.Background(), id))(t).JSON200)
}

// startProcess runs `gantry serve` against the test cluster on SQLite at db
// and waits until it answers.
func startProcess(t *testing.T, db string) *servertest.Process {
	t.Helper()
	return startServe(t, "", "", filepath.Join(filepath.Dir(db), "data"), nil, "--db", db)
}

// startServe runs `gantry serve` from root (default: this tree's, built
// once) with args and env, and the test cluster, the test policy, the
// development registry and one-second loops, and waits until it serves.
// dataDir holds the development signing key.
func startServe(t testing.TB, root, bin, dataDir string, env []string, args ...string) *servertest.Process {
	t.Helper()
	return servertest.StartBinary(t, servertest.ProcessOptions{Bin: bin, Dir: root,
		Args: append([]string{"--kubeconfig", gantryKubeconfig, "--log-level", "info"}, args...),
		Env: append([]string{"GANTRY_RECONCILE_INTERVAL=1s", "GANTRY_POLICY_DIR=" + testPolicy(t), "GANTRY_IMAGES_DEV_REGISTRY=true", "GANTRY_CAPACITY_INFORMERS=false",
			"XDG_DATA_HOME=" + dataDir}, env...)})
}
