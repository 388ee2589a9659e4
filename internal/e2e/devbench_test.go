package e2e_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/devcluster"
	"github.com/gantryhq/gantry/internal/kube"
	"github.com/gantryhq/gantry/internal/loadgen"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/template"
	"github.com/gantryhq/gantry/internal/waitfor"
)

// BenchmarkDevLaunch is BenchmarkSustainedLaunch's outside way against
// `gantry dev` — the newcomer's command: Gantry, its own local cluster and
// the simulated nodes' agents in one process — with the baseline on that
// same cluster. 50 clients on the token gantry dev prints launch
// pytorch-train (one GPU, with its volume, team vision) through the API from
// a third process (loadgen.Outside), in 10 s rounds alternating with 50
// goroutines applying the same objects with client-go into a namespace of
// their own, queued in a copy of team vision's queue without Gantry's
// approval check (likeTeam). It fails on any error and reports both rates and their ratio;
// gantry dev's cluster goes when it stops.
// (The dev cluster has few GPUs: most launches wait in Kueue's queue, on
// both paths, and are not followed to their end.)
//
//	go test -tags dev -run '^$' -bench DevLaunch -benchtime 2x ./internal/e2e
func BenchmarkDevLaunch(b *testing.B) {
	const clients, round = 50, 10 * time.Second
	dev := startDev(b)
	cfg, err := clientcmd.BuildConfigFromFlags("", dev.kubeconfig)
	if err != nil {
		b.Fatal(err)
	}
	k, err := kube.New(cfg, kube.Options{})
	if err != nil {
		b.Fatal(err)
	}
	classes, _, err := template.LoadCatalog("../../templates")
	if err != nil {
		b.Fatal(err)
	}
	data, err := os.ReadFile("../../templates/pytorch-train.yaml")
	if err != nil {
		b.Fatal(err)
	}
	tpl, err := template.Parse("pytorch-train.yaml", data, classes, nil)
	if err != nil {
		b.Fatal(err)
	}
	r, err := tpl.Resolve(classes, template.Choice{Count: 1})
	if err != nil {
		b.Fatal(err)
	}
	// The baseline's queue copies team vision's, which gantry dev keeps from
	// its start: the same quota, Kueue alone admitting.
	const directTeam, directNS = "vision-direct", "bench-vision-direct"
	core, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	baselineQueue(b, core, dyn, directNS, likeTeam(b, dyn, gteam("vision")))
	body, _ := json.Marshal(model.LaunchRequest{Template: "pytorch-train", Team: "vision", Gpu: &model.GPUChoice{Count: new(1)}})
	tokens := slices.Repeat([]string{dev.token}, clients)
	var (
		rs  rounds
		seq atomic.Int64
	)
	runGantry := func() {
		res := loadgen.Outside(b, loadgen.Job{URL: dev.url, Method: http.MethodPost, Paths: []string{"/api/v1/workloads"}, Body: body,
			Tokens: tokens, Duration: round, Status: http.StatusCreated})
		rs.gantryN += res.Requests
		rs.gantryT += time.Duration(res.Seconds * float64(time.Second))
		rs.p50s = append(rs.p50s, time.Duration(res.P50ms*float64(time.Millisecond)))
		rs.p99s = append(rs.p99s, time.Duration(res.P99ms*float64(time.Millisecond)))
		b.Logf("gantry dev (outside): %d launches in %.1f s: %.1f/s, p50 %.0f ms, p99 %.0f ms", res.Requests, res.Seconds, res.Rate, res.P50ms, res.P99ms)
	}
	runDirect := func() {
		n, took := applyRound(b, k, r, directTeam, directNS, &seq, clients, round)
		rs.directN += n
		rs.directT += took
	}
	rs.alternate(b, runGantry, runDirect)
}

// devProcess is a running `gantry dev`: where it serves, the token it
// printed, and its cluster's kubeconfig.
type devProcess struct{ url, token, kubeconfig string }

var (
	devURLRE        = regexp.MustCompile(`Gantry is running at (http://\S+) `)
	devTokenRE      = regexp.MustCompile(`export GANTRY_TOKEN=(\S+)`)
	devKubeconfigRE = regexp.MustCompile(`--kubeconfig (\S+) get nodes`)
)

// startDev runs `gantry dev --listen 127.0.0.1:0` (the development binary,
// each of its processes, the cluster's included, under ulimit -v 16 GiB: etcd
// maps its 8 GiB backend) with a data directory of its own, waits until it
// prints its address, and stops it with Ctrl-C when b ends. With
// GANTRY_BENCH_CPUPROFILE set, Gantry's CPU profile goes to that path +
// ".dev".
func startDev(b testing.TB) devProcess {
	b.Helper()
	root, err := devcluster.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	args := []string{"-c", `ulimit -v 16777216 && exec "$0" dev --listen 127.0.0.1:0 "$@"`, servertest.Binary(b)}
	if prof := os.Getenv("GANTRY_BENCH_CPUPROFILE"); prof != "" {
		prof, _ = filepath.Abs(prof)
		args = append(args, "--cpuprofile", prof+".dev") // written when Ctrl-C stops it
	}
	cmd := exec.Command("/bin/sh", args...)
	cmd.Dir, cmd.Env = root, append(os.Environ(), "XDG_DATA_HOME="+b.TempDir())
	stdout, stderr := &servertest.Log{}, &servertest.Log{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	b.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGINT) // as Ctrl-C: gantry dev removes its cluster
		select {
		case <-exited:
		case <-time.After(2 * time.Minute):
			cmd.Process.Kill()
			<-exited
		}
	})
	var dev devProcess
	waitfor.Until(b, 15*time.Minute, "gantry dev to print its address", func() error {
		select {
		case <-exited:
			b.Fatalf("gantry dev exited:\n%s", stderr)
		default:
		}
		out := stdout.String()
		u, t, k := devURLRE.FindStringSubmatch(out), devTokenRE.FindStringSubmatch(out), devKubeconfigRE.FindStringSubmatch(out)
		if u == nil || t == nil || k == nil {
			return fmt.Errorf("not yet (stderr so far: %d bytes)", len(stderr.String()))
		}
		dev = devProcess{url: u[1], token: t[1], kubeconfig: k[1]}
		return nil
	})
	return dev
}
