// Package capreplay owns the capacity replay: a GPU trace's pods driven,
// time-compressed, onto a local cluster whose node group a real Karpenter
// scales — once scaling on the queue alone (reactive), once with machines
// warmed ahead of the demand forecast (capacity.Warmer with placeholder
// pods) — measuring each pod's wait for a machine, the GPU-hours of the
// machines paid and of the pods run, and gangs placed in part.
package capreplay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/gantryhq/gantry/internal/capacity"
	"github.com/gantryhq/gantry/internal/forecast"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/kube/karpenter"
	"github.com/gantryhq/gantry/internal/nodegroup"
	"github.com/gantryhq/gantry/internal/workload"
)

// Namespace is where the replay's pods run.
const Namespace = "capreplay"

// label marks the replay's pods (not the placeholders).
const label = "gantry.dev/capreplay"

// Options are one replay. Times are the trace's.
type Options struct {
	Core    kubernetes.Interface
	Dynamic dynamic.Interface
	// Trace is the whole trace: what came before From is the forecast's
	// history.
	Trace []forecast.Record
	// From and Span are the window measured; Warmup before it is replayed
	// too (the pods alive at From − Warmup start at once) and not measured.
	From         time.Time
	Span, Warmup time.Duration
	Compress     float64 // trace seconds a real second (72: a day in 20 minutes)
	Group        nodegroup.Group
	Classes      *gpu.Catalog
	Ahead        bool          // warm ahead of the forecast (else reactive)
	WarmInterval time.Duration // how often warmth is sized (trace time)
	Log          *slog.Logger
}

// Result is what a replay measured over its window (trace time).
type Result struct {
	Policy string `json:"policy"`
	// Pods arrived in the window; Placed got a machine before they left
	// (or the window ended); the others count their whole stay as wait.
	Pods   int `json:"pods"`
	Placed int `json:"placed"`
	// Waits from arrival to a machine, in seconds.
	WaitP50 float64 `json:"waitP50Seconds"`
	WaitP90 float64 `json:"waitP90Seconds"`
	WaitMax float64 `json:"waitMaxSeconds"`
	// WaitMean is the mean wait (seconds); Waited, the pods that waited
	// more than a minute (most pods fit a machine already up).
	WaitMean float64 `json:"waitMeanSeconds"`
	Waited   int     `json:"waitedOverAMinute"`
	// GPU-hours of the machines from when Karpenter launched them until
	// they went (PaidGPUHours), of the trace's pods on them (Used), and the
	// rest (Idle).
	PaidGPUHours float64 `json:"paidGpuHours"`
	UsedGPUHours float64 `json:"usedGpuHours"`
	IdleGPUHours float64 `json:"idleGpuHours"`
	Machines     int     `json:"machines"`
	// WarmGPUHours are the placeholders' GPU-hours (ahead only), in Paid.
	WarmGPUHours float64 `json:"warmGpuHours"`
	// PartialGangs are pods placed with fewer GPUs than they asked for: a
	// pod is placed whole or not at all, so this stays 0; a trace of
	// several-pod gangs would need Kueue's all-or-nothing admission.
	PartialGangs int `json:"partialGangs"`
}

type pod struct {
	name           string
	gpus           int
	arrive, depart time.Time // trace time; depart zero: past the window
}

// Run replays o on the cluster and measures it. The cluster must have o's
// group scaled by Karpenter and nothing else running in Namespace.
func Run(ctx context.Context, o Options) (Result, error) {
	if o.Core == nil || o.Dynamic == nil || o.Compress <= 0 || o.Span <= 0 || o.Classes == nil || o.Log == nil {
		return Result{}, errors.New("capreplay: clients, a window, a compression and the classes are required")
	}
	start, end := o.From.Add(-o.Warmup), o.From.Add(o.Span)
	var pods []pod
	for i, r := range o.Trace {
		if !r.Created.Before(end) || (!r.Ended.IsZero() && !r.Ended.After(start)) {
			continue
		}
		p := pod{name: fmt.Sprintf("p%05d", i), gpus: max(1, int(math.Ceil(r.GPUs-1e-9))), arrive: later(r.Created, start), depart: r.Ended}
		if p.gpus > o.Group.GPUsPerNode {
			continue // larger than any machine: Gantry would refuse it
		}
		pods = append(pods, p)
	}
	if _, err := o.Core.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return Result{}, err
	}
	realStart := time.Now() //clock:allow the replay drives a real cluster on a real-time clock it compresses
	clock := func() time.Time { return start.Add(time.Duration(float64(time.Since(realStart)) * o.Compress)) }
	at := func(t time.Time) time.Time { return realStart.Add(time.Duration(float64(t.Sub(start)) / o.Compress)) }
	m := newMeter(o.Group, clock)
	stop, err := m.watch(ctx, o)
	if err != nil {
		return Result{}, err
	}
	defer stop()

	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	spend := &capacity.MemoryLedger{}
	if o.Ahead {
		w, err := warmer(o, clock, spend)
		if err != nil {
			return Result{}, err
		}
		wg.Go(func() {
			every := time.Duration(float64(o.WarmInterval) / o.Compress)
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				if err := w.Pass(rctx); err != nil && rctx.Err() == nil {
					o.Log.Warn("warm pass", "err", err)
				}
				select {
				case <-rctx.Done():
					return
				case <-t.C:
				}
			}
		})
	}

	// The events in trace order: arrivals create pods, departures delete
	// them.
	type event struct {
		t      time.Time
		p      *pod
		arrive bool
	}
	var events []event
	for i := range pods {
		events = append(events, event{pods[i].arrive, &pods[i], true})
		if d := pods[i].depart; !d.IsZero() && d.Before(end) {
			events = append(events, event{d, &pods[i], false})
		}
	}
	slices.SortStableFunc(events, func(a, b event) int { return a.t.Compare(b.t) })
	cl := o.Core.CoreV1().Pods(Namespace)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for _, e := range append(events, event{t: end}) {
		timer.Reset(time.Until(at(e.t)))
		select {
		case <-ctx.Done():
			return Result{}, ctx.Err()
		case <-timer.C:
		}
		switch {
		case e.p == nil: // the window's end
		case e.arrive:
			m.arrived(e.p.name, e.p.gpus, clock())
			if _, err := cl.Create(ctx, replayPod(e.p.name, e.p.gpus, o.Group), metav1.CreateOptions{}); err != nil {
				return Result{}, fmt.Errorf("create %s: %w", e.p.name, err)
			}
		default:
			m.departed(e.p.name, clock())
			if err := cl.Delete(ctx, e.p.name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil && !apierrors.IsNotFound(err) {
				return Result{}, fmt.Errorf("delete %s: %w", e.p.name, err)
			}
		}
	}
	cancel()
	wg.Wait()
	r := m.result(o.From, end)
	spent, _ := spend.WarmSpend(ctx, start, end.Add(24*time.Hour))
	for _, sp := range spent {
		r.WarmGPUHours += sp.GPUHours
	}
	r.WarmGPUHours = math.Round(r.WarmGPUHours*100) / 100
	r.Policy = map[bool]string{false: "reactive", true: "ahead"}[o.Ahead]
	return r, nil
}

// warmer is capacity.Warmer over the trace before the clock, holding
// placeholders in Namespace.
func warmer(o Options, clock func() time.Time, spend *capacity.MemoryLedger) (*capacity.Warmer, error) {
	g := o.Group
	set, err := nodegroup.New(nodegroup.File{APIVersion: nodegroup.APIVersion, Kind: nodegroup.Kind, Groups: []nodegroup.Group{g}}, o.Classes.Names())
	if err != nil {
		return nil, err
	}
	hist := history{class: g.Class, trace: o.Trace, max: g.GPUsPerNode}
	svc, err := capacity.New(capacity.Options{NodeGroups: set, Pools: capacity.NoPools{}, Launches: hist, Classes: o.Classes, Now: clock})
	if err != nil {
		return nil, err
	}
	ph, err := karpenter.NewPlaceholders(o.Core, Namespace)
	if err != nil {
		return nil, err
	}
	return capacity.NewWarmer(svc, ph, spend, o.WarmInterval, o.Log)
}

// history serves the trace as Gantry's launch records: the forecast reads
// only what was created, and what ended, by its origin.
type history struct {
	class string
	trace []forecast.Record
	max   int
}

func (h history) Demand(_ context.Context, since time.Time) ([]workload.Demand, error) {
	var out []workload.Demand
	for _, r := range h.trace {
		n := max(1, int(math.Ceil(r.GPUs-1e-9)))
		if n > h.max || (!r.Ended.IsZero() && r.Ended.Before(since)) {
			continue
		}
		out = append(out, workload.Demand{Created: r.Created, Ended: r.Ended, GPUClass: h.class, GPUCount: n})
	}
	return out, nil
}

// replayPod asks for gpus GPUs on the group's machines, at normal priority
// (it preempts placeholders, as a Gantry workload does).
func replayPod(name string, gpus int, g nodegroup.Group) *corev1.Pod {
	res := corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(int64(gpus), resource.DecimalSI)}
	tol := []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	if g.Purchase == nodegroup.Spot {
		tol = append(tol, corev1.Toleration{Key: "gantry.dev/spot", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, Labels: map[string]string{label: "1"}},
		Spec: corev1.PodSpec{
			PriorityClassName:             "gantry-normal",
			TerminationGracePeriodSeconds: new(int64),
			NodeSelector:                  map[string]string{karpenter.GroupLabel: g.Name},
			Tolerations:                   tol,
			Containers:                    []corev1.Container{{Name: "main", Image: "example.com/replay:1", Resources: corev1.ResourceRequirements{Requests: res, Limits: res}}},
		},
	}
}

// meter records, on the replay's clock, when each pod arrived, got a
// machine and left, and when each machine was launched and went.
type meter struct {
	mu       sync.Mutex
	group    nodegroup.Group
	clock    func() time.Time
	arrive   map[string]time.Time
	placed   map[string]time.Time
	depart   map[string]time.Time
	gpus     map[string]int
	launched map[string]time.Time // NodeClaim → when seen
	gone     map[string]time.Time
}

func newMeter(g nodegroup.Group, clock func() time.Time) *meter {
	return &meter{group: g, clock: clock, arrive: map[string]time.Time{}, placed: map[string]time.Time{}, depart: map[string]time.Time{},
		gpus: map[string]int{}, launched: map[string]time.Time{}, gone: map[string]time.Time{}}
}

func (m *meter) arrived(name string, gpus int, t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.arrive[name], m.gpus[name] = t, gpus
}

func (m *meter) departed(name string, t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.depart[name] = t
}

// watch starts informers on the replay's pods and Karpenter's NodeClaims.
func (m *meter) watch(ctx context.Context, o Options) (func(), error) {
	pf := informers.NewSharedInformerFactoryWithOptions(o.Core, 0, informers.WithNamespace(Namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = label }))
	pods := pf.Core().V1().Pods().Informer()
	seen := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Spec.NodeName == "" {
			return
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if _, done := m.placed[p.Name]; !done {
			m.placed[p.Name] = m.clock()
		}
	}
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, n any) { seen(n) }}); err != nil {
		return nil, err
	}
	cf := dynamicinformer.NewDynamicSharedInformerFactory(o.Dynamic, 0)
	claims := cf.ForResource(karpenter.NodeClaims).Informer()
	// Machines of the replay: its group's, asked for since it began (a
	// machine of an earlier run still going is not its).
	began := time.Now().Truncate(time.Second) //clock:allow compared with the API server's creation timestamps
	name := func(obj any) string {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if mo, ok := obj.(metav1.Object); ok && mo.GetLabels()[karpenter.NodePoolLabel] == o.Group.Name && !mo.GetCreationTimestamp().Time.Before(began) {
			return mo.GetName()
		}
		return ""
	}
	if _, err := claims.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			m.mu.Lock()
			defer m.mu.Unlock()
			if n := name(obj); n != "" {
				if _, ok := m.launched[n]; !ok {
					m.launched[n] = m.clock()
				}
			}
		},
		DeleteFunc: func(obj any) {
			m.mu.Lock()
			defer m.mu.Unlock()
			if n := name(obj); n != "" {
				m.gone[n] = m.clock()
			}
		},
	}); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	pf.Start(wctx.Done())
	cf.Start(wctx.Done())
	pf.WaitForCacheSync(wctx.Done())
	cf.WaitForCacheSync(wctx.Done())
	return func() { cancel(); pf.Shutdown(); cf.Shutdown() }, nil
}

// result sums the window [from, end): the waits of the pods that arrived
// in it, and the GPU-hours inside it.
func (m *meter) result(from, end time.Time) Result {
	m.mu.Lock()
	defer m.mu.Unlock()
	clip := func(a, b time.Time) float64 {
		if b.IsZero() || b.After(end) {
			b = end
		}
		a = later(a, from)
		if !b.After(a) {
			return 0
		}
		return b.Sub(a).Hours()
	}
	var r Result
	var waits []float64
	for name, a := range m.arrive {
		placed, ok := m.placed[name]
		left := m.depart[name]
		if ok && (left.IsZero() || !placed.After(left)) {
			r.UsedGPUHours += float64(m.gpus[name]) * clip(placed, left)
		}
		if a.Before(from) {
			continue // the warm-up's
		}
		r.Pods++
		switch {
		case ok && (left.IsZero() || !placed.After(left)):
			r.Placed++
			waits = append(waits, placed.Sub(a).Seconds())
		case !left.IsZero():
			waits = append(waits, left.Sub(a).Seconds())
		default:
			waits = append(waits, end.Sub(a).Seconds())
		}
	}
	for name, l := range m.launched {
		r.PaidGPUHours += float64(m.group.GPUsPerNode) * clip(l, m.gone[name])
		if !l.After(end) {
			r.Machines++
		}
	}
	slices.Sort(waits)
	r.WaitP50, r.WaitP90 = quantile(waits, 0.5), quantile(waits, 0.9)
	if len(waits) > 0 {
		r.WaitMax = math.Round(waits[len(waits)-1])
		sum := 0.0
		for _, w := range waits {
			sum += w
			if w > 60 {
				r.Waited++
			}
		}
		r.WaitMean = math.Round(sum/float64(len(waits))*10) / 10
	}
	r.IdleGPUHours = math.Max(0, r.PaidGPUHours-r.UsedGPUHours)
	for _, p := range []*float64{&r.PaidGPUHours, &r.UsedGPUHours, &r.IdleGPUHours} {
		*p = math.Round(*p*100) / 100
	}
	return r
}

// quantile is the q-quantile of sorted xs (nearest rank; 0 when empty).
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return math.Round(xs[max(0, min(i, len(xs)-1))])
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
