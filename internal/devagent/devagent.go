// Package devagent runs gantry dev's simulated node agents: one gantry-agent
// pipeline per GPU node of the local kwok cluster, with replay GPUs in place
// of NVML (the node's GPUs and MIG instances from its labels and capacity),
// and a PodResources stand-in that hands the pods the scheduler placed there
// simulated devices of the kind they asked for. Each pod's device plays the
// replay profile its annotation gantry.dev/replay-profile names (default: a
// pod of the embedded GenAI trace, chosen by the pod's name), so charts and
// advice are live on the local cluster.
package devagent

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/gantryhq/gantry/internal/agent"
	"github.com/gantryhq/gantry/internal/replay"
	"github.com/gantryhq/gantry/internal/telemetry"
)

// ProfileAnnotation names the replay profile a pod's devices play.
const ProfileAnnotation = "gantry.dev/replay-profile"

// Options configure the simulated fleet.
type Options struct {
	Client   kubernetes.Interface
	Sink     agent.Sink
	Interval time.Duration // default 10 s
	Clock    clock.WithTicker
	Log      *slog.Logger
}

// SinkFunc is a Sink that is a function (gantry dev ingests in-process).
type SinkFunc func(ctx context.Context, b telemetry.Batch) error

// Push implements agent.Sink.
func (f SinkFunc) Push(ctx context.Context, b telemetry.Batch) error { return f(ctx, b) }

// Run runs an agent per GPU node until ctx ends.
func Run(ctx context.Context, o Options) error {
	if o.Client == nil || o.Sink == nil {
		return errors.New("devagent: a client and a sink are required")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	nodes, err := o.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "nvidia.com/gpu.present=true"})
	if err != nil {
		return fmt.Errorf("list GPU nodes: %w", err)
	}
	f := informers.NewSharedInformerFactory(o.Client, 10*time.Minute)
	pods := f.Core().V1().Pods()
	inf := pods.Informer()
	f.Start(ctx.Done())
	defer f.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return ctx.Err()
	}
	g, gctx := errgroup.WithContext(ctx)
	started := 0
	for i := range nodes.Items {
		n := &nodes.Items[i]
		sim := newSimNode(n, pods.Lister(), o.Log)
		if sim == nil {
			continue
		}
		a, err := agent.New(agent.Options{Node: n.Name, GPUs: sim, Pods: sim, Procs: noProcs{}, Sink: o.Sink, Interval: o.Interval,
			Clock: o.Clock, Log: o.Log.With("node", n.Name), Version: "devagent"})
		if err != nil {
			return err
		}
		started++
		g.Go(func() error { return a.Run(gctx) })
	}
	o.Log.Info("simulated GPU agents running", "nodes", started)
	return g.Wait()
}

// noProcs: simulated pods have no processes; shared devices split evenly.
type noProcs struct{}

func (noProcs) PodUID(uint32) (string, bool) { return "", false }

// simNode is one node's replay GPUs and who holds them.
type simNode struct {
	name  string
	node  *replay.Node
	pods  listersv1.PodLister
	log   *slog.Logger
	whole []string            // device ids of whole GPUs
	mig   map[string][]string // MIG profile → its instances' ids

	mu       sync.Mutex
	assigned map[string]assignment // pod UID → its devices
}

type assignment struct {
	pod     agent.PodDevices
	devices []string
	profile string
}

var migProfile = regexp.MustCompile(`^(\d)g\.(\d+)gb$`)

// newSimNode simulates a node's GPUs from its labels (nvidia.com/gpu.product,
// .memory, .count) and capacity (nvidia.com/gpu whole, nvidia.com/mig-*);
// nil for a node with neither (passthrough GPUs of confidential nodes).
func newSimNode(n *corev1.Node, pods listersv1.PodLister, log *slog.Logger) *simNode {
	count, _ := strconv.Atoi(n.Labels["nvidia.com/gpu.count"])
	memMiB, _ := strconv.ParseFloat(n.Labels["nvidia.com/gpu.memory"], 64)
	model := strings.ReplaceAll(n.Labels["nvidia.com/gpu.product"], "-", " ")
	whole := int(n.Status.Capacity.Name("nvidia.com/gpu", "").Value())
	type migRes struct {
		profile string
		n       int
		compute int
		memGB   float64
	}
	var migs []migRes
	for res, q := range n.Status.Capacity {
		p, ok := strings.CutPrefix(string(res), "nvidia.com/mig-")
		m := migProfile.FindStringSubmatch(p)
		if !ok || m == nil {
			continue
		}
		c, _ := strconv.Atoi(m[1])
		gb, _ := strconv.ParseFloat(m[2], 64)
		migs = append(migs, migRes{p, int(q.Value()), c, gb})
	}
	if whole == 0 && len(migs) == 0 {
		return nil
	}
	sort.Slice(migs, func(i, j int) bool { return migs[i].profile < migs[j].profile })
	count = max(count, whole)
	gpus := make([]replay.GPU, count)
	for i := range gpus {
		gpus[i] = replay.GPU{UUID: fmt.Sprintf("GPU-%s-%d", n.Name, i), Index: i, Model: model, MemoryMiB: memMiB}
	}
	s := &simNode{name: n.Name, pods: pods, log: log, mig: map[string][]string{}, assigned: map[string]assignment{}}
	// MIG instances go to the GPUs after the whole ones, round robin.
	migGPUs := count - whole
	if len(migs) > 0 && migGPUs <= 0 {
		migGPUs = 1
	}
	k := 0
	for _, m := range migs {
		for j := 0; j < m.n; j++ {
			gi := whole + k%migGPUs
			if gi >= len(gpus) {
				gi = len(gpus) - 1
			}
			id := fmt.Sprintf("MIG-%s-%s-%d", n.Name, m.profile, j)
			gpus[gi].MIG = append(gpus[gi].MIG, replay.MIG{UUID: id, Profile: m.profile, InstanceID: len(gpus[gi].MIG) + 1,
				MemoryMiB: m.memGB * 1024, ComputeShare: float64(m.compute) / 7})
			s.mig[m.profile] = append(s.mig[m.profile], id)
			k++
		}
	}
	for i := 0; i < whole; i++ {
		s.whole = append(s.whole, gpus[i].UUID)
	}
	s.node = replay.NewNode(gpus)
	return s
}

// sync gives the pods running on the node devices of the kind they asked
// for (the oldest pods first, so assignments are stable), releases the
// devices of pods that are gone, and plays each pod's profile.
func (s *simNode) sync() {
	list, err := s.pods.List(labels.Everything())
	if err != nil {
		s.log.Warn("list pods", "err", err)
		return
	}
	var running []*corev1.Pod
	for _, p := range list {
		if p.Spec.NodeName == s.name && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && wantsGPU(p) {
			running = append(running, p)
		}
	}
	sort.Slice(running, func(i, j int) bool {
		a, b := running[i], running[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.UID < b.UID
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	alive := map[string]bool{}
	for _, p := range running {
		alive[string(p.UID)] = true
	}
	used := map[string]bool{}
	for uid, a := range s.assigned {
		if !alive[uid] {
			for _, d := range a.devices {
				s.node.Stop(d)
			}
			delete(s.assigned, uid)
			continue
		}
		for _, d := range a.devices {
			used[d] = true
		}
	}
	for _, p := range running {
		uid := string(p.UID)
		if _, ok := s.assigned[uid]; ok {
			continue
		}
		a := assignment{pod: agent.PodDevices{UID: uid, Resources: map[string][]string{}}}
		for _, c := range p.Spec.Containers {
			for res, q := range c.Resources.Limits {
				name := string(res)
				var pool []string
				switch {
				case name == "nvidia.com/gpu":
					pool = s.whole
				case strings.HasPrefix(name, "nvidia.com/mig-"):
					pool = s.mig[strings.TrimPrefix(name, "nvidia.com/mig-")]
				default:
					continue
				}
				want := int(q.Value())
				for _, d := range pool {
					if want == 0 {
						break
					}
					if !used[d] {
						used[d] = true
						want--
						a.devices = append(a.devices, d)
						a.pod.Resources[name] = append(a.pod.Resources[name], d)
					}
				}
				if a.pod.Pod.Name == "" {
					a.pod.Pod = telemetry.PodRef{Namespace: p.Namespace, Name: p.Name, Container: c.Name}
				}
			}
		}
		if len(a.devices) == 0 {
			continue // more asked for than simulated: nothing to play
		}
		a.profile = p.Annotations[ProfileAnnotation]
		if a.profile == "" {
			a.profile = "trace"
		}
		prof, err := replay.Lookup(a.profile, p.Name)
		if err != nil {
			s.log.Warn("replay profile of pod; playing the trace instead", "pod", p.Namespace+"/"+p.Name, "err", err)
			prof, _ = replay.Lookup("trace", p.Name)
		}
		start := p.CreationTimestamp.Time
		if p.Status.StartTime != nil {
			start = p.Status.StartTime.Time
		}
		h := fnv.New64a()
		h.Write([]byte(uid))
		for _, d := range a.devices {
			if err := s.node.Play(d, prof, start, h.Sum64()); err != nil {
				s.log.Warn("play a replay profile", "device", d, "err", err)
			}
		}
		s.assigned[uid] = a
	}
}

func wantsGPU(p *corev1.Pod) bool {
	for _, c := range p.Spec.Containers {
		for res := range c.Resources.Limits {
			if n := string(res); n == "nvidia.com/gpu" || strings.HasPrefix(n, "nvidia.com/mig-") {
				return true
			}
		}
	}
	return false
}

// Inventory implements agent.GPUs (after bringing the assignments up to date).
func (s *simNode) Inventory(ctx context.Context) ([]telemetry.GPUState, error) {
	s.sync()
	return s.node.Inventory(ctx)
}

// Sample implements agent.GPUs.
func (s *simNode) Sample(ctx context.Context, now time.Time) ([]agent.DeviceSample, error) {
	return s.node.Sample(ctx, now)
}

// Events implements agent.GPUs.
func (s *simNode) Events() []telemetry.Event { return s.node.Events() }

// List implements agent.PodResources: the pods holding simulated devices.
func (s *simNode) List(context.Context) ([]agent.PodDevices, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]agent.PodDevices, 0, len(s.assigned))
	for _, a := range s.assigned {
		out = append(out, a.pod)
	}
	return out, nil
}
