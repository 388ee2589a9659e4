//go:build dev

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/devcluster"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/gpu"
	kubedispatch "github.com/gantryhq/gantry/internal/kube/dispatch"
	"github.com/gantryhq/gantry/internal/node/agent"
	"github.com/gantryhq/gantry/internal/node/devagent"
	"github.com/gantryhq/gantry/internal/node/devrun"
	"github.com/gantryhq/gantry/internal/nodegroup"
	"github.com/gantryhq/gantry/internal/server"
	"github.com/gantryhq/gantry/internal/telemetry"
	"github.com/gantryhq/gantry/internal/workload"
)

// devCmd starts the local cluster with its simulated GPU fleet (building it the
// first time), then Gantry on SQLite with the starter catalog against it, and
// tears the cluster down on Ctrl-C.
func devCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("gantry dev", stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve on (loopback)")
	db := fs.String("db", "", "SQLite file to keep (default: a fresh gantry-dev.db in the user's data directory)")
	cpuProfile := fs.String("cpuprofile", "", "write Gantry's CPU profile (go tool pprof) to this new file until it stops: for measuring it under load")
	workers := fs.Int("workers", 0, "start this many worker clusters too (1 or 2: an on-premises A100 room, then a cloud of H100s and A100s), each with its own Kueue: the local cluster becomes their MultiKueue manager and Jobs run on the workers (docs/fleets.md)")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if *workers < 0 || *workers > len(devWorkers) {
		return fmt.Errorf("--workers: 0 to %d", len(devWorkers))
	}
	root, err := devcluster.RepoRoot()
	if err != nil {
		return fmt.Errorf("gantry dev runs from a checkout of the repository: %w", err)
	}
	if err := os.Chdir(root); err != nil {
		return err
	}
	cfg, err := loadConfig("", config.Flags{"listen": *listen, "db": *db})
	if err != nil {
		return err
	}
	server.UseLogger(cfg.Logger()) // before the clusters' clients log

	if *db == "" {
		// The cluster is new on every run, so is the dev database: records of
		// workloads from an earlier run would point at objects that are gone.
		path := filepath.Join(filepath.Dir(string(config.Default().Database.DSN)), "gantry-dev.db")
		for _, f := range []string{path, path + "-wal", path + "-shm"} {
			if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
				return fmt.Errorf("reset the dev database: %w", err)
			}
		}
		cfg.Database.DSN = config.Secret(path)
	}
	if cfg.NodeGroupsFile == "" {
		cfg.NodeGroupsFile = filepath.Join("templates", "node-groups.yaml")
	}
	classes, err := gpu.LoadFile(cfg.GPUClassesFile)
	if err != nil {
		return err
	}
	groups, err := nodegroup.LoadFile(cfg.NodeGroupsFile, classes.Names())
	if err != nil {
		return err
	}
	// What the real node runs on (containerd, runc, the CNI plugins; as
	// root, from Debian) and its images, where missing: a newcomer's
	// `gantry dev` is `make dev`.
	if err := devcluster.PrepareRealNode(ctx, root, stderr); err != nil {
		fmt.Fprintf(stderr, "gantry dev: the real node's packages or images: %v (the cluster starts without what failed)\n", err)
	}
	fmt.Fprintln(stderr, "gantry dev: starting the local cluster") // a first run's build of Kubernetes says so itself
	// Ephemeral: the cluster is removed on Ctrl-C and made new on every run,
	// so its etcd need not fsync. Karpenter scales the on-demand and spot
	// node groups from zero; machines boot in a tenth of their boot time.
	// Where the machine can (root, containerd), a real node runs containers
	// beside the simulated GPU fleet.
	mo := devcluster.Options{Name: "gantry-dev", Root: root, Log: stderr, Ephemeral: true, KueueCountsCPU: true,
		NodeGroups: groups.List(), BootScale: devBootScale, WaitForPodsReady: devPodsReady, RealNode: true}
	if *workers > 0 {
		mo.MultiKueueDispatcher = kubedispatch.Name
	}
	cl, err := startRetrying(ctx, mo, stderr)
	if err != nil {
		return fmt.Errorf("the local cluster did not start: %w", err)
	}
	defer func() {
		fmt.Fprintln(stderr, "gantry dev: stopping the local cluster")
		cl.Stop(context.Background())
	}()
	launchNote := `Launch a notebook on a MIG slice:
  curl -s -X POST URL/api/v1/workloads -H "Authorization: Bearer $GANTRY_TOKEN" -H 'content-type: application/json' -d '{"template":"jupyter-notebook","team":"vision"}'
`
	if _, err := cl.RealNode(); err == nil {
		launchNote += `Run a shell script in a real container on the CPU node (then: gantry logs ID):
  curl -s -X POST URL/api/v1/workloads -H "Authorization: Bearer $GANTRY_TOKEN" -H 'content-type: application/json' -d '{"template":"cpu-job","team":"vision","parameters":{"script":"uname -a; echo $((6*7))"}}'
Or open a real Jupyter notebook there: in the portal, launch "Jupyter notebook on a CPU node", then Open.
`
	}
	if *workers > 0 {
		kubeconfigs := map[string]string{}
		for _, w := range devWorkers[:*workers] {
			fmt.Fprintf(stderr, "gantry dev: starting worker cluster %s\n", w.name)
			wc, err := startRetrying(ctx, devcluster.Options{Name: "gantry-dev-" + w.name, Root: root, Log: stderr, Ephemeral: true, KueueCountsCPU: true, Fleet: w.nodes, JobRuntime: devJobRuntime}, stderr)
			if err != nil {
				return fmt.Errorf("worker cluster %s did not start: %w", w.name, err)
			}
			defer func() {
				fmt.Fprintf(stderr, "gantry dev: stopping worker cluster %s\n", w.name)
				wc.Stop(context.Background())
			}()
			kubeconfigs[w.name] = wc.Kubeconfig
		}
		file := filepath.Join(filepath.Dir(cl.Kubeconfig), "gantry-dev-clusters.yaml")
		if err := os.WriteFile(file, devClustersFile(*workers, kubeconfigs), 0o600); err != nil {
			return err
		}
		cfg.ClustersFile = file
		launchNote = fmt.Sprintf(`Worker clusters: %d, listed in %s; Jobs, services,
notebooks and VMs run there. Launch a training Job
and see where it went (its "cluster" and "reason"):
  curl -s -X POST URL/api/v1/workloads -H "Authorization: Bearer $GANTRY_TOKEN" -H 'content-type: application/json' -d '{"template":"pytorch-train","team":"vision","gpu":{"class":"A100-80GB","count":4}}'
`, *workers, file)
	}
	cfg.Kubeconfig = cl.Kubeconfig
	cfg.Images.DevRegistry = true
	if cfg.Confidential.KBSURL == "" {
		// No key broker runs here: the simulated CC nodes never attest, but the
		// pods carry init data as they would in a real cluster.
		cfg.Confidential.KBSURL = "http://kbs.gantry-system.svc.cluster.local:8080"
	}
	// No cluster DNS or kube-proxy here: /w/{id}/ reaches a notebook's
	// Service through its endpoints (pods on the real node answer; the
	// simulated nodes' pods do not).
	cfg.AppDial = config.AppDialEndpoints
	// Training Jobs on the real node report their progress to Gantry
	// through a forwarder on the host's side of its veth pair (Gantry
	// listens on loopback).
	var listening atomic.Value
	listening.Store("")
	if cfg.Runs.ReportURL == "" {
		if fwd, _, err := cl.Forward(func() string { return listening.Load().(string) }); err == nil { // open as long as the cluster
			cfg.Runs.ReportURL = "http://" + fwd
		} else {
			// No real node: no pod reaches Gantry, and none needs to — the
			// simulated fleet's trial runs report in-process (devrun), so
			// Jobs render with an address that is never dialled.
			cfg.Runs.ReportURL = "http://gantry-dev.invalid"
		}
	}
	srv, err := server.New(ctx, cfg, server.Overrides{})
	if err != nil {
		return err
	}
	listening.Store(strings.TrimPrefix(strings.TrimPrefix(srv.URL(), "http://"), "https://"))
	// The real node pulls the catalog's images from the local registry.
	if err := cl.MirrorRegistries(srv.Images.Verifier.Mirrors()); err != nil {
		return err
	}
	fleet, err := cl.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("the local cluster's nodes: %w", err)
	}
	users := srv.DevUsers()
	var list strings.Builder
	for _, u := range users {
		fmt.Fprintf(&list, "  %-6s %s (groups: %s)\n", u.Username, u.Name, strings.Join(u.Groups, ", "))
	}
	tok := "(no development provider: create one in the portal)"
	if len(users) > 0 {
		t, err := srv.DevToken(ctx, users[0].Username)
		if err != nil {
			fmt.Fprintf(stderr, "gantry dev: could not make a token for %s: %v\n", users[0].Username, err)
		} else {
			tok = t
		}
	}
	fmt.Fprintf(stdout, `
Gantry is running at %[1]s (API: %[1]s/api/v1, spec: %[1]s/openapi.yaml)
Sign in with a browser at %[1]s as one of these development users
(password = username; provider: %[5]s):
%[6]s
A token for %[7]s, for curl and notebooks (valid 24 h):
  export GANTRY_TOKEN=%[8]s
  curl -s -H "Authorization: Bearer $GANTRY_TOKEN" %[1]s/api/v1/me
Or sign the CLI in:  go run ./cmd/gantry login --server %[1]s
Simulated GPU nodes: %[2]d, and Karpenter adds more of the node groups in
%[9]s as launches need them (booting in a tenth of their boot time).
Look at the cluster with:
  %[3]s/kubectl --kubeconfig %[4]s get nodes -L nvidia.com/gpu.product
%[10]sStop with Ctrl-C (the cluster is removed too).
`, srv.URL(), len(fleet.Items), cl.Bin, cl.Kubeconfig, srv.Issuer(), list.String(), firstUser(users), tok, cfg.NodeGroupsFile, strings.ReplaceAll(launchNote, "URL", srv.URL()))
	stopProfile, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	// The simulated GPU nodes' agents push into Gantry in-process, through
	// the same ingest as a real agent's push (less the token check).
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return srv.Run(gctx) })
	g.Go(func() error {
		err := devagent.Run(gctx, devagent.Options{Client: cl.Client, Log: srv.Log, Sink: devagent.SinkFunc(func(ctx context.Context, b telemetry.Batch) error {
			_, err := srv.Telemetry.Ingest(ctx, b.Node, b)
			var bad *fault.Invalid
			if errors.As(err, &bad) {
				return &agent.PermanentError{Err: err}
			}
			return err
		})})
		if err != nil && gctx.Err() == nil {
			srv.Log.Error("simulated GPU agents stopped; Gantry goes on without telemetry", "err", err)
		}
		return nil
	})
	// Trials' runs on the simulated nodes report progress at the step time
	// of a per-class model (package devrun), as their pods would.
	g.Go(func() error {
		return devrun.Run(gctx, devrun.Options{Workloads: devRunWorkloads{srv}, Runs: srv.Runs, Classes: srv.Catalog.Classes(), Log: srv.Log})
	})
	return g.Wait()
}

// devRunWorkloads is what the simulated training runs read, as Gantry.
type devRunWorkloads struct{ srv *server.Server }

func (d devRunWorkloads) ListWorkloads(ctx context.Context, f workload.Filter) ([]workload.Workload, error) {
	return d.srv.Store.Workloads.ListWorkloads(ctx, f)
}
func (d devRunWorkloads) Namespace(w workload.Workload) string { return d.srv.Workloads.Namespace(w) }

// startRetrying starts a local cluster, and again under a new name when a
// start fails (up to three times): a start can lose a race for a port with
// another cluster starting at the same moment, as clustertest.ForTests
// knows.
func startRetrying(ctx context.Context, o devcluster.Options, stderr io.Writer) (*devcluster.Cluster, error) {
	name := o.Name
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		var c *devcluster.Cluster
		if c, err = devcluster.Start(ctx, o); err == nil || ctx.Err() != nil {
			return c, err
		}
		fmt.Fprintf(stderr, "gantry dev: cluster %s, attempt %d: %v\n", o.Name, attempt, err)
		o.Name = fmt.Sprintf("%s-%d", name, attempt+1)
	}
	return nil, err
}

// devWorkers are the worker clusters gantry dev --workers starts, in order:
// an on-premises room of A100s at an amortised price, and a cloud of H100s
// and A100s, each with a simulated CPU node for CPU-only launches
// (docs/fleets.md).
var devWorkers = []struct {
	name  string
	nodes []devcluster.NodeSpec
	offer string // the clusters file's entry, less name and kubeconfig
}{
	{"onprem", []devcluster.NodeSpec{{Prefix: "a100", Count: 2, Product: "NVIDIA-A100-SXM4-80GB", MemoryMB: 81920, GPUs: 8, Whole: 8},
		{Prefix: "cpu", Count: 1, CPULabel: devcluster.RealNodeLabel, Cores: 32}},
		`    region: eu-central
    provider: on-premises
    labels: {residency: onprem}
    offers: [{class: A100-80GB, purchase: reserved, pricePerGPUHour: 1.10, gpus: 16}]
    cpu: {purchase: reserved, pricePerCoreHour: 0.02, cores: 32}
`},
	{"cloud", []devcluster.NodeSpec{{Prefix: "h100", Count: 1, Product: "NVIDIA-H100-80GB-HBM3", MemoryMB: 81559, GPUs: 8, Whole: 8},
		{Prefix: "a100", Count: 1, Product: "NVIDIA-A100-SXM4-80GB", MemoryMB: 81920, GPUs: 8, Whole: 8},
		{Prefix: "cpu", Count: 1, CPULabel: devcluster.RealNodeLabel, Cores: 64}},
		`    region: us-east-1
    provider: cloud
    labels: {residency: cloud}
    offers:
      - {class: H100-80GB, purchase: on-demand, pricePerGPUHour: 6.90, gpus: 8}
      - {class: A100-80GB, purchase: on-demand, pricePerGPUHour: 3.20, gpus: 8}
    cpu: {purchase: on-demand, pricePerCoreHour: 0.05}
`},
}

// devClustersFile is the clusters file of the first n devWorkers, each at
// its kubeconfig.
func devClustersFile(n int, kubeconfigs map[string]string) []byte {
	var b strings.Builder
	b.WriteString("apiVersion: gantry.dev/v1alpha1\nkind: ClusterList\nclusters:\n")
	for _, w := range devWorkers[:n] {
		fmt.Fprintf(&b, "  - name: %s\n    kubeconfig: {file: %q}\n%s", w.name, kubeconfigs[w.name], w.offer)
	}
	return []byte(b.String())
}

// devJobRuntime is how long a Job's simulated pod runs on a worker cluster
// before it completes: long enough to see where it went.
const devJobRuntime = 10 * time.Minute

// devBootScale shortens the node groups' boot times on the local cluster,
// so that a newcomer sees a machine join within seconds.
const devBootScale = 0.1

// devPodsReady is how long Kueue gives an admitted workload's pods to be all
// Ready before it gives the quota back and queues the workload again
// (all-or-nothing: docs/capacity.md): well above a machine's boot here.
const devPodsReady = 2 * time.Minute

func firstUser(us []config.DevUser) string {
	if len(us) == 0 {
		return "nobody"
	}
	return us[0].Username
}
