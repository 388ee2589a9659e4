package workers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/gantryhq/gantry/internal/fleet"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/kube"
	"github.com/gantryhq/gantry/internal/kube/kapi"
	"github.com/gantryhq/gantry/internal/kube/kueue"
	"github.com/gantryhq/gantry/internal/quota"
	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/team"
)

// SecretName is the Secret, in Kueue's namespace of the manager, through
// which MultiKueue reaches a worker.
func SecretName(cluster string) string { return "gantry-worker-" + cluster }

// Secrets writes, in the manager's namespace (Kueue's), each worker's
// kubeconfig as Gantry reads it — flattened, for MultiKueue reads no file
// paths — into the Secret MultiKueue reaches it through, when it changed
// and every refresh calls: credentials that rotate under Gantry rotate
// under MultiKueue too, and a Secret deleted by hand comes back. A worker whose
// kubeconfig cannot be read keeps its Secret as it
// was, and the error says which.
func (w *Workers) Secrets(ctx context.Context, manager kubernetes.Interface, namespace string, refresh int) error {
	w.mu.Lock()
	if refresh > 0 && w.secretPass%refresh == 0 {
		clear(w.written)
	}
	w.secretPass++
	w.mu.Unlock()
	var errs []error
	for _, c := range w.fleet.Clusters() {
		data, err := flattened(Path(c.Kubeconfig, w.secretsDir))
		if err != nil {
			errs = append(errs, fmt.Errorf("worker %s: %w", c.Name, err))
			continue
		}
		sum := sha256.Sum256(data)
		stamp := hex.EncodeToString(sum[:])
		w.mu.Lock()
		same := w.written[c.Name] == stamp
		w.mu.Unlock()
		if same {
			continue
		}
		s := &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Name: SecretName(c.Name), Namespace: namespace, Labels: map[string]string{render.LabelManagedBy: render.ManagedBy}},
			Data:       map[string][]byte{"kubeconfig": data}}
		body, err := json.Marshal(s)
		if err != nil {
			return err
		}
		if _, err := manager.CoreV1().Secrets(namespace).Patch(ctx, s.Name, types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: kapi.FieldManager, Force: kapi.Ptr(true)}); err != nil {
			errs = append(errs, fmt.Errorf("worker %s: write its Secret %s/%s: %w", c.Name, namespace, s.Name, kapi.Classify(err, "Secret", s.Name)))
			continue
		}
		w.mu.Lock()
		w.written[c.Name] = stamp
		w.mu.Unlock()
	}
	return errors.Join(errs...)
}

// flattened is a kubeconfig file with the files it names inlined.
func flattened(path string) ([]byte, error) {
	kc, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("its kubeconfig %s does not load: %v", path, err)
	}
	if err := clientcmdapi.FlattenConfig(kc); err != nil {
		return nil, fmt.Errorf("its kubeconfig %s names a file that cannot be read: %v", path, err)
	}
	for name, a := range kc.AuthInfos {
		if a.Exec != nil || a.AuthProvider != nil {
			return nil, fmt.Errorf("its kubeconfig %s has user %q sign in through a plugin, which MultiKueue cannot run: give it a token or a client certificate", path, name)
		}
		if a.TokenFile != "" {
			// MultiKueue reads no file: the token goes in, read now (a
			// rotated token file is written again at the next change).
			tok, err := os.ReadFile(a.TokenFile)
			if err != nil {
				return nil, fmt.Errorf("its kubeconfig %s names a token file that cannot be read: %v", path, err)
			}
			a.Token, a.TokenFile = strings.TrimSpace(string(tok)), ""
		}
	}
	return clientcmd.Write(*kc)
}

// Mirror keeps on each worker read reachable at the last pass what
// MultiKueue needs there to run the manager's work: the team namespaces the
// manager has (as Gantry applies them: Pod Security "restricted",
// default-deny ingress, the LocalQueue) and the Kueue objects objects gives
// for the cluster (the flavors, priorities and the teams' ClusterQueues
// under the cluster's caps). What a worker was last given is applied again
// only when it changes, and every refresh passes.
func (w *Workers) Mirror(ctx context.Context, namespaces map[string]team.Name, objects func(fleet.Cluster) []quota.Object, refresh int) error {
	states, _ := w.States()
	var errs []error
	for _, c := range w.fleet.Clusters() {
		if !states[c.Name].Reachable {
			continue
		}
		cl := w.get(c.Name)
		if cl.core == nil {
			continue
		}
		objs := objects(c)
		data, _ := json.Marshal(struct {
			N map[string]team.Name
			O []quota.Object
		}{namespaces, objs})
		w.mu.Lock()
		last := w.mirrored[c.Name]
		pass := w.mirrorPass[c.Name]
		w.mirrorPass[c.Name]++
		w.mu.Unlock()
		if last == string(data) && refresh > 0 && pass%refresh != 0 {
			continue
		}
		if err := mirrorOne(ctx, cl, namespaces, objs); err != nil {
			errs = append(errs, fmt.Errorf("worker %s: %w", c.Name, err))
			continue
		}
		w.mu.Lock()
		w.mirrored[c.Name] = string(data)
		w.mu.Unlock()
	}
	return errors.Join(errs...)
}

func mirrorOne(ctx context.Context, cl client, namespaces map[string]team.Name, objs []quota.Object) error {
	q, err := kueue.New(kueue.Options{Dynamic: cl.dyn, Core: cl.core, Observer: unobserved{}})
	if err != nil {
		return err
	}
	// The queues first: a namespace's LocalQueue points at its team's.
	if err := q.SyncQuotas(ctx, objs); err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(namespaces)) {
		if err := kube.ApplyNamespace(ctx, cl.core, q, name, namespaces[name]); err != nil {
			return err
		}
	}
	return nil
}

type unobserved struct{}

func (unobserved) ObserveAdmission(time.Duration) {}

// Manager is the manager's side of the fleet, one pass at a time from the
// leader's loop: the workers' Secrets in Kueue's namespace, and on each
// worker the team namespaces the manager has with their teams' queues
// under the worker's caps.
type Manager struct {
	o ManagerOptions
}

// ManagerOptions build a Manager; all are required but Refresh.
type ManagerOptions struct {
	Workers *Workers
	// Cluster is the manager.
	Cluster *kube.Cluster
	// KueueNamespace is Kueue's namespace in the manager.
	KueueNamespace string
	Policy         func() quota.Policy
	Classes        *gpu.Catalog
	Priorities     []quota.Priority
	// Refresh applies what is unchanged again every Refresh passes
	// (default 10).
	Refresh int
}

// NewManager checks the options.
func NewManager(o ManagerOptions) (*Manager, error) {
	if o.Workers == nil || o.Cluster == nil || o.KueueNamespace == "" || o.Policy == nil || o.Classes == nil {
		return nil, errors.New("workers: a Manager needs the workers, the manager cluster, Kueue's namespace, the policy and the GPU classes")
	}
	if o.Refresh <= 0 {
		o.Refresh = 10
	}
	return &Manager{o: o}, nil
}

// Workers are the workers as MultiKueue's objects name them (for
// quota.Options.Fleet).
func (m *Manager) Workers() []quota.Worker {
	var out []quota.Worker
	for _, c := range m.o.Workers.fleet.Clusters() {
		out = append(out, quota.Worker{Name: c.Name, Secret: SecretName(c.Name)})
	}
	return out
}

// Pass writes the Secrets and mirrors the namespaces and queues once.
func (m *Manager) Pass(ctx context.Context) error {
	serr := m.o.Workers.Secrets(ctx, m.o.Cluster.Core(), m.o.KueueNamespace, m.o.Refresh)
	namespaces, err := m.o.Cluster.TeamNamespaces(ctx)
	if err != nil {
		return errors.Join(serr, fmt.Errorf("the manager's team namespaces: %w", err))
	}
	policy := m.o.Policy()
	teams := policy.Quotas()
	for _, t := range namespaces {
		if _, ok := teams[t.String()]; !ok {
			teams[t.String()] = policy.Quota(t)
		}
	}
	merr := m.o.Workers.Mirror(ctx, namespaces, func(c fleet.Cluster) []quota.Object {
		return quota.WorkerObjects(m.o.Classes, teams, m.o.Priorities, c.Caps)
	}, m.o.Refresh)
	// What was staged for workloads since deleted goes.
	var cerr []error
	states, _ := m.o.Workers.States()
	for _, c := range m.o.Workers.fleet.Clusters() {
		if core := m.o.Workers.get(c.Name).core; core != nil && states[c.Name].Reachable {
			if err := collect(ctx, m.o.Cluster.Core(), core); err != nil {
				cerr = append(cerr, fmt.Errorf("worker %s: what was staged for deleted workloads: %w", c.Name, err))
			}
		}
	}
	return errors.Join(serr, merr, errors.Join(cerr...))
}

// Stage puts on a worker, before the manager's Kueue Workload is nominated
// to it, what its work needs there and MultiKueue does not copy: the
// workload's PersistentVolumeClaims (the manager's, labelled with its
// workload id), applied anew (a claim is bound where it is used); a
// service's or notebook's Service, so that its endpoint resolves where its
// pods run; and its NetworkPolicy, which lets in what may reach its pods
// past the namespace's default of nothing. One already there is left as it
// is. dispatch.Options.Stage.
func (w *Workers) Stage(ctx context.Context, manager kubernetes.Interface, cluster string, wl *unstructured.Unstructured) error {
	id := wl.GetLabels()[render.LabelWorkloadID]
	if id == "" {
		return nil
	}
	core := w.get(cluster).core
	if core == nil {
		return fmt.Errorf("worker %s not read yet", cluster)
	}
	ns := wl.GetNamespace()
	sel := metav1.ListOptions{LabelSelector: render.LabelWorkloadID + "=" + id}
	claims, err := manager.CoreV1().PersistentVolumeClaims(ns).List(ctx, sel)
	if err != nil {
		return fmt.Errorf("the claims of workload %s: %w", id, err)
	}
	for _, c := range claims.Items {
		copied := &corev1.PersistentVolumeClaim{ObjectMeta: stagedMeta(c.ObjectMeta),
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: c.Spec.AccessModes, Resources: c.Spec.Resources, StorageClassName: c.Spec.StorageClassName, VolumeMode: c.Spec.VolumeMode}}
		if err := stage(ctx, core.CoreV1().PersistentVolumeClaims(ns), copied); err != nil {
			return fmt.Errorf("worker %s: claim %s/%s: %w", cluster, ns, c.Name, err)
		}
	}
	services, err := manager.CoreV1().Services(ns).List(ctx, sel)
	if err != nil {
		return fmt.Errorf("the services of workload %s: %w", id, err)
	}
	for _, v := range services.Items {
		copied := &corev1.Service{ObjectMeta: stagedMeta(v.ObjectMeta), Spec: corev1.ServiceSpec{Type: v.Spec.Type, Selector: v.Spec.Selector,
			PublishNotReadyAddresses: v.Spec.PublishNotReadyAddresses}}
		if v.Spec.ClusterIP == corev1.ClusterIPNone {
			copied.Spec.ClusterIP = corev1.ClusterIPNone // headless there too; an address is the worker's own
		}
		for _, p := range v.Spec.Ports {
			copied.Spec.Ports = append(copied.Spec.Ports, corev1.ServicePort{Name: p.Name, Protocol: p.Protocol, Port: p.Port, TargetPort: p.TargetPort, AppProtocol: p.AppProtocol})
		}
		if err := stage(ctx, core.CoreV1().Services(ns), copied); err != nil {
			return fmt.Errorf("worker %s: service %s/%s: %w", cluster, ns, v.Name, err)
		}
	}
	policies, err := manager.NetworkingV1().NetworkPolicies(ns).List(ctx, sel)
	if err != nil {
		return fmt.Errorf("the network policies of workload %s: %w", id, err)
	}
	for _, p := range policies.Items {
		copied := &networkingv1.NetworkPolicy{ObjectMeta: stagedMeta(p.ObjectMeta), Spec: *p.Spec.DeepCopy()}
		if err := stage(ctx, core.NetworkingV1().NetworkPolicies(ns), copied); err != nil {
			return fmt.Errorf("worker %s: network policy %s/%s: %w", cluster, ns, p.Name, err)
		}
	}
	return nil
}

// Placed notes, on the manager's claims of a workload a worker has
// admitted, that their data is on that worker (kapi.AnnotationHomeCluster)
// — unless a cluster of the fleet holds it already. dispatch.Stager.
func (w *Workers) Placed(ctx context.Context, manager kubernetes.Interface, cluster string, wl *unstructured.Unstructured) error {
	id := wl.GetLabels()[render.LabelWorkloadID]
	if id == "" {
		return nil
	}
	ns := wl.GetNamespace()
	claims, err := manager.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{LabelSelector: render.LabelWorkloadID + "=" + id})
	if err != nil {
		return fmt.Errorf("the claims of workload %s: %w", id, err)
	}
	for _, c := range claims.Items {
		if home := c.Annotations[kapi.AnnotationHomeCluster]; home == cluster {
			continue
		} else if _, listed := w.fleet.Get(home); listed {
			continue // its data is on a cluster of the fleet
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{kapi.AnnotationHomeCluster: cluster}}})
		if _, err := manager.CoreV1().PersistentVolumeClaims(ns).Patch(ctx, c.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: kapi.FieldManager}); err != nil {
			return fmt.Errorf("claim %s/%s: say its data is on %s: %w", ns, c.Name, cluster, err)
		}
	}
	return nil
}

// stagedMeta is the metadata of a manager object's copy on a worker: its
// name and labels, marked staged.
func stagedMeta(m metav1.ObjectMeta) metav1.ObjectMeta {
	labels := maps.Clone(m.Labels)
	labels[LabelStaged] = "true"
	return metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, Labels: labels, Annotations: map[string]string{}}
}

// stage creates obj on a worker unless one of its name is there.
func stage[T metav1.Object](ctx context.Context, c interface {
	Get(context.Context, string, metav1.GetOptions) (T, error)
	Create(context.Context, T, metav1.CreateOptions) (T, error)
}, obj T) error {
	if _, err := c.Get(ctx, obj.GetName(), metav1.GetOptions{}); err == nil {
		return nil
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	if _, err := c.Create(ctx, obj, metav1.CreateOptions{FieldManager: kapi.FieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// LabelStaged marks what Stage put on a worker: only that is collected (a
// Gantry of the worker's own keeps its objects).
const LabelStaged = "gantry.dev/staged"

// collect deletes what was staged on a worker for workloads the manager
// no longer has (gone: their primary object deleted, and with it the
// manager's own claims, Service and NetworkPolicy). The worker is read
// first and the manager after it, from the API server itself (not a
// cache): whatever was staged before the worker's list was made for an
// object the manager already had, so the manager's list has it.
func collect(ctx context.Context, manager, worker kubernetes.Interface) error {
	staged := metav1.ListOptions{LabelSelector: render.LabelManagedBy + "=" + render.ManagedBy + "," + render.LabelWorkloadID + "," + LabelStaged + "=true"}
	ours := metav1.ListOptions{LabelSelector: render.LabelManagedBy + "=" + render.ManagedBy + "," + render.LabelWorkloadID}
	for _, k := range []struct {
		kind string
		list func(kubernetes.Interface, metav1.ListOptions) ([]metav1.Object, error)
		del  func(kubernetes.Interface, string, string) error
	}{
		{"claims", func(c kubernetes.Interface, o metav1.ListOptions) ([]metav1.Object, error) {
			l, err := c.CoreV1().PersistentVolumeClaims("").List(ctx, o)
			return objects(l, err, func(l *corev1.PersistentVolumeClaimList) []corev1.PersistentVolumeClaim { return l.Items })
		}, func(c kubernetes.Interface, ns, name string) error {
			return c.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, name, metav1.DeleteOptions{})
		}},
		{"services", func(c kubernetes.Interface, o metav1.ListOptions) ([]metav1.Object, error) {
			l, err := c.CoreV1().Services("").List(ctx, o)
			return objects(l, err, func(l *corev1.ServiceList) []corev1.Service { return l.Items })
		}, func(c kubernetes.Interface, ns, name string) error {
			return c.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{})
		}},
		{"network policies", func(c kubernetes.Interface, o metav1.ListOptions) ([]metav1.Object, error) {
			l, err := c.NetworkingV1().NetworkPolicies("").List(ctx, o)
			return objects(l, err, func(l *networkingv1.NetworkPolicyList) []networkingv1.NetworkPolicy { return l.Items })
		}, func(c kubernetes.Interface, ns, name string) error {
			return c.NetworkingV1().NetworkPolicies(ns).Delete(ctx, name, metav1.DeleteOptions{})
		}},
	} {
		there, err := k.list(worker, staged)
		if err != nil {
			return fmt.Errorf("list the staged %s: %w", k.kind, err)
		}
		if len(there) == 0 {
			continue
		}
		here, err := k.list(manager, ours)
		if err != nil {
			return fmt.Errorf("list the manager's %s: %w", k.kind, err)
		}
		kept := map[string]bool{}
		for _, o := range here {
			kept[o.GetNamespace()+"/"+o.GetName()] = true
		}
		for _, o := range there {
			if kept[o.GetNamespace()+"/"+o.GetName()] {
				continue
			}
			if err := k.del(worker, o.GetNamespace(), o.GetName()); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete the staged %s %s/%s: %w", k.kind, o.GetNamespace(), o.GetName(), err)
			}
		}
	}
	return nil
}

// objects is a list's items as metav1.Objects.
func objects[L any, T any, PT interface {
	*T
	metav1.Object
}](l L, err error, items func(L) []T) ([]metav1.Object, error) {
	if err != nil {
		return nil, err
	}
	all := items(l)
	out := make([]metav1.Object, len(all))
	for i := range all {
		out[i] = PT(&all[i])
	}
	return out, nil
}

// Stage readies a worker for a manager's Workload (dispatch.Stager).
func (m *Manager) Stage(ctx context.Context, cluster string, wl *unstructured.Unstructured) error {
	return m.o.Workers.Stage(ctx, m.o.Cluster.Core(), cluster, wl)
}

// Placed notes where a manager's Workload was admitted (dispatch.Stager).
func (m *Manager) Placed(ctx context.Context, cluster string, wl *unstructured.Unstructured) error {
	return m.o.Workers.Placed(ctx, m.o.Cluster.Core(), cluster, wl)
}
