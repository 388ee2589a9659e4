package workers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/devcluster"
	"github.com/gantryhq/gantry/internal/devcluster/clustertest"
	"github.com/gantryhq/gantry/internal/fleet"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/kube/workers"
	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/waitfor"
)

// Two worker clusters, each a control plane of its own: an on-premises
// room of A100s and a cloud of H100s.
var onprem, cloud *devcluster.Cluster

func TestMain(m *testing.M) {
	var stops []func()
	code := 0
	for _, spec := range []struct {
		c     **devcluster.Cluster
		name  string
		fleet []devcluster.NodeSpec
	}{
		{&onprem, "workers-onprem", []devcluster.NodeSpec{{Prefix: "a100", Count: 2, Product: "NVIDIA-A100-SXM4-80GB", MemoryMB: 81920, GPUs: 8, Whole: 8}}},
		{&cloud, "workers-cloud", []devcluster.NodeSpec{{Prefix: "h100", Count: 1, Product: "NVIDIA-H100-80GB-HBM3", MemoryMB: 81559, GPUs: 8, Whole: 8}}},
	} {
		c, stop, err := clustertest.ForTests(spec.name, func(o *devcluster.Options) { o.Fleet = spec.fleet })
		if errors.Is(err, clustertest.ErrNotRequested) {
			fmt.Println(err)
			break
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "worker cluster:", err)
			code = 1
			break
		}
		*spec.c = c
		stops = append(stops, stop)
	}
	if code == 0 {
		code = m.Run()
	}
	for _, s := range stops {
		s()
	}
	os.Exit(code)
}

func need(t *testing.T) {
	if onprem == nil || cloud == nil {
		t.Skip(clustertest.ErrNotRequested)
	}
}

// TestWorkersThroughGantry: Gantry with a clusters file of the two workers
// reads each with its own credentials and serves, at GET /api/v1/clusters,
// what each has free and what each team uses there; the dispatch decision
// over those states sends an A100 launch on premises and an H100 launch to
// the cloud. A credential the worker refuses is said as such, and a rotated
// one is picked up; a worker whose API server is gone is unreachable.
func TestWorkersThroughGantry(t *testing.T) {
	need(t)
	ctx := context.Background()
	dir := t.TempDir()
	cloudKube := filepath.Join(dir, "cloud.kubeconfig")
	good, err := os.ReadFile(cloud.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cloudKube, good, 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "clusters.yaml")
	os.WriteFile(file, []byte(fmt.Sprintf(`apiVersion: gantry.dev/v1alpha1
kind: ClusterList
clusters:
  - name: onprem-a100
    region: eu-central
    provider: on-premises
    kubeconfig: {file: %s}
    labels: {residency: onprem}
    offers: [{class: A100-80GB, purchase: reserved, pricePerGPUHour: 1.10, gpus: 16}]
  - name: cloud-east
    region: us-east-1
    provider: cloud
    kubeconfig: {file: %s}
    labels: {residency: cloud}
    offers:
      - {class: H100-80GB, purchase: on-demand, pricePerGPUHour: 6.90}
      - {class: A100-80GB, purchase: on-demand, pricePerGPUHour: 3.20}
`, onprem.Kubeconfig, cloudKube)), 0o644)

	// A pod of team vision on the cloud's H100s.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "default", Labels: map[string]string{render.LabelTeam: "vision", render.LabelGPUClass: "H100-80GB"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "train", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("4")}}}},
			Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}}}}
	if _, err := cloud.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, time.Minute, "the pod running", func() error {
		p, err := cloud.Client.CoreV1().Pods("default").Get(ctx, "train", metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("%v %v", p.Status.Phase, err)
		}
		return nil
	})

	g := servertest.New(t, func(c *config.Config) { c.ClustersFile = file })
	type state struct {
		Reachable bool
		Why       string
		Free      map[string]float64
		Used      map[string]map[string]float64
	}
	clusters := func() map[string]*state {
		req, _ := http.NewRequest("GET", g.URL+"/api/v1/clusters", nil)
		req.Header.Set("Authorization", "Bearer "+g.Token("ada"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var list struct {
			Items []struct {
				Name  string
				State *state
			}
		}
		if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&list) != nil {
			t.Fatalf("GET /api/v1/clusters: %d", resp.StatusCode)
		}
		out := map[string]*state{}
		for _, c := range list.Items {
			out[c.Name] = c.State
		}
		return out
	}
	waitfor.Until(t, time.Minute, "both workers read", func() error {
		cs := clusters()
		on, cl := cs["onprem-a100"], cs["cloud-east"]
		if on == nil || cl == nil || !on.Reachable || !cl.Reachable {
			return fmt.Errorf("%+v %+v", on, cl)
		}
		if on.Free["A100-80GB"] != 16 || cl.Free["H100-80GB"] != 4 || cl.Free["A100-80GB"] != 0 || cl.Used["vision"]["H100-80GB"] != 4 {
			return fmt.Errorf("onprem %+v, cloud %+v", on, cl)
		}
		return nil
	})

	// The decision over the same workers, read directly.
	classes, err := gpu.LoadFile(g.Config.GPUClassesFile)
	if err != nil {
		t.Fatal(err)
	}
	fl, err := fleet.LoadFile(file, classes)
	if err != nil {
		t.Fatal(err)
	}
	w, err := workers.New(workers.Options{Fleet: fl, Classes: classes})
	if err != nil {
		t.Fatal(err)
	}
	w.Pass(ctx)
	states, _ := w.States()
	if d := fl.Place(fleet.Launch{Team: "vision", Class: "A100-80GB", GPUs: 8}, states); d.Cluster() != "onprem-a100" ||
		d.Reason != "placed on onprem-a100: $1.10/GPU-h (reserved) vs $3.20 on cloud-east (full); 16 GPUs free" {
		t.Errorf("an A100 launch: %s", d.Reason)
	}
	if d := fl.Place(fleet.Launch{Team: "vision", Class: "H100-80GB", GPUs: 4}, states); d.Cluster() != "cloud-east" {
		t.Errorf("an H100 launch: %s", d.Reason)
	}

	// Credentials the worker refuses: a token it never issued.
	kc, err := clientcmd.Load(good)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range kc.AuthInfos {
		a.ClientCertificateData, a.ClientKeyData, a.ClientCertificate, a.ClientKey, a.Token = nil, nil, "", "", "not-a-token"
	}
	if err := clientcmd.WriteToFile(*kc, cloudKube); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, time.Minute, "the refused credentials said", func() error {
		if cl := clusters()["cloud-east"]; cl == nil || cl.Reachable || !strings.Contains(cl.Why, "refuses Gantry's credentials") {
			return fmt.Errorf("%+v", cl)
		}
		return nil
	})
	// Rotated: good credentials again, picked up without a restart.
	if err := os.WriteFile(cloudKube, good, 0o600); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, time.Minute, "the rotated credentials used", func() error {
		if cl := clusters()["cloud-east"]; cl == nil || !cl.Reachable {
			return fmt.Errorf("%+v", cl)
		}
		return nil
	})
	// The cloud's control plane gone.
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := cloud.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, time.Minute, "the stopped worker unreachable", func() error {
		if cl := clusters()["cloud-east"]; cl == nil || cl.Reachable || !strings.Contains(cl.Why, "cannot be reached") && !strings.Contains(cl.Why, "did not answer") {
			return fmt.Errorf("%+v", cl)
		}
		return nil
	})
	w.Pass(ctx)
	states, _ = w.States()
	if d := fl.Place(fleet.Launch{Team: "vision", Class: "H100-80GB", GPUs: 4}, states); d.Cluster() != "" || !strings.Contains(d.Reason, "cloud-east: unreachable") {
		t.Errorf("an H100 launch with the cloud gone: %s", d.Reason)
	}
}
