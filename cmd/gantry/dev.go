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
	"time"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/devcluster"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/node/agent"
	"github.com/gantryhq/gantry/internal/node/devagent"
	"github.com/gantryhq/gantry/internal/nodegroup"
	"github.com/gantryhq/gantry/internal/server"
	"github.com/gantryhq/gantry/internal/telemetry"
)

// devCmd starts the local cluster with its simulated GPU fleet (building it the
// first time), then Gantry on SQLite with the starter catalog against it, and
// tears the cluster down on Ctrl-C.
func devCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("gantry dev", stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve on (loopback)")
	db := fs.String("db", "", "SQLite file to keep (default: a fresh gantry-dev.db in the user's data directory)")
	cpuProfile := fs.String("cpuprofile", "", "write Gantry's CPU profile (go tool pprof) to this new file until it stops: for measuring it under load")
	if _, err := parse(fs, args); err != nil {
		return err
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
	fmt.Fprintln(stderr, "gantry dev: starting the local cluster") // a first run's build of Kubernetes says so itself
	// Ephemeral: the cluster is removed on Ctrl-C and made new on every run,
	// so its etcd need not fsync. Karpenter scales the on-demand and spot
	// node groups from zero; machines boot in a tenth of their boot time.
	cl, err := devcluster.Start(ctx, devcluster.Options{Name: "gantry-dev", Root: root, Log: stderr, Ephemeral: true,
		NodeGroups: groups.List(), BootScale: devBootScale, WaitForPodsReady: devPodsReady})
	if err != nil {
		return fmt.Errorf("the local cluster did not start: %w", err)
	}
	defer func() {
		fmt.Fprintln(stderr, "gantry dev: stopping the local cluster")
		cl.Stop(context.Background())
	}()
	cfg.Kubeconfig = cl.Kubeconfig
	cfg.Images.DevRegistry = true
	if cfg.Confidential.KBSURL == "" {
		// No key broker runs here: the simulated CC nodes never attest, but the
		// pods carry init data as they would in a real cluster.
		cfg.Confidential.KBSURL = "http://kbs.gantry-system.svc.cluster.local:8080"
	}
	srv, err := server.New(ctx, cfg, server.Overrides{})
	if err != nil {
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
Launch a notebook on a MIG slice:
  curl -s -X POST %[1]s/api/v1/workloads -H "Authorization: Bearer $GANTRY_TOKEN" -H 'content-type: application/json' -d '{"template":"jupyter-notebook","team":"vision"}'
Stop with Ctrl-C (the cluster is removed too).
`, srv.URL(), len(fleet.Items), cl.Bin, cl.Kubeconfig, srv.Issuer(), list.String(), firstUser(users), tok, cfg.NodeGroupsFile)
	srv.UseLogger()
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
	return g.Wait()
}

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
