package servertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gantryhq/gantry/api/client"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/waitfor"
)

// CheckLaunches asserts what a fault test must find once its launches were
// answered (accepted: each caller's Idempotency-Key → the workload id it
// was answered with): every key has a workload of its own; each workload
// gets to ready (polled for up to within; nil: applied and Succeeded); the
// team's records are exactly those workloads (none lost, none
// duplicated); and the team's namespace holds exactly one Job per
// workload (none orphaned, none twice).
func CheckLaunches(t testing.TB, api *client.ClientWithResponses, kube kubernetes.Interface, team string, accepted map[string]string, within time.Duration, ready func(model.Workload) error) {
	t.Helper()
	ctx := context.Background()
	if ready == nil {
		ready = func(w model.Workload) error {
			if !w.Applied || w.Status != model.Succeeded {
				return fmt.Errorf("%s applied=%v (%s)", w.Status, w.Applied, Deref(w.Reason))
			}
			return nil
		}
	}
	ids := map[string]bool{}
	for key, id := range accepted {
		if ids[id] {
			t.Fatalf("two keys answered with workload %s", id)
		}
		ids[id] = true
		waitfor.Until(t, within, "workload "+id+" ("+key+")", func() error {
			return ready(Deref(Must(api.GetWorkloadWithResponse(ctx, id))(t).JSON200))
		})
	}
	name := model.Name(team)
	list := Deref(Must(api.ListWorkloadsWithResponse(ctx, &model.ListWorkloadsParams{Limit: new(500), Team: &name}))(t).JSON200)
	if len(list.Items) != len(ids) {
		t.Fatalf("%d workloads recorded for team %s, %d launches answered (none lost, none duplicated)", len(list.Items), team, len(ids))
	}
	jobs, err := kube.BatchV1().Jobs("gantry-"+team).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, j := range jobs.Items {
		id := j.Labels["gantry.dev/workload-id"]
		if !ids[id] || seen[id] {
			t.Fatalf("Job %s belongs to workload %q: orphaned or duplicated", j.Name, id)
		}
		seen[id] = true
	}
	if len(seen) != len(ids) {
		t.Fatalf("%d Jobs for %d workloads", len(seen), len(ids))
	}
}
