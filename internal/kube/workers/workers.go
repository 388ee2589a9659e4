// Package workers reads Gantry's worker clusters (internal/fleet): for each,
// whether its API server answers Gantry's credentials, the GPUs of each
// class it offers that are free now, and each team's GPUs running or
// waiting there. Credentials are kubeconfig files, read again when they
// change (a rotated token is picked up at the next pass); a worker that
// refuses them is said to, in words an operator can act on. With Kueue, it
// is also the manager's side of the fleet (Manager, on the leader): the
// kubeconfigs as MultiKueue's Secrets, each worker's team namespaces and
// queues, and a workload's volume claims, Service and NetworkPolicy staged
// on its worker (and where its data stays, a notebook's home), and a
// fleet's VMs run on their workers (SyncVMs); and the way to a notebook's
// app on a worker (Dial: its API server's port-forward).
package workers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gantryhq/gantry/internal/fleet"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/kube/kapi"
	"github.com/gantryhq/gantry/internal/kube/nodes"
	"github.com/gantryhq/gantry/internal/render"
)

// SecretsDir is where the chart mounts the Secrets a clusters file names
// (kubeconfig: {secret: NAME}): SecretsDir/NAME/kubeconfig.
const SecretsDir = "/var/run/gantry/workers"

// Path is where Gantry reads a cluster's kubeconfig.
func Path(k fleet.Kubeconfig, secretsDir string) string {
	if k.File != "" {
		return k.File
	}
	return filepath.Join(secretsDir, k.Secret, "kubeconfig")
}

// Workers reads the fleet's clusters; fleet.Watch.
type Workers struct {
	fleet      *fleet.Fleet
	classes    *gpu.Catalog
	secretsDir string
	timeout    time.Duration

	mu      sync.Mutex
	clients map[string]client // by cluster
	states  map[string]fleet.State
	read    bool

	written    map[string]string // by cluster: the kubeconfig last written to its Secret (Secrets)
	mirrored   map[string]string // by cluster: what Mirror last applied
	mirrorPass map[string]int
	secretPass int
}

type client struct {
	stamp string // the kubeconfig file as read (size and time)
	core  kubernetes.Interface
	dyn   dynamic.Interface
	// stream is core without the per-request timeout: a log followed
	// for as long as its reader wants (its context ends it); config is
	// its configuration (Dial's port-forwards).
	stream kubernetes.Interface
	config *rest.Config
}

// Options build Workers; Fleet and Classes are required.
type Options struct {
	Fleet      *fleet.Fleet
	Classes    *gpu.Catalog
	SecretsDir string        // default SecretsDir
	Timeout    time.Duration // per cluster and pass; default 5 s
}

// New returns Workers that have read nothing yet.
func New(o Options) (*Workers, error) {
	if o.Fleet == nil || o.Classes == nil {
		return nil, errors.New("workers: the fleet and the GPU classes are required")
	}
	if o.SecretsDir == "" {
		o.SecretsDir = SecretsDir
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	return &Workers{fleet: o.Fleet, classes: o.Classes, secretsDir: o.SecretsDir, timeout: o.Timeout, clients: map[string]client{}, states: map[string]fleet.State{},
		written: map[string]string{}, mirrored: map[string]string{}, mirrorPass: map[string]int{}}, nil
}

// States implements fleet.Watch: each cluster's state as last read; ok is
// false before the first pass.
func (w *Workers) States() (map[string]fleet.State, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]fleet.State, len(w.states))
	for k, v := range w.states {
		out[k] = v
	}
	return out, w.read
}

// Pass reads every cluster once, in parallel, each bounded by the timeout.
func (w *Workers) Pass(ctx context.Context) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	states := map[string]fleet.State{}
	for _, c := range w.fleet.Clusters() {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, w.timeout)
			defer cancel()
			s := w.readOne(cctx, c)
			mu.Lock()
			states[c.Name] = s
			mu.Unlock()
		})
	}
	wg.Wait()
	w.mu.Lock()
	w.states, w.read = states, true
	w.mu.Unlock()
}

// Client is the cluster's client as last built, without a timeout of its
// own (logs are followed for as long as the caller's context lasts); nil
// when its credentials could not be read.
func (w *Workers) Client(cluster string) kubernetes.Interface { return w.get(cluster).stream }

func (w *Workers) readOne(ctx context.Context, c fleet.Cluster) fleet.State {
	core, err := w.client(c)
	if err != nil {
		return fleet.State{Why: err.Error()}
	}
	s := fleet.State{Reachable: true, Free: map[string]float64{}, FreeMIG: map[string]map[string]float64{}, Used: map[string]map[string]float64{}}
	// Per class its offers name: whole GPUs, and the MIG instances of each
	// profile they name, as the device plugin's mixed strategy advertises
	// them — the class's nodes and their pods read once.
	profiles := map[string][]gpu.MIGProfile{}
	var order []string
	for _, o := range c.Offers {
		cl, ok := w.classes.Get(o.Class)
		if !ok {
			continue
		}
		if _, seen := profiles[o.Class]; !seen {
			order, profiles[o.Class] = append(order, o.Class), []gpu.MIGProfile{}
		}
		for _, name := range o.MIG {
			if p, ok := cl.Profile(name); ok && !slices.Contains(profiles[o.Class], p) {
				profiles[o.Class] = append(profiles[o.Class], p)
			}
		}
	}
	// KubeVirt's API served: VMs may run there, on GPUs its nodes pass
	// through (the class's KubeVirt device).
	if _, err := core.Discovery().ServerResourcesForGroupVersion(kapi.VMResource.GroupVersion().String()); err == nil {
		s.VMs, s.FreeVM = true, map[string]float64{}
	}
	nd := nodes.New(core)
	for _, class := range order {
		cl, _ := w.classes.Get(class)
		res := []string{"nvidia.com/gpu"}
		for _, p := range profiles[class] {
			res = append(res, p.Resource())
		}
		if s.VMs && cl.VMDeviceName != "" {
			res = append(res, cl.VMDeviceName)
		}
		free, err := nd.Free(ctx, cl, res...)
		if err != nil {
			return fleet.State{Why: why(err)}
		}
		s.Free[class] = float64(free["nvidia.com/gpu"])
		if s.VMs && cl.VMDeviceName != "" {
			s.FreeVM[class] = float64(free[cl.VMDeviceName])
		}
		for _, p := range profiles[class] {
			if s.FreeMIG[class] == nil {
				s.FreeMIG[class] = map[string]float64{}
			}
			s.FreeMIG[class][p.Name] = float64(free[p.Resource()])
		}
	}
	// Its CPU nodes, where it runs CPU-only launches: their cores free.
	cpu, hasCPU := w.classes.CPU()
	if c.CPU != nil && hasCPU {
		free, err := nd.CPUFree(ctx, cpu.NodeLabel)
		if err != nil {
			return fleet.State{Why: why(err)}
		}
		s.Free[gpu.CPUClass] = free
	}
	pods, err := core.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: render.LabelTeam})
	if err != nil {
		return fleet.State{Why: why(err)}
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		team, class := p.Labels[render.LabelTeam], p.Labels[render.LabelGPUClass]
		if class == "" {
			continue
		}
		n := w.gpus(class, p.Spec.Containers)
		if class == gpu.CPUClass {
			n = float64(nodes.CPURequested(p.Spec.Containers)) / 1000
		}
		if s.Used[team] == nil {
			s.Used[team] = map[string]float64{}
		}
		s.Used[team][class] += n
	}
	return s
}

// gpus is what containers ask of class: whole GPUs (also those passed
// through to a VM, the class's KubeVirt device, which its virt-launcher
// pod asks for), and MIG instances at their share (gpu.Catalog.Share).
func (w *Workers) gpus(class string, ctrs []corev1.Container) float64 {
	n := 0.0
	cl, _ := w.classes.Get(class)
	for _, ctr := range ctrs {
		for name, q := range ctr.Resources.Limits {
			switch {
			case name == "nvidia.com/gpu" || (cl.VMDeviceName != "" && string(name) == cl.VMDeviceName):
				n += float64(q.Value())
			case strings.HasPrefix(string(name), "nvidia.com/mig-"):
				n += w.classes.Share(class, strings.TrimPrefix(string(name), "nvidia.com/mig-"), float64(q.Value()))
			}
		}
	}
	return n
}

// A worker's client's rate limits, unless its kubeconfig sets its own.
const (
	workerQPS   = 100
	workerBurst = 200
)

// client is the cluster's client, built again when its kubeconfig changed.
func (w *Workers) client(c fleet.Cluster) (kubernetes.Interface, error) {
	path := Path(c.Kubeconfig, w.secretsDir)
	fi, err := os.Stat(path)
	if err != nil {
		w.forget(c.Name)
		return nil, fmt.Errorf("its credentials cannot be read: %v", err)
	}
	stamp := fmt.Sprintf("%d:%d", fi.Size(), fi.ModTime().UnixNano())
	have := w.get(c.Name)
	if have.core != nil && have.stamp == stamp {
		return have.core, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		w.forget(c.Name)
		return nil, fmt.Errorf("its kubeconfig %s does not load: %v", path, err)
	}
	if cfg.QPS == 0 && cfg.RateLimiter == nil {
		// client-go's default (5 a second) would queue the reviews of
		// runs' tokens behind each other and the reads of a pass.
		cfg.QPS, cfg.Burst = workerQPS, workerBurst
	}
	stream, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("its kubeconfig %s: %v", path, err)
	}
	streamCfg := rest.CopyConfig(cfg)
	cfg.Timeout = w.timeout
	core, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("its kubeconfig %s: %v", path, err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("its kubeconfig %s: %v", path, err)
	}
	w.mu.Lock()
	w.clients[c.Name] = client{stamp: stamp, core: core, dyn: dyn, stream: stream, config: streamCfg}
	w.mu.Unlock()
	return core, nil
}

// get is the cluster's clients as last built (zero when none).
func (w *Workers) get(cluster string) client {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.clients[cluster]
}

// forget drops a cluster's client: its credentials no longer load.
func (w *Workers) forget(cluster string) {
	w.mu.Lock()
	delete(w.clients, cluster)
	w.mu.Unlock()
}

// Reserved reports whether the worker has reserved quota for the Kueue
// Workload namespace/name (MultiKueue's copy of the manager's, of the same
// name): dispatch.Remote.
func (w *Workers) Reserved(ctx context.Context, cluster, namespace, name string) (bool, error) {
	dyn := w.get(cluster).dyn
	if dyn == nil {
		return false, fmt.Errorf("worker %s not read yet", cluster)
	}
	u, err := dyn.Resource(kapi.KueueWorkloads).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == "QuotaReserved" {
			return m["status"] == "True", nil
		}
	}
	return false, nil
}

// Stopped reports whether the worker runs no pod of the Job
// namespace/name, terminating ones included (dispatch.Remote).
func (w *Workers) Stopped(ctx context.Context, cluster, namespace, job string) (bool, error) {
	core := w.get(cluster).core
	if core == nil {
		return false, fmt.Errorf("worker %s not read yet", cluster)
	}
	pods, err := core.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + job})
	if err != nil {
		return false, err
	}
	return len(pods.Items) == 0, nil
}

// why says why a worker could not be read, in words an operator acts on.
func why(err error) string {
	var ne net.Error
	switch {
	case apierrors.IsUnauthorized(err):
		return "its API server refuses Gantry's credentials (expired or revoked?): renew the kubeconfig"
	case apierrors.IsForbidden(err):
		return "Gantry's credentials may not read its nodes and pods: " + err.Error()
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return "its API server did not answer in time"
	}
	return "its API server cannot be reached: " + err.Error()
}
