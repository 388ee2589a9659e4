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
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/gantryhq/gantry/internal/node/agent"
	"github.com/gantryhq/gantry/internal/replay"
	"github.com/gantryhq/gantry/internal/telemetry"
)

// ProfileAnnotation names the replay profile a pod's devices play.
const ProfileAnnotation = "gantry.dev/replay-profile"

// DefaultProfile is what a pod without the annotation plays: a pod of the
// GenAI trace, chosen by the pod's name.
const DefaultProfile = "trace"

// GPUNodes selects the nodes that get a simulated agent.
const GPUNodes = "nvidia.com/gpu.present=true"

// Options configure the simulated fleet.
type Options struct {
	Client   kubernetes.Interface
	Sink     agent.Sink
	Interval time.Duration // default agent.DefaultInterval
	Clock    clock.WithTicker
	Log      *slog.Logger
}

// SinkFunc is a Sink that is a function (gantry dev ingests in-process).
type SinkFunc func(ctx context.Context, b telemetry.Batch) error

// Push implements agent.Sink.
func (f SinkFunc) Push(ctx context.Context, b telemetry.Batch) error { return f(ctx, b) }

// Fleet is the running simulated agents: they run until the context given
// to Start ends; Wait returns then.
type Fleet struct {
	nodes map[string]*simNode
	names []string
	done  chan struct{}
	err   error
}

// Start lists the cluster's GPU nodes, starts a pod informer and, once it
// has synced, a simulated agent per node that has GPUs to simulate. It
// returns when they run; everything stops when ctx ends.
func Start(ctx context.Context, o Options) (*Fleet, error) {
	if o.Client == nil || o.Sink == nil {
		return nil, errors.New("devagent: a client and a sink are required")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	nodes, err := o.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: GPUNodes})
	if err != nil {
		return nil, fmt.Errorf("devagent: list GPU nodes: %w", err)
	}
	f := informers.NewSharedInformerFactory(o.Client, 10*time.Minute)
	pods := f.Core().V1().Pods()
	inf := pods.Informer()
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		f.Shutdown()
		return nil, fmt.Errorf("devagent: pod informer: %w", ctx.Err())
	}
	fl := &Fleet{nodes: map[string]*simNode{}, done: make(chan struct{})}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		sim, err := newSimNode(n, pods.Lister(), o.Log.With("node", n.Name))
		if err != nil {
			o.Log.Warn("devagent: no simulated agent for a GPU node", "node", n.Name, "err", err)
			continue
		}
		if sim == nil {
			continue // no GPU resources to simulate (passthrough GPUs)
		}
		a, err := agent.New(agent.Options{Node: n.Name, GPUs: sim, Pods: sim, Procs: noProcs{}, Sink: o.Sink, Interval: o.Interval,
			Clock: o.Clock, Log: o.Log.With("node", n.Name), Version: "devagent"})
		if err != nil {
			f.Shutdown()
			return nil, fmt.Errorf("devagent: agent of node %s: %w", n.Name, err)
		}
		sim.agent = a
		fl.nodes[n.Name] = sim
		fl.names = append(fl.names, n.Name)
	}
	sort.Strings(fl.names)
	o.Log.Info("simulated GPU agents running", "nodes", len(fl.names))
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, name := range fl.names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fl.nodes[name].agent.Run(ctx); err != nil && ctx.Err() == nil {
				mu.Lock()
				fl.err = errors.Join(fl.err, fmt.Errorf("devagent: the agent of node %s: %w", name, err))
				mu.Unlock()
			}
		}()
	}
	go func() {
		wg.Wait()
		<-ctx.Done() // the informer serves until ctx ends, agents or not
		f.Shutdown()
		close(fl.done)
	}()
	return fl, nil
}

// Run starts the fleet and waits until ctx ends.
func Run(ctx context.Context, o Options) error {
	fl, err := Start(ctx, o)
	if err != nil {
		return err
	}
	return fl.Wait()
}

// Wait blocks until the fleet has stopped (the context given to Start
// ended) and returns the errors of agents that stopped before it.
func (f *Fleet) Wait() error {
	<-f.done
	return f.err
}

// Done is closed once the fleet has stopped.
func (f *Fleet) Done() <-chan struct{} { return f.done }

// Nodes names the nodes with a simulated agent, sorted.
func (f *Fleet) Nodes() []string { return append([]string(nil), f.names...) }

// GPUs is a node's simulated GPUs (nil for a node without an agent): tests
// inject faults through it (XID events, ECC errors, row remap failures).
func (f *Fleet) GPUs(node string) *replay.Node {
	if s, ok := f.nodes[node]; ok {
		return s.node
	}
	return nil
}

// Agent is a node's agent (nil for a node without one): its /metrics
// handler, a pass on demand.
func (f *Fleet) Agent(node string) *agent.Agent {
	if s, ok := f.nodes[node]; ok {
		return s.agent
	}
	return nil
}

// Handler serves a node's agent /metrics at /<node>/metrics.
func (f *Fleet) Handler() http.Handler {
	mux := http.NewServeMux()
	for name, s := range f.nodes {
		mux.Handle("/"+name+"/metrics", s.agent.Handler())
	}
	return mux
}

// noProcs: simulated pods have no processes; shared devices split evenly.
type noProcs struct{}

func (noProcs) PodUID(uint32) (string, bool) { return "", false }

// simNode is one node's replay GPUs and who holds them.
type simNode struct {
	name  string
	node  *replay.Node
	agent *agent.Agent
	pods  listersv1.PodLister
	log   *slog.Logger
	whole []string            // device ids of whole GPUs
	mig   map[string][]string // MIG profile → its instances' ids

	mu       sync.Mutex
	assigned map[string]*assignment // pod UID → its devices
	short    map[types.UID]bool     // pods told there are not enough devices
}

type assignment struct {
	containers []agent.PodDevices
	devices    []string
	profile    string // as the annotation named it
	seed       uint64
	start      time.Time
}

// newSimNode simulates a node's GPUs from its labels (nvidia.com/gpu.product,
// .memory, .count) and capacity (nvidia.com/gpu whole GPUs, then
// nvidia.com/mig-<profile> instances on the GPUs after them, round robin —
// a balanced MIG layout such as all-balanced comes out as configured); nil
// for a node with neither (passthrough GPUs of confidential nodes). GPU and
// MIG UUIDs are made from the node's name, the same on every start.
func newSimNode(n *corev1.Node, pods listersv1.PodLister, log *slog.Logger) (*simNode, error) {
	count, _ := strconv.Atoi(n.Labels["nvidia.com/gpu.count"])
	memMiB, _ := strconv.ParseFloat(n.Labels["nvidia.com/gpu.memory"], 64)
	model := strings.ReplaceAll(n.Labels["nvidia.com/gpu.product"], "-", " ")
	if model == "" {
		model = "NVIDIA GPU"
	}
	whole := int(n.Status.Capacity.Name("nvidia.com/gpu", "").Value())
	type migRes struct {
		inst replay.MIG
		n    int
	}
	var migs []migRes
	for res, q := range n.Status.Capacity {
		p, ok := strings.CutPrefix(string(res), "nvidia.com/mig-")
		if !ok || q.Value() <= 0 {
			continue
		}
		m, err := replay.MIGFor(memMiB, p)
		if err != nil {
			return nil, fmt.Errorf("capacity %s: %w", res, err)
		}
		migs = append(migs, migRes{m, int(q.Value())})
	}
	if whole == 0 && len(migs) == 0 {
		return nil, nil
	}
	if memMiB <= 0 {
		return nil, errors.New("no nvidia.com/gpu.memory label")
	}
	sort.Slice(migs, func(i, j int) bool { return migs[i].inst.Profile < migs[j].inst.Profile })
	migGPUs := count - whole
	if len(migs) > 0 && migGPUs <= 0 {
		migGPUs = 1
	}
	count = max(count, whole+migGPUs)
	gpus := make([]replay.GPU, count)
	for i := range gpus {
		gpus[i] = replay.GPU{UUID: fakeUUID("GPU", n.Name, strconv.Itoa(i)), Index: i, Model: model, MemoryMiB: memMiB}
	}
	s := &simNode{name: n.Name, pods: pods, log: log, mig: map[string][]string{}, assigned: map[string]*assignment{}, short: map[types.UID]bool{}}
	k := 0
	for _, m := range migs {
		for j := 0; j < m.n; j++ {
			g := &gpus[whole+k%migGPUs]
			inst := m.inst
			inst.UUID = fakeUUID("MIG", n.Name, m.inst.Profile, strconv.Itoa(j))
			inst.InstanceID = len(g.MIG) + 1
			g.MIG = append(g.MIG, inst)
			s.mig[inst.Profile] = append(s.mig[inst.Profile], inst.UUID)
			k++
		}
	}
	for i := 0; i < whole; i++ {
		s.whole = append(s.whole, gpus[i].UUID)
	}
	s.node = replay.NewNode(gpus)
	return s, nil
}

// fakeUUID is a UUID-shaped id (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)
// from a hash of its parts: the same node gets the same ids every time.
func fakeUUID(kind string, parts ...string) string {
	h1, h2 := fnv.New64a(), fnv.New64()
	for _, p := range parts {
		h1.Write([]byte(p + "/"))
		h2.Write([]byte(p + "/"))
	}
	a, b := h1.Sum64(), h2.Sum64()
	return fmt.Sprintf("%s-%08x-%04x-%04x-%04x-%012x", kind, a>>32, a>>16&0xffff, a&0xffff, b>>48, b&0xffffffffffff)
}

// sync gives the pods running on the node devices of the kind they asked
// for (the oldest pods first, ties by UID, so assignments are the same
// whenever the same pods run), releases the devices of pods that are gone,
// and plays each pod's profile (again when its annotation changes).
func (s *simNode) sync() {
	list, err := s.pods.List(labels.Everything())
	if err != nil {
		s.log.Warn("devagent: list pods", "err", err)
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
		a, ok := s.assigned[uid]
		if !ok {
			if a = s.assign(p, used); a == nil {
				continue
			}
			s.assigned[uid] = a
		} else if p.Annotations[ProfileAnnotation] == a.profile {
			continue
		}
		a.profile = p.Annotations[ProfileAnnotation]
		name := a.profile
		if name == "" {
			name = DefaultProfile
		}
		prof, err := replay.Lookup(name, p.Name)
		if err != nil {
			s.log.Warn("devagent: the pod's replay profile; playing the default", "pod", p.Namespace+"/"+p.Name, "err", err)
			if prof, err = replay.Lookup(DefaultProfile, p.Name); err != nil {
				s.log.Error("devagent: the default replay profile", "err", err)
				continue
			}
		}
		for _, d := range a.devices {
			if err := s.node.Play(d, prof, a.start, a.seed); err != nil {
				s.log.Warn("devagent: play a replay profile", "device", d, "err", err)
			}
		}
	}
}

// assign takes free devices for each container's GPU limits; nil when the
// node has none left of a kind the pod asks for (it plays nothing then).
func (s *simNode) assign(p *corev1.Pod, used map[string]bool) *assignment {
	a := &assignment{start: p.CreationTimestamp.Time}
	if p.Status.StartTime != nil {
		a.start = p.Status.StartTime.Time
	}
	h := fnv.New64a()
	h.Write([]byte(p.UID))
	a.seed = h.Sum64()
	taken := map[string]bool{}
	for _, c := range p.Spec.Containers {
		pd := agent.PodDevices{Pod: telemetry.PodRef{Namespace: p.Namespace, Name: p.Name, Container: c.Name}, UID: string(p.UID), Resources: map[string][]string{}}
		names := make([]string, 0, len(c.Resources.Limits))
		for res := range c.Resources.Limits {
			names = append(names, string(res))
		}
		sort.Strings(names)
		for _, name := range names {
			var pool []string
			switch {
			case name == "nvidia.com/gpu":
				pool = s.whole
			case strings.HasPrefix(name, "nvidia.com/mig-"):
				pool = s.mig[strings.TrimPrefix(name, "nvidia.com/mig-")]
			default:
				continue
			}
			q := c.Resources.Limits[corev1.ResourceName(name)]
			want := int(q.Value())
			for _, d := range pool {
				if want == 0 {
					break
				}
				if !used[d] && !taken[d] {
					taken[d] = true
					want--
					a.devices = append(a.devices, d)
					pd.Resources[name] = append(pd.Resources[name], d)
				}
			}
			if want > 0 {
				if s.short[p.UID] {
					return nil // said once
				}
				s.short[p.UID] = true
				s.log.Warn("devagent: a pod asks for more simulated devices than are free", "pod", p.Namespace+"/"+p.Name, "resource", name, "missing", want)
				return nil
			}
		}
		if len(pd.Resources) > 0 {
			a.containers = append(a.containers, pd)
		}
	}
	if len(a.devices) == 0 {
		return nil
	}
	for d := range taken {
		used[d] = true
	}
	return a
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

// Inventory implements agent.GPUs (after bringing the assignments up to
// date: the agent asks for it first in every pass).
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

// List implements agent.PodResources: the containers holding simulated
// devices, by pod UID.
func (s *simNode) List(context.Context) ([]agent.PodDevices, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	uids := make([]string, 0, len(s.assigned))
	for uid := range s.assigned {
		uids = append(uids, uid)
	}
	sort.Strings(uids)
	var out []agent.PodDevices
	for _, uid := range uids {
		out = append(out, s.assigned[uid].containers...)
	}
	return out, nil
}
