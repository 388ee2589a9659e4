package devagent_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantryhq/gantry/internal/devcluster"
	"github.com/gantryhq/gantry/internal/devcluster/clustertest"
	"github.com/gantryhq/gantry/internal/node/devagent"
	"github.com/gantryhq/gantry/internal/replay"
	"github.com/gantryhq/gantry/internal/telemetry"
	"github.com/gantryhq/gantry/internal/waitfor"
)

var cluster *devcluster.Cluster

func TestMain(m *testing.M) { clustertest.Main(m, "devagent", &cluster) }

// recorder keeps the newest reading of each device, by node.
type recorder struct {
	mu     sync.Mutex
	latest map[string]telemetry.Reading // node/device → reading
	events []telemetry.Event
}

func (r *recorder) push(_ context.Context, b telemetry.Batch) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, b.Events...)
	for _, rd := range b.Readings {
		k := b.Node + "/" + rd.Device.ID()
		if old, ok := r.latest[k]; !ok || !rd.Time.Before(old.Time) {
			r.latest[k] = rd
		}
	}
	return nil
}

// of finds the newest reading attributed to a pod.
func (r *recorder) of(pod string) (string, telemetry.Reading, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, rd := range r.latest {
		if rd.Pod.Name == pod {
			return k, rd, true
		}
	}
	return "", telemetry.Reading{}, false
}

func gpuPod(name, resource, profile string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{devagent.ProfileAnnotation: profile}},
		Spec: corev1.PodSpec{
			Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "main", Image: "example/cuda", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{corev1.ResourceName(resource): resource1}}}},
		},
	}
}

var resource1 = resource.MustParse("1")

// TestSimulatedAgents: pods the scheduler puts on simulated GPU nodes get
// simulated devices of the kind they asked for, which play the profile
// their annotation names; a deleted pod's device reads as held by nobody.
func TestSimulatedAgents(t *testing.T) {
	if cluster == nil {
		t.Skip(clustertest.ErrNotRequested)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := cluster.Client
	ns := "devagent-test"
	c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	for _, p := range []*corev1.Pod{gpuPod("trainer", "nvidia.com/gpu", "compute-bound"), gpuPod("notebook", "nvidia.com/mig-1g.10gb", "near-oom")} {
		if _, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitfor.Until(t, 60*time.Second, "both pods running", func() error {
		for _, n := range []string{"trainer", "notebook"} {
			p, err := c.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Status.Phase != corev1.PodRunning {
				return fmt.Errorf("%s is %s", n, p.Status.Phase)
			}
		}
		return nil
	})
	rec := &recorder{latest: map[string]telemetry.Reading{}}
	fleet, err := devagent.Start(ctx, devagent.Options{Client: c, Sink: devagent.SinkFunc(rec.push), Interval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Every simulated GPU node has an agent; confidential nodes (passthrough GPUs) have none.
	nodes := map[string]bool{}
	for _, n := range fleet.Nodes() {
		nodes[n] = true
	}
	for _, n := range devcluster.Nodes(devcluster.Fleet) {
		if want := n.Labels["nvidia.com/cc.mode"] != "on"; nodes[n.Name] != want {
			t.Errorf("node %s: agent %v, want %v", n.Name, nodes[n.Name], want)
		}
	}
	var trainerDevice string
	waitfor.Until(t, 30*time.Second, "readings of both pods", func() error {
		k, rd, ok := rec.of("trainer")
		if !ok || rd.Values[telemetry.SMActive] < 0.85 || rd.Device.MIG != nil || rd.Pod.Namespace != ns || rd.Pod.Container != "main" || rd.Attribution != "exclusive" {
			return fmt.Errorf("trainer: %v %+v", ok, rd)
		}
		trainerDevice = k
		if rd.Device.GPU != rd.Device.ID() || len(rd.Device.GPU) != len("GPU-")+36 {
			return fmt.Errorf("trainer's GPU: %+v", rd.Device)
		}
		_, rd, ok = rec.of("notebook")
		if !ok || rd.Device.MIG == nil || rd.Device.MIG.Profile != "1g.10gb" || rd.Values[telemetry.FBUsed]/rd.Values[telemetry.FBTotal] < 0.95 {
			return fmt.Errorf("notebook: %v %+v", ok, rd)
		}
		return nil
	})
	if err := c.CoreV1().Pods(ns).Delete(ctx, "trainer", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, time.Minute, "the trainer's GPU free again", func() error {
		rec.mu.Lock()
		rd := rec.latest[trainerDevice]
		rec.mu.Unlock()
		if rd.Pod.Name != "" || rd.Values[telemetry.SMActive] != 0 {
			return fmt.Errorf("%s: %+v", trainerDevice, rd.Pod)
		}
		return nil
	})
	// A fault injected into a simulated GPU reaches the sink as an event.
	node, gpu, _ := strings.Cut(trainerDevice, "/")
	fleet.GPUs(node).Inject(replay.Fault{GPU: gpu, XID: 79, At: time.Now()})
	waitfor.Until(t, 30*time.Second, "the injected XID pushed", func() error {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for _, e := range rec.events {
			if e.GPU == gpu && e.XID == 79 {
				return nil
			}
		}
		return fmt.Errorf("events %+v", rec.events)
	})
	cancel()
	if err := fleet.Wait(); err != nil {
		t.Fatal(err)
	}
}
