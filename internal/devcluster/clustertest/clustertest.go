// Package clustertest starts the local cluster for test packages that need
// one (kept apart from devcluster so that no binary carries package testing).
package clustertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/devcluster"
	"k8s.io/klog/v2"
)

// ErrNotRequested means tests that need a cluster were not asked to run: set
// GANTRY_TEST_CLUSTER=1 (make test does). In CI they always run.
var ErrNotRequested = errors.New("GANTRY_TEST_CLUSTER is not set: tests against the local cluster are skipped (make test runs them)")

// ForTests starts a cluster for a test package, named after it, when the
// environment asks for cluster tests; stop ends it.
// configure, when given, changes the cluster's options (node groups, say).
func ForTests(pkg string, configure ...func(*devcluster.Options)) (c *devcluster.Cluster, stop func(), err error) {
	if os.Getenv("GANTRY_TEST_CLUSTER") == "" && os.Getenv("CI") == "" {
		return nil, func() {}, ErrNotRequested
	}
	root, err := devcluster.RepoRoot()
	if err != nil {
		return nil, func() {}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	var log *os.File
	if os.Getenv("GANTRY_TEST_CLUSTER_LOG") != "" {
		log = os.Stderr
	}
	// Creations take turns (devcluster's lock), but Kueue's port or a
	// component's can still be taken by another program at the wrong moment;
	// try again, under a new name.
	for attempt := 1; attempt <= 3; attempt++ {
		// Named for the test run (GANTRY_TEST_RUN, set by .ci/test) so that its
		// cleanup kills only its own clusters.
		run := os.Getenv("GANTRY_TEST_RUN")
		if run == "" {
			run = "local"
		}
		// The e2e suite's API server audits every request: it checks the
		// Helm chart's RBAC against what Gantry asked for. (The others do
		// not pay for writing it.)
		o := devcluster.Options{Name: fmt.Sprintf("gt-%s-%s-%d-%d", run, pkg, os.Getpid(), attempt), Root: root, Audit: pkg == "e2e", Ephemeral: true}
		if log != nil {
			o.Log = log
		}
		for _, f := range configure {
			f(&o)
		}
		if c, err = devcluster.Start(ctx, o); err == nil {
			break
		}
		fmt.Fprintf(os.Stderr, "local cluster, attempt %d: %v\n", attempt, err)
	}
	if err != nil {
		return nil, func() {}, err
	}
	return c, func() {
		// A component that died during the tests explains many a failure
		// (r169: a controller manager gone, and no Job made a pod).
		for name, log := range c.DeadComponents() {
			fmt.Fprintf(os.Stderr, "cluster %s: %s had stopped before the end of the tests; its log ends: %q\n", c.Name, name, log)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c.Stop(ctx)
	}, nil
}

// Hooks run around a package's tests on its cluster: Before once it has
// started (an error ends the run), After once the tests passed (an error
// fails the run).
type Hooks struct {
	Before, After func(*devcluster.Cluster) error
	// Options changes the cluster's options before it starts.
	Options func(*devcluster.Options)
}

// Main runs a test package whose tests use a local cluster: it starts one when
// cluster tests are asked for (tests then find it in *c; without, they skip),
// runs the tests, stops the cluster and exits. m is the package's
// *testing.M, or one that wraps its Run.
func Main(m interface{ Run() int }, pkg string, c **devcluster.Cluster, hooks ...Hooks) {
	if os.Getenv("GANTRY_TEST_CLUSTER_LOG") == "" {
		// client-go logs through klog (leader election, informers); in
		// tests that is noise between the results, unless asked for.
		klog.LogToStderr(false)
		klog.SetOutput(io.Discard)
	}
	var configure []func(*devcluster.Options)
	for _, h := range hooks {
		if h.Options != nil {
			configure = append(configure, h.Options)
		}
	}
	cl, stop, err := ForTests(pkg, configure...)
	switch {
	case errors.Is(err, ErrNotRequested):
		fmt.Println(err)
	case err != nil:
		fmt.Fprintln(os.Stderr, "local cluster:", err)
		os.Exit(1)
	}
	*c = cl
	for _, h := range hooks {
		if cl != nil && h.Before != nil {
			if err := h.Before(cl); err != nil {
				fmt.Fprintln(os.Stderr, "before the tests:", err)
				stop()
				os.Exit(1)
			}
		}
	}
	code := m.Run()
	for _, h := range hooks {
		if cl != nil && code == 0 && h.After != nil {
			if err := h.After(cl); err != nil {
				fmt.Fprintln(os.Stderr, "FAIL after the tests:", err)
				code = 1
			}
		}
	}
	stop()
	os.Exit(code)
}

// NeedRealNode skips a test when what it needs of the real node is missing
// (err: the node, or an image built for it), and fails it where the real
// node is required (devcluster.RealNodeRequired: in CI, and in .ci/test
// unless this machine cannot run one). Check the node first: the images
// are built where it can run.
func NeedRealNode(t testing.TB, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if devcluster.RealNodeRequired(err) {
		t.Fatalf("%s: %v", what, err)
	}
	t.Skipf("%s: %v", what, err)
}
