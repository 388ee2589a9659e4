// Package template owns request templates: their versioned schema (apiVersion
// gantry.dev/v1alpha1, kind Template), strict parsing with file:line errors, the
// validation rules shared by files and the API, typed parameters, and resolving a
// request's choices (GPU class, MIG profile, count, parameter values) against a
// template. It knows nothing of Kubernetes objects; package render does.
package template

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/offhours"
	"github.com/gantryhq/gantry/internal/quantity"
	"github.com/gantryhq/gantry/internal/yamldoc"
)

// APIVersion and Kind identify a template document.
const (
	APIVersion = "gantry.dev/v1alpha1"
	Kind       = "Template"
)

// Workload kinds.
const (
	Job      = "job"
	Service  = "service"
	Notebook = "notebook"
	VM       = "vm" // a KubeVirt VirtualMachine
)

// Parameter types.
const (
	TypeString = "string"
	TypeInt    = "int"
	TypeBool   = "bool"
	TypeEnum   = "enum"
)

// Template is a request template as written by the platform team.
type Template struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Metadata   Metadata `json:"metadata"`
	Spec       Spec     `json:"spec"`
}

// Metadata names and describes a template.
type Metadata struct {
	Name        string `json:"name"`
	Title       string `json:"title"`
	Description string `json:"description,omitempty"`
}

// Spec is what a template launches.
type Spec struct {
	Workload string `json:"workload"`
	Image    string `json:"image"` // a catalog image, name:tag
	// Confidential runs every launch in a confidential VM (Kata with NVIDIA
	// confidential computing); the image must be a confidential catalog image.
	Confidential bool `json:"confidential,omitempty"`
	GPU          GPU  `json:"gpu,omitzero"`
	// CPUOnly offers a launch without a GPU (as JupyterHub's CPU profiles
	// do): on the GPU classes' CPU nodes, priced per core-hour. A template
	// without GPU classes offers only that.
	CPUOnly    *CPUOnly    `json:"cpuOnly,omitempty"`
	Resources  Resources   `json:"resources"`
	Env        []EnvVar    `json:"env,omitempty"`
	Command    []string    `json:"command,omitempty"`
	Args       []string    `json:"args,omitempty"`
	WorkingDir string      `json:"workingDir,omitempty"`
	Ports      []Port      `json:"ports,omitempty"`
	Volumes    []Volume    `json:"volumes,omitempty"`
	Lifecycle  Lifecycle   `json:"lifecycle,omitempty"`
	Scheduling Scheduling  `json:"scheduling,omitempty"`
	CostCenter string      `json:"costCenter,omitempty"`
	Parameters []Parameter `json:"parameters,omitempty"`
	// VM configures a vm workload: the cloud-init user and the SSH keys it
	// accepts (usually a {{sshPublicKey}} parameter).
	VM *VMSpec `json:"vm,omitempty"`
	// Interactive says how a person opens the workload: through Gantry's
	// authenticating proxy at /w/{id}/ and nowhere else (a NetworkPolicy
	// admits only the proxy). Every notebook must have it.
	Interactive *Interactive `json:"interactive,omitempty"`
	// Checkpoints says where a job keeps its checkpoints: a directory on
	// one of its volumes, which outlive its pods (a retry, a requeue, a
	// stop and a start). Gantry passes it as GANTRY_CHECKPOINT_DIR.
	Checkpoints *Checkpoints `json:"checkpoints,omitempty"`
	// EarlyStopping ends (or flags) a job's run by what it reports of
	// itself (package runs): a metric that stopped improving, a target
	// reached, a cost cap.
	EarlyStopping *EarlyStopping `json:"earlyStopping,omitempty"`
	// Tracking names the experiment tracker a job's runs log to (MLflow or
	// Weights & Biases): Gantry passes its address and project, a run id
	// that stays the same across restarts and requeues, and the team's
	// credentials from a Secret of the team's namespace, which Gantry
	// never reads.
	Tracking *Tracking `json:"tracking,omitempty"`
}

// Tracking is an experiment tracker; exactly one of its members is set.
type Tracking struct {
	MLflow *MLflow `json:"mlflow,omitempty"`
	WandB  *WandB  `json:"wandb,omitempty"`
}

// Sets names the tracker that sets the environment variable name in a
// workload's containers (render: a variable for a field left empty is not
// set, and the template may set it), or "" (a nil Tracking sets none).
func (t *Tracking) Sets(name string) string {
	if t == nil {
		return ""
	}
	if m := t.MLflow; m != nil {
		set := map[string]bool{"MLFLOW_TRACKING_URI": m.URI != "", "MLFLOW_EXPERIMENT_NAME": true, "MLFLOW_RUN_NAME": true}
		if set[name] {
			return "spec.tracking.mlflow"
		}
	}
	if w := t.WandB; w != nil {
		set := map[string]bool{"WANDB_PROJECT": w.Project != "", "WANDB_ENTITY": w.Entity != "", "WANDB_BASE_URL": w.BaseURL != "",
			"WANDB_RUN_ID": true, "WANDB_RESUME": true, "WANDB_NAME": true}
		if set[name] {
			return "spec.tracking.wandb"
		}
	}
	return ""
}

// SelectsDevices reports whether an environment variable chooses the GPUs
// the NVIDIA container runtime shows a container: NVIDIA_VISIBLE_DEVICES and
// the MIG device lists. Gantry's device plugin allocation decides those; a
// template may not (others, such as NVIDIA_DRIVER_CAPABILITIES, it may set).
func SelectsDevices(name string) bool {
	return name == "NVIDIA_VISIBLE_DEVICES" || strings.HasPrefix(name, "NVIDIA_MIG_") && strings.HasSuffix(name, "_DEVICES")
}

// MLflow is an MLflow tracking server: MLFLOW_TRACKING_URI and
// MLFLOW_EXPERIMENT_NAME (default: the template's name); the run is found
// again by its tag gantry.run_id (gantry.tracking.mlflow_run in Python).
type MLflow struct {
	URI        string `json:"uri"`
	Experiment string `json:"experiment,omitempty"`
	// Credentials is a Secret in the team's namespace whose keys become
	// the job's environment (MLFLOW_TRACKING_TOKEN, or
	// MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD); the job
	// starts without them when the team has none.
	Credentials string `json:"credentials,omitempty"`
}

// WandB is a Weights & Biases project: WANDB_PROJECT, WANDB_ENTITY,
// WANDB_BASE_URL (default W&B's cloud), WANDB_RUN_ID with
// WANDB_RESUME=allow, so that a restarted run goes on in the same W&B run.
type WandB struct {
	Project string `json:"project"`
	Entity  string `json:"entity,omitempty"`
	BaseURL string `json:"baseURL,omitempty"`
	// Credentials is a Secret in the team's namespace holding
	// WANDB_API_KEY (its keys become the job's environment).
	Credentials string `json:"credentials,omitempty"`
}

// TrackingRunID is the tracker's run id of a workload: the same for every
// run of it (a restart, a requeue, a start after a stop).
func TrackingRunID(workloadID string) string { return "gantry-" + workloadID }

// EarlyStopping is a job's stopping rules and what happens when one fires:
// stop (the job is stopped, its checkpoints kept, with the rule and its
// numbers as the reason) or advise (the run is flagged, and left running).
type EarlyStopping struct {
	Action string     `json:"action"`
	Rules  []StopRule `json:"rules"`
}

// Early stopping's actions.
const (
	StopRun   = "stop"
	AdviseRun = "advise"
)

// StopRule is one rule; exactly one of its members is set.
type StopRule struct {
	// Plateau fires when Metric has not improved by more than Delta over
	// its best for Reports reports that carry it.
	Plateau *Plateau `json:"plateau,omitempty"`
	// Target fires when Metric reaches Value.
	Target *Target `json:"target,omitempty"`
	// CostCap fires when the run has cost this many dollars.
	CostCap float64 `json:"costCap,omitempty"`
	// MaxSteps fires when the run reports this step (or a later one): a
	// run capped in steps, such as a trial's.
	MaxSteps int64 `json:"maxSteps,omitempty"`
	// Median fires when the run's best Metric so far is worse than the
	// median of what earlier runs of the template had reached by the same
	// step (the median stopping rule of Vizier, Katib and Ray Tune).
	Median *Median `json:"median,omitempty"`
	// Deadline fires when, at its pace, the run would finish later than
	// Within after its first report.
	Deadline *Deadline `json:"deadline,omitempty"`
}

// Median compares a run with the template's earlier runs at the same
// step: from GraceSteps on, and once at least MinRuns earlier runs (of the
// latest 20 that reported Metric) got that far.
type Median struct {
	Metric     string `json:"metric"`
	Mode       string `json:"mode,omitempty"` // min (default: lower is better) or max
	GraceSteps int64  `json:"graceSteps,omitempty"`
	MinRuns    int    `json:"minRuns,omitempty"` // default 3
}

// DefaultMedianRuns is how many earlier runs the median rule needs when
// the template does not say (Katib's and Ray Tune's default).
const DefaultMedianRuns = 3

// Deadline is when a run must be done by: Within (a duration) after its
// first report, judged on its pace once it has made GraceReports reports
// in its current run (default 5: a pace needs a few).
type Deadline struct {
	Within       string `json:"within"`
	GraceReports int    `json:"graceReports,omitempty"`
}

// DefaultDeadlineReports is the deadline rule's grace when the template
// does not say.
const DefaultDeadlineReports = 5

// Plateau is a metric that stopped improving.
type Plateau struct {
	Metric  string  `json:"metric"`
	Mode    string  `json:"mode,omitempty"` // min (default: lower is better) or max
	Delta   float64 `json:"delta,omitempty"`
	Reports int     `json:"reports"`
}

// Target is a metric's goal.
type Target struct {
	Metric string  `json:"metric"`
	Mode   string  `json:"mode,omitempty"` // min (reached at or below) or max
	Value  float64 `json:"value"`
}

// Checkpoints is a directory on one of the template's volumes.
type Checkpoints struct {
	Volume string `json:"volume"`
	Path   string `json:"path,omitempty"` // relative to the volume's mount path
}

// CheckpointDir is where the checkpoints are in the container ("" when the
// template declares none).
func (s *Spec) CheckpointDir() string {
	if s.Checkpoints == nil {
		return ""
	}
	for _, v := range s.Volumes {
		if v.Name == s.Checkpoints.Volume {
			return path.Join(v.MountPath, s.Checkpoints.Path)
		}
	}
	return ""
}

// Interactive is an app a person uses in the browser (JupyterLab,
// code-server): the port Gantry's proxy forwards to and whether the app
// expects the /w/{id}/ prefix (an app given {{gantry.basePath}}, such as
// Jupyter's base_url) or is served at / (stripPrefix, such as code-server).
type Interactive struct {
	Port        string `json:"port"`
	StripPrefix bool   `json:"stripPrefix,omitempty"`
}

// VMSpec is what a VM gets from cloud-init.
type VMSpec struct {
	User              string   `json:"user"`
	SSHAuthorizedKeys []string `json:"sshAuthorizedKeys"`
}

// GPU says which GPUs a workload may ask for.
type GPU struct {
	Classes           []string `json:"classes"`
	DefaultClass      string   `json:"defaultClass"`
	MIGProfiles       []string `json:"migProfiles,omitempty"`
	DefaultMIGProfile string   `json:"defaultMigProfile,omitempty"`
	Count             Count    `json:"count"`
}

// CPUOnly bounds a CPU-only launch's CPU and memory (the template's
// resources, parameters applied, must stay within them) and says whether
// it is the template's default choice.
type CPUOnly struct {
	MaxCPU    string `json:"maxCPU"`
	MaxMemory string `json:"maxMemory"`
	Default   bool   `json:"default,omitempty"`
}

// Count bounds the number of GPUs (or MIG slices).
type Count struct {
	Min     int `json:"min"`
	Max     int `json:"max"`
	Default int `json:"default"`
}

// Resources are the container's CPU, memory and disk; values are Kubernetes
// quantities and may reference parameters.
type Resources struct {
	CPU              string `json:"cpu"`
	Memory           string `json:"memory"`
	EphemeralStorage string `json:"ephemeralStorage,omitempty"`
	SharedMemory     string `json:"sharedMemory,omitempty"`
}

// EnvVar is one environment variable.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Port is one container port; services and notebooks expose them.
type Port struct {
	Name string `json:"name"`
	Port int    `json:"port"`
}

// Volume is a persistent volume claim of Size mounted at MountPath.
type Volume struct {
	Name         string `json:"name"`
	MountPath    string `json:"mountPath"`
	Size         string `json:"size"`
	StorageClass string `json:"storageClass,omitempty"`
}

// Lifecycle bounds how long a workload may run.
type Lifecycle struct {
	MaxRuntime  string `json:"maxRuntime,omitempty"`
	IdleTimeout string `json:"idleTimeout,omitempty"`
	// Sleep is an off-hours schedule ("weekdays 20:00-08:00 Europe/Berlin",
	// package offhours): workloads running when a window begins are
	// stopped as IdleStopped; one started during it runs on.
	Sleep   string `json:"sleep,omitempty"`
	Retries int    `json:"retries,omitempty"`
	// IdleTimeoutMax is the longest idle timeout a team may choose for
	// its launches of this template (a team override, package overrides);
	// unset, a team may only shorten IdleTimeout.
	IdleTimeoutMax string `json:"idleTimeoutMax,omitempty"`
}

// Scheduling sets priority and whether spot capacity may be used.
type Scheduling struct {
	Priority string `json:"priority,omitempty"`
	Spot     bool   `json:"spot,omitempty"`
	// SpotRequeues bounds how often a job on spot capacity starts again
	// after its pod was evicted (0: the default, DefaultSpotRequeues);
	// past it the workload fails.
	SpotRequeues int `json:"spotRequeues,omitempty"`
	// Flexible marks a job's start as movable for cleaner power: Gantry
	// may hold a launch up to MaxDelay and release it into its queue when
	// the grid's forecast carbon intensity is lowest (docs/energy.md).
	Flexible *Flexible `json:"flexible,omitempty"`
}

// Flexible is how far a flexible job's start may move.
type Flexible struct {
	// MaxDelay is the longest Gantry may hold a launch (1m to 168h); a
	// launch may ask for less, or give a deadline.
	MaxDelay string `json:"maxDelay"`
	// ExpectedRuntime is how long a run is expected to take: the window
	// whose forecast is compared. Unset: the median of the template's
	// earlier successful runs in the team, else its maxRuntime, else 1h.
	ExpectedRuntime string `json:"expectedRuntime,omitempty"`
}

// MaxFlexibleDelay is the longest a flexible job's start may move.
const MaxFlexibleDelay = 7 * 24 * time.Hour

// DefaultSpotRequeues is how often a spot job starts again after an
// eviction unless its template says otherwise.
const DefaultSpotRequeues = 3

// Requeues is how often a spot job starts again after an eviction.
func (s Scheduling) Requeues() int {
	if s.SpotRequeues > 0 {
		return s.SpotRequeues
	}
	return DefaultSpotRequeues
}

// Parameter is a typed value the user supplies at launch and the template body
// references as {{name}}.
type Parameter struct {
	Name        string   `json:"name"`
	Type        string   `json:"type"`
	Description string   `json:"description,omitempty"`
	Default     any      `json:"default,omitempty"`
	Required    bool     `json:"required,omitempty"`
	Min         *int64   `json:"min,omitempty"`
	Max         *int64   `json:"max,omitempty"`
	Pattern     string   `json:"pattern,omitempty"`
	Values      []string `json:"values,omitempty"`
}

// Priorities are the allowed values of scheduling.priority.
var Priorities = []string{"low", "normal", "high"}

// Limits on names and sizes.
const (
	MaxNameLen        = 40
	MaxParamValueLen  = 1024
	MaxParameters     = 64
	maxDescriptionLen = 4096
)

var (
	nameRE      = regexp.MustCompile(`^[a-z]([a-z0-9-]*[a-z0-9])?$`)
	paramNameRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_]{0,62}$`)
	envNameRE   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	labelValRE  = regexp.MustCompile(`^([A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?$`)
	// refRE matches a reference such as {{epochs}} or {{ gantry.gpuCount }}.
	refRE = regexp.MustCompile(`\{\{\s*([A-Za-z][A-Za-z0-9_.]*)\s*\}\}`)
)

// Builtins are values every template may reference besides its parameters.
// gantry.basePath is where Gantry's proxy serves an interactive workload
// (/w/{id}/).
var Builtins = []string{"gantry.gpuCount", "gantry.workload", "gantry.team", "gantry.basePath"}

// ValidName reports whether name is a valid template name (a DNS-1123 label of at
// most MaxNameLen characters, so that derived object names stay valid).
var (
	userRE   = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)
	sshKeyRE = regexp.MustCompile(`^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)|sk-ssh-ed25519@openssh\.com) [A-Za-z0-9+/]+={0,3}( [^\n]*)?$`)
)

// validateVM checks what only vm workloads have, and what they cannot have:
// a container command, working directory, ports or volumes (the VM's disk is
// its catalog image), and MIG slices (GPUs are passed through whole).
func (t *Template) validateVM(classes *gpu.Catalog, errs *fault.List, checkRefs func(path, v string)) {
	s := &t.Spec
	if s.VM == nil {
		errs.Addf("spec.vm", "a vm needs spec.vm with the cloud-init user and sshAuthorizedKeys")
	} else {
		if !userRE.MatchString(s.VM.User) {
			errs.Addf("spec.vm.user", "%q is not a Linux user name", clip(s.VM.User))
		}
		if len(s.VM.SSHAuthorizedKeys) == 0 {
			errs.Addf("spec.vm.sshAuthorizedKeys", "at least one key (or {{parameter}}) is required: a VM is reached over SSH")
		}
		for i, k := range s.VM.SSHAuthorizedKeys {
			p := fmt.Sprintf("spec.vm.sshAuthorizedKeys[%d]", i)
			checkRefs(p, k)
			if !refRE.MatchString(k) && !sshKeyRE.MatchString(k) {
				errs.Addf(p, "%q is not an SSH public key or a {{parameter}}", clip(k))
			}
		}
	}
	for _, f := range []struct {
		path string
		set  bool
	}{{"spec.command", len(s.Command) > 0}, {"spec.args", len(s.Args) > 0}, {"spec.workingDir", s.WorkingDir != ""},
		{"spec.env", len(s.Env) > 0}, {"spec.ports", len(s.Ports) > 0}, {"spec.volumes", len(s.Volumes) > 0},
		{"spec.gpu.migProfiles", len(s.GPU.MIGProfiles) > 0}} {
		if f.set {
			errs.Addf(f.path, "does not apply to a vm (its disk and software come from its catalog image; GPUs are passed through whole)")
		}
	}
	for i, n := range s.GPU.Classes {
		if c, ok := classes.Get(n); ok && c.VMDeviceName == "" {
			errs.Addf(fmt.Sprintf("spec.gpu.classes[%d]", i), "%s has no vmDeviceName in the GPU classes: its GPUs cannot be passed through to VMs", n)
		}
	}
}

// SSHPublicKey reports whether s is an SSH public key line.
func SSHPublicKey(s string) bool { return sshKeyRE.MatchString(s) }

// imageRE is a catalog image reference: an image name and a tag.
var imageRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

func ValidName(name string) bool { return len(name) <= MaxNameLen && nameRE.MatchString(name) }

// Images answers for the image catalog: the GPU classes a catalog image
// ("name:tag") supports and its TEE ("" unless it is a confidential image),
// or why it cannot be launched (unknown image, tag not approved).
type Images interface {
	Describe(ref string) (gpuClasses []string, tee string, err error)
}

// Parse decodes and validates a template document (YAML or JSON), and, when
// images is not nil, its image against the image catalog. Every problem is
// reported at once, each with file:line and field path.
func Parse(file string, data []byte, classes *gpu.Catalog, images Images) (*Template, error) {
	var t Template
	lines, err := yamldoc.Decode(file, data, &t)
	if lines == nil {
		return nil, err // not YAML at all
	}
	if err := fault.Merge(err, lines.Locate(file, t.ValidateWith(classes, images))); err != nil {
		return nil, err
	}
	return &t, nil
}

// Digest is the SHA-256 of the template's canonical JSON form: two templates with
// the same digest launch the same thing.
func (t *Template) Digest() string {
	b, err := json.Marshal(t)
	if err != nil {
		panic(err) // only plain data: cannot fail
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// ValidateWith is Validate and, when images is not nil, CheckImage.
func (t *Template) ValidateWith(classes *gpu.Catalog, images Images) error {
	err := t.Validate(classes)
	if images == nil || !imageRE.MatchString(t.Spec.Image) {
		return err
	}
	var errs fault.List
	if err != nil {
		errs.AddErr("", err)
	}
	if err := t.CheckImage(images); err != nil {
		errs.AddErr("", err)
	}
	return errs.Err()
}

// CheckImage checks the template's image against the image catalog: it exists,
// its tag is approved, and it supports every GPU class the template offers.
func (t *Template) CheckImage(images Images) error {
	var errs fault.List
	supported, tee, err := images.Describe(t.Spec.Image)
	if err != nil {
		errs.Addf("spec.image", "%v", err)
		return errs.Err()
	}
	if t.Spec.Confidential && tee == "" {
		errs.Addf("spec.image", "%s is not a confidential image: a confidential template runs only catalog images built for a TEE", t.Spec.Image)
	}
	if t.Spec.CPUOnly != nil && !slices.Contains(supported, gpu.CPUClass) {
		errs.Addf("spec.cpuOnly", "image %s does not run without a GPU (its gpuClasses do not list %s; it supports %s)", t.Spec.Image, gpu.CPUClass, strings.Join(supported, ", "))
	}
	for i, c := range t.Spec.GPU.Classes {
		if !slices.Contains(supported, c) {
			errs.Addf(fmt.Sprintf("spec.gpu.classes[%d]", i), "image %s does not support %s (it supports %s)", t.Spec.Image, c, strings.Join(supported, ", "))
		}
	}
	return errs.Err()
}

// Validate checks the template against the schema's rules and the GPU classes.
func (t *Template) Validate(classes *gpu.Catalog) error {
	var errs fault.List
	t.validateMetadata(&errs)
	t.validateWorkloadAndImage(&errs)
	if len(t.Spec.GPU.Classes) > 0 || t.Spec.CPUOnly == nil {
		t.validateGPU(classes, &errs)
	} else if g := t.Spec.GPU; g.DefaultClass != "" || len(g.MIGProfiles) > 0 || g.Count != (Count{}) {
		errs.Addf("spec.gpu", "a CPU-only template (no GPU classes) takes no GPU settings")
	}
	t.validateCPUOnly(classes, &errs)
	c := refChecker{errs: &errs, params: t.validateParameters(&errs)}
	s := &t.Spec
	c.quantity("spec.resources.cpu", s.Resources.CPU, true)
	c.quantity("spec.resources.memory", s.Resources.Memory, true)
	c.quantity("spec.resources.ephemeralStorage", s.Resources.EphemeralStorage, false)
	c.quantity("spec.resources.sharedMemory", s.Resources.SharedMemory, false)
	t.validateEnvAndCommand(c)
	t.validatePorts(&errs)
	if s.Workload == VM {
		t.validateVM(classes, &errs, c.refs)
	} else if s.VM != nil {
		errs.Addf("spec.vm", "applies to vm workloads only")
	}
	if (s.Workload == Service || s.Workload == Notebook) && len(s.Ports) == 0 {
		errs.Addf("spec.ports", "a %s needs at least one port", s.Workload)
	}
	t.validateInteractive(&errs)
	t.validateVolumes(c)
	t.validateCheckpoints(&errs)
	t.validateEarlyStopping(&errs)
	t.validateTracking(&errs)
	t.validateLifecycle(&errs)
	t.validateScheduling(&errs)
	if errs.Len() == 0 {
		// The template must render with its own defaults, and its
		// CPU-only choice within its bounds.
		if _, err := t.resolve(classes, Choice{}, true); err != nil {
			errs.AddErr("", err)
		}
		if s.CPUOnly != nil && len(s.GPU.Classes) > 0 {
			if _, err := t.resolve(classes, Choice{CPUOnly: true}, true); err != nil {
				errs.AddErr("", err)
			}
		}
	}
	return errs.Err()
}

// validateMetadata checks apiVersion, kind and metadata.
func (t *Template) validateMetadata(errs *fault.List) {
	yamldoc.Header(errs, t.APIVersion, t.Kind, APIVersion, Kind)
	if !ValidName(t.Metadata.Name) {
		errs.Addf("metadata.name", "%q must be a lowercase DNS label (a-z, 0-9, '-'), starting with a letter, at most %d characters", clip(t.Metadata.Name), MaxNameLen)
	}
	if strings.TrimSpace(t.Metadata.Title) == "" {
		errs.Addf("metadata.title", "is required")
	}
	if len(t.Metadata.Title) > 200 || len(t.Metadata.Description) > maxDescriptionLen {
		errs.Addf("metadata", "title (200) or description (%d characters) too long", maxDescriptionLen)
	}
}

// validateWorkloadAndImage checks spec.workload and spec.image.
func (t *Template) validateWorkloadAndImage(errs *fault.List) {
	s := &t.Spec
	switch s.Workload {
	case Job, Service, Notebook, VM:
	default:
		errs.Addf("spec.workload", "%q is not one of job, service, notebook, vm", clip(s.Workload))
	}
	if s.Image == "" {
		errs.Addf("spec.image", "is required")
	} else if !imageRE.MatchString(s.Image) {
		errs.Addf("spec.image", "%q is not a catalog image (name:tag from images/, e.g. pytorch:25.01-py3)", clip(s.Image))
	}
}

// refChecker checks the {{parameter}} references and quantities of spec
// fields against the template's parameters and the builtins.
type refChecker struct {
	errs   *fault.List
	params map[string]bool
}

func (c refChecker) known(name string) bool {
	if c.params[name] {
		return true
	}
	for _, b := range Builtins {
		if b == name {
			return true
		}
	}
	return false
}

// refs checks that v references only known parameters.
func (c refChecker) refs(path, v string) {
	for _, m := range refRE.FindAllStringSubmatch(v, -1) {
		if !c.known(m[1]) {
			c.errs.Addf(path, "references unknown parameter %q", m[1])
		}
	}
}

// quantity checks that v is a positive quantity or references parameters.
func (c refChecker) quantity(path, v string, required bool) {
	if v == "" {
		if required {
			c.errs.Addf(path, "is required")
		}
		return
	}
	c.refs(path, v)
	if !refRE.MatchString(v) {
		if q, err := quantity.Parse(v); err != nil || q.Sign() <= 0 {
			c.errs.Addf(path, "%q is not a positive quantity such as 8, 500m, 64Gi", clip(v))
		}
	}
}

// validateEnvAndCommand checks spec.env, spec.command, spec.args and
// spec.workingDir.
func (t *Template) validateEnvAndCommand(c refChecker) {
	s := &t.Spec
	envSeen := map[string]bool{}
	for i, e := range s.Env {
		p := fmt.Sprintf("spec.env[%d]", i)
		if !envNameRE.MatchString(e.Name) {
			c.errs.Addf(p+".name", "%q is not a valid environment variable name", clip(e.Name))
		} else if strings.HasPrefix(e.Name, "GANTRY_") {
			c.errs.Addf(p+".name", "names starting with GANTRY_ are reserved")
		} else if SelectsDevices(e.Name) {
			// The NVIDIA container runtime reads NVIDIA_VISIBLE_DEVICES (and
			// the MIG device lists) from the image and the pod: a template's
			// value ("all") would show a pod every GPU of its node, past the
			// device plugin's allocation, the quota and the meter.
			c.errs.Addf(p+".name", "%s is reserved: the GPU runtime chooses devices by it, and a workload sees only the GPUs it was given", e.Name)
		} else if by := s.Tracking.Sets(e.Name); by != "" {
			c.errs.Addf(p+".name", "%s is set by %s: remove it here, or the tracker", e.Name, by)
		}
		if envSeen[e.Name] {
			c.errs.Addf(p+".name", "duplicate variable %q", e.Name)
		}
		envSeen[e.Name] = true
		c.refs(p+".value", e.Value)
	}
	for i, a := range s.Command {
		c.refs(fmt.Sprintf("spec.command[%d]", i), a)
	}
	for i, a := range s.Args {
		c.refs(fmt.Sprintf("spec.args[%d]", i), a)
	}
	c.refs("spec.workingDir", s.WorkingDir)
	if s.WorkingDir != "" && !strings.HasPrefix(s.WorkingDir, "/") && !refRE.MatchString(s.WorkingDir) {
		c.errs.Addf("spec.workingDir", "must be an absolute path")
	}
}

// validateInteractive checks spec.interactive: a notebook is opened by a
// person, so it must say how (its proxied port); other kinds are not.
func (t *Template) validateInteractive(errs *fault.List) {
	s := &t.Spec
	switch {
	case s.Workload == Notebook && s.Interactive == nil:
		errs.Addf("spec.interactive", "a notebook is opened in the browser through Gantry: name its port (interactive: {port: http})")
	case s.Workload != Notebook && s.Interactive != nil:
		errs.Addf("spec.interactive", "applies to notebook workloads only (a service is reached by its clients in the cluster)")
	case s.Interactive != nil && !slices.ContainsFunc(s.Ports, func(p Port) bool { return p.Name == s.Interactive.Port }):
		errs.Addf("spec.interactive.port", "%q is not one of spec.ports", clip(s.Interactive.Port))
	}
}

// InteractivePrefix is where Gantry serves interactive workloads; each one
// at BasePath, the value of {{gantry.basePath}}.
const InteractivePrefix = "/w/"

// BasePath is where workload id is served: /w/{id}/.
func BasePath(id string) string { return InteractivePrefix + id + "/" }

// InteractivePort is the port number a notebook's proxy forwards to, 0 if
// the template is not interactive.
func (s *Spec) InteractivePort() int {
	if s.Interactive == nil {
		return 0
	}
	for _, p := range s.Ports {
		if p.Name == s.Interactive.Port {
			return p.Port
		}
	}
	return 0
}

// validatePorts checks spec.ports.
func (t *Template) validatePorts(errs *fault.List) {
	portSeen := map[string]bool{}
	for i, p := range t.Spec.Ports {
		pp := fmt.Sprintf("spec.ports[%d]", i)
		if len(p.Name) > 15 || !nameRE.MatchString(p.Name) {
			errs.Addf(pp+".name", "%q must be a lowercase DNS label of at most 15 characters", clip(p.Name))
		}
		if portSeen[p.Name] {
			errs.Addf(pp+".name", "duplicate port %q", p.Name)
		}
		portSeen[p.Name] = true
		if p.Port < 1 || p.Port > 65535 {
			errs.Addf(pp+".port", "%d is not a port number (1-65535)", p.Port)
		}
	}
}

// validateVolumes checks spec.volumes.
func (t *Template) validateVolumes(c refChecker) {
	volSeen := map[string]bool{}
	for i, v := range t.Spec.Volumes {
		vp := fmt.Sprintf("spec.volumes[%d]", i)
		if len(v.Name) > 20 || !nameRE.MatchString(v.Name) {
			c.errs.Addf(vp+".name", "%q must be a lowercase DNS label of at most 20 characters", clip(v.Name))
		}
		if volSeen[v.Name] || v.Name == "dshm" {
			c.errs.Addf(vp+".name", "duplicate or reserved volume name %q", v.Name)
		}
		volSeen[v.Name] = true
		if problem := mountPathProblem(v.MountPath); problem != "" {
			c.errs.Addf(vp+".mountPath", "%q %s", clip(v.MountPath), problem)
		}
		c.quantity(vp+".size", v.Size, true)
		if v.StorageClass != "" && !nameRE.MatchString(v.StorageClass) {
			c.errs.Addf(vp+".storageClass", "%q is not a valid storage class name", clip(v.StorageClass))
		}
	}
}

// validateCheckpoints checks spec.checkpoints: a job's, on one of its
// volumes, at a relative path inside it.
func (t *Template) validateCheckpoints(errs *fault.List) {
	c := t.Spec.Checkpoints
	if c == nil {
		return
	}
	if t.Spec.Workload != Job {
		errs.Addf("spec.checkpoints", "applies to job workloads only")
	}
	if !slices.ContainsFunc(t.Spec.Volumes, func(v Volume) bool { return v.Name == c.Volume }) {
		errs.Addf("spec.checkpoints.volume", "%q is not one of spec.volumes", clip(c.Volume))
	}
	if c.Path != "" && (path.IsAbs(c.Path) || path.Clean(c.Path) != c.Path || c.Path == ".." || strings.HasPrefix(c.Path, "../") || len(c.Path) > 200) {
		errs.Addf("spec.checkpoints.path", "%q must be a clean relative path inside the volume, such as checkpoints", clip(c.Path))
	}
}

// validateEarlyStopping checks spec.earlyStopping: a job's, an action, and
// rules with exactly one kind each.
func (t *Template) validateEarlyStopping(errs *fault.List) {
	e := t.Spec.EarlyStopping
	if e == nil {
		return
	}
	if t.Spec.Workload != Job {
		errs.Addf("spec.earlyStopping", "applies to job workloads only")
	}
	if e.Action != StopRun && e.Action != AdviseRun {
		errs.Addf("spec.earlyStopping.action", "%q: want stop or advise", clip(e.Action))
	}
	if len(e.Rules) == 0 || len(e.Rules) > 10 {
		errs.Addf("spec.earlyStopping.rules", "want 1 to 10 rules")
	}
	metric := func(p, name, mode string) {
		if !metricName.MatchString(name) {
			errs.Addf(p+".metric", "%q: a metric's name is a letter or _ then up to 63 letters, digits or _ . / -", clip(name))
		}
		if mode != "" && mode != "min" && mode != "max" {
			errs.Addf(p+".mode", "%q: want min (lower is better) or max", clip(mode))
		}
	}
	for i, r := range e.Rules {
		p := fmt.Sprintf("spec.earlyStopping.rules[%d]", i)
		n := 0
		if r.Plateau != nil {
			n++
			metric(p+".plateau", r.Plateau.Metric, r.Plateau.Mode)
			if r.Plateau.Reports < 2 || r.Plateau.Reports > 1000 {
				errs.Addf(p+".plateau.reports", "%d: want 2 to 1000 reports", r.Plateau.Reports)
			}
			if r.Plateau.Delta < 0 {
				errs.Addf(p+".plateau.delta", "%v: want 0 or more", r.Plateau.Delta)
			}
		}
		if r.Target != nil {
			n++
			metric(p+".target", r.Target.Metric, r.Target.Mode)
		}
		if r.CostCap != 0 {
			n++
			if r.CostCap < 0 {
				errs.Addf(p+".costCap", "%v: want dollars above 0", r.CostCap)
			}
		}
		if r.MaxSteps != 0 {
			n++
			if r.MaxSteps < 1 {
				errs.Addf(p+".maxSteps", "%d: want 1 or more steps", r.MaxSteps)
			}
		}
		if r.Median != nil {
			n++
			metric(p+".median", r.Median.Metric, r.Median.Mode)
			if r.Median.GraceSteps < 0 {
				errs.Addf(p+".median.graceSteps", "%d: want 0 or more steps", r.Median.GraceSteps)
			}
			if r.Median.MinRuns != 0 && (r.Median.MinRuns < 1 || r.Median.MinRuns > 20) {
				errs.Addf(p+".median.minRuns", "%d: want 1 to 20 earlier runs (default %d)", r.Median.MinRuns, DefaultMedianRuns)
			}
		}
		if r.Deadline != nil {
			n++
			if d, err := time.ParseDuration(r.Deadline.Within); err != nil || d < time.Minute {
				errs.Addf(p+".deadline.within", "%q must be a duration of at least 1m, such as 8h", clip(r.Deadline.Within))
			}
			if r.Deadline.GraceReports != 0 && (r.Deadline.GraceReports < 2 || r.Deadline.GraceReports > 1000) {
				errs.Addf(p+".deadline.graceReports", "%d: want 2 to 1000 reports (default %d)", r.Deadline.GraceReports, DefaultDeadlineReports)
			}
		}
		if n != 1 {
			errs.Addf(p, "want exactly one of plateau, target, costCap, maxSteps, median and deadline")
		}
	}
}

// trackerName is a W&B project or entity, or an MLflow experiment.
var trackerName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// validateTracking checks spec.tracking: a job's, one tracker, an http(s)
// address, names a tracker and Kubernetes take.
func (t *Template) validateTracking(errs *fault.List) {
	tr := t.Spec.Tracking
	if tr == nil {
		return
	}
	if t.Spec.Workload != Job {
		errs.Addf("spec.tracking", "applies to job workloads only")
	}
	if (tr.MLflow == nil) == (tr.WandB == nil) {
		errs.Addf("spec.tracking", "want exactly one of mlflow and wandb")
	}
	address := func(p, v string, required bool) {
		if v == "" && !required {
			return
		}
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			errs.Addf(p, "%q: want an http or https address without credentials, query or fragment", clip(v))
		}
	}
	named := func(p, v string, required bool) {
		if v == "" && !required {
			return
		}
		if !trackerName.MatchString(v) {
			errs.Addf(p, "%q: want a letter or digit, then up to 127 letters, digits or _ . -", clip(v))
		}
	}
	secret := func(p, v string) {
		if v != "" && (len(v) > 253 || !nameRE.MatchString(v)) {
			errs.Addf(p, "%q is not a Secret's name", clip(v))
		}
	}
	// Credentials travel only to an https address.
	plain := func(p, v, credentials string) {
		if credentials != "" && strings.HasPrefix(strings.ToLower(v), "http://") {
			errs.Addf(p, "%q: with credentials, want an https address (the token would travel in the clear)", clip(v))
		}
	}
	if m := tr.MLflow; m != nil {
		address("spec.tracking.mlflow.uri", m.URI, true)
		plain("spec.tracking.mlflow.uri", m.URI, m.Credentials)
		named("spec.tracking.mlflow.experiment", m.Experiment, false)
		secret("spec.tracking.mlflow.credentials", m.Credentials)
	}
	if w := tr.WandB; w != nil {
		named("spec.tracking.wandb.project", w.Project, true)
		named("spec.tracking.wandb.entity", w.Entity, false)
		address("spec.tracking.wandb.baseURL", w.BaseURL, false)
		plain("spec.tracking.wandb.baseURL", w.BaseURL, w.Credentials)
		secret("spec.tracking.wandb.credentials", w.Credentials)
	}
}

// metricName is a run metric's name (package runs checks reports by it).
var metricName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_./-]{0,63}$`)

// guardedPaths are where a volume may not be mounted, nor above nor below:
// the service-account token's directory (under /var/run, which images link
// to /run, and /run itself), and the kernel's and devices' filesystems.
var guardedPaths = []string{
	"/var/run/secrets/kubernetes.io/serviceaccount",
	"/run/secrets/kubernetes.io/serviceaccount",
	"/var/run/gantry", "/run/gantry", // a run's token (render.RunTokenDir)
	"/proc", "/sys", "/dev",
}

// mountPathProblem says what is wrong with a volume's mount path, "" if nothing.
func mountPathProblem(p string) string {
	switch {
	case !strings.HasPrefix(p, "/") || path.Clean(p) != p:
		return "must be a clean absolute path (no '..', '.', '//' or trailing '/')"
	case p == "/":
		return "would hide the image's whole filesystem: mount a directory"
	}
	for _, g := range guardedPaths {
		if p == g || strings.HasPrefix(g, p+"/") || strings.HasPrefix(p, g+"/") {
			return fmt.Sprintf("overlaps %s, which a volume may not cover or enter", g)
		}
	}
	return ""
}

// validateLifecycle checks spec.lifecycle.
func (t *Template) validateLifecycle(errs *fault.List) {
	s := &t.Spec
	duration := func(path, v string) {
		if v == "" {
			return
		}
		if d, err := time.ParseDuration(v); err != nil || d < time.Minute {
			errs.Addf(path, "%q must be a duration of at least 1m, such as 30m or 24h", clip(v))
		}
	}
	duration("spec.lifecycle.maxRuntime", s.Lifecycle.MaxRuntime)
	duration("spec.lifecycle.idleTimeout", s.Lifecycle.IdleTimeout)
	if s.Lifecycle.Sleep != "" {
		if _, err := offhours.Parse(s.Lifecycle.Sleep); err != nil {
			errs.Addf("spec.lifecycle.sleep", "%v", err)
		} else if s.Workload == Job {
			errs.Addf("spec.lifecycle.sleep", "does not apply to jobs: a job stopped at night starts over")
		}
	}
	duration("spec.lifecycle.idleTimeoutMax", s.Lifecycle.IdleTimeoutMax)
	if s.Lifecycle.IdleTimeoutMax != "" {
		limit, _ := time.ParseDuration(s.Lifecycle.IdleTimeoutMax)
		idle, err := time.ParseDuration(s.Lifecycle.IdleTimeout)
		if s.Lifecycle.IdleTimeout == "" || err != nil || limit < idle {
			errs.Addf("spec.lifecycle.idleTimeoutMax", "needs spec.lifecycle.idleTimeout, and must not be shorter than it")
		}
	}
	if s.Lifecycle.IdleTimeout != "" && s.Workload == VM {
		errs.Addf("spec.lifecycle.idleTimeout", "does not apply to VMs: their GPUs are not sampled per workload")
	}
	if s.Scheduling.SpotRequeues < 0 || s.Scheduling.SpotRequeues > 20 {
		errs.Addf("spec.scheduling.spotRequeues", "must be between 0 (the default, %d) and 20", DefaultSpotRequeues)
	} else if s.Scheduling.SpotRequeues > 0 && (!s.Scheduling.Spot || s.Workload != Job) {
		errs.Addf("spec.scheduling.spotRequeues", "applies to jobs with spot: true")
	}
	if f := s.Scheduling.Flexible; f != nil {
		t.validateFlexible(errs, *f)
	}
	if s.Lifecycle.Retries < 0 || s.Lifecycle.Retries > 10 {
		errs.Addf("spec.lifecycle.retries", "must be between 0 and 10")
	}
	if s.Lifecycle.Retries > 0 && s.Workload != Job {
		errs.Addf("spec.lifecycle.retries", "applies to jobs only")
	}
}

// validateFlexible checks spec.scheduling.flexible.
func (t *Template) validateFlexible(errs *fault.List, f Flexible) {
	s := &t.Spec
	if s.Workload != Job {
		errs.Addf("spec.scheduling.flexible", "applies to jobs only: a notebook or service is waited for by a person")
	}
	if d, err := time.ParseDuration(f.MaxDelay); err != nil || d < time.Minute || d > MaxFlexibleDelay {
		errs.Addf("spec.scheduling.flexible.maxDelay", "%q must be a duration from 1m to 168h, such as 8h", clip(f.MaxDelay))
	}
	if f.ExpectedRuntime == "" {
		return
	}
	d, err := time.ParseDuration(f.ExpectedRuntime)
	if err != nil || d < time.Minute {
		errs.Addf("spec.scheduling.flexible.expectedRuntime", "%q must be a duration of at least 1m, such as 2h", clip(f.ExpectedRuntime))
		return
	}
	if limit, err := time.ParseDuration(s.Lifecycle.MaxRuntime); err == nil && d > limit {
		errs.Addf("spec.scheduling.flexible.expectedRuntime", "%s is longer than spec.lifecycle.maxRuntime (%s)", f.ExpectedRuntime, s.Lifecycle.MaxRuntime)
	}
}

// validateScheduling checks spec.scheduling and spec.costCenter.
func (t *Template) validateScheduling(errs *fault.List) {
	s := &t.Spec
	if p := s.Scheduling.Priority; p != "" && !slices.Contains(Priorities, p) {
		errs.Addf("spec.scheduling.priority", "%q is not one of %s", clip(p), strings.Join(Priorities, ", "))
	}
	if !labelValRE.MatchString(s.CostCenter) {
		errs.Addf("spec.costCenter", "%q must be a valid label value (letters, digits, '-', '_', '.'; at most 63)", clip(s.CostCenter))
	}
}

func (t *Template) validateGPU(classes *gpu.Catalog, errs *fault.List) {
	g := &t.Spec.GPU
	if len(g.Classes) == 0 {
		errs.Addf("spec.gpu.classes", "at least one GPU class is required (known: %s)", strings.Join(classes.Names(), ", "))
	}
	for i, c := range g.Classes {
		if _, ok := classes.Get(c); !ok {
			errs.Addf(fmt.Sprintf("spec.gpu.classes[%d]", i), "unknown GPU class %q (known: %s)", clip(c), strings.Join(classes.Names(), ", "))
		}
	}
	if !slices.Contains(g.Classes, g.DefaultClass) {
		errs.Addf("spec.gpu.defaultClass", "%q is not one of the allowed classes %s", clip(g.DefaultClass), strings.Join(g.Classes, ", "))
	}
	for i, p := range g.MIGProfiles {
		supported := false
		for _, c := range g.Classes {
			if cl, ok := classes.Get(c); ok {
				if _, ok := cl.Profile(p); ok {
					supported = true
				}
			}
		}
		if !supported {
			errs.Addf(fmt.Sprintf("spec.gpu.migProfiles[%d]", i), "MIG profile %q is not supported by any allowed class", clip(p))
		}
	}
	if g.DefaultMIGProfile != "" && !slices.Contains(g.MIGProfiles, g.DefaultMIGProfile) {
		errs.Addf("spec.gpu.defaultMigProfile", "%q is not one of the allowed MIG profiles %s", clip(g.DefaultMIGProfile), strings.Join(g.MIGProfiles, ", "))
	}
	c := g.Count
	if c.Min < 1 {
		errs.Addf("spec.gpu.count.min", "must be at least 1")
	}
	if c.Max < c.Min || c.Max > 64 {
		errs.Addf("spec.gpu.count.max", "must be between min (%d) and 64", c.Min)
	}
	if c.Default < c.Min || c.Default > c.Max {
		errs.Addf("spec.gpu.count.default", "must be between min (%d) and max (%d)", c.Min, c.Max)
	}
}

// validateCPUOnly checks spec.cpuOnly: bounds that are quantities, the GPU
// classes' cpu section to run on, and a workload that can run without a GPU.
func (t *Template) validateCPUOnly(classes *gpu.Catalog, errs *fault.List) {
	c := t.Spec.CPUOnly
	if c == nil {
		return
	}
	if _, ok := classes.CPU(); !ok {
		errs.Addf("spec.cpuOnly", "the GPU classes have no cpu section: CPU-only launches have nowhere to run")
	}
	for _, b := range []struct{ path, v string }{{"spec.cpuOnly.maxCPU", c.MaxCPU}, {"spec.cpuOnly.maxMemory", c.MaxMemory}} {
		if q, err := quantity.Parse(b.v); err != nil || q.Sign() <= 0 {
			errs.Addf(b.path, "%q is not a positive quantity such as 8, 500m, 64Gi", clip(b.v))
		}
	}
	if t.Spec.Workload == VM {
		errs.Addf("spec.cpuOnly", "a vm passes GPUs through: it has no CPU-only choice")
	}
	if t.Spec.Confidential {
		errs.Addf("spec.cpuOnly", "a confidential template runs on confidential GPUs: it has no CPU-only choice")
	}
	if c.Default && len(t.Spec.GPU.Classes) == 0 {
		errs.Addf("spec.cpuOnly.default", "a template without GPU classes is CPU-only already")
	}
}

func (t *Template) validateParameters(errs *fault.List) map[string]bool {
	names := map[string]bool{}
	if len(t.Spec.Parameters) > MaxParameters {
		errs.Addf("spec.parameters", "at most %d parameters", MaxParameters)
	}
	for i, p := range t.Spec.Parameters {
		pp := fmt.Sprintf("spec.parameters[%d]", i)
		if !paramNameRE.MatchString(p.Name) {
			errs.Addf(pp+".name", "%q must start with a letter and contain only letters, digits and '_'", clip(p.Name))
		}
		if names[p.Name] {
			errs.Addf(pp+".name", "duplicate parameter %q", p.Name)
		}
		names[p.Name] = true
		switch p.Type {
		case TypeString, TypeInt, TypeBool, TypeEnum:
		default:
			errs.Addf(pp+".type", "%q is not one of string, int, bool, enum", clip(p.Type))
			continue
		}
		if (p.Min != nil || p.Max != nil) && p.Type != TypeInt {
			errs.Addf(pp, "min and max apply to int parameters only")
		}
		if p.Min != nil && p.Max != nil && *p.Min > *p.Max {
			errs.Addf(pp+".max", "must not be less than min")
		}
		badPattern := false
		if p.Pattern != "" {
			if p.Type != TypeString {
				errs.Addf(pp+".pattern", "applies to string parameters only")
			} else if _, err := pattern(p.Pattern); err != nil {
				errs.Addf(pp+".pattern", "%v", err)
				badPattern = true
			}
		}
		if p.Type == TypeEnum && len(p.Values) == 0 {
			errs.Addf(pp+".values", "an enum needs at least one value")
		}
		if p.Type != TypeEnum && len(p.Values) > 0 {
			errs.Addf(pp+".values", "applies to enum parameters only")
		}
		if p.Default == nil && !p.Required {
			errs.Addf(pp+".default", "a parameter needs a default unless it is required")
		}
		if p.Default != nil && !badPattern { // a pattern that does not compile is reported once, above
			if _, err := p.Value(p.Default); err != nil {
				errs.Addf(pp+".default", "%v", err)
			}
		}
	}
	return names
}

// pattern compiles a parameter pattern so that it must match the whole value.
func pattern(p string) (*regexp.Regexp, error) {
	if re, ok := patterns.Load(p); ok {
		return re.(*regexp.Regexp), nil
	}
	if _, err := regexp.Compile(p); err != nil {
		return nil, fmt.Errorf("invalid regular expression: %v", err)
	}
	re, err := regexp.Compile(`^(?:` + p + `)$`)
	if err == nil && patternCount.Add(1) <= maxCachedPatterns {
		patterns.Store(p, re)
	}
	return re, err
}

// patterns caches compiled parameter patterns: every launch checks its
// values against them, and compiling was the largest allocation of a launch.
// Only valid patterns are cached, at most maxCachedPatterns of them.
var (
	patterns     sync.Map
	patternCount atomic.Int64
)

const maxCachedPatterns = 4096

// Value checks v (a JSON or YAML value, or a string from a command line) against
// the parameter's type and bounds and returns its string form.
func (p *Parameter) Value(v any) (string, error) {
	switch p.Type {
	case TypeInt:
		var i int64
		switch x := v.(type) {
		case int64:
			i = x
		case int:
			i = int64(x)
		case float64:
			if x != float64(int64(x)) {
				return "", fmt.Errorf("%v is not an integer", x)
			}
			i = int64(x)
		case json.Number:
			n, err := x.Int64()
			if err != nil {
				return "", fmt.Errorf("%q is not an integer", clip(string(x)))
			}
			i = n
		case string:
			var err error
			if _, err = fmt.Sscan(x, &i); err != nil || fmt.Sprint(i) != x {
				return "", fmt.Errorf("%q is not an integer", clip(x))
			}
		default:
			return "", fmt.Errorf("expected an integer")
		}
		if p.Min != nil && i < *p.Min {
			return "", fmt.Errorf("%d is less than the minimum %d", i, *p.Min)
		}
		if p.Max != nil && i > *p.Max {
			return "", fmt.Errorf("%d is more than the maximum %d", i, *p.Max)
		}
		return fmt.Sprint(i), nil
	case TypeBool:
		switch x := v.(type) {
		case bool:
			return fmt.Sprint(x), nil
		case string:
			if x == "true" || x == "false" {
				return x, nil
			}
		}
		return "", fmt.Errorf("expected true or false")
	case TypeString, TypeEnum:
		s, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("expected a string")
		}
		if len(s) > MaxParamValueLen {
			return "", fmt.Errorf("value is longer than %d bytes", MaxParamValueLen)
		}
		if strings.ContainsRune(s, 0) || refRE.MatchString(s) {
			return "", fmt.Errorf("value may not contain NUL bytes or {{...}} references")
		}
		if p.Type == TypeEnum {
			if !slices.Contains(p.Values, s) {
				return "", fmt.Errorf("%q is not one of %s", clip(s), strings.Join(p.Values, ", "))
			}
			return s, nil
		}
		if p.Pattern != "" {
			re, err := pattern(p.Pattern)
			if err != nil {
				return "", err
			}
			if !re.MatchString(s) {
				return "", fmt.Errorf("%q does not match the pattern %s", clip(s), p.Pattern)
			}
		}
		return s, nil
	}
	return "", fmt.Errorf("unknown parameter type %q", p.Type)
}

// clip shortens a value quoted back in an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:61] + "..."
	}
	return s
}
