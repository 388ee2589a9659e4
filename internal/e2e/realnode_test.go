package e2e_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/devcluster"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/store/storetest"
	"github.com/gantryhq/gantry/internal/waitfor"
)

// realNode returns Gantry on the cluster with the real node pulling the
// catalog's images from Gantry's local signed registry; without a real node
// it skips (and fails in CI, which can run one).
func realNode(t *testing.T) *gantryServer {
	t.Helper()
	g := start(t, storetest.SQLitePath(t), true)
	if _, err := cluster.RealNode(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	if err := cluster.MirrorRegistries(g.Images.Verifier.Mirrors()); err != nil {
		t.Fatal(err)
	}
	return g
}

// TestCPUJobRunsForReal: the cpu-job template's CPU-only launch runs in a
// real container on the cluster's CPU node, from the catalog's image as the
// launch verified it (signed, pinned by digest, pulled from the registry):
// its output is the container's own through the logs API, a script that
// exits 3 leaves the workload Failed with exit code 3, one over its memory
// limit Failed OOMKilled, and the price is per core-hour.
func TestCPUJobRunsForReal(t *testing.T) {
	g := realNode(t)
	run := func(script, memory string) model.Workload {
		t.Helper()
		params := model.Parameters{"script": script, "cpu": "2"}
		if memory != "" {
			params["memory"] = memory
		}
		s, w := g.launch(model.LaunchRequest{Template: "cpu-job", Team: "realnode", Parameters: &params})
		if s != 201 {
			t.Fatalf("launch: %d", s)
		}
		if w.Gpu.Class != "CPU" || w.Gpu.Count != 0 || w.PricePerHour != 0.1 {
			t.Fatalf("launched %s", asJSON(w))
		}
		return w
	}
	logs := func(id string) string {
		r := servertest.Must(g.api.GetWorkloadLogsWithResponse(t.Context(), id, nil))(t)
		return string(r.Body)
	}

	ok := run(`echo "6*7 = $((6*7)) in $(hostname)"`, "")
	w := g.waitStatus(ok.Id, "Succeeded", "Failed")
	if w.Status != "Succeeded" || servertest.Deref(w.ExitCode) != 0 {
		t.Fatalf("the script ended %s (exit code %v): %s", w.Status, w.ExitCode, asJSON(w))
	}
	if pods := podsOf(t, "realnode", ok.Id); len(pods) != 1 || pods[0].Spec.NodeName != devcluster.RealNodeName {
		t.Fatalf("pods %v, want one on %s", len(pods), devcluster.RealNodeName)
	}
	waitfor.Until(t, 30*time.Second, "the container's own output", func() error {
		if got := logs(ok.Id); !strings.Contains(got, "6*7 = 42 in cpu-job-"+ok.Id) {
			return fmt.Errorf("logs %q", got)
		}
		return nil
	})

	failed := run("echo about to fail; exit 3", "")
	w = g.waitStatus(failed.Id, "Failed", "Succeeded")
	if w.Status != "Failed" || servertest.Deref(w.ExitCode) != 3 {
		t.Fatalf("exit 3 ended %s (exit code %v, %s)", w.Status, w.ExitCode, servertest.Deref(w.Reason))
	}

	oom := run("head -c 300m /dev/zero | tail", "128Mi")
	w = g.waitStatus(oom.Id, "Failed", "Succeeded")
	if w.Status != "Failed" || !strings.Contains(servertest.Deref(w.Reason), "OOMKilled") {
		t.Fatalf("over its memory it ended %s: %q", w.Status, servertest.Deref(w.Reason))
	}
}
