package devcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/gantryhq/gantry/internal/kube/kapi"
)

// Kueue runs on the binary-runtime cluster as a process on loopback, like
// the control plane. Its webhooks are not registered with the API server:
// the API server could reach them only through a Service, and there is no
// kube-proxy here. Gantry does what Kueue's webhooks would do for its
// workloads (creates Jobs suspended, labels pods for Kueue's pod integration
// and gates them). Kueue still serves webhooks on a loopback port and
// manages its own certificates (internalCertManagement), because it insists
// on both; the CRDs it converts carry its conversion webhook settings, which
// the API server must never call: it cannot reach the webhook. So each CRD
// serves its stored version only (v1beta2, the one Kueue and Gantry use).
// Served, the older version had a watch cache of its own, which converted
// every object through the webhook, failed, and listed the whole resource
// from etcd again, about once a second for each of Workloads, LocalQueues
// and ClusterQueues: without it the API server's CPU over the e2e tests
// fell by 41 % (docs/benchmarks.md).

// KueueNamespace is where Kueue keeps its certificate Secret.
const KueueNamespace = "kueue-system"

// kueueConverted are the CRDs whose conversion webhook Kueue's certificate
// manager must find (it waits until it has put its CA in each).
var kueueConverted = map[string]bool{
	"localqueues.kueue.x-k8s.io": true, "clusterqueues.kueue.x-k8s.io": true, "workloads.kueue.x-k8s.io": true,
	"cohorts.kueue.x-k8s.io": true, "multikueueclusters.kueue.x-k8s.io": true,
}

// KueueTransformation is one of Kueue's resource transformations: each unit
// of Input counts as Milli thousandths of Output in quota (Input replaced).
type KueueTransformation struct {
	Input, Output string
	Milli         int64
}

// BuildKueue builds (first time) or finds Kueue and returns its directory
// (bin/kueue, crds/).
func BuildKueue(ctx context.Context, root string, log io.Writer) (string, error) {
	return runBuild(ctx, root, "deploy/kueue/build.sh", "Kueue", log)
}

// startKueue installs Kueue's CRDs and runs its controller manager against
// the cluster until Stop, waiting until it manages ClusterQueues.
func (c *Cluster) startKueue(ctx context.Context, o Options) error {
	c.kueueOptions = o
	dir, err := BuildKueue(ctx, o.Root, o.Log)
	if err != nil {
		return err
	}
	if err := c.installKueueCRDs(ctx, filepath.Join(dir, "crds")); err != nil {
		return fmt.Errorf("install Kueue's CRDs: %w", err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: KueueNamespace}}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", KueueNamespace, err)
	}
	// Kueue's certificate manager fills this Secret; it must exist.
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "kueue-webhook-server-cert", Namespace: KueueNamespace}}
	if _, err := c.Client.CoreV1().Secrets(KueueNamespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create Kueue's certificate Secret: %w", err)
	}
	// Under clusters/<name>/ so that a test run's cleanup (which kills the
	// processes of its clusters by path) ends Kueue too.
	kdir := filepath.Join(c.workDir, "clusters", c.Name, "kueue")
	if err := os.MkdirAll(filepath.Join(kdir, "certs"), 0o700); err != nil {
		return err
	}
	// Kueue's webhook server needs a port of its own; a taken one makes it
	// exit at once, and another is tried. Below 30000: kwokctl gives other
	// clusters' components ports counting down from 32767 (ports.go).
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port := 20000 + rand.IntN(10000)
		cfg := filepath.Join(kdir, "config.yaml")
		if err := os.WriteFile(cfg, kueueConfig(port, filepath.Join(kdir, "certs"), o.KueueTransformations, o.WaitForPodsReady, o.MultiKueueDispatcher, o.KueueCountsCPU), 0o600); err != nil {
			return err
		}
		k, err := startProcess("Kueue", filepath.Join(dir, "bin", "kueue"), []string{"--config", cfg, "--feature-gates", "VisibilityOnDemand=false", "--zap-log-level", kueueLogLevel(o.KueueLogLevel)},
			[]string{"KUBECONFIG=" + c.Kubeconfig}, filepath.Join(kdir, "kueue.log"))
		if err != nil {
			return err
		}
		mounted := make(chan struct{})
		go func() { defer close(mounted); c.mountKueueCerts(k, filepath.Join(kdir, "certs")) }()
		lastErr = c.waitKueue(ctx, k)
		if lastErr == nil {
			// Kueue starts only once its certificates are mounted, so the
			// mount is done: nothing of the cluster's keeps running in the
			// background (client-go logs through process-wide state).
			<-mounted
			c.kueue = k
			c.kueueLog = filepath.Join(kdir, "kueue.log")
			return nil
		}
		k.stop()
		<-mounted
		if !strings.Contains(k.output(), "address already in use") {
			break
		}
	}
	return fmt.Errorf("start Kueue: %w", lastErr)
}

// kueueLogLevel is Kueue's --zap-log-level for a verbosity (zap takes
// "info" or a level above 0).
func kueueLogLevel(v int) string {
	if v <= 0 {
		return "info"
	}
	return strconv.Itoa(v)
}

// KueueLog is the path of Kueue's log ("" before it starts), for a failed
// test to read what Kueue did.
func (c *Cluster) KueueLog() string { return c.kueueLog }

// KarpenterLog is the path of Karpenter's log ("" without Karpenter), for a
// failed test to read what Karpenter did.
func (c *Cluster) KarpenterLog() string { return c.karpenterLog }

// mountKueueCerts does what the kubelet's Secret volume does for Kueue in a
// pod: once Kueue's certificate manager has filled the certificate Secret,
// it writes it into Kueue's certificate directory, and returns (or when
// Kueue ends first). The certificates outlive any local cluster (Kueue's
// are valid for years), so they are not followed after.
func (c *Cluster) mountKueueCerts(k *process, dir string) {
	var written string
	for written == "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		s, err := c.Client.CoreV1().Secrets(KueueNamespace).Get(ctx, "kueue-webhook-server-cert", metav1.GetOptions{})
		cancel()
		if err == nil && len(s.Data["tls.crt"]) > 0 && len(s.Data["tls.key"]) > 0 {
			if v := string(s.Data["tls.crt"]) + string(s.Data["tls.key"]) + string(s.Data["ca.crt"]); v != written {
				ok := true
				for name, data := range s.Data {
					tmp := filepath.Join(dir, "."+name)
					if os.WriteFile(tmp, data, 0o600) != nil || os.Rename(tmp, filepath.Join(dir, name)) != nil {
						ok = false
					}
				}
				if ok {
					written = v
				}
			}
		}
		if written != "" {
			return
		}
		select {
		case <-k.done:
			return
		case <-time.After(300 * time.Millisecond):
		}
	}
}

var (
	clusterQueueResource = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "clusterqueues"}
)

// waitKueue waits until Kueue marks a probe ClusterQueue active: its
// controllers run and its caches are warm.
func (c *Cluster) waitKueue(ctx context.Context, k *process) error {
	dyn, err := dynamic.NewForConfig(c.Config())
	if err != nil {
		return err
	}
	probe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
		"metadata": map[string]any{"name": "gantry-kueue-probe"},
		"spec":     map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"gantry.dev/kueue-probe": "none"}}},
	}}
	cqs := dyn.Resource(clusterQueueResource)
	if _, err := cqs.Create(ctx, probe, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the probe ClusterQueue: %w", err)
	}
	defer cqs.Delete(context.Background(), "gantry-kueue-probe", metav1.DeleteOptions{})
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		if u, err := cqs.Get(ctx, "gantry-kueue-probe", metav1.GetOptions{}); err == nil && conditionTrue(u, "Active") {
			return nil
		}
		select {
		case <-k.done:
			return fmt.Errorf("kueue exited (%v):\n%s", k.err, k.output())
		case <-ctx.Done():
			return fmt.Errorf("kueue did not activate a ClusterQueue within 2 minutes:\n%s", k.output())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func conditionTrue(u *unstructured.Unstructured, typ string) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ && m["status"] == "True" {
			return true
		}
	}
	return false
}

// installKueueCRDs installs Kueue's CRDs from dir, serving only their stored
// version and giving those it converts their conversion webhook settings
// (see the comment at the top).
func (c *Cluster) installKueueCRDs(ctx context.Context, dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return errors.New("no CRDs in " + dir)
	}
	var docs []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var crd map[string]any
		if err := yaml.Unmarshal(data, &crd); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		name, _, _ := unstructured.NestedString(crd, "metadata", "name")
		if err := serveStoredOnly(crd); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if kueueConverted[name] {
			unstructured.SetNestedField(crd, map[string]any{
				"strategy": "Webhook",
				"webhook": map[string]any{
					"clientConfig": map[string]any{"service": map[string]any{
						"namespace": KueueNamespace, "name": "kueue-webhook-service", "path": "/convert",
					}},
					"conversionReviewVersions": []any{"v1"},
				},
			}, "spec", "conversion")
		}
		out, err := yaml.Marshal(crd)
		if err != nil {
			return err
		}
		docs = append(docs, string(out))
	}
	return c.installCRDs(ctx, []byte(strings.Join(docs, "\n---\n")))
}

// kueueConfig is Kueue's configuration on the local cluster: it counts
// CPU (the teams' quota.cores) only with countCPU.
func kueueConfig(port int, certDir string, tr []KueueTransformation, podsReady time.Duration, dispatcher string, countCPU bool) []byte {
	exclude := `["cpu", "memory", "ephemeral-storage", "pods"]`
	if countCPU {
		exclude = `["memory", "ephemeral-storage", "pods"]`
	}
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: %s
health:
  healthProbeBindAddress: "0"
metrics:
  bindAddress: "0"
webhook:
  host: 127.0.0.1
  port: %d
  certDir: %s
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: true
  webhookServiceName: kueue-webhook-service
  webhookSecretName: kueue-webhook-server-cert
clientConnection:
  qps: -1
controller:
  groupKindConcurrency:
    # A burst of launches is a burst of Workloads, each reconciled several
    # times (quota reserved, checks listed, admitted): Kueue's default of 5
    # at a time kept each waiting 5 s for its check to be listed and 5 s more
    # to be admitted once the check was Ready (docs/benchmarks.md, Seams 11).
    Workload.kueue.x-k8s.io: 20
    # The same for the Jobs and pods it makes Workloads of and starts:
    # five at a time made a burst's Jobs wait seconds for their Workloads.
    Job.batch: 20
    Pod: 20
fairSharing:
  preemptionStrategies: [LessThanOrEqualToFinalShare, LessThanInitialShare]
integrations:
  frameworks: ["batch/job", "pod"]
  labelKeysToCopy: ["gantry.dev/workload-id", "app.kubernetes.io/managed-by", "gantry.dev/team", "gantry.dev/gpu-class", "gantry.dev/template", "gantry.dev/planned-cluster"]
managedJobsNamespaceSelector:
  matchLabels:
    app.kubernetes.io/managed-by: gantry
resources:
  excludeResourcePrefixes: %s
`, KueueNamespace, port, certDir, exclude)
	if len(tr) > 0 {
		b.WriteString("  transformations:\n")
		for _, t := range tr {
			fmt.Fprintf(&b, "  - input: %s\n    strategy: Replace\n    outputs:\n      %s: %d\n", t.Input, t.Output, t.Milli)
		}
	}
	if dispatcher != "" {
		// A manager cluster: MultiKueue dispatches each Workload to the
		// worker its external dispatcher (Gantry) nominates; a worker lost
		// for 30 s gives its Workloads back.
		// VMs go to workers as FleetVMs, through MultiKueue's generic
		// adapter (docs/fleets.md, "VMs in a fleet").
		fmt.Fprintf(&b, "multiKueue:\n  dispatcherName: %s\n  workerLostTimeout: 30s\n  gcInterval: 30s\n  externalFrameworks:\n  - name: %s\n", dispatcher, kapi.FleetVMFramework)
	}
	if podsReady > 0 {
		// All-or-nothing: an admitted workload whose pods are not all
		// Ready within the timeout is evicted — its quota given back, its
		// pods removed — and queued again after a backoff (a tenth of the
		// timeout, doubling, at most the timeout). Admissions are not
		// blocked meanwhile.
		fmt.Fprintf(&b, `waitForPodsReady:
  timeout: %s
  blockAdmission: false
  requeuingStrategy:
    timestamp: Eviction
    backoffBaseSeconds: %d
    backoffMaxSeconds: %d
`, podsReady, max(1, int(podsReady.Seconds()/10)), max(1, int(podsReady.Seconds())))
	}
	return []byte(b.String())
}

// serveStoredOnly stops a CRD serving any version but the one it stores
// (see the comment at the top).
func serveStoredOnly(crd map[string]any) error {
	versions, _, err := unstructured.NestedSlice(crd, "spec", "versions")
	if err != nil {
		return err
	}
	stored := 0
	for _, v := range versions {
		v, ok := v.(map[string]any)
		if !ok {
			return errors.New("spec.versions: not a list of objects")
		}
		if v["storage"] == true {
			stored++
		} else {
			v["served"] = false
		}
	}
	if stored != 1 {
		return fmt.Errorf("spec.versions: %d stored versions, want 1", stored)
	}
	return unstructured.SetNestedSlice(crd, versions, "spec", "versions")
}
