// Package render owns turning a resolved template into Kubernetes objects: a pure
// function from (template version, choices, team, owner, workload id) to typed
// objects — a batch/v1 Job for a job, a Deployment and Service for a service, a
// StatefulSet and headless Service for a notebook, plus claims for volumes and
// a NetworkPolicy saying who may reach the pods. Objects
// are built as structs, never by templating YAML, so a parameter value can only
// ever become the text of the one field that references it.
package render

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/gantryhq/gantry/deploy"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/quantity"
	"github.com/gantryhq/gantry/internal/quota"
	"github.com/gantryhq/gantry/internal/template"
)

// Labels, annotations and well-known names that Gantry writes or reads.
const (
	LabelName        = "app.kubernetes.io/name"
	LabelInstance    = "app.kubernetes.io/instance"
	LabelComponent   = "app.kubernetes.io/component"
	LabelManagedBy   = "app.kubernetes.io/managed-by"
	ManagedBy        = "gantry"
	LabelWorkloadID  = "gantry.dev/workload-id"
	LabelTeam        = "gantry.dev/team"
	LabelOwner       = "gantry.dev/owner"
	LabelTemplate    = "gantry.dev/template"
	LabelTemplateVer = "gantry.dev/template-version"
	LabelGPUClass    = "gantry.dev/gpu-class"
	LabelCostCenter  = "gantry.dev/cost-center"
	// LabelPlannedCluster is on a flexible Job whose start was planned on
	// one worker cluster (Fleets): the dispatcher places it there first
	// while that cluster can start it (Kueue's labelKeysToCopy must
	// include it). Added at apply (Plan), not part of the rendering.
	LabelPlannedCluster = "gantry.dev/planned-cluster"

	AnnotationOwner       = "gantry.dev/owner"
	AnnotationTemplate    = "gantry.dev/template"
	AnnotationMIGProfile  = "gantry.dev/mig-profile"
	AnnotationMaxRuntime  = "gantry.dev/max-runtime"
	AnnotationIdleTimeout = "gantry.dev/idle-timeout"

	// GPU Feature Discovery's product label and the device plugin's resources.
	LabelGPUProduct = "nvidia.com/gpu.product"
	ResourceGPU     = "nvidia.com/gpu"
	TaintGPU        = "nvidia.com/gpu"

	// Confidential computing: NVIDIA's Kata runtime classes (one per CPU TEE),
	// the node label the GPU Operator sets on CC-ready nodes, the resource the
	// Kata sandbox device plugin advertises for passed-through GPUs, and the
	// Kata annotation carrying init data (attestation agent and CDH settings).
	RuntimeClassPrefix  = "kata-qemu-nvidia-gpu-"
	LabelCCMode         = "nvidia.com/cc.mode"
	ResourcePassthrough = "nvidia.com/pgpu"
	AnnotationInitData  = "io.katacontainers.config.runtime.cc_init_data"
	LabelConfidential   = "gantry.dev/confidential"
	// LabelTrial marks the objects of a trial's run (Meta.Trial).
	LabelTrial = "gantry.dev/trial"

	// Spot capacity: nodes labelled capacity-type=spot and tainted gantry.dev/spot.
	LabelCapacityType = "gantry.dev/capacity-type"
	TaintSpot         = "gantry.dev/spot"

	// PriorityClassPrefix + priority names the PriorityClass (see deploy/).
	PriorityClassPrefix = "gantry-"

	// UserID is the non-root user every container runs as.
	UserID = 1000

	// Gantry's own pods carry LabelRole=RoleProxy (a label no template can
	// put on a workload's pods) in a namespace labelled LabelRole=RoleProxy
	// (only a cluster admin labels namespaces); an interactive workload
	// admits only them. Labels, not names, so that the objects of a launch do
	// not depend on where Gantry is deployed.
	LabelRole = "gantry.dev/role"
	RoleProxy = "proxy"
)

// Object is a Kubernetes object with metadata.
type Object interface {
	runtime.Object
	metav1.Object
}

// Meta identifies the workload being rendered.
type Meta struct {
	WorkloadID      string
	Team            string
	Owner           string
	Namespace       string
	TemplateVersion int
	// Image is what the main container runs: the template's catalog image,
	// verified and pinned by digest (repository@sha256:...).
	Image string
	// TEE is the CPU TEE of a confidential workload (the image's: snp | tdx),
	// and InitData the Kata init data that points its attestation agent at
	// the key broker (base64 of gzip, see InitData).
	TEE      string
	InitData string
	// Kueue puts the workload in its team's Kueue queue: a Job is created
	// suspended with the queue's label, a Deployment's or StatefulSet's pods
	// wait at Kueue's admission gate (what Kueue's webhooks would do), and
	// the pods tolerate their class's flavor taint (package quota). A VM
	// is queued by a Kueue Workload of its own (vmWorkload), halted until
	// Kueue admits it.
	Kueue bool
	// MultiKueue, with Kueue, hands a Job to MultiKueue (spec.managedBy, as
	// Kueue's webhook would set it in a manager cluster): it runs on the
	// worker cluster Gantry's dispatcher nominates, and its status is
	// copied back. A VM becomes a FleetVM holding it (fleetVM), which
	// MultiKueue copies to that worker.
	MultiKueue bool
	// CPUNodeLabel is the label (=true, and taint, NoSchedule) of the nodes
	// CPU-only launches run on (the GPU classes' cpu section); required
	// for one.
	CPUNodeLabel string
	// RunURL is how a Job's pods reach Gantry (its base URL): with it, a
	// Job reports its progress — GANTRY_RUN_URL, its progress route, and
	// GANTRY_RUN_TOKEN_FILE, a projected ServiceAccount token for
	// runs.Audience that the kubelet renews and that dies with the pod
	// (package runs). "": no progress reports.
	RunURL string
	// Trial and TrialSteps, for a trial's run (package trial): its objects
	// carry the trial's label, and its container GANTRY_TRIAL_ID and
	// GANTRY_TRIAL_STEPS (the step Gantry stops it at, so that a script can
	// end there itself). The trial's time cap is the template's max runtime
	// (the launch caps it).
	Trial      string
	TrialSteps int64
}

// Where a run's token is mounted.
const (
	RunTokenDir  = "/var/run/gantry/run"
	RunTokenFile = RunTokenDir + "/token"
	// RunTokenAudience is runs.Audience (render imports no domain service).
	RunTokenAudience = "gantry-run"
	// runTokenSeconds is the token's lifetime: the kubelet renews it at
	// four fifths of it.
	runTokenSeconds = 3600
)

// ManagedByMultiKueue is the spec.managedBy of a Job or FleetVM MultiKueue
// runs on a worker cluster.
const ManagedByMultiKueue = "kueue.x-k8s.io/multikueue"

// LabelPrebuiltWorkload names, on a FleetVM, the Kueue Workload that
// queues it (Kueue's prebuilt-workload label, by which MultiKueue's generic
// adapter finds it).
const LabelPrebuiltWorkload = "kueue.x-k8s.io/prebuilt-workload-name"

// FleetVMAPIVersion and FleetVMKind are the FleetVM's
// (deploy/helm/gantry/crds/fleetvms.yaml).
const (
	FleetVMAPIVersion = "gantry.dev/v1alpha1"
	FleetVMKind       = "FleetVM"
)

// Name is the name of the workload's objects: template name and workload id.
func (m Meta) Name(templateName string) string { return templateName + "-" + m.WorkloadID }

var idRE = regexp.MustCompile(`^[a-z0-9]{4,16}$`)

// Objects renders a resolved template. Problems (for example a parameter value
// that makes an invalid quantity) come back as *fault.Invalid naming the field.
func Objects(r *template.Resolved, m Meta) ([]Object, error) {
	b := newBuilder(r, m)
	b.checkMeta()
	container := b.container()
	volumes, claims := b.volumes(&container)
	pod, podMeta := b.pod(container, volumes)
	if err := b.errs.Err(); err != nil {
		return nil, err
	}
	queued := m.Kueue && b.s.Workload != template.VM
	if queued {
		b.enqueue(&pod, &podMeta)
	}

	switch b.s.Workload {
	case template.VM:
		vm, err := virtualMachine(r, m, b.meta(b.name), podMeta, pod, b.expand)
		if err != nil {
			return nil, err
		}
		if !m.Kueue {
			return []Object{vm}, nil
		}
		// KubeVirt's Kueue integration needs Kueue's webhooks: Gantry
		// queues a VM itself, with a Kueue Workload that asks for its GPUs.
		// The VM waits halted until Kueue admits that Workload; Gantry's
		// Kueue controller then starts it (and halts it if Kueue evicts).
		vm.Spec.RunStrategy = ptr(kubevirtv1.RunStrategyHalted)
		vm.Labels[quota.LabelQueueName] = quota.LocalQueue
		if m.MultiKueue {
			// In a fleet the VM runs on a worker: MultiKueue copies its
			// FleetVM there, and Gantry makes the VM from it.
			fvm, err := fleetVM(vm)
			if err != nil {
				return nil, err
			}
			return []Object{fvm, b.vmWorkload(pod, vm)}, nil
		}
		return []Object{vm, b.vmWorkload(pod, vm)}, nil
	case template.Job:
		objs := b.jobObjects(claims, pod, podMeta)
		if queued {
			job := objs[len(objs)-1].(*batchv1.Job)
			job.Labels[quota.LabelQueueName] = quota.LocalQueue
			job.Labels[quota.LabelPriorityClass] = b.kueuePriority(&job.Spec.Template.Spec)
			job.Spec.Suspend = ptr(true) // Kueue resumes it when it admits it
			if m.MultiKueue {
				job.Spec.ManagedBy = ptr(ManagedByMultiKueue)
			}
		}
		return append(objs, b.networkPolicy()), nil
	case template.Service:
		return append(b.serviceObjects(claims, pod, podMeta), b.networkPolicy()), nil
	case template.Notebook:
		return append(b.notebookObjects(claims, pod, podMeta), b.networkPolicy()), nil
	}
	return nil, nil
}

// Plan marks the Jobs of objs as planned on cluster (LabelPlannedCluster),
// in place; cluster "" marks nothing.
func Plan(objs []Object, cluster string) {
	if cluster == "" {
		return
	}
	for _, o := range objs {
		if job, ok := o.(*batchv1.Job); ok {
			if job.Labels == nil {
				job.Labels = map[string]string{}
			}
			job.Labels[LabelPlannedCluster] = cluster
		}
	}
}

// builder holds what the steps of Objects share, including the problems found.
type builder struct {
	r           *template.Resolved
	s           *template.Spec
	m           Meta
	name        string
	expand      func(string) string
	labels      map[string]string
	annotations map[string]string
	selector    map[string]string
	errs        fault.List
}

func newBuilder(r *template.Resolved, m Meta) *builder {
	t := r.Template
	b := &builder{r: r, s: &t.Spec, m: m, name: m.Name(t.Metadata.Name)}
	builtins := map[string]string{
		"gantry.gpuCount": strconv.Itoa(r.Count),
		"gantry.workload": b.name,
		"gantry.team":     m.Team,
		"gantry.basePath": template.BasePath(m.WorkloadID),
	}
	b.expand = func(v string) string { return r.Expand(v, builtins) }
	b.labels, b.annotations = b.metadata()
	b.selector = map[string]string{LabelInstance: b.name, LabelWorkloadID: m.WorkloadID}
	return b
}

// checkMeta checks the workload's id, team, namespace, image and, for a
// confidential workload, its TEE and init data.
func (b *builder) checkMeta() {
	r, m, s := b.r, b.m, b.s
	if !idRE.MatchString(m.WorkloadID) {
		b.errs.Addf("workload.id", "%q must be 4-16 lowercase letters or digits", m.WorkloadID)
	}
	if !template.ValidName(m.Team) {
		b.errs.Addf("team", "%q must be a lowercase DNS label of at most %d characters", m.Team, template.MaxNameLen)
	}
	if m.Namespace == "" {
		b.errs.Addf("namespace", "is required")
	}
	if r.Confidential {
		switch {
		case !slices.Contains(gpu.TEEs, m.TEE):
			b.errs.Addf("image", "a confidential workload needs a confidential image (TEE %s), not %q", strings.Join(gpu.TEEs, " or "), m.TEE)
		case !r.Class.SupportsTEE(m.TEE):
			b.errs.Addf("gpu.class", "%s does not run confidential workloads on %s", r.Class.Name, m.TEE)
		}
		if m.InitData == "" && s.Workload != template.VM {
			b.errs.Addf("confidential", "init data for the attestation agent is required (configure confidential.kbsURL)")
		}
	}
	if r.CPUOnly && m.CPUNodeLabel == "" {
		b.errs.Addf("cpuOnly", "no CPU nodes are configured (the GPU classes' cpu section): a CPU-only launch has nowhere to run")
	}
	if m.Image == "" || strings.ContainsAny(m.Image, " \t\n{}") {
		b.errs.Addf("image", "%q is not an image reference: the template's catalog image, verified and pinned by digest, is required", m.Image)
	}
}

// metadata is the labels and annotations of every object.
func (b *builder) metadata() (labels, annotations map[string]string) {
	r, m, s := b.r, b.m, b.s
	t := r.Template
	labels = map[string]string{
		LabelName:        t.Metadata.Name,
		LabelInstance:    b.name,
		LabelComponent:   s.Workload,
		LabelManagedBy:   ManagedBy,
		LabelWorkloadID:  m.WorkloadID,
		LabelTeam:        m.Team,
		LabelOwner:       labelValue(m.Owner),
		LabelTemplate:    t.Metadata.Name,
		LabelTemplateVer: strconv.Itoa(m.TemplateVersion),
		LabelGPUClass:    r.Class.Name,
	}
	if s.CostCenter != "" {
		labels[LabelCostCenter] = s.CostCenter
	}
	annotations = map[string]string{
		AnnotationOwner:    m.Owner,
		AnnotationTemplate: fmt.Sprintf("%s@%d", t.Metadata.Name, m.TemplateVersion),
	}
	if r.MIG != nil {
		annotations[AnnotationMIGProfile] = r.MIG.Name
	}
	if r.Confidential {
		labels[LabelConfidential] = m.TEE
	}
	if m.Trial != "" {
		labels[LabelTrial] = m.Trial
	}
	if s.Lifecycle.MaxRuntime != "" {
		annotations[AnnotationMaxRuntime] = s.Lifecycle.MaxRuntime
	}
	if s.Lifecycle.IdleTimeout != "" {
		annotations[AnnotationIdleTimeout] = s.Lifecycle.IdleTimeout
	}
	return labels, annotations
}

// meta is the object metadata of an object named n.
func (b *builder) meta(n string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: n, Namespace: b.m.Namespace, Labels: copyMap(b.labels), Annotations: copyMap(b.annotations)}
}

// quantity expands v and parses it as a positive quantity; "" is the zero
// quantity.
func (b *builder) quantity(path, v string) resource.Quantity {
	if v == "" {
		return resource.Quantity{}
	}
	x := b.expand(v)
	q, err := quantity.Parse(x)
	if err != nil || q.Sign() <= 0 {
		b.errs.Addf(path, "%q is not a positive quantity", x)
	}
	return q
}

// container is the main container, without volume mounts.
func (b *builder) container() corev1.Container {
	s := b.s
	resources := b.resources()
	c := corev1.Container{
		Name:       "main",
		Image:      b.m.Image,
		Command:    expandAll(s.Command, b.expand),
		Args:       expandAll(s.Args, b.expand),
		WorkingDir: b.expand(s.WorkingDir),
		Env:        b.env(),
		EnvFrom:    b.envFrom(),
		Resources:  resources,
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			RunAsNonRoot:             ptr(true),
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	if c.WorkingDir != "" && !strings.HasPrefix(c.WorkingDir, "/") {
		b.errs.Addf("spec.workingDir", "%q is not an absolute path", c.WorkingDir)
	}
	for _, p := range s.Ports {
		c.Ports = append(c.Ports, corev1.ContainerPort{Name: p.Name, ContainerPort: int32(p.Port), Protocol: corev1.ProtocolTCP})
	}
	return c
}

// GPUResource is the extended resource a resolved choice's GPUs are asked
// for as: a confidential launch's passed-through GPUs (MIG or not), a MIG
// profile's slices, or whole GPUs.
func GPUResource(r *template.Resolved) string {
	switch {
	case r.Confidential:
		return ResourcePassthrough
	case r.MIG != nil:
		return r.MIG.Resource()
	}
	return ResourceGPU
}

// resources is the main container's requests and limits: CPU, memory, the
// GPUs (whole, MIG slices or passed through; none CPU-only) and ephemeral
// storage.
func (b *builder) resources() corev1.ResourceRequirements {
	r, s := b.r, b.s
	cpu := b.quantity("spec.resources.cpu", s.Resources.CPU)
	mem := b.quantity("spec.resources.memory", s.Resources.Memory)
	requests := corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem}
	limits := corev1.ResourceList{corev1.ResourceMemory: mem}
	if r.CPUOnly {
		// Priced per core it asks for: it gets no more.
		limits[corev1.ResourceCPU] = cpu
	} else {
		gpuResource := corev1.ResourceName(GPUResource(r))
		gpus := *resource.NewQuantity(int64(r.Count), resource.DecimalSI)
		requests[gpuResource], limits[gpuResource] = gpus, gpus
	}
	if s.Resources.EphemeralStorage != "" {
		q := b.quantity("spec.resources.ephemeralStorage", s.Resources.EphemeralStorage)
		requests[corev1.ResourceEphemeralStorage] = q
		limits[corev1.ResourceEphemeralStorage] = q
	}
	return corev1.ResourceRequirements{Requests: requests, Limits: limits}
}

// env is Gantry's variables followed by the template's, expanded.
func (b *builder) env() []corev1.EnvVar {
	r, m := b.r, b.m
	env := []corev1.EnvVar{
		{Name: "GANTRY_WORKLOAD", Value: b.name},
		{Name: "GANTRY_WORKLOAD_ID", Value: m.WorkloadID},
		{Name: "GANTRY_TEAM", Value: m.Team},
		{Name: "GANTRY_GPU_CLASS", Value: r.Class.Name},
		{Name: "GANTRY_GPU_COUNT", Value: strconv.Itoa(r.Count)},
	}
	for _, e := range b.s.Env {
		if template.SelectsDevices(e.Name) {
			continue // the GPU runtime's choice of devices (a template saved before validation refused it)
		}
		env = append(env, corev1.EnvVar{Name: e.Name, Value: b.expand(e.Value)})
	}
	if dir := b.s.CheckpointDir(); dir != "" {
		env = append(env, corev1.EnvVar{Name: "GANTRY_CHECKPOINT_DIR", Value: dir})
	}
	env = append(env, b.tracking()...)
	if m.Trial != "" {
		env = append(env, corev1.EnvVar{Name: "GANTRY_TRIAL_ID", Value: m.Trial},
			corev1.EnvVar{Name: "GANTRY_TRIAL_STEPS", Value: strconv.FormatInt(m.TrialSteps, 10)})
	}
	if b.reports() {
		env = append(env, corev1.EnvVar{Name: "GANTRY_RUN_URL", Value: strings.TrimSuffix(m.RunURL, "/") + "/api/v1/workloads/" + m.WorkloadID + "/progress"},
			corev1.EnvVar{Name: "GANTRY_RUN_TOKEN_FILE", Value: RunTokenFile})
	}
	if r.CPUOnly {
		// No GPU, even where a node has some and the image asks the NVIDIA
		// container runtime for all of them (last: it wins over the
		// template's).
		env = append(env, corev1.EnvVar{Name: "NVIDIA_VISIBLE_DEVICES", Value: "void"})
	}
	return lastWins(env)
}

// lastWins is env with each name once, at its first place with its last
// value (as a container sees a repeated name; an apply refuses the
// repeat). Validation refuses a template's repeats; this covers one saved
// before it did.
func lastWins(env []corev1.EnvVar) []corev1.EnvVar {
	// A container has a dozen variables: pairs compared, no map made, and
	// nothing copied when no name repeats (every render but an old
	// template's).
	var out []corev1.EnvVar
	for i, e := range env {
		first, lastAt := true, i
		for j := range env {
			if env[j].Name == e.Name {
				first = first && j >= i
				lastAt = j
			}
		}
		if lastAt != i || !first {
			if out == nil {
				out = slices.Clone(env[:i])
			}
			if first {
				out = append(out, env[lastAt])
			}
			continue
		}
		if out != nil {
			out = append(out, e)
		}
	}
	if out == nil {
		return env
	}
	return out
}

// tracking is the experiment tracker's variables: its address and
// project, and the workload's run id, the same across restarts and
// requeues.
func (b *builder) tracking() []corev1.EnvVar {
	t := b.s.Tracking
	if t == nil {
		return nil
	}
	id := template.TrackingRunID(b.m.WorkloadID)
	env := []corev1.EnvVar{{Name: "GANTRY_TRACKING_RUN_ID", Value: id}}
	set := func(name, v string) {
		if v != "" {
			env = append(env, corev1.EnvVar{Name: name, Value: v})
		}
	}
	if m := t.MLflow; m != nil {
		experiment := m.Experiment
		if experiment == "" {
			experiment = b.r.Template.Metadata.Name
		}
		set("MLFLOW_TRACKING_URI", m.URI)
		set("MLFLOW_EXPERIMENT_NAME", experiment)
		set("MLFLOW_RUN_NAME", id)
	}
	if w := t.WandB; w != nil {
		set("WANDB_PROJECT", w.Project)
		set("WANDB_ENTITY", w.Entity)
		set("WANDB_BASE_URL", w.BaseURL)
		set("WANDB_RUN_ID", id)
		set("WANDB_RESUME", "allow")
		set("WANDB_NAME", b.name)
	}
	return env
}

// envFrom is the tracker's credentials: a Secret of the team's namespace
// whose keys become variables, optional (a team without one starts its jobs
// without credentials rather than not at all). Gantry names it and never
// reads it.
func (b *builder) envFrom() []corev1.EnvFromSource {
	t := b.s.Tracking
	if t == nil {
		return nil
	}
	name := ""
	switch {
	case t.MLflow != nil:
		name = t.MLflow.Credentials
	case t.WandB != nil:
		name = t.WandB.Credentials
	}
	if name == "" {
		return nil
	}
	return []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Optional: ptr(true)}}}
}

// reports says whether the workload reports its progress: a Job, with a
// RunURL. A Job MultiKueue runs on a worker carries a token of the
// worker's, which Gantry has that worker review.
func (b *builder) reports() bool {
	return b.m.RunURL != "" && b.s.Workload == template.Job
}

// volumes mounts the template's volumes and /dev/shm in c and returns the
// pod's volumes and the claims: claims for jobs and services, claim templates
// for notebooks.
func (b *builder) volumes(c *corev1.Container) ([]corev1.Volume, []corev1.PersistentVolumeClaim) {
	s := b.s
	var volumes []corev1.Volume
	var claims []corev1.PersistentVolumeClaim
	for i, v := range s.Volumes {
		claim := b.claim(i, v)
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v.Name, MountPath: v.MountPath})
		if s.Workload == template.Notebook {
			claim.ObjectMeta = metav1.ObjectMeta{Name: v.Name, Labels: copyMap(b.labels)}
			claim.TypeMeta = metav1.TypeMeta{}
		} else {
			volumes = append(volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim.Name},
			}})
		}
		claims = append(claims, claim)
	}
	if s.Resources.SharedMemory != "" {
		q := b.quantity("spec.resources.sharedMemory", s.Resources.SharedMemory)
		volumes = append(volumes, corev1.Volume{Name: "dshm", VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &q},
		}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "dshm", MountPath: "/dev/shm"})
	}
	if b.reports() {
		volumes = append(volumes, corev1.Volume{Name: "gantry-run", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
				Audience: RunTokenAudience, ExpirationSeconds: ptr(int64(runTokenSeconds)), Path: "token"}}},
		}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "gantry-run", MountPath: RunTokenDir, ReadOnly: true})
	}
	return volumes, claims
}

// claim is the claim for the template's i'th volume v.
func (b *builder) claim(i int, v template.Volume) corev1.PersistentVolumeClaim {
	claim := corev1.PersistentVolumeClaim{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		ObjectMeta: b.meta(b.name + "-" + v.Name),
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: b.quantity(fmt.Sprintf("spec.volumes[%d].size", i), v.Size),
			}},
		},
	}
	if v.StorageClass != "" {
		claim.Spec.StorageClassName = ptr(v.StorageClass)
	}
	return claim
}

// pod is the pod spec and pod metadata. A confidential pod gets its TEE's
// runtime class, GPUs in CC mode and the init data.
func (b *builder) pod(c corev1.Container, volumes []corev1.Volume) (corev1.PodSpec, metav1.ObjectMeta) {
	pod := podSpec(b.r, c, volumes, b.m.CPUNodeLabel)
	podMeta := metav1.ObjectMeta{Labels: copyMap(b.labels), Annotations: copyMap(b.annotations)}
	if b.r.Confidential {
		// The runtime class's scheduling (see deploy/) keeps the pod on nodes
		// of its TEE; the CC-mode label keeps it on GPUs in CC mode.
		pod.RuntimeClassName = ptr(RuntimeClassPrefix + b.m.TEE)
		req := pod.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
		req.NodeSelectorTerms[0].MatchExpressions = append(req.NodeSelectorTerms[0].MatchExpressions,
			corev1.NodeSelectorRequirement{Key: LabelCCMode, Operator: corev1.NodeSelectorOpIn, Values: []string{"on"}})
		podMeta.Annotations[AnnotationInitData] = b.m.InitData
	}
	return pod, podMeta
}

// enqueue readies a pod for Kueue: it tolerates its class's flavor taint;
// a pod that is not a Job's (Kueue's pod integration) carries its queue and
// priority, is marked managed, and waits at Kueue's admission gate (a Job
// carries its queue itself and is created suspended).
func (b *builder) enqueue(pod *corev1.PodSpec, podMeta *metav1.ObjectMeta) {
	if !b.r.CPUOnly { // a CPU-only pod asks Kueue for no GPU: no flavor to tolerate
		pod.Tolerations = append(pod.Tolerations, corev1.Toleration{Key: quota.TaintGPUClass, Operator: corev1.TolerationOpEqual, Value: b.r.Class.Name, Effect: corev1.TaintEffectNoSchedule})
	}
	if b.s.Workload != template.Job {
		podMeta.Labels[quota.LabelQueueName] = quota.LocalQueue
		podMeta.Labels[quota.LabelPriorityClass] = b.kueuePriority(pod)
		podMeta.Labels[quota.LabelManagedPod] = "true"
		pod.SchedulingGates = append(pod.SchedulingGates, corev1.PodSchedulingGate{Name: quota.GatePodAdmission})
	}
}

// fleetVM is the FleetVM that holds vm in a fleet's manager: named and
// labelled like it, handed to MultiKueue (spec.managedBy), naming the Kueue
// Workload that queues it (of the same name), with the VM's labels,
// annotations and spec as its template.
func fleetVM(vm *kubevirtv1.VirtualMachine) (Object, error) {
	spec, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&vm.Spec)
	if err != nil {
		return nil, fmt.Errorf("render: the VM's spec: %w", err)
	}
	labels := map[string]any{LabelPrebuiltWorkload: vm.Name}
	tmplLabels := map[string]any{}
	for k, v := range vm.Labels {
		labels[k], tmplLabels[k] = v, v
	}
	tmplAnnotations := map[string]any{}
	for k, v := range vm.Annotations {
		tmplAnnotations[k] = v
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": FleetVMAPIVersion, "kind": FleetVMKind,
		"metadata": map[string]any{"name": vm.Name, "namespace": vm.Namespace, "labels": labels},
		"spec": map[string]any{
			"managedBy": ManagedByMultiKueue,
			"template":  map[string]any{"metadata": map[string]any{"labels": tmplLabels, "annotations": tmplAnnotations}, "spec": spec},
		},
	}}
	if len(vm.Annotations) > 0 {
		u.SetAnnotations(maps.Clone(vm.Annotations))
	}
	return u, nil
}

// vmWorkload is the Kueue Workload that queues a VM: one pod set asking for
// its GPUs as whole GPUs (1000 thousandths each), tolerating its class's
// flavor, at its priority, named and labelled like the VM. Its container
// names the VM's disk image (what a fleet's image rules read).
func (b *builder) vmWorkload(pod corev1.PodSpec, vm *kubevirtv1.VirtualMachine) Object {
	tolerations := []any{map[string]any{"key": quota.TaintGPUClass, "operator": "Equal", "value": b.r.Class.Name, "effect": "NoSchedule"}}
	for _, t := range pod.Tolerations {
		if t.Key == TaintSpot {
			tolerations = append(tolerations, map[string]any{"key": t.Key, "operator": string(t.Operator), "effect": string(t.Effect)})
		}
	}
	gpus := fmt.Sprint(b.r.Count)
	meta := b.meta(b.name)
	labels := map[string]any{}
	for k, v := range meta.Labels {
		labels[k] = v
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": quota.APIVersion, "kind": "Workload",
		"metadata": map[string]any{"name": meta.Name, "namespace": meta.Namespace, "labels": labels},
		"spec": map[string]any{
			"queueName":        quota.LocalQueue,
			"priorityClassRef": map[string]any{"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": b.kueuePriority(&pod)},
			// What Kueue's defaulting webhook would set from the class.
			"priority": deploy.PriorityValue(strings.TrimPrefix(pod.PriorityClassName, PriorityClassPrefix)),
			"podSets": []any{map[string]any{
				"name": "vm", "count": int64(1),
				"template": map[string]any{"spec": map[string]any{
					"containers": []any{map[string]any{"name": "vm", "image": vmImage(vm), "resources": map[string]any{
						"requests": map[string]any{"nvidia.com/gpu": gpus}, "limits": map[string]any{"nvidia.com/gpu": gpus}}}},
					"tolerations": tolerations,
				}},
			}},
		},
	}}
}

// vmImage is the image of a VM's containerDisk ("" without one).
func vmImage(vm *kubevirtv1.VirtualMachine) string {
	if vm.Spec.Template == nil {
		return ""
	}
	for _, v := range vm.Spec.Template.Spec.Volumes {
		if v.ContainerDisk != nil {
			return v.ContainerDisk.Image
		}
	}
	return ""
}

// kueuePriority is the WorkloadPriorityClass of the pod's priority.
func (b *builder) kueuePriority(pod *corev1.PodSpec) string {
	return quota.PriorityClass(strings.TrimPrefix(pod.PriorityClassName, PriorityClassPrefix))
}

// jobObjects is a job's claims and its Job.
func (b *builder) jobObjects(claims []corev1.PersistentVolumeClaim, pod corev1.PodSpec, podMeta metav1.ObjectMeta) []Object {
	var objs []Object
	for i := range claims {
		objs = append(objs, &claims[i])
	}
	var maxRuntime *int64
	if b.s.Lifecycle.MaxRuntime != "" {
		d, _ := time.ParseDuration(b.s.Lifecycle.MaxRuntime) // validated with the template
		maxRuntime = ptr(int64(d / time.Second))
	}
	pod.RestartPolicy = corev1.RestartPolicyNever
	job := &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: b.meta(b.name),
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptr(int32(b.s.Lifecycle.Retries)),
			ActiveDeadlineSeconds: maxRuntime,
			Template:              corev1.PodTemplateSpec{ObjectMeta: podMeta, Spec: pod},
		},
	}
	if b.s.Scheduling.Spot {
		// A pod evicted from spot capacity (the DisruptionTarget condition:
		// a node drained or reclaimed, a preemption) does not count against
		// the retries: the Job starts a new one. Gantry counts evictions
		// and fails the workload past spec.scheduling.spotRequeues.
		job.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
			Action:          batchv1.PodFailurePolicyActionIgnore,
			OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
		}}}
	}
	return append(objs, job)
}

// serviceObjects is a service's claims, its Deployment and its Service.
func (b *builder) serviceObjects(claims []corev1.PersistentVolumeClaim, pod corev1.PodSpec, podMeta metav1.ObjectMeta) []Object {
	var objs []Object
	for i := range claims {
		objs = append(objs, &claims[i])
	}
	return append(objs, &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: b.meta(b.name),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: b.selector},
			// GPUs are scarce: replace rather than surge.
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{ObjectMeta: podMeta, Spec: pod},
		},
	}, service(b.meta(b.name), b.selector, b.s.Ports, false))
}

// notebookObjects is a notebook's headless Service and its StatefulSet, which
// carries the claim templates.
func (b *builder) notebookObjects(claims []corev1.PersistentVolumeClaim, pod corev1.PodSpec, podMeta metav1.ObjectMeta) []Object {
	return []Object{service(b.meta(b.name), b.selector, b.s.Ports, true), &appsv1.StatefulSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: b.meta(b.name),
		Spec: appsv1.StatefulSetSpec{
			Replicas:             ptr(int32(1)),
			ServiceName:          b.name,
			Selector:             &metav1.LabelSelector{MatchLabels: b.selector},
			Template:             corev1.PodTemplateSpec{ObjectMeta: podMeta, Spec: pod},
			VolumeClaimTemplates: claims,
			// A notebook's volumes go with it: deleting the workload deletes them.
			PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
				WhenDeleted: appsv1.DeletePersistentVolumeClaimRetentionPolicyType,
				WhenScaled:  appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
			},
		},
	}}
}

// networkPolicy is what may reach the workload's pods, on top of the
// namespace's default of nothing (see kube.EnsureNamespace):
//   - a notebook: Gantry's proxy only, on the interactive port;
//   - a service: pods of its team's namespace and Gantry, on its ports;
//   - a job: its own pods (distributed training), on any port.
func (b *builder) networkPolicy() *networkingv1.NetworkPolicy {
	proxy := networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{LabelRole: RoleProxy}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{LabelRole: RoleProxy}},
	}
	tcp := corev1.ProtocolTCP
	ports := func(ps ...template.Port) []networkingv1.NetworkPolicyPort {
		var out []networkingv1.NetworkPolicyPort
		for _, p := range ps {
			out = append(out, networkingv1.NetworkPolicyPort{Protocol: &tcp, Port: ptr(intstr.FromInt32(int32(p.Port)))})
		}
		return out
	}
	var rule networkingv1.NetworkPolicyIngressRule
	switch s := b.s; s.Workload {
	case template.Notebook:
		rule = networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{proxy},
			Ports: ports(template.Port{Port: s.InteractivePort()})}
	case template.Service:
		rule = networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}, proxy},
			Ports: ports(s.Ports...)}
	default:
		rule = networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: b.selector}}}}
	}
	return &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: b.meta(b.name),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: b.selector},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{rule},
		},
	}
}

// podSpec is the pod of r: on nodes of its GPU class (spot ones only if it
// asks), or, CPU-only, on the nodes labelled cpuNode.
func podSpec(r *template.Resolved, c corev1.Container, volumes []corev1.Volume, cpuNode string) corev1.PodSpec {
	s := &r.Template.Spec
	priority := s.Scheduling.Priority
	if priority == "" {
		priority = "normal"
	}
	tolerations := []corev1.Toleration{{Key: TaintGPU, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	terms := []corev1.NodeSelectorRequirement{{Key: LabelGPUProduct, Operator: corev1.NodeSelectorOpIn, Values: append([]string(nil), r.Class.Products...)}}
	switch {
	case r.CPUOnly:
		tolerations = []corev1.Toleration{{Key: cpuNode, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		terms = []corev1.NodeSelectorRequirement{{Key: cpuNode, Operator: corev1.NodeSelectorOpIn, Values: []string{"true"}},
			{Key: LabelGPUProduct, Operator: corev1.NodeSelectorOpDoesNotExist}} // never a GPU node at the price of its cores
	case s.Scheduling.Spot:
		tolerations = append(tolerations, corev1.Toleration{Key: TaintSpot, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	default:
		terms = append(terms, corev1.NodeSelectorRequirement{Key: LabelCapacityType, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"spot"}})
	}
	return corev1.PodSpec{
		Containers:                   []corev1.Container{c},
		Volumes:                      volumes,
		AutomountServiceAccountToken: ptr(false),
		EnableServiceLinks:           ptr(false),
		PriorityClassName:            PriorityClassPrefix + priority,
		Tolerations:                  tolerations,
		Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: terms}},
			},
		}},
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot:   ptr(true),
			RunAsUser:      ptr(int64(UserID)),
			RunAsGroup:     ptr(int64(UserID)),
			FSGroup:        ptr(int64(UserID)),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}
}

func service(meta metav1.ObjectMeta, selector map[string]string, ports []template.Port, headless bool) *corev1.Service {
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: meta,
		Spec:       corev1.ServiceSpec{Selector: selector, Type: corev1.ServiceTypeClusterIP},
	}
	if headless {
		svc.Spec.ClusterIP = corev1.ClusterIPNone
	}
	for _, p := range ports {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{
			Name: p.Name, Port: int32(p.Port), TargetPort: intstr.FromString(p.Name), Protocol: corev1.ProtocolTCP,
		})
	}
	return svc
}

// YAML renders objects as a multi-document YAML stream.
func YAML(objs []Object) ([]byte, error) {
	var b strings.Builder
	for i, o := range objs {
		if i > 0 {
			b.WriteString("---\n")
		}
		y, err := objectYAML(o)
		if err != nil {
			return nil, err
		}
		b.Write(y)
	}
	return []byte(b.String()), nil
}

// objectYAML marshals an object without its (empty) status, which Gantry never
// writes.
func objectYAML(o Object) ([]byte, error) {
	j, err := json.Marshal(o)
	if err != nil {
		return nil, fmt.Errorf("marshal %T: %w", o, err)
	}
	var m map[string]any
	if err := json.Unmarshal(j, &m); err != nil {
		return nil, fmt.Errorf("marshal %T: %w", o, err)
	}
	delete(m, "status")
	return yaml.Marshal(m)
}

// Hash is the SHA-256 of the objects' JSON encoding (deterministic: struct fields
// in order, map keys sorted): it changes whenever what would be applied changes.
func Hash(objs []Object) (string, error) {
	h := sha256.New()
	for _, o := range objs {
		b, err := json.Marshal(o)
		if err != nil {
			return "", fmt.Errorf("marshal %T: %w", o, err)
		}
		h.Write(b)
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

var labelBad = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// labelValue turns s into a valid label value (the raw value is kept in an
// annotation).
func labelValue(s string) string {
	v := labelBad.ReplaceAllString(s, "_")
	if len(v) > 63 {
		v = v[:63]
	}
	return strings.Trim(v, "._-")
}

func expandAll(in []string, expand func(string) string) []string {
	if in == nil {
		return nil
	}
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = expand(s)
	}
	return out
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// InitData is the Kata init data of a confidential pod: the attestation
// agent's and the confidential data hub's settings pointing at the key broker
// (KBS), a TOML document, gzipped and base64-encoded for the
// io.katacontainers.config.runtime.cc_init_data annotation. Deterministic for
// a given URL, so re-rendering gives the same objects.
func InitData(kbsURL string) (string, error) {
	if u, err := url.Parse(kbsURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.ContainsAny(kbsURL, "'\"\n") {
		return "", fmt.Errorf("%q is not a key broker URL (http or https)", kbsURL)
	}
	doc := fmt.Sprintf(`algorithm = "sha384"
version = "0.1.0"

[data]
"aa.toml" = '''
[token_configs]
[token_configs.coco_as]
url = '%[1]s'

[token_configs.kbs]
url = '%[1]s'
'''

"cdh.toml" = '''
socket = 'unix:///run/confidential-containers/cdh.sock'
credentials = []

[kbc]
name = 'cc_kbc'
url = '%[1]s'
'''
`, kbsURL)
	var b bytes.Buffer
	zw, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	if err != nil {
		return "", err
	}
	if _, err := zw.Write([]byte(doc)); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(b.Bytes()), nil
}

// virtualMachine renders a vm workload as a KubeVirt VirtualMachine: the
// template's catalog image as its containerDisk (verified and pinned like any
// image), cloud-init with the user and SSH keys, the class's GPUs passed
// through by their KubeVirt device name, CPU cores and memory, the same
// placement as a pod of the class, and SEV-SNP or TDX launch security when
// confidential. runStrategy Always starts it; stop sets Halted.
func virtualMachine(r *template.Resolved, m Meta, meta, podMeta metav1.ObjectMeta, pod corev1.PodSpec, expand func(string) string) (*kubevirtv1.VirtualMachine, error) {
	cores, mem, keys, err := vmInputs(r, expand)
	if err != nil {
		return nil, err
	}
	userData, err := cloudConfig(r.Template.Spec.VM.User, keys)
	if err != nil {
		return nil, err
	}
	domain := vmDomain(r, m.TEE, cores, mem)
	tmplMeta := metav1.ObjectMeta{Labels: podMeta.Labels, Annotations: podMeta.Annotations}
	delete(tmplMeta.Annotations, AnnotationInitData) // a Kata setting, not a KubeVirt one
	return &kubevirtv1.VirtualMachine{
		TypeMeta:   metav1.TypeMeta{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine"},
		ObjectMeta: meta,
		Spec: kubevirtv1.VirtualMachineSpec{
			RunStrategy: ptr(kubevirtv1.RunStrategyAlways),
			Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: tmplMeta,
				Spec: kubevirtv1.VirtualMachineInstanceSpec{
					Domain:            domain,
					Affinity:          pod.Affinity,
					Tolerations:       pod.Tolerations,
					PriorityClassName: pod.PriorityClassName,
					Volumes: []kubevirtv1.Volume{
						{Name: "rootdisk", VolumeSource: kubevirtv1.VolumeSource{ContainerDisk: &kubevirtv1.ContainerDiskSource{Image: m.Image}}},
						{Name: "cloudinit", VolumeSource: kubevirtv1.VolumeSource{CloudInitNoCloud: &kubevirtv1.CloudInitNoCloudSource{UserData: "#cloud-config\n" + string(userData)}}},
					},
				},
			},
		},
	}, nil
}

// vmInputs expands and checks a vm's CPU cores, memory and SSH keys, and that
// its GPU class can be passed through.
func vmInputs(r *template.Resolved, expand func(string) string) (cores int64, mem resource.Quantity, keys []string, err error) {
	s := &r.Template.Spec
	var errs fault.List
	cpu, err := quantity.Parse(expand(s.Resources.CPU))
	cores = cpu.Value()
	if err != nil || cpu.MilliValue()%1000 != 0 || cores < 1 || cores > 512 {
		errs.Addf("spec.resources.cpu", "%q must be a whole number of cores for a vm", expand(s.Resources.CPU))
	}
	mem, err = quantity.Parse(expand(s.Resources.Memory))
	if err != nil || mem.Sign() <= 0 {
		errs.Addf("spec.resources.memory", "%q is not a positive quantity", expand(s.Resources.Memory))
	}
	for i, k := range s.VM.SSHAuthorizedKeys {
		k = strings.TrimSpace(expand(k))
		if !template.SSHPublicKey(k) {
			errs.Addf(fmt.Sprintf("spec.vm.sshAuthorizedKeys[%d]", i), "%q is not an SSH public key (ssh-ed25519 AAAA... comment)", clipValue(k))
		}
		keys = append(keys, k)
	}
	if r.Class.VMDeviceName == "" {
		errs.Addf("gpu.class", "%s has no vmDeviceName: its GPUs cannot be passed through to VMs", r.Class.Name)
	}
	return cores, mem, keys, errs.Err()
}

// cloudConfig is the cloud-init user data: the user with the SSH keys and
// passwordless sudo, no password logins, no root.
func cloudConfig(user string, keys []string) ([]byte, error) {
	return yaml.Marshal(map[string]any{
		"users":        []any{map[string]any{"name": user, "ssh_authorized_keys": keys, "sudo": "ALL=(ALL) NOPASSWD:ALL", "shell": "/bin/bash", "lock_passwd": true}},
		"ssh_pwauth":   false,
		"disable_root": true,
	})
}

// vmDomain is the VM's CPU, memory, passed-through GPUs and disks, with
// launch security for tee when confidential.
func vmDomain(r *template.Resolved, tee string, cores int64, mem resource.Quantity) kubevirtv1.DomainSpec {
	gpus := make([]kubevirtv1.GPU, r.Count)
	for i := range gpus {
		gpus[i] = kubevirtv1.GPU{Name: fmt.Sprintf("gpu%d", i), DeviceName: r.Class.VMDeviceName}
	}
	domain := kubevirtv1.DomainSpec{
		CPU:       &kubevirtv1.CPU{Cores: uint32(cores)},
		Memory:    &kubevirtv1.Memory{Guest: &mem},
		Resources: kubevirtv1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: mem}},
		Devices: kubevirtv1.Devices{
			GPUs: gpus,
			Disks: []kubevirtv1.Disk{
				{Name: "rootdisk", DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusVirtio}}},
				{Name: "cloudinit", DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusVirtio}}},
			},
		},
	}
	if r.Confidential {
		// SEV-SNP and TDX guests boot with EFI, without Secure Boot.
		domain.Firmware = &kubevirtv1.Firmware{Bootloader: &kubevirtv1.Bootloader{EFI: &kubevirtv1.EFI{SecureBoot: ptr(false)}}}
		switch tee {
		case "snp":
			domain.LaunchSecurity = &kubevirtv1.LaunchSecurity{SNP: &kubevirtv1.SEVSNP{}}
		case "tdx":
			domain.LaunchSecurity = &kubevirtv1.LaunchSecurity{TDX: &kubevirtv1.TDX{}}
		}
	}
	return domain
}

func clipValue(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}
