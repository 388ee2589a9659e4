// Package devcluster owns the local Kubernetes cluster that the integration tests
// and `gantry dev` run against: a real etcd, kube-apiserver, kube-controller-manager
// and kube-scheduler built from source (deploy/cluster/build.sh, cached by version),
// kwok simulating nodes and pod lifecycles, and a simulated GPU fleet with the
// labels, taints and resources GPU Feature Discovery and the NVIDIA device plugin
// would publish, and Kueue (deploy/kueue/build.sh) admitting workloads against
// quotas. Everything listens on loopback. Asked for, a real node (a kubelet on
// containerd, realnode.go) runs containers beside the simulated fleet.
package devcluster

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/gantryhq/gantry/deploy"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/nodegroup"
	"github.com/gantryhq/gantry/internal/quota"
)

//go:embed stages.yaml
var stages []byte

// Options configure a cluster.
type Options struct {
	Name    string    // kwokctl cluster name
	Root    string    // repository root, where deploy/cluster lives
	WorkDir string    // kwokctl's working directory; a temporary one when empty
	Log     io.Writer // progress and tool output; discarded when nil
	Fleet   []NodeSpec
	// KueueTransformations are the resource transformations Kueue counts
	// quota with (a MIG slice as its share of a GPU).
	KueueTransformations []KueueTransformation
	// Audit has the API server write an audit log of every request (at the
	// Metadata level) to AuditLog: who did what to which resource.
	Audit bool
	// Ephemeral clusters (the tests', gantry dev's) run etcd without fsync:
	// a disk that stalls for seconds (seen on CI machines: "slow fdatasync
	// took 4.5s") then slows nothing, and the cluster's data is thrown away
	// when it stops anyway.
	Ephemeral bool
	// NodeGroups, when set, are scaled by Karpenter (the on-demand and spot
	// groups), and the reserved groups' machines replace the Fleet's specs
	// of the same group (reservedFleet).
	NodeGroups []nodegroup.Group
	// BootScale multiplies the groups' boot times (0: 1, as declared).
	BootScale float64
	// WaitForPodsReady, when set, has Kueue admit all-or-nothing: an
	// admitted workload whose pods are not all Ready within it gives its
	// quota back and is queued again (Kueue's waitForPodsReady).
	WaitForPodsReady time.Duration
	// KueueLogLevel is Kueue's log verbosity (0: info; 2 logs each
	// Workload's events and why one was not queued, for a test whose
	// failures need Kueue's side: KueueLog).
	KueueLogLevel int
	// KueueCountsCPU has Kueue count pods' CPU, so that the teams'
	// quota.cores hold (Gantry's queues cover CPU either way). Off, Kueue
	// excludes cpu, as releases before quota.cores (18b6337) need it to.
	KueueCountsCPU bool
	// MultiKueueDispatcher, when set, makes the cluster a MultiKueue
	// manager whose Workloads wait for that external dispatcher's
	// nominations (Gantry's: dispatch.Dispatcher).
	MultiKueueDispatcher string
	// JobRuntime is how long a Job's pod runs before it completes, unless
	// its pod-complete.stage.kwok.x-k8s.io/delay annotation says (0: 1 s):
	// a worker cluster's, whose Jobs MultiKueue copies as they are.
	JobRuntime time.Duration
	// RealNode starts the real node beside the simulated fleet (realnode.go)
	// where the machine can run it; where it cannot, the cluster comes up
	// without it and RealNode says why.
	RealNode bool
}

// Cluster is a running local cluster.
type Cluster struct {
	Name         string
	Kubeconfig   string
	Bin          string
	workDir      string
	ownWorkDir   bool
	log          io.Writer
	config       *rest.Config
	Client       kubernetes.Interface
	volumesDir   string // where the volume provisioner makes volumes
	stopVolumes  func() // ends the volume provisioner and waits for it
	kueue        *process
	kueueLog     string
	kueueOptions Options // what Kueue started with, to start it again (Outage)
	karpenter    *process
	karpenterLog string
	realNode     *realNode
	realNodeWhy  error // why the real node asked for did not start
}

// AuditLog is the API server's audit log (JSON lines, audit.k8s.io/v1
// Events); it exists only when the cluster started with Options.Audit.
func (c *Cluster) AuditLog() string {
	return filepath.Join(c.workDir, "clusters", c.Name, "logs", "audit.log")
}

// Config is the client configuration for the cluster.
func (c *Cluster) Config() *rest.Config { return rest.CopyConfig(c.config) }

// Build builds (first time) or finds the control plane binaries and returns
// their directory.
func Build(ctx context.Context, root string, log io.Writer) (string, error) {
	return runBuild(ctx, root, "deploy/cluster/build.sh", "the cluster binaries", log)
}

// Helm builds (first time) or finds Helm (deploy/helm/build.sh) and returns
// the binary's path.
func Helm(ctx context.Context, root string, log io.Writer) (string, error) {
	return runBuild(ctx, root, "deploy/helm/build.sh", "Helm", log)
}

// runBuild runs one of the repository's cached build scripts and returns what
// it prints: where the result is.
func runBuild(ctx context.Context, root, script, what string, log io.Writer) (string, error) {
	if log == nil {
		log = io.Discard
	}
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, filepath.FromSlash(script)))
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build %s (%s): %w", what, script, err)
	}
	return strings.TrimSpace(out.String()), nil
}

// Start creates and starts a cluster, its GPU fleet and what rendered workloads
// need (PriorityClasses, a default StorageClass whose claims get volumes made
// for them), and waits
// until every node is Ready.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Name == "" {
		o.Name = "gantry"
	}
	if o.Fleet == nil {
		o.Fleet = Fleet
	}
	classes, err := gpu.LoadFile(filepath.Join(o.Root, "templates", "gpu-classes.yaml"))
	if err != nil {
		return nil, err
	}
	if o.KueueTransformations == nil {
		// A MIG slice counts as its share of a GPU, from the GPU classes
		// Gantry serves (package quota).
		for _, t := range quota.Transformations(classes) {
			o.KueueTransformations = append(o.KueueTransformations, KueueTransformation{Input: t.Input, Output: quota.GPUMilli, Milli: t.Milli})
		}
	}
	if len(o.NodeGroups) > 0 {
		o.Fleet = withReserved(o.Fleet, o.NodeGroups, classes)
	}
	bin, err := Build(ctx, o.Root, o.Log)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Name: o.Name, Bin: bin, workDir: o.WorkDir, log: o.Log}
	if c.workDir == "" {
		if c.workDir, err = os.MkdirTemp("", "gantry-kwok-"); err != nil {
			return nil, err
		}
		c.ownWorkDir = true
	}
	c.Kubeconfig = filepath.Join(c.workDir, "kubeconfig")
	cfgFile := filepath.Join(c.workDir, "kwokctl.yaml")
	logFile := filepath.Join(c.workDir, "container.log")
	if err := os.WriteFile(logFile, []byte(containerLog), 0o644); err != nil {
		return nil, err
	}
	appFile := filepath.Join(c.workDir, "simulated-app.py")
	if _, err := exec.LookPath("python3"); err != nil {
		fmt.Fprintln(o.Log, "cluster: no python3: the simulated pods' ports answer no port-forward (a notebook on a worker cluster will not open)")
		appFile = ""
	} else if err := os.WriteFile(appFile, []byte(simulatedApp), 0o644); err != nil {
		return nil, err
	}
	var auditPolicy string
	if o.Audit {
		auditPolicy = filepath.Join(c.workDir, "audit-policy.yaml")
		if err := os.WriteFile(auditPolicy, []byte(auditPolicyMetadata), 0o644); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(cfgFile, kwokctlConfig(bin, logFile, appFile, auditPolicy, filepath.Join(c.workDir, "clusters", o.Name, "pki"), o.Ephemeral, o.JobRuntime), 0o600); err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Log, "cluster: starting %q (kwokctl, binary runtime, loopback)\n", o.Name)
	if err := c.create(ctx, cfgFile); err != nil {
		c.Stop(context.Background())
		return nil, fmt.Errorf("start the local cluster: %w", err)
	}
	if c.config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		c.Stop(context.Background())
		return nil, err
	}
	c.config.QPS, c.config.Burst = 200, 400
	if c.Client, err = kubernetes.NewForConfig(c.config); err != nil {
		c.Stop(context.Background())
		return nil, err
	}
	if err := c.provision(ctx, o); err != nil {
		err = fmt.Errorf("%w%s", err, c.componentLogs())
		c.Stop(context.Background())
		return nil, err
	}
	if err := c.startKueue(ctx, o); err != nil {
		c.Stop(context.Background())
		return nil, err
	}
	if err := c.startKarpenter(ctx, o, classes); err != nil {
		c.Stop(context.Background())
		return nil, err
	}
	if o.RealNode {
		if err := c.startRealNode(ctx, o, classes); err != nil {
			c.realNodeWhy = fmt.Errorf("no real node: %w", err)
			line, _, _ := strings.Cut(err.Error(), "\n")
			fmt.Fprintf(o.Log, "cluster: no real node, the simulated fleet only: %s\n", line)
		}
	}
	return c, nil
}

// create has kwokctl create the cluster, its turn taken (lockCreate): it
// returns once every component listens on its port.
func (c *Cluster) create(ctx context.Context, cfgFile string) error {
	unlock, err := lockCreate(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	if err := c.kwokctl(ctx, "create", "cluster", "--config", cfgFile, "--kubeconfig", c.Kubeconfig, "--wait", "2m"); err != nil {
		return err
	}
	if err := c.waitListening(ctx); err != nil {
		return fmt.Errorf("%w%s", err, c.componentLogs())
	}
	return nil
}

// DeadComponents are the control plane's components (kwokctl's processes)
// that have stopped running, each with the end of its log: for a failed
// test's report. None while the cluster runs as it should.
func (c *Cluster) DeadComponents() map[string]string {
	dir := filepath.Join(c.workDir, "clusters", c.Name)
	pids, _ := filepath.Glob(filepath.Join(dir, "pids", "*.pid"))
	dead := map[string]string{}
	for _, f := range pids {
		name := strings.TrimSuffix(filepath.Base(f), ".pid")
		data, err := os.ReadFile(f)
		if err != nil {
			continue // removed meanwhile: stopped on purpose
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil || c.componentAlive(pid) {
			continue
		}
		log, _ := os.ReadFile(filepath.Join(dir, "logs", name+".log"))
		if len(log) > 600 {
			log = log[len(log)-600:]
		}
		dead[name] = string(log)
	}
	return dead
}

// componentAlive: process pid runs (not a zombie) and is one of this
// cluster's components (its command line names the cluster's directory,
// as .ci/test's cleanup finds them), not a process that took the pid of
// one that ended.
func (c *Cluster) componentAlive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command's name in parentheses, which may
	// itself hold spaces and parentheses.
	if i := bytes.LastIndexByte(stat, ')'); i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' || stat[i+2] == 'X' {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && bytes.Contains(cmdline, []byte("/clusters/"+c.Name+"/"))
}

// componentLogs returns the end of the API server's and etcd's logs, to say why
// a cluster failed.
func (c *Cluster) componentLogs() string {
	var b strings.Builder
	for _, name := range []string{"kube-apiserver", "etcd"} {
		data, err := os.ReadFile(filepath.Join(c.workDir, "clusters", c.Name, "logs", name+".log"))
		if err != nil {
			continue
		}
		if len(data) > 1500 {
			data = data[len(data)-1500:]
		}
		fmt.Fprintf(&b, "\n--- end of %s.log:\n%s", name, data)
	}
	return b.String()
}

// kwokctlConfig points kwokctl at the locally built binaries, keeps every
// component on loopback, turns on admission (Pod Security) and authorization,
// lifts the components' client QPS limits (with them, a batch of 100 launches
// waits ~15 s on the controller manager's 20 requests a second), runs the one
// scheduler and controller manager without leader election (with it, an etcd
// write that stalls past the lease's renewal deadline made them exit, and every
// later launch stayed Pending), and adds the Stages. An ephemeral cluster's
// etcd does not fsync. kwok manages only the nodes annotated
// kwok.x-k8s.io/node=fake (kwokctl's binary runtime would have it manage
// every node, the real node's too), and the API server reaches a kubelet at
// its InternalIP first (the real node's; kwok's nodes have only a Hostname,
// kwok's own address) presenting the cluster's admin certificate (pki: the
// cluster's kwokctl PKI directory), which the real node's kubelet checks.
func kwokctlConfig(bin, logFile, appFile, auditPolicy, pki string, ephemeral bool, jobRuntime time.Duration) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  runtime: binary
  bindAddress: 127.0.0.1
  kubeAdmission: true
  kubeAuthorization: true
  disableQPSLimits: true
  etcdBinary: %[1]s/etcd
  kubeApiserverBinary: %[1]s/kube-apiserver
  kubeControllerManagerBinary: %[1]s/kube-controller-manager
  kubeSchedulerBinary: %[1]s/kube-scheduler
  kwokControllerBinary: %[1]s/kwok
  kubectlBinary: %[1]s/kubectl
  kubeVersion: v1.37.2
  kubeAuditPolicy: "%[2]s"
componentsPatches:
- name: kube-apiserver
  extraArgs:
  # Room for thousands of Services (the default /24 fills after ~250 launches).
  - key: service-cluster-ip-range
    value: 10.96.0.0/16
  - key: kubelet-preferred-address-types
    value: InternalIP,Hostname
  - key: kubelet-client-certificate
    value: "%[3]s/admin.crt"
  - key: kubelet-client-key
    value: "%[3]s/admin.key"
- name: kwok-controller
  extraArgs:
  - key: manage-all-nodes
    value: "false"
  - key: manage-nodes-with-annotation-selector
    value: kwok.x-k8s.io/node=fake
  # The kubelet's node lease, 40 s renewed every 10 s, instead of kwokctl's
  # five times that: a kwok started again (Outage) has a new identity and
  # takes a node over only once the lease its last run held has expired;
  # with 200 s leases the nodes ran no pod for up to 150 s after the
  # control plane was back.
  - key: node-lease-duration-seconds
    value: "40"
- name: kube-scheduler
  extraArgs:
  - key: leader-elect
    value: "false"
- name: kube-controller-manager
  extraArgs:
  - key: leader-elect
    value: "false"
`, bin, auditPolicy, pki)
	if ephemeral {
		b.WriteString(`- name: etcd
  extraArgs:
  - key: unsafe-no-fsync
    value: "true"
`)
	}
	b.WriteString("---\n")
	st := stages
	if jobRuntime > 0 {
		st = bytes.Replace(st, []byte("durationMilliseconds: 1000\n    durationFrom:\n      expressionFrom: '.metadata.annotations[\"pod-complete"),
			fmt.Appendf(nil, "durationMilliseconds: %d\n    durationFrom:\n      expressionFrom: '.metadata.annotations[\"pod-complete", jobRuntime.Milliseconds()), 1)
	}
	b.Write(st)
	// Every simulated container "prints" the same log, served through the real
	// pods/log API (kwok answers for the kubelet).
	fmt.Fprintf(&b, `
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata:
  name: gantry-simulated-logs
spec:
  logs:
  - logsFile: %s
    follow: true
`, logFile)
	// Every simulated container's ports answer a port-forward (the way
	// Gantry reaches a notebook on a worker cluster) with a stand-in app
	// that says what it was asked: one request per connection.
	if appFile == "" {
		return b.Bytes()
	}
	fmt.Fprintf(&b, `
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterPortForward
metadata:
  name: gantry-simulated-app
spec:
  forwards:
  - command: [python3, %q]
`, appFile)
	return b.Bytes()
}

// simulatedApp answers one HTTP request on its standard input with what it
// was asked (the simulated containers' ports, through kwok's port-forward).
const simulatedApp = `import json, sys
r, w = sys.stdin.buffer, sys.stdout.buffer
line = r.readline().decode("latin-1").strip()
headers = {}
while True:
    h = r.readline().decode("latin-1")
    if h in ("", "\r\n", "\n"):
        break
    k, _, v = h.partition(":")
    headers[k.strip().lower()] = v.strip()
body = json.dumps({"app": "simulated", "request": line, "forwardedPrefix": headers.get("x-forwarded-prefix", "")}).encode()
w.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
w.flush()
`

// auditPolicyMetadata records who did what to which resource, for every
// request once it is answered (no bodies).
const auditPolicyMetadata = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
`

// containerLog is what every simulated container logs, in the CRI log format
// the kubelet (here kwok) reads.
const containerLog = `2026-01-01T00:00:00.000000000Z stdout F simulated container: started on a kwok node
2026-01-01T00:00:01.000000000Z stdout F simulated container: loading model weights
2026-01-01T00:00:02.000000000Z stdout F simulated container: ready
`

func (c *Cluster) kwokctl(ctx context.Context, args ...string) error {
	args = append([]string{"--name", c.Name}, args...)
	cmd := exec.CommandContext(ctx, filepath.Join(c.Bin, "kwokctl"), args...)
	cmd.Env = append(os.Environ(), "KWOK_WORKDIR="+c.workDir)
	var out bytes.Buffer
	cmd.Stdout = io.MultiWriter(c.log, &out)
	cmd.Stderr = io.MultiWriter(c.log, &out)
	if err := cmd.Run(); err != nil {
		tail := out.String()
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		return fmt.Errorf("kwokctl %s: %w\n%s", strings.Join(args, " "), err, tail)
	}
	return nil
}

// Outage stops the cluster's control plane — its API server, etcd, the
// controllers and kwok (kwokctl stop cluster) — until restore starts it
// again: what an API server outage is to a client. restore returns once
// the API server answers, every component has run for 15 s (one that exited
// at its start is started again, as a kubelet restarts a static pod: the
// controller manager exits when the API server is not healthy within 10 s,
// which after an outage on a loaded machine it may not be), every node is
// Ready again and its lease renewed
// since (kwok, restarted too, runs pods again: until its previous run's
// leases expired it ran none, which with kwokctl's 200 s leases stalled
// every pod for up to 150 s after the outage), and Kueue and the volume
// provisioner have started afresh. They are restarted because that is what
// an outage does to them in a real cluster: there they run with leader
// election, lose their lease within seconds of the API server going away,
// exit, and are started again (kept running, their informers came back one
// by one up to 90 s after the API server, on client-go's backoff). For
// fault-injection tests on a cluster of their own.
//
// The machine's cluster-creation lock (lockCreate) is held from the stop
// until every component runs and listens on its port again: kwokctl gives a new
// cluster the first ports it can bind, so a cluster created meanwhile
// (another test package's) would take the stopped one's ports, and its
// components could not start again (seen in CI: connection refused for
// minutes after the restart). Creations elsewhere wait out the outage
// instead.
func (c *Cluster) Outage(ctx context.Context) (restore func(context.Context) error, err error) {
	unlock, err := lockCreate(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.kwokctl(ctx, "stop", "cluster"); err != nil {
		unlock()
		return nil, err
	}
	var once sync.Once
	return func(ctx context.Context) error {
		defer once.Do(unlock)
		// A lease's renewal time is its holder's clock (kwok's, the
		// kubelet's), which is this machine's; a second's margin for a
		// renewal stamped as the start began.
		started := time.Now().Add(-time.Second) //clock:allow compared with lease times kwok and the kubelet stamp on this machine
		if err := c.kwokctl(ctx, "start", "cluster"); err != nil {
			return err
		}
		for {
			if _, err := c.Client.Discovery().ServerVersion(); err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("the API server did not answer after the outage: %w", ctx.Err())
			case <-time.After(200 * time.Millisecond):
			}
		}
		// Held until every component runs and listens again, as at
		// creation: the API server can answer before the others bind
		// their ports (kwok's was often still free here), and a cluster
		// created in between takes a free one (its kwokctl counts down
		// past bound ports only), so that our component cannot start.
		if err := c.waitListening(ctx); err != nil {
			return fmt.Errorf("after the outage: %w", err)
		}
		nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("after the outage: %w", err)
		}
		if err := c.waitReady(ctx, len(nodes.Items)); err != nil {
			return fmt.Errorf("after the outage: %w", err)
		}
		if err := c.waitLeasesRenewed(ctx, started); err != nil {
			return fmt.Errorf("after the outage: %w", err)
		}
		if err := c.keepComponents(ctx); err != nil {
			return fmt.Errorf("after the outage: %w", err)
		}
		once.Do(unlock)
		// The volume provisioner starts afresh too, as a real one (run
		// with leader election) would: kept running, its informers came
		// back on client-go's backoff, and claims made after the outage
		// stayed unbound for up to a minute.
		if c.stopVolumes != nil {
			c.stopVolumes()
			c.startVolumes()
		}
		if c.kueueLog == "" {
			return nil // no Kueue on this cluster
		}
		c.kueue.stop()
		c.kueue = nil
		if err := c.startKueue(ctx, c.kueueOptions); err != nil {
			return fmt.Errorf("after the outage: %w", err)
		}
		return nil
	}, nil
}

// componentSettle is how long a restarted component must have run to count
// as started: past the controller manager's 10 s wait for a healthy API
// server, after which it exits.
const componentSettle = 15 * time.Second

// keepComponents waits until every component of the control plane has run
// for componentSettle, starting again (kwokctl start: it starts only what
// does not run) any that exited meanwhile — as a kubelet restarts a static
// pod. After an outage, on a loaded machine, the API server can take longer
// than the controller manager's 10 s wait to be healthy, and it exits
// ("healthz check failed"): then no Job makes a pod and no claim binds (CI
// at 10fe62b, shown by DeadComponents). At most three restarts.
func (c *Cluster) keepComponents(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	restarts := 0
	for {
		dead := c.DeadComponents()
		if len(dead) > 0 {
			names := slices.Sorted(maps.Keys(dead))
			if restarts == 3 {
				return fmt.Errorf("components %v exited after 3 restarts; the last: %q", names, dead[names[0]])
			}
			restarts++
			fmt.Fprintf(c.log, "cluster: %v exited after the restart; starting them again\n", names)
			// kwokctl takes a component whose pid file names a process that
			// answers a signal as running — a zombie does, where nothing
			// reaps the orphans kwokctl leaves (a container's first process
			// often does not) — so the dead ones' pid files go first.
			for _, name := range names {
				if err := os.Remove(filepath.Join(c.workDir, "clusters", c.Name, "pids", name+".pid")); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return err
				}
			}
			if err := c.kwokctl(ctx, "start", "cluster"); err != nil {
				return err
			}
			if err := c.waitListening(ctx); err != nil {
				return err
			}
			continue
		}
		young, err := c.youngestComponent()
		if err != nil {
			return err
		}
		if young >= componentSettle {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the components did not stay up %v: %w", componentSettle, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// youngestComponent is how long the most recently started component has
// run (its pid file is written as kwokctl starts it).
func (c *Cluster) youngestComponent() (time.Duration, error) {
	pids, err := filepath.Glob(filepath.Join(c.workDir, "clusters", c.Name, "pids", "*.pid"))
	if err != nil || len(pids) == 0 {
		return 0, fmt.Errorf("the components' pid files: %v (%d found)", err, len(pids))
	}
	young := time.Duration(math.MaxInt64)
	for _, f := range pids {
		st, err := os.Stat(f)
		if err != nil {
			return 0, err
		}
		young = min(young, time.Since(st.ModTime())) //clock:allow compared with the pid files' times this machine stamps
	}
	return young, nil
}

// startVolumes starts the volume provisioner (provision) until
// stopVolumes.
func (c *Cluster) startVolumes() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); provision(ctx, c.Client, c.volumesDir, c.log) }()
	c.stopVolumes = func() { cancel(); <-done }
}

// Stop deletes the cluster (kwokctl stops the apiserver before etcd) and its
// working directory.
func (c *Cluster) Stop(ctx context.Context) error {
	if c.stopVolumes != nil {
		c.stopVolumes()
	}
	c.realNode.stop()
	c.karpenter.stop()
	c.kueue.stop()
	err := c.kwokctl(ctx, "delete", "cluster")
	if c.ownWorkDir {
		os.RemoveAll(c.workDir)
	}
	return err
}

func (c *Cluster) provision(ctx context.Context, o Options) error {
	cs := c.Client
	for _, pcs := range [][]byte{deploy.PriorityClasses, deploy.WarmPriorityClass, deploy.ServerPriorityClass} {
		if err := createAll(ctx, pcs, "priority class", cs.SchedulingV1().PriorityClasses().Create); err != nil {
			return err
		}
	}
	if err := createAll(ctx, deploy.RuntimeClasses, "runtime class", cs.NodeV1().RuntimeClasses().Create); err != nil {
		return err
	}
	if err := c.installCRDs(ctx, deploy.KubeVirtCRDs); err != nil {
		return fmt.Errorf("KubeVirt CRDs: %w", err)
	}
	// Every cluster may be a fleet's manager or worker: MultiKueue reaches
	// no worker without the FleetVM CRD (it watches FleetVMs there).
	if err := c.installCRDs(ctx, deploy.FleetVMCRD); err != nil {
		return fmt.Errorf("the FleetVM CRD: %w", err)
	}
	sc := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: "standard", Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}},
		Provisioner:       Provisioner,
		VolumeBindingMode: ptr(storagev1.VolumeBindingImmediate),
	}
	if _, err := cs.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create storage class: %w", err)
	}
	volumes := filepath.Join(c.workDir, "volumes") // in the cluster's private directory
	if err := os.MkdirAll(volumes, 0o700); err != nil {
		return err
	}
	c.volumesDir = volumes
	c.startVolumes()
	nodes := Nodes(o.Fleet)
	for _, n := range nodes {
		if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create node %s: %w", n.Name, err)
		}
	}
	fmt.Fprintf(o.Log, "cluster: %d GPU nodes created, waiting until they are Ready\n", len(nodes))
	return c.waitReady(ctx, len(nodes))
}

// waitReady waits until n nodes are Ready with their GPU resources allocatable
// and without the not-ready taint (pods created before would fail to schedule).
// AddNodes adds simulated nodes to a running cluster and waits until they
// (and every node before them) are Ready, so that nothing scheduled next
// meets a node still tainted not-ready.
func (c *Cluster) AddNodes(ctx context.Context, specs []NodeSpec) error {
	for _, n := range Nodes(specs) {
		if _, err := c.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create node %s: %w", n.Name, err)
		}
	}
	list, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	return c.waitReady(ctx, len(list.Items))
}

func (c *Cluster) waitReady(ctx context.Context, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		list, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err == nil {
			ready := 0
			for _, node := range list.Items {
				if nodeReady(&node) {
					ready++
				}
			}
			if ready >= n {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return errors.New("nodes did not become Ready within 2 minutes")
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitLeasesRenewed waits until every node's lease was renewed after since:
// until then a node's Ready condition is what it was before the outage, and
// no kubelet (nor kwok, a new process that takes a node over only once the
// lease its last run held expires) runs its pods. The nodes are listed
// afresh each time (one removed meanwhile is not waited for).
func (c *Cluster) waitLeasesRenewed(ctx context.Context, since time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var stale []string
	for {
		stale = stale[:0]
		nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			stale = append(stale, "(the node list: "+err.Error()+")")
		} else {
			for _, n := range nodes.Items {
				l, err := c.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, n.Name, metav1.GetOptions{})
				if err != nil || l.Spec.RenewTime == nil || l.Spec.RenewTime.Time.Before(since) {
					stale = append(stale, n.Name)
				}
			}
		}
		if len(stale) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the leases of nodes %v were not renewed within 2 minutes of the restart", stale)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func nodeReady(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == "node.kubernetes.io/not-ready" || t.Key == "node.kubernetes.io/unreachable" {
			return false
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func ptr[T any](v T) *T { return &v }

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// installCRDs creates the CustomResourceDefinitions in a multi-document YAML
// and waits until the API server serves them.
func (c *Cluster) installCRDs(ctx context.Context, docs []byte) error {
	dyn, err := dynamic.NewForConfig(c.Config())
	if err != nil {
		return err
	}
	var names []string
	for _, doc := range strings.Split(string(docs), "\n---\n") {
		if strings.TrimSpace(strings.TrimPrefix(doc, "---")) == "" {
			continue
		}
		j, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			return err
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(j); err != nil {
			return err
		}
		if _, err := dyn.Resource(crdResource).Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %s: %w", u.GetName(), err)
		}
		names = append(names, u.GetName())
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, n := range names {
		for {
			u, err := dyn.Resource(crdResource).Get(ctx, n, metav1.GetOptions{})
			if err == nil && established(u) {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s not established: %w", n, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

func established(u *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// createAll creates every object of a multi-document manifest from deploy/,
// decoded strictly, leaving those that exist.
func createAll[T any, PT interface {
	*T
	metav1.Object
}](ctx context.Context, docs []byte, what string, create func(context.Context, PT, metav1.CreateOptions) (PT, error)) error {
	for _, doc := range strings.Split(string(docs), "\n---\n") {
		obj := PT(new(T))
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			return fmt.Errorf("%s manifest: %w", what, err)
		}
		if _, err := create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %s %s: %w", what, obj.GetName(), err)
		}
	}
	return nil
}

// RepoRoot finds the repository root (the directory holding deploy/cluster)
// from the working directory up.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "deploy", "cluster", "build.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("repository root (with deploy/cluster/build.sh) not found above the working directory")
		}
		dir = parent
	}
}
