package e2e_test

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/gantryhq/gantry/internal/kube/kapi"
	"github.com/gantryhq/gantry/internal/kube/kueue"
	"github.com/gantryhq/gantry/internal/render"
)

// The stages of a launch from its submission until its pod runs, in the
// order the cluster's pipeline passes them. Each is stamped when this
// process's watch first sees it (milliseconds, where the objects' own
// condition times have whole seconds), so a stage's figure includes the
// watch's delivery, alike for both paths.
var stageNames = []string{
	"submitted",      // the client sent it
	"pod created",    // the pod made: by a Deployment's ReplicaSet (gated by Kueue), by a Job once Kueue unsuspends it
	"kueue workload", // Kueue made the pod's Workload
	"quota reserved", // Kueue reserved quota (QuotaReserved)
	"check listed",   // Kueue listed Gantry's approval check on it, Pending (Gantry's queues only)
	"check ready",    // Gantry's approval check said Ready
	"admitted",       // Kueue admitted it (Admitted): every check Ready
	"ungated",        // Kueue removed the pod's scheduling gate
	"bound",          // the scheduler bound it to a node
	"running",        // kwok ran it (phase Running)
	"listed",         // the client saw it Running (Gantry's API for Gantry's path; the pod list for the direct one)
	"applied",        // its Job or Deployment is in the cluster (Gantry answered, or the direct apply returned)
}

// The order a launch passes the stages in: a service's pods come first
// (Kueue's pod integration makes a Workload per pod), a Job's after Kueue
// admits its Workload and unsuspends it (its pod is never gated).
var (
	serviceStages = []int{0, 11, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	jobStages     = []int{0, 11, 2, 3, 4, 5, 6, 1, 7, 8, 9, 10}
)

// stageWatch stamps each workload id's stages as its pod and Kueue
// Workload change in one namespace.
type stageWatch struct {
	order []int // the stages in the order the launches pass them
	mu    sync.Mutex
	seen  map[string][]time.Time // workload id → time per stage (zero: not yet)
	stop  func()
}

func (s *stageWatch) stamp(id string, stage int) {
	if id == "" {
		return
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.seen[id]
	if t == nil {
		t = make([]time.Time, len(stageNames))
		s.seen[id] = t
	}
	if t[stage].IsZero() {
		t[stage] = now
	}
}

// watchStages starts watching namespace ns, whose launches pass the stages
// in order; the watch stops with the benchmark.
func watchStages(b *testing.B, dyn dynamic.Interface, ns string, order []int) *stageWatch {
	b.Helper()
	s := &stageWatch{order: order, seen: map[string][]time.Time{}}
	ctx, cancel := context.WithCancel(context.Background())
	pf := informers.NewSharedInformerFactoryWithOptions(cluster.Client, 0, informers.WithNamespace(ns))
	pod := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		id := p.Labels[render.LabelWorkloadID]
		s.stamp(id, 1)
		if len(p.Spec.SchedulingGates) == 0 {
			s.stamp(id, 7)
		}
		if p.Spec.NodeName != "" {
			s.stamp(id, 8)
		}
		if p.Status.Phase == corev1.PodRunning {
			s.stamp(id, 9)
		}
	}
	pi := pf.Core().V1().Pods().Informer()
	applied := func(obj any) {
		if m, ok := obj.(metav1.Object); ok {
			s.stamp(m.GetLabels()[render.LabelWorkloadID], 11)
		}
	}
	for _, inf := range []cache.SharedIndexInformer{pf.Batch().V1().Jobs().Informer(), pf.Apps().V1().Deployments().Informer()} {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: applied}); err != nil {
			b.Fatal(err)
		}
	}
	kf := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, ns, nil)
	wl := func(obj any) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return
		}
		id := u.GetLabels()[render.LabelWorkloadID]
		s.stamp(id, 2)
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["status"] != "True" {
				continue
			}
			switch m["type"] {
			case "QuotaReserved":
				s.stamp(id, 3)
			case "Admitted":
				s.stamp(id, 6)
			}
		}
		if state, _, found := kueue.CheckState(u); found {
			s.stamp(id, 4)
			if state == "Ready" {
				s.stamp(id, 5)
			}
		}
	}
	ki := kf.ForResource(kapi.KueueWorkloads).Informer()
	for inf, f := range map[cache.SharedIndexInformer]func(any){pi: pod, ki: wl} {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: f, UpdateFunc: func(_, n any) { f(n) }}); err != nil {
			b.Fatal(err)
		}
	}
	pf.Start(ctx.Done())
	kf.Start(ctx.Done())
	pf.WaitForCacheSync(ctx.Done())
	kf.WaitForCacheSync(ctx.Done())
	s.stop = func() { cancel(); pf.Shutdown(); kf.Shutdown() }
	b.Cleanup(s.stop)
	return s
}

// stageTimes is how long each stage took (from the one before it) for each
// launch: per stage, the durations of the launches that passed it.
type stageTimes [][]time.Duration

// took stops the watch and returns each launch's stage durations (each from
// the latest stage before it in the launch's order, so a stage seen late
// does not make the next negative), its submission time taken from
// submitted and the time the client saw it running from ran; a stage a
// launch skipped (seen at once with the next) counts as 0.
func (s *stageWatch) took(submitted map[string]time.Time, ran map[string]time.Duration) stageTimes {
	s.stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(stageTimes, len(stageNames))
	for id, at := range submitted {
		t := s.seen[id]
		if t == nil {
			continue
		}
		if d, ok := ran[id]; ok {
			t[10] = at.Add(d) // listed: when the client saw it Running
		}
		prev := at
		for _, i := range s.order[1:] {
			if t[i].IsZero() {
				continue
			}
			d := max(t[i].Sub(prev), 0)
			out[i] = append(out[i], d)
			if t[i].After(prev) {
				prev = t[i]
			}
		}
	}
	return out
}

// add appends another batch's durations.
func (st stageTimes) add(o stageTimes) stageTimes {
	if st == nil {
		st = make(stageTimes, len(stageNames))
	}
	for i := range o {
		st[i] = append(st[i], o[i]...)
	}
	return st
}

// p50 is the median of stage i in milliseconds (0 without samples).
func (st stageTimes) p50(i int) float64 {
	if i >= len(st) || len(st[i]) == 0 {
		return 0
	}
	d := slices.Clone(st[i])
	slices.Sort(d)
	return float64(d[len(d)/2].Microseconds()) / 1000
}

// stageTable is the stages side by side, in order: each path's median per
// stage and its share of the sum of the medians.
func stageTable(order []int, paths []string, times []stageTimes) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-16s", "stage (p50 ms)")
	for _, p := range paths {
		fmt.Fprintf(&b, " %18s", p)
	}
	b.WriteString("\n")
	sums := make([]float64, len(paths))
	for j := range paths {
		for _, i := range order[1:] {
			sums[j] += times[j].p50(i)
		}
	}
	for _, i := range order[1:] {
		fmt.Fprintf(&b, "%-16s", stageNames[i])
		for j := range paths {
			share := 0.0
			if sums[j] > 0 {
				share = 100 * times[j].p50(i) / sums[j]
			}
			fmt.Fprintf(&b, " %10.1f (%3.0f%%)", times[j].p50(i), share)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// apiserverRequests is the API server's count of the requests it has served
// (apiserver_request_total), by verb and resource.
func apiserverRequests(b *testing.B) map[string]float64 {
	b.Helper()
	raw, err := cluster.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatalf("the API server's metrics: %v", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]float64{}
	for _, m := range families["apiserver_request_total"].GetMetric() {
		var verb, res, sub string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "verb":
				verb = l.GetValue()
			case "resource":
				res = l.GetValue()
			case "subresource":
				sub = l.GetValue()
			}
		}
		if sub != "" {
			res += "/" + sub
		}
		out[verb+" "+res] += m.GetCounter().GetValue()
	}
	return out
}

// requestTable lists the requests per launch of two paths side by side,
// most first.
func requestTable(gantry, direct map[string]float64) string {
	keys := map[string]bool{}
	for k := range gantry {
		keys[k] = true
	}
	for k := range direct {
		keys[k] = true
	}
	order := slices.Collect(maps.Keys(keys))
	slices.SortFunc(order, func(a, b string) int {
		if c := cmp.Compare(gantry[b]+direct[b], gantry[a]+direct[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	var b strings.Builder
	fmt.Fprintf(&b, "%-40s %8s %8s\n", "verb resource", "gantry", "direct")
	for _, k := range order {
		fmt.Fprintf(&b, "%-40s %8.1f %8.1f\n", k, gantry[k], direct[k])
	}
	return b.String()
}
