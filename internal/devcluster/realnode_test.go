package devcluster

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gantryhq/gantry/internal/waitfor"
)

// TestRealNode: a cluster asked for a real node gets one beside its
// simulated fleet — a kubelet on containerd that kwok leaves alone, tainted
// so that only pods meant for it land there. A pod there really runs: its
// container's output comes back through the API server's pods/log, its
// exit code is the process's, and a server in it answers the host at the
// pod's address. When the cluster stops, nothing of the node is left: no
// process, network namespace or cgroup.
func TestRealNode(t *testing.T) {
	ctx, root, run := localClusters(t)
	netnsBefore := netnsNames(t)
	var startLog strings.Builder
	c, err := Start(ctx, Options{Name: fmt.Sprintf("gt-%s-realnode-%d", run, os.Getpid()), Root: root, Ephemeral: true, RealNode: true, Log: &startLog})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			c.Stop(context.Background())
		}
	})
	nodeName, err := c.RealNode()
	if err != nil {
		if RealNodeRequired(err) {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	node, err := c.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Labels[RealNodeLabel] != "true" || !strings.HasPrefix(node.Status.NodeInfo.ContainerRuntimeVersion, "containerd://") || node.Annotations["kwok.x-k8s.io/node"] != "" {
		t.Fatalf("node %s: labels %v, runtime %q, annotations %v", nodeName, node.Labels, node.Status.NodeInfo.ContainerRuntimeVersion, node.Annotations)
	}
	tainted := false
	for _, taint := range node.Spec.Taints {
		tainted = tainted || (taint.Key == RealNodeLabel && taint.Effect == corev1.TaintEffectNoSchedule)
	}
	if !tainted {
		t.Fatalf("node %s is not tainted %s: %v", nodeName, RealNodeLabel, node.Spec.Taints)
	}
	if node.Status.Capacity.Cpu().IsZero() || node.Status.Capacity.Memory().IsZero() {
		t.Fatalf("node %s has no CPU or memory: %v", nodeName, node.Status.Capacity)
	}

	pods := c.Client.CoreV1().Pods("default")
	// A process that prints and exits 3.
	if _, err := pods.Create(ctx, realPod("exits", "echo computed $((6*7)); exit 3"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var term *corev1.ContainerStateTerminated
	waitfor.Until(t, 2*time.Minute, "the pod to end", func() error {
		p, err := pods.Get(ctx, "exits", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, s := range p.Status.ContainerStatuses {
			if s.State.Terminated != nil {
				term = s.State.Terminated
				if p.Status.Phase != corev1.PodFailed {
					return fmt.Errorf("phase %s", p.Status.Phase)
				}
				return nil
			}
		}
		return fmt.Errorf("phase %s on %q", p.Status.Phase, p.Spec.NodeName)
	})
	if term.ExitCode != 3 {
		t.Errorf("exit code %d, want 3 (%s)", term.ExitCode, term.Reason)
	}
	out, err := pods.GetLogs("exits", &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil || strings.TrimSpace(string(out)) != "computed 42" {
		t.Errorf("the container's log through the API server: %q, %v", out, err)
	}
	// The node's pod logs are its own, not in the machine's /var/log/pods,
	// whose directories another node's kubelet removes as not its pods'.
	if p, err := pods.Get(ctx, "exits", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else {
		dir := fmt.Sprintf("%s_%s_%s", p.Namespace, p.Name, p.UID)
		if _, err := os.Stat(filepath.Join(c.realNode.dir, "pods-log", dir, "main", "0.log")); err != nil {
			t.Errorf("the pod's log is not in the node's own directory: %v", err)
		}
		if _, err := os.Stat(filepath.Join("/var/log/pods", dir)); err == nil {
			t.Errorf("the pod's log directory is in the machine's /var/log/pods")
		}
		if links, _ := filepath.Glob(filepath.Join(c.realNode.dir, "containers-log", "exits_default_main-*.log")); len(links) != 1 {
			t.Errorf("the container's log links in the node's own /var/log/containers: %v", links)
		}
	}

	// A server, reached from the host at the pod's address.
	if _, err := pods.Create(ctx, realPod("serves", "mkdir -p /tmp/www && hostname > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var ip string
	waitfor.Until(t, 2*time.Minute, "the server's pod running", func() error {
		p, err := pods.Get(ctx, "serves", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			return fmt.Errorf("phase %s, address %q", p.Status.Phase, p.Status.PodIP)
		}
		ip = p.Status.PodIP
		return nil
	})
	answers(t, http.DefaultClient, "http://"+ip+":8080/", "serves")

	// The server through a headless Service, as Gantry's proxy reaches a
	// notebook: by its cluster DNS name, at the Service's port.
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "serves", Namespace: "default"},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "serves"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	if _, err := c.Client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	answers(t, &http.Client{Transport: &http.Transport{DialContext: c.DialService}}, "http://serves.default.svc.cluster.local/", "serves")

	// An image pulled by digest from a registry on the host's loopback,
	// named for another host (as the catalog's are), through the node's
	// mirror of that host.
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	_, shell, err := busyboxImages()
	if err != nil {
		t.Fatal(err)
	}
	local, err := name.NewTag(strings.TrimPrefix(reg.URL, "http://")+"/test/busybox:1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(local, shell, remote.WithContext(ctx)); err != nil {
		t.Fatal(err)
	}
	digest, err := shell.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.MirrorRegistries(map[string]string{"registry.gantry.internal": strings.TrimPrefix(reg.URL, "http://")}); err != nil {
		t.Fatal(err)
	}
	pulled := realPod("pulled", "echo pulled")
	pulled.Spec.Containers[0].Image = "registry.gantry.internal/test/busybox@" + digest.String()
	pulled.Spec.Containers[0].ImagePullPolicy = corev1.PullIfNotPresent
	if _, err := pods.Create(ctx, pulled, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 2*time.Minute, "the pulled image's pod to succeed", func() error {
		p, err := pods.Get(ctx, "pulled", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodSucceeded {
			var why []string
			for _, s := range p.Status.ContainerStatuses {
				if s.State.Waiting != nil {
					why = append(why, s.State.Waiting.Reason+": "+s.State.Waiting.Message)
				}
			}
			return fmt.Errorf("phase %s %v", p.Status.Phase, why)
		}
		return nil
	})

	// A command run in the container through the API server (the kubelet
	// reaches containerd's streaming server across the namespaces).
	out, err = exec.CommandContext(ctx, filepath.Join(c.Bin, "kubectl"), "--kubeconfig", c.Kubeconfig, "exec", "serves", "--", "cat", "/tmp/www/index.html").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "serves" {
		t.Errorf("kubectl exec in the container: %q, %v", out, err)
	}

	n := c.realNode
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	stopped = true
	if out, _ := exec.Command("pgrep", "-f", n.dir+"|"+n.run).Output(); len(out) > 0 {
		t.Errorf("processes of the node left: %s", out)
	}
	// The node's namespace is gone, and every other one that was there is
	// still there — except other real nodes' (gantry-node-N): the other
	// cluster packages' nodes start and stop while this test runs. A
	// namespace of the same slot left by a crashed earlier run was
	// reclaimed when the slot was taken, so it counts as the node's own.
	after := strings.Fields(netnsNames(t))
	if slices.Contains(after, n.netns) {
		t.Errorf("the node's network namespace %s is left: %q", n.netns, after)
	}
	for _, name := range strings.Fields(netnsBefore) {
		if name != n.netns && !strings.HasPrefix(name, "gantry-node-") && !slices.Contains(after, name) {
			t.Errorf("network namespace %s, not the node's, is gone: %q before, %q after", name, netnsBefore, after)
		}
	}
	for _, m := range cgroupMounts() {
		if _, err := os.Stat(filepath.Join(m, n.cgroup)); err == nil {
			t.Errorf("cgroup %s left", filepath.Join(m, n.cgroup))
		}
	}
}

// realPod runs script in busybox's shell on the real node, once.
func realPod(name, script string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			Hostname:      name,
			RestartPolicy: corev1.RestartPolicyNever,
			NodeSelector:  map[string]string{RealNodeLabel: "true"},
			Tolerations:   []corev1.Toleration{{Key: RealNodeLabel, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Containers: []corev1.Container{{
				Name: "main", Image: ShellImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"/bin/sh", "-c", script},
			}},
		},
	}
}

// netnsNames lists the host's named network namespaces.
func netnsNames(t *testing.T) string {
	t.Helper()
	entries, err := os.ReadDir("/run/netns")
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return strings.Join(names, " ")
}

// answers waits until a GET of url answers want (its body, trimmed).
func answers(t *testing.T, client *http.Client, url, want string) {
	t.Helper()
	waitfor.Until(t, time.Minute, url+" answering", func() error {
		resp, err := client.Get(url)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if strings.TrimSpace(string(body)) != want {
			return fmt.Errorf("%s: %q", resp.Status, body)
		}
		return nil
	})
}
