package devcluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// TestClustersCreatedAtOnce: three clusters created at the same moment (as
// `go test -p 2` starts two packages' clusters) each get ports of their own
// and a control plane of their own — every API server answers its own
// kubeconfig and keeps its own data. Without the creation lock, kwokctl
// hands all three the same ports and reports each ready.
func TestClustersCreatedAtOnce(t *testing.T) {
	ctx, root, run := localClusters(t)
	bin, err := Build(ctx, root, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	clusters := make([]*Cluster, 3)
	errs := make([]error, len(clusters))
	var wg sync.WaitGroup
	for i := range clusters {
		dir := filepath.Join(t.TempDir(), "gantry-kwok-at-once") // under gantry-kwok-: a run's cleanup finds it
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		c := &Cluster{Name: fmt.Sprintf("gt-%s-at-once-%d-%d", run, os.Getpid(), i), Bin: bin, workDir: dir, log: io.Discard}
		c.Kubeconfig = filepath.Join(dir, "kubeconfig")
		cfg := filepath.Join(dir, "kwokctl.yaml")
		if err := os.WriteFile(cfg, kwokctlConfig(bin, filepath.Join(dir, "container.log"), filepath.Join(dir, "simulated-app.py"), "", filepath.Join(dir, "clusters", c.Name, "pki"), true, 0), 0o600); err != nil {
			t.Fatal(err)
		}
		clusters[i] = c
		t.Cleanup(func() { c.Stop(context.Background()) })
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = c.create(ctx, cfg) }()
	}
	wg.Wait()
	owner := map[int]string{}
	for i, c := range clusters {
		if errs[i] != nil {
			t.Fatalf("cluster %d: %v", i, errs[i])
		}
		ports, err := c.componentPorts()
		if err != nil {
			t.Fatal(err)
		}
		for name, p := range ports {
			if other, taken := owner[p]; taken {
				t.Errorf("port %d: %s of cluster %d and %s", p, name, i, other)
			}
			owner[p] = fmt.Sprintf("%s of cluster %d", name, i)
		}
	}
	// Each API server, reached with its own cluster's credentials, stores
	// what it is given in its own etcd.
	clients := make([]kubernetes.Interface, len(clusters))
	for i, c := range clusters {
		cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		if clients[i], err = kubernetes.NewForConfig(cfg); err != nil {
			t.Fatal(err)
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cluster-%d", i), Namespace: "default"}}
		if _, err := clients[i].CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatalf("cluster %d through its own kubeconfig: %v", i, err)
		}
	}
	for i := range clusters {
		for j := range clusters {
			_, err := clients[i].CoreV1().ConfigMaps("default").Get(ctx, fmt.Sprintf("cluster-%d", j), metav1.GetOptions{})
			switch {
			case i == j && err != nil:
				t.Errorf("cluster %d lost its own ConfigMap: %v", i, err)
			case i != j && !apierrors.IsNotFound(err):
				t.Errorf("cluster %d sees cluster %d's ConfigMap (%v): they share an etcd", i, j, err)
			}
		}
	}
}

// localClusters skips a test of local clusters unless they are asked for
// (GANTRY_TEST_CLUSTER, or CI), and returns a context for it, the
// repository's root and the test run's name (GANTRY_TEST_RUN: .ci/test's
// cleanup kills the processes of its clusters by it).
func localClusters(t *testing.T) (ctx context.Context, root, run string) {
	t.Helper()
	if os.Getenv("GANTRY_TEST_CLUSTER") == "" && os.Getenv("CI") == "" {
		t.Skip("GANTRY_TEST_CLUSTER is not set: tests against local clusters are skipped")
	}
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	if run = os.Getenv("GANTRY_TEST_RUN"); run == "" {
		run = "local"
	}
	return ctx, root, run
}
