// Package dispatch is Gantry's MultiKueue dispatcher: in the manager
// cluster, each Kueue Workload that has its quota reserved and waits on the
// MultiKueue admission check is nominated to the worker cluster the fleet's
// decision chooses (fleet.Round over the workers' states), by writing its
// status.nominatedClusterNames — Kueue's external-dispatcher contract
// (multiKueue.dispatcherName set to a name that is not Kueue's own). The
// decision's reason is annotated on the Workload. A nomination moves when
// its cluster can no longer run the work (unreachable, cordoned, a rule
// changed) and another may, or when it was not admitted there within the
// retry time; it is withdrawn when its cluster answers but may no longer
// run the work and none other may. Nothing moves before the workers were
// read once. A Workload a worker has reserved for is left to MultiKueue.
package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/gantryhq/gantry/internal/fleet"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/kube/kapi"
	"github.com/gantryhq/gantry/internal/kube/kueue"
	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/template"
)

// Name is the name Kueue's configuration gives the external dispatcher
// (multiKueue.dispatcherName).
const Name = "gantry.dev/fleet"

// ReasonAnnotation carries the dispatch decision in words on the Workload.
const ReasonAnnotation = kapi.AnnotationPlacement

// Remote reads the workers' copies of the manager's Workloads.
type Remote interface {
	// Reserved reports whether cluster has reserved quota for the Workload
	// namespace/name.
	Reserved(ctx context.Context, cluster, namespace, name string) (bool, error)
	// Stopped reports whether cluster runs no pod of the Job
	// namespace/name (MultiKueue's copy of the manager's, of the same
	// name), terminating ones included.
	Stopped(ctx context.Context, cluster, namespace, job string) (bool, error)
	// VMStopped reports whether cluster runs no instance of the VM
	// namespace/name (a FleetVM's, of the same name).
	VMStopped(ctx context.Context, cluster, namespace, name string) (bool, error)
}

// Workers are the worker clusters as the dispatcher reads them.
type Workers interface {
	fleet.Watch
	Remote
}

// Stager puts on a worker what a Workload's Job or pod needs there and
// MultiKueue does not copy (its volume claims, Service and NetworkPolicy),
// before the Workload is nominated to it; and, once the worker admitted
// it, notes that its claims' data is there (a notebook's home).
type Stager interface {
	Stage(ctx context.Context, cluster string, wl *unstructured.Unstructured) error
	Placed(ctx context.Context, cluster string, wl *unstructured.Unstructured) error
}

// Options build a Dispatcher; all but Retry and Log are required.
type Options struct {
	Manager dynamic.Interface // the manager cluster
	Fleet   *fleet.Fleet
	Classes *gpu.Catalog // a MIG instance's share of its GPU
	Workers Workers
	// Check is the MultiKueue AdmissionCheck's name in the manager.
	Check string
	// Stage, when set, readies a worker for a Workload before it is
	// nominated there (a nomination waits for it).
	Stage Stager
	// Retry is how long a nomination may wait to be admitted before the
	// next candidate is tried (default 2 minutes).
	Retry time.Duration
	// Intensity says the grid's carbon intensity (gCO2e/kWh) at a region
	// this hour, for the fleet's carbon price (nil, or false: not known;
	// carbon then weighs nothing there).
	Intensity func(ctx context.Context, region string, at time.Time) (float64, bool)
	// PUE is a cluster's site power usage effectiveness as metering
	// counts it, so that placement weighs the energy showback will charge
	// (nil: the cluster's own from the clusters file, else 1).
	PUE func(cluster string) float64
	Now func() time.Time
	Log *slog.Logger
}

// Dispatcher nominates worker clusters for the manager's Workloads.
type Dispatcher struct {
	o Options

	mu    sync.Mutex
	since map[types.UID]nominated // the nomination each Workload holds now
	pods  map[types.UID]podWork   // what a pod's Workload is, once read
}

type nominated struct {
	cluster string
	at      time.Time
	tried   []string // nominated before and not admitted in time
}

// New returns a Dispatcher.
func New(o Options) (*Dispatcher, error) {
	if o.Manager == nil || o.Fleet == nil || o.Classes == nil || o.Workers == nil || o.Check == "" || o.Now == nil {
		return nil, errors.New("dispatch: the manager's client, the fleet, the GPU classes, the fleet's watch, the check's name and a clock are required")
	}
	if o.Retry <= 0 {
		o.Retry = 2 * time.Minute
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return &Dispatcher{o: o, since: map[types.UID]nominated{}, pods: map[types.UID]podWork{}}, nil
}

// withIntensity is states with each cluster's grid intensity now, read
// once a round per region, and its site's PUE.
func (d *Dispatcher) withIntensity(ctx context.Context, states map[string]fleet.State, now time.Time) map[string]fleet.State {
	out := maps.Clone(states)
	byRegion := map[string]float64{}
	for _, c := range d.o.Fleet.Clusters() {
		v, seen := byRegion[c.Region]
		if !seen {
			v, _ = d.o.Intensity(ctx, c.Region, now)
			byRegion[c.Region] = v
		}
		if s, ok := out[c.Name]; ok {
			s.Intensity = v
			if d.o.PUE != nil {
				s.PUE = d.o.PUE(c.Name)
			}
			out[c.Name] = s
		}
	}
	return out
}

// waiting is a Workload waiting on the MultiKueue check.
type waiting struct {
	u      *unstructured.Unstructured
	launch fleet.Launch
	now    []string // its nominated clusters now
}

// Round nominates every waiting Workload once: n is how many nominations
// it wrote.
func (d *Dispatcher) Round(ctx context.Context) (n int, err error) {
	states, read := d.o.Workers.States()
	if !read {
		return 0, nil // nothing is known of the workers yet: no nomination moves
	}
	list, err := d.o.Manager.Resource(kapi.KueueWorkloads).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return 0, fmt.Errorf("dispatch: list the manager's Workloads: %w", err)
	}
	now := d.o.Now()
	var pending []waiting
	var errs []error
	seen := map[types.UID]bool{}
	draining := map[string]bool{}
	for _, c := range d.o.Fleet.Clusters() {
		draining[c.Name] = c.Draining
	}
	for i := range list.Items {
		u := &list.Items[i]
		seen[u.GetUID()] = true
		if err := d.drain(ctx, u, draining); err != nil {
			errs = append(errs, err)
			continue
		}
		if !d.waits(u) {
			continue
		}
		w := waiting{u: u, launch: launchOf(u, d.o.Classes)}
		home, err := d.home(ctx, u)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		w.launch.Home = home
		w.now, _, _ = unstructured.NestedStringSlice(u.Object, "status", "nominatedClusterNames")
		pending = append(pending, w)
	}
	d.mu.Lock()
	for uid := range d.since {
		if !seen[uid] {
			delete(d.since, uid)
		}
	}
	for uid := range d.pods {
		if !seen[uid] {
			delete(d.pods, uid)
		}
	}
	d.mu.Unlock()
	var undecided []waiting
	var launches []fleet.Launch
	for _, w := range pending {
		held := d.held(w, now)
		if c := held.cluster; c != "" && states[c].Reachable {
			// A worker that reserved quota for its copy: the nomination is
			// withdrawn, so that MultiKueue can record where the Workload
			// runs (status.clusterName, which may not stand beside
			// nominations; Kueue's own status writes cannot clear a field
			// another writer set). A worker that cannot say: left as it is.
			reserved, err := d.o.Workers.Reserved(ctx, c, w.u.GetNamespace(), w.u.GetName())
			if err != nil {
				errs = append(errs, fmt.Errorf("dispatch: read %s/%s on %s: %w", w.u.GetNamespace(), w.u.GetName(), c, err))
				continue
			}
			if reserved {
				if d.o.Stage != nil {
					if err := d.o.Stage.Placed(ctx, c, w.u); err != nil {
						errs = append(errs, fmt.Errorf("dispatch: note %s/%s placed on %s: %w", w.u.GetNamespace(), w.u.GetName(), c, err))
						continue
					}
				}
				if len(w.now) > 0 {
					if err := d.withdraw(ctx, w.u); err != nil {
						errs = append(errs, err)
					}
				}
				continue // MultiKueue records it at its next look
			}
		}
		// The nomination held stays first while it stands and has not
		// waited past the retry time; one that did is tried last.
		if held.cluster != "" {
			if now.Sub(held.at) < d.o.Retry {
				w.launch.Hold = held.cluster
			} else if !slices.Contains(held.tried, held.cluster) {
				held.tried = append(held.tried, held.cluster)
			}
		}
		w.launch.Avoid = held.tried
		d.remember(w.u.GetUID(), held)
		undecided = append(undecided, w)
		launches = append(launches, w.launch)
	}
	pending = undecided
	if d.o.Intensity != nil && d.o.Fleet.CarbonPrice() > 0 && len(launches) > 0 {
		states = d.withIntensity(ctx, states, now)
	}
	for i, dec := range d.o.Fleet.Round(launches, states) {
		w := pending[indexOf(pending, dec.Launch.ID, i)]
		target := dec.Cluster()
		price := prices(dec) // priced into the run
		switch {
		case target == "" && len(w.now) == 1 && states[w.now[0]].Reachable:
			// Its cluster answers but may no longer run it (cordoned, a
			// rule changed), and none other may: the nomination goes.
		case target == "" || slices.Equal(w.now, []string{target}):
			// Nowhere to go now (a nomination on a worker out of reach
			// stands: it may be back), or where it is: only the reason
			// (and the price where it is) is told.
			if err := d.annotate(ctx, w.u, dec.Reason, price, target); err != nil {
				errs = append(errs, err)
			}
			continue
		default:
			if d.o.Stage != nil {
				if err := d.o.Stage.Stage(ctx, target, w.u); err != nil {
					errs = append(errs, fmt.Errorf("dispatch: ready %s for %s/%s: %w", target, w.u.GetNamespace(), w.u.GetName(), err))
					continue
				}
			}
		}
		if err := d.nominate(ctx, w.u, target, dec.Reason, price); err != nil {
			errs = append(errs, err)
			continue
		}
		d.mu.Lock()
		h := d.since[w.u.GetUID()]
		d.since[w.u.GetUID()] = nominated{cluster: target, at: now, tried: h.tried}
		d.mu.Unlock()
		n++
	}
	return n, errors.Join(errs...)
}

// drain moves a Workload off a draining worker. A service's pod there is
// evicted in the manager (its Deployment makes another); a notebook's
// stays, its home being there. A Job's Workload running there is
// deactivated (Kueue evicts it, MultiKueue deletes its copy there) and
// marked; one so marked is activated again (queued, to be nominated
// elsewhere) once Kueue has taken its quota back — so that it never runs
// in two clusters at once — unless its Job was stopped meanwhile.
func (d *Dispatcher) drain(ctx context.Context, u *unstructured.Unstructured, draining map[string]bool) error {
	res := d.o.Manager.Resource(kapi.KueueWorkloads).Namespace(u.GetNamespace())
	active, found, _ := unstructured.NestedBool(u.Object, "spec", "active")
	inactive := found && !active
	cluster, _, _ := unstructured.NestedString(u.Object, "status", "clusterName")
	from := u.GetAnnotations()[kapi.AnnotationDrainedFrom]
	if inactive && kueue.Condition(u, "QuotaReserved") {
		// Deactivated (drained, or stopped by its owner) while it ran on a
		// worker: Kueue gives the quota back once the manager's Job is not
		// active, and its status is the worker copy's as MultiKueue last
		// synced it, which an evicted copy no longer syncs. Once the worker
		// runs none of it, the manager's Job says so.
		at := from
		for _, c := range []string{cluster, u.GetAnnotations()[kapi.AnnotationDispatchedTo]} {
			if at == "" {
				at = c
			}
		}
		if at == "" {
			return nil // never dispatched: Kueue needs nothing of a worker
		}
		return d.settle(ctx, u, at)
	}
	if from != "" {
		spec := map[string]any{"active": true}
		stopped, err := d.stopped(ctx, u)
		if err != nil {
			return err
		}
		if !inactive || stopped {
			// Started by its owner meanwhile, or stopped: left as it is.
			spec = map[string]any{}
		} else if gone, err := d.gone(ctx, u, from); err != nil || !gone {
			return err // its pods still going: the next round looks again
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{kapi.AnnotationDrainedFrom: nil}}, "spec": spec})
		if _, err := res.Patch(ctx, u.GetName(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "gantry-dispatch"}); err != nil {
			return fmt.Errorf("dispatch: queue %s/%s again after the drain of %s: %w", u.GetNamespace(), u.GetName(), from, err)
		}
		d.o.Log.Info("drained: queued again", "workload", u.GetNamespace()+"/"+u.GetName(), "from", from)
		return nil
	}
	if cluster == "" || !draining[cluster] || inactive || kueue.Condition(u, "Finished") {
		return nil
	}
	if pod := ownerPod(u); pod != nil {
		// A service's pod: evicted in the manager (a PodDisruptionBudget
		// its team set holds it), so that its Workload ends (MultiKueue
		// deletes the copy on the worker) and its Deployment makes a new
		// pod, queued and nominated afresh. The service stops meanwhile:
		// one replica, and a volume new on the next worker.
		if u.GetDeletionTimestamp() != nil {
			return nil // evicted already: its Workload goes
		}
		if pw, err := d.notebook(ctx, u); err != nil || pw.notebook {
			// A notebook stays: its home volume is on this cluster. It
			// runs on until its owner stops it (docs/fleets.md).
			return err
		}
		ev := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "policy/v1", "kind": "Eviction",
			"metadata":      map[string]any{"name": pod.Name, "namespace": u.GetNamespace()},
			"deleteOptions": map[string]any{"preconditions": map[string]any{"uid": string(pod.UID)}}}}
		_, err := d.o.Manager.Resource(podsResource).Namespace(u.GetNamespace()).Create(ctx, ev, metav1.CreateOptions{}, "eviction")
		switch {
		case apierrors.IsNotFound(err):
			return nil // gone already
		case apierrors.IsTooManyRequests(err):
			d.o.Log.Debug("draining: a disruption budget holds the pod; the next round tries again", "workload", u.GetNamespace()+"/"+u.GetName(), "pod", pod.Name)
			return nil
		case err != nil:
			return fmt.Errorf("dispatch: move pod %s/%s off %s (drained): %w", u.GetNamespace(), pod.Name, cluster, err)
		}
		d.o.Log.Info("draining: pod evicted, to be replaced", "workload", u.GetNamespace()+"/"+u.GetName(), "pod", pod.Name, "cluster", cluster)
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{kapi.AnnotationDrainedFrom: cluster}}, "spec": map[string]any{"active": false}})
	if _, err := res.Patch(ctx, u.GetName(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "gantry-dispatch"}); err != nil {
		return fmt.Errorf("dispatch: move %s/%s off %s (drained): %w", u.GetNamespace(), u.GetName(), cluster, err)
	}
	d.o.Log.Info("draining", "workload", u.GetNamespace()+"/"+u.GetName(), "cluster", cluster)
	return nil
}

var podsResource = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// podWork is what the dispatcher learnt of a pod's Workload, kept for the
// Workload's life (a pod's kind and claims never change; a home, once
// noted, neither): whether it is a notebook's, its claims, its home.
type podWork struct {
	notebook bool
	claims   []string
	home     string
}

// notebook says whether a Workload admits a notebook's pod, and the pod's
// claims (false: a Job's, a service's, or its pod gone).
func (d *Dispatcher) notebook(ctx context.Context, u *unstructured.Unstructured) (podWork, error) {
	ref := ownerPod(u)
	if ref == nil {
		return podWork{}, nil
	}
	d.mu.Lock()
	pw, known := d.pods[u.GetUID()]
	d.mu.Unlock()
	if known {
		return pw, nil
	}
	pod, err := d.o.Manager.Resource(podsResource).Namespace(u.GetNamespace()).Get(ctx, ref.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return podWork{}, nil
	case err != nil:
		return podWork{}, fmt.Errorf("dispatch: read pod %s/%s: %w", u.GetNamespace(), ref.Name, err)
	case pod.GetUID() == ref.UID && pod.GetLabels()[render.LabelComponent] == template.Notebook:
		pw.notebook = true
		volumes, _, _ := unstructured.NestedSlice(pod.Object, "spec", "volumes")
		for _, v := range volumes {
			m, _ := v.(map[string]any)
			if name, _, _ := unstructured.NestedString(m, "persistentVolumeClaim", "claimName"); name != "" {
				pw.claims = append(pw.claims, name)
			}
		}
	}
	d.mu.Lock()
	d.pods[u.GetUID()] = pw
	d.mu.Unlock()
	return pw, nil
}

// home is the cluster a notebook's home is on: the worker it first ran on
// (kapi.AnnotationHomeCluster on its claims), where alone it may run
// again; "" for other work, or a notebook that has not run yet.
func (d *Dispatcher) home(ctx context.Context, u *unstructured.Unstructured) (string, error) {
	pw, err := d.notebook(ctx, u)
	if err != nil || !pw.notebook || pw.home != "" {
		return pw.home, err
	}
	claims := d.o.Manager.Resource(schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}).Namespace(u.GetNamespace())
	for _, name := range pw.claims {
		c, err := claims.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return "", fmt.Errorf("dispatch: read claim %s/%s: %w", u.GetNamespace(), name, err)
		}
		if at := c.GetAnnotations()[kapi.AnnotationHomeCluster]; at != "" {
			pw.home = at
			d.mu.Lock()
			d.pods[u.GetUID()] = pw
			d.mu.Unlock()
			return at, nil
		}
	}
	return "", nil
}

// ownedBy says whether a Workload has an owner of kind.
func ownedBy(u *unstructured.Unstructured, kind string) bool {
	return slices.ContainsFunc(u.GetOwnerReferences(), func(r metav1.OwnerReference) bool { return r.Kind == kind })
}

// ownerPod is the pod a Workload admits through Kueue's pod integration
// (a service's or notebook's), nil for a Job's.
func ownerPod(u *unstructured.Unstructured) *metav1.OwnerReference {
	for _, r := range u.GetOwnerReferences() {
		if r.Kind == "Pod" && r.APIVersion == "v1" {
			return &r
		}
	}
	return nil
}

// gone reports whether cluster runs no pod of the Jobs a Workload admits
// and no instance of its VM (or is no longer one of the fleet's).
func (d *Dispatcher) gone(ctx context.Context, u *unstructured.Unstructured, cluster string) (bool, error) {
	if _, listed := d.o.Fleet.Get(cluster); !listed {
		return true, nil // removed from the clusters file: nothing there counts
	}
	for _, r := range u.GetOwnerReferences() {
		stopped := true
		var err error
		switch r.Kind {
		case "Job":
			stopped, err = d.o.Workers.Stopped(ctx, cluster, u.GetNamespace(), r.Name)
		case kapi.FleetVMKind.Kind:
			stopped, err = d.o.Workers.VMStopped(ctx, cluster, u.GetNamespace(), r.Name)
		}
		if err != nil || !stopped {
			return false, err
		}
	}
	return true, nil
}

// settle zeroes the active and ready counts of a deactivated Workload's Job
// in the manager once the worker it left runs no pod of it (Kueue waits for
// them to give the quota back).
func (d *Dispatcher) settle(ctx context.Context, u *unstructured.Unstructured, from string) error {
	if gone, err := d.gone(ctx, u, from); err != nil || !gone {
		return err // not yet: the next round looks again
	}
	gvr, _ := kapi.ResourceOf("Job")
	for _, r := range u.GetOwnerReferences() {
		if r.Kind != "Job" {
			continue
		}
		patch := []byte(`{"status":{"active":0,"ready":0}}`)
		if _, err := d.o.Manager.Resource(gvr).Namespace(u.GetNamespace()).Patch(ctx, r.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "gantry-dispatch"}, "status"); err != nil {
			return fmt.Errorf("dispatch: say Job %s/%s stopped on %s: %w", u.GetNamespace(), r.Name, from, err)
		}
	}
	return nil
}

// stopped reports whether the Job or FleetVM a Workload admits was stopped
// by its owner (kapi.AnnotationStopped); one gone is not.
func (d *Dispatcher) stopped(ctx context.Context, u *unstructured.Unstructured) (bool, error) {
	for _, r := range u.GetOwnerReferences() {
		if r.Kind != "Job" && r.Kind != kapi.FleetVMKind.Kind {
			continue
		}
		gvr, _ := kapi.ResourceOf(r.Kind)
		obj, err := d.o.Manager.Resource(gvr).Namespace(u.GetNamespace()).Get(ctx, r.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return false, fmt.Errorf("dispatch: read %s %s/%s: %w", r.Kind, u.GetNamespace(), r.Name, err)
		case obj.GetAnnotations()[kapi.AnnotationStopped] == "true":
			return true, nil
		}
	}
	return false, nil
}

// held is the nomination a Workload holds: the cluster it is nominated to
// now, or the one this dispatcher last nominated it to, since when, and
// the clusters tried before in vain.
func (d *Dispatcher) held(w waiting, now time.Time) nominated {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := d.since[w.u.GetUID()]
	if len(w.now) == 1 && h.cluster != w.now[0] { // nominated before this replica led
		h = nominated{cluster: w.now[0], at: now, tried: h.tried}
	}
	return h
}

func (d *Dispatcher) remember(uid types.UID, h nominated) {
	d.mu.Lock()
	d.since[uid] = h
	d.mu.Unlock()
}

// waits reports whether a Workload has its quota reserved in the manager,
// its other admission checks are ready, it waits on the MultiKueue check,
// and no worker has admitted it yet.
func (d *Dispatcher) waits(u *unstructured.Unstructured) bool {
	if name, _, _ := unstructured.NestedString(u.Object, "status", "clusterName"); name != "" {
		return false
	}
	if !kueue.Condition(u, "QuotaReserved") || kueue.Condition(u, "Finished") {
		return false
	}
	if kueue.Evicted(u) && ownedBy(u, kapi.FleetVMKind.Kind) {
		// A VM's: its quota comes back once no worker runs it
		// (workers.Manager.SyncVMs), and only then is it placed again.
		return false
	}
	// A deactivated one (drained, stopped) waits for its quota to come
	// back. One Kueue evicted for its check (its worker lost past
	// MultiKueue's workerLostTimeout) is nominated again while it still
	// holds its quota: its manager Job's status is the lost copy's, and
	// only a new copy's status, synced back, lets Kueue finish the eviction.
	if active, found, _ := unstructured.NestedBool(u.Object, "spec", "active"); found && !active {
		return false
	}
	// The other checks (Gantry's approval) come first: MultiKueue runs a
	// nominated Workload on its worker as soon as the worker admits it,
	// whatever the manager's other checks say.
	checks, _, _ := unstructured.NestedSlice(u.Object, "status", "admissionChecks")
	pending := false
	for _, c := range checks {
		m, _ := c.(map[string]any)
		switch {
		case m["name"] == d.o.Check:
			pending = m["state"] == "Pending"
		case m["state"] != "Ready":
			return false
		}
	}
	return pending
}

// nominate writes the Workload's nomination and the reason.
func (d *Dispatcher) nominate(ctx context.Context, u *unstructured.Unstructured, cluster, reason string, price map[string]string) error {
	// The reason, price and cluster first: a run never starts without its
	// price, nor runs anywhere Gantry did not note.
	if err := d.annotate(ctx, u, reason, price, cluster); err != nil {
		return err
	}
	res := d.o.Manager.Resource(kapi.KueueWorkloads).Namespace(u.GetNamespace())
	var names []string
	if cluster != "" {
		names = []string{cluster}
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"nominatedClusterNames": names}})
	if _, err := res.Patch(ctx, u.GetName(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "gantry-dispatch"}, "status"); err != nil {
		return fmt.Errorf("dispatch: nominate %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	d.o.Log.Info("dispatched", "workload", u.GetNamespace()+"/"+u.GetName(), "cluster", cluster, "reason", reason)
	return nil
}

// withdraw removes a Workload's nomination once its worker has reserved.
func (d *Dispatcher) withdraw(ctx context.Context, u *unstructured.Unstructured) error {
	patch := []byte(`{"status":{"nominatedClusterNames":null}}`)
	if _, err := d.o.Manager.Resource(kapi.KueueWorkloads).Namespace(u.GetNamespace()).Patch(ctx, u.GetName(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "gantry-dispatch"}, "status"); err != nil {
		return fmt.Errorf("dispatch: withdraw the nomination of %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return nil
}

// prices are the annotations that price a decision's run: its hourly
// price on the chosen cluster and, for a GPU launch, that cluster's
// GPU-hour price (which releases before the hourly one read); none when
// no cluster was chosen.
func prices(dec fleet.Decision) map[string]string {
	if dec.Cluster() == "" {
		return nil
	}
	c := dec.Candidates[0]
	out := map[string]string{}
	if c.PricePerHour > 0 { // 0: what it asks is not counted here (a VM's passthrough GPUs)
		out[kapi.AnnotationHourPrice] = strconv.FormatFloat(math.Round(c.PricePerHour*1e6)/1e6, 'f', -1, 64)
	}
	if dec.Launch.Class != gpu.CPUClass {
		out[kapi.AnnotationGPUHourPrice] = strconv.FormatFloat(c.Offer.PricePerGPUHour, 'f', -1, 64)
	}
	return out
}

// annotate records the decision's reason on the Workload, and with a
// nomination the chosen cluster and its prices (prices; none: nil) —
// once per change.
func (d *Dispatcher) annotate(ctx context.Context, u *unstructured.Unstructured, reason string, price map[string]string, cluster string) error {
	ann := map[string]string{ReasonAnnotation: reason}
	maps.Copy(ann, price)
	if cluster != "" {
		ann[kapi.AnnotationDispatchedTo] = cluster
	}
	same := true
	for k, v := range ann {
		same = same && u.GetAnnotations()[k] == v
	}
	if same {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if _, err := d.o.Manager.Resource(kapi.KueueWorkloads).Namespace(u.GetNamespace()).Patch(ctx, u.GetName(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "gantry-dispatch"}); err != nil {
		return fmt.Errorf("dispatch: say why %s/%s goes where: %w", u.GetNamespace(), u.GetName(), err)
	}
	return nil
}

// JobLaunch is what a Job asks of the fleet, read as its Kueue Workload
// would be (launchOf): one pod set, its template's pods as many as run at
// once. What plans a flexible Job's cluster before the Job exists.
func JobLaunch(job *batchv1.Job, classes *gpu.Catalog) (fleet.Launch, error) {
	tmpl, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&job.Spec.Template)
	if err != nil {
		return fleet.Launch{}, fmt.Errorf("dispatch: read Job %s/%s: %w", job.Namespace, job.Name, err)
	}
	count := int64(1)
	if p := job.Spec.Parallelism; p != nil {
		count = int64(*p)
	}
	if c := job.Spec.Completions; c != nil && int64(*c) < count {
		count = int64(*c)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"podSets": []any{map[string]any{"count": count, "template": tmpl}}}}}
	u.SetLabels(job.Labels)
	return launchOf(u, classes), nil
}

// launchOf reads what a Workload asks of the fleet: its team and GPU class
// from the labels Kueue copies from the Job (gantry.dev/team,
// gantry.dev/gpu-class; the cluster it was planned on,
// gantry.dev/planned-cluster), its GPUs from its pod sets (MIG instances counted,
// and at their profile's share of a GPU, gpu.Catalog.Share) — a CPU-only
// launch's cores from its containers' CPU requests —, every container's
// image (init containers' too), its priority and age, and whether it is a
// VM's (a FleetVM owns it).
func launchOf(u *unstructured.Unstructured, classes *gpu.Catalog) fleet.Launch {
	l := fleet.Launch{ID: string(u.GetUID()), Team: u.GetLabels()[render.LabelTeam], Class: u.GetLabels()[render.LabelGPUClass],
		Template: u.GetLabels()[render.LabelTemplate], Planned: u.GetLabels()[render.LabelPlannedCluster], Order: u.GetCreationTimestamp().UnixNano()}
	if p, ok, _ := unstructured.NestedInt64(u.Object, "spec", "priority"); ok {
		l.Priority = int(p)
	}
	for _, r := range u.GetOwnerReferences() {
		l.VM = l.VM || r.Kind == kapi.FleetVMKind.Kind
	}
	sets, _, _ := unstructured.NestedSlice(u.Object, "spec", "podSets")
	for _, s := range sets {
		m, _ := s.(map[string]any)
		count, _, _ := unstructured.NestedInt64(m, "count")
		ctrs, _, _ := unstructured.NestedSlice(m, "template", "spec", "containers")
		inits, _, _ := unstructured.NestedSlice(m, "template", "spec", "initContainers")
		for _, c := range append(slices.Clone(inits), ctrs...) {
			cm, _ := c.(map[string]any)
			if img, _ := cm["image"].(string); img != "" && !slices.Contains(l.Images, img) {
				l.Images = append(l.Images, img)
			}
		}
		for _, c := range ctrs {
			cm, _ := c.(map[string]any)
			if l.Class == gpu.CPUClass {
				// Requests, as Kueue and the scheduler count them (a
				// limit alone is its request too).
				v, ok, _ := unstructured.NestedString(cm, "resources", "requests", "cpu")
				if !ok {
					v, ok, _ = unstructured.NestedString(cm, "resources", "limits", "cpu")
				}
				if q, err := resource.ParseQuantity(v); ok && err == nil {
					l.Cores += float64(count) * q.AsApproximateFloat64()
				}
			}
			limits, _, _ := unstructured.NestedStringMap(cm, "resources", "limits")
			for name, v := range limits {
				var n float64
				if _, err := fmt.Sscan(v, &n); err != nil {
					continue
				}
				switch {
				case name == "nvidia.com/gpu":
					l.GPUs += float64(count) * n
				case strings.HasPrefix(name, "nvidia.com/mig-"):
					// One profile per launch: a template asks for one.
					l.MIG = strings.TrimPrefix(name, "nvidia.com/mig-")
					l.Slices += int(count) * int(n)
					l.GPUs += classes.Share(l.Class, l.MIG, float64(count)*n)
				}
			}
		}
		tols, _, _ := unstructured.NestedSlice(m, "template", "spec", "tolerations")
		for _, t := range tols {
			if tm, _ := t.(map[string]any); tm["key"] == render.TaintSpot {
				l.Spot = true
			}
		}
	}
	return l
}

// indexOf finds the pending Workload of a launch (Round keeps them in
// priority order, not list order).
func indexOf(p []waiting, id string, guess int) int {
	if guess < len(p) && p[guess].launch.ID == id {
		return guess
	}
	for i := range p {
		if p[i].launch.ID == id {
			return i
		}
	}
	return guess
}
