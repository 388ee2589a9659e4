package dispatch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/devcluster"
	"github.com/gantryhq/gantry/internal/devcluster/clustertest"
	"github.com/gantryhq/gantry/internal/devregistry"
	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/waitfor"
)

// TestNotebookOnWorkerRunsCode: a real Jupyter on a worker. A third worker,
// "room", is a control plane whose one node is the real node (a kubelet on
// containerd); the cpu-notebook launched through the manager is placed
// there, its pod pulls Debian's Jupyter from Gantry's local signed
// registry, and it is opened at /w/{id}/ through Gantry, which reaches it
// through the worker's API server (a port-forward to the real kubelet, as
// for any worker): Jupyter's API answers, a kernel started over it runs
// print(6*7) over its websocket and answers 42, and the notebook's log
// through Gantry is the container's own. (The other fleet tests' workers
// run simulated pods, whose ports answer with a stand-in app.)
func TestNotebookOnWorkerRunsCode(t *testing.T) {
	if manager == nil {
		t.Skip(clustertest.ErrNotRequested)
	}
	clustertest.NeedRealNode(t, "the real node", devcluster.CanRunRealNode())
	_, err := os.Stat(filepath.Join(devregistry.ImagesDir(), "jupyter", "6.4-debian12", "layer.json"))
	clustertest.NeedRealNode(t, "the image jupyter:6.4-debian12 (deploy/images/build.sh, as root; .ci/test runs it)", err)
	room, stop, err := clustertest.ForTests("fleet-room", func(o *devcluster.Options) {
		o.Fleet = []devcluster.NodeSpec{} // the real node alone
		o.RealNode = true
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	_, err = room.RealNode()
	clustertest.NeedRealNode(t, "the real node", err)

	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "clusters.yaml")
	if err := os.WriteFile(file, []byte(fmt.Sprintf(`apiVersion: gantry.dev/v1alpha1
kind: ClusterList
clusters:
  - name: room
    region: eu-central
    provider: on-premises
    kubeconfig: {file: %s}
    cpu: {purchase: reserved, pricePerCoreHour: 0.02}
`, workerIdentity(t, room))), 0o644); err != nil {
		t.Fatal(err)
	}
	g := fleetGantry(t, file, "gantry-fleet-notebook", nil)
	if err := room.MirrorRegistries(g.Images.Verifier.Mirrors()); err != nil {
		t.Fatal(err)
	}
	tok := g.Token("ada")
	api := servertest.Client(g.URL, tok)
	r := servertest.Must(api.CreateWorkloadWithResponse(ctx, nil, model.LaunchRequest{Template: "cpu-notebook", Team: "vision"}))(t)
	if r.StatusCode() != 201 {
		t.Fatalf("launch: %d %s", r.StatusCode(), r.Body)
	}
	nb := servertest.Deref(r.JSON201)
	t.Cleanup(func() {
		api.DeleteWorkloadWithResponse(context.Background(), nb.Id)
		waitfor.Until(t, 2*time.Minute, "the notebook's pod gone from the room", func() error {
			pods, err := room.Client.CoreV1().Pods("gantry-vision").List(context.Background(), metav1.ListOptions{LabelSelector: render.LabelWorkloadID + "=" + nb.Id})
			if err != nil || len(pods.Items) > 0 {
				return fmt.Errorf("%d pods (%v)", len(pods.Items), err)
			}
			return nil
		})
	})
	base := g.URL + "/w/" + nb.Id + "/"
	// A stuck port-forward ends a request, not the test's wait.
	hc := &http.Client{Timeout: 30 * time.Second}
	app := func(method, path, body string) (int, string, error) {
		req, _ := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	// On a cold run the image's first pull and Jupyter's start on the
	// real node take most of this.
	waitfor.Until(t, 4*time.Minute, "Jupyter answering through /w/"+nb.Id+"/ from the room", func() error {
		w := servertest.Deref(servertest.Must(api.GetWorkloadWithResponse(ctx, nb.Id))(t).JSON200)
		if servertest.Deref(w.Cluster) != "room" || w.Status != model.Running {
			return fmt.Errorf("%s on %q (%s)", w.Status, servertest.Deref(w.Cluster), servertest.Deref(w.Reason))
		}
		if s, body, err := app("GET", "api", ""); err != nil || s != 200 || !strings.Contains(body, `"version": "6.4`) && !strings.Contains(body, `"version":"6.4`) {
			return fmt.Errorf("%d %.200s %v", s, body, err)
		}
		return nil
	})
	pods, err := room.Client.CoreV1().Pods("gantry-vision").List(ctx, metav1.ListOptions{LabelSelector: render.LabelWorkloadID + "=" + nb.Id})
	if err != nil || len(pods.Items) != 1 || pods.Items[0].Spec.NodeName != devcluster.RealNodeName {
		t.Fatalf("the notebook's pods on the room: %v, want one on %s", err, devcluster.RealNodeName)
	}
	s, body, err := app("POST", "api/kernels", `{"name": "python3"}`)
	var kernel struct{ ID string }
	if err == nil {
		err = json.Unmarshal([]byte(body), &kernel)
	}
	if s != 201 || err != nil || kernel.ID == "" {
		t.Fatalf("start a kernel: %d %s %v", s, body, err)
	}
	if got := servertest.RunCell(t, strings.Replace(base, "http://", "ws://", 1)+"api/kernels/"+kernel.ID+"/channels?session_id=fleet", tok, "print(6*7)"); got != "42\n" {
		t.Fatalf("print(6*7) printed %q", got)
	}
	waitfor.Until(t, 30*time.Second, "Jupyter's own log through Gantry", func() error {
		logs := servertest.Must(api.GetWorkloadLogsWithResponse(ctx, nb.Id, nil))(t)
		if !strings.Contains(string(logs.Body), "Serving notebooks from local directory: /home/jovyan") {
			return fmt.Errorf("%d %.300s", logs.StatusCode(), logs.Body)
		}
		return nil
	})
}
