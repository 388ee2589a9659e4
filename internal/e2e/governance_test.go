package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/notify"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/store/storetest"
	"github.com/gantryhq/gantry/internal/waitfor"
)

// webhookReceiver is a team's webhook endpoint: it checks every delivery's
// signature with notify.Verify and keeps the ones that pass.
type webhookReceiver struct {
	secret  []byte
	mu      sync.Mutex
	got     []map[string]any
	refused int
}

func (r *webhookReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := notify.Verify(r.secret, req.Header, body, time.Now(), 5*time.Minute); err != nil {
		r.refused++
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var m map[string]any
	json.Unmarshal(body, &m)
	r.got = append(r.got, m)
}

func (r *webhookReceiver) deliveries() ([]map[string]any, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]map[string]any{}, r.got...), r.refused
}

// TestApprovalsAndBudgets runs governance on the local cluster with real
// Kueue: a launch above the team's per-launch ceiling is PendingApproval
// while Gantry's AdmissionCheck holds it in Kueue; a team-admin's approval
// lets Kueue admit it and the service runs; a denial fails another and
// Kueue rejects it. The running one spends the team's budget: the 80 % and 100 % alerts
// reach a webhook receiver once each, signed (a tampered delivery is
// refused), and land in the audit log; the budget's banner says so; and
// under block the team's ClusterQueue is held, so the next launch waits,
// saying why.
func TestApprovalsAndBudgets(t *testing.T) {
	secret := []byte("e2e-webhook-secret-0123456789")
	rcv := &webhookReceiver{secret: secret}
	hook := httptest.NewServer(rcv)
	defer hook.Close()
	g := start(t, storetest.SQLitePath(t), true, func(c *config.Config) {
		c.PolicyDir = policyWith(t, "  vision:\n    templates: [\"*\"]\n    gpuClasses: [\"*\"]\n    quota: {gpus: {\"*\": 1000}}\n"+
			"    approval: {launchCeiling: 100, expires: 1h}\n"+
			"    budget: {amount: 0.05, atLimit: block}\n")
		c.Notify.WebhookURL, c.Notify.WebhookSecret = config.Secret(hook.URL), config.Secret(secret)
	})
	dyn, err := dynamic.NewForConfig(cluster.Config())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	lee := servertest.Client(g.URL, g.Token("lee")) // a team-admin of vision
	// A service on two H100s ($13.80/h) without a max runtime, priced for a
	// month: $10,074.00, above the $100 ceiling.
	launch := func() model.Workload {
		s, w := g.launch(model.LaunchRequest{Template: "vllm-inference", Team: "vision", Gpu: &model.GPUChoice{Class: new("H100-80GB"), Count: new(2)}})
		if s != 201 {
			t.Fatalf("launch: %d", s)
		}
		return w
	}
	approved := launch()
	if reason := servertest.Deref(approved.Reason); approved.Status != "PendingApproval" || !strings.Contains(reason, "a team-admin of vision") || !strings.Contains(reason, "$10,074.00") {
		t.Fatalf("launch above the ceiling: %s (%s)", approved.Status, reason)
	}
	check := func(id string) (string, error) {
		list, err := dyn.Resource(schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloads"}).Namespace("gantry-vision").
			List(context.Background(), metav1.ListOptions{LabelSelector: "gantry.dev/workload-id=" + id})
		if err != nil || len(list.Items) == 0 {
			return "", fmt.Errorf("no Kueue Workload yet (%v)", err)
		}
		checks, _, _ := unstructured.NestedSlice(list.Items[0].Object, "status", "admissionChecks")
		for _, c := range checks {
			if m := c.(map[string]any); m["name"] == "gantry-approval" {
				return fmt.Sprint(m["state"]), nil
			}
		}
		return "", fmt.Errorf("no gantry-approval check on %s", list.Items[0].GetName())
	}
	waitCheck := func(id, want string) {
		t.Helper()
		waitfor.Until(t, 60*time.Second, "the AdmissionCheck "+want, func() error {
			st, err := check(id)
			if err == nil && st != want {
				err = fmt.Errorf("state %s", st)
			}
			return err
		})
	}
	waitCheck(approved.Id, "Pending")
	if w := g.workload(approved.Id); w.Status != "PendingApproval" {
		t.Fatalf("held by its check, the launch says %s (%s)", w.Status, servertest.Deref(w.Reason))
	}
	if s := servertest.Must(lee.ApproveWorkloadWithResponse(ctx, approved.Id, model.DecisionRequest{Reason: "the quarter's plan"}))(t).StatusCode(); s != 200 {
		t.Fatalf("approve: %d", s)
	}
	waitCheck(approved.Id, "Ready")
	g.waitStatus(approved.Id, "Running")

	denied := launch()
	waitCheck(denied.Id, "Pending")
	if s := servertest.Must(lee.DenyWorkloadWithResponse(ctx, denied.Id, model.DecisionRequest{Reason: "one run at a time"}))(t).StatusCode(); s != 200 {
		t.Fatalf("deny: %d", s)
	}
	waitCheck(denied.Id, "Rejected")
	if w := g.workload(denied.Id); w.Status != "Failed" || !strings.Contains(servertest.Deref(w.Reason), "one run at a time") {
		t.Fatalf("denied: %s (%s)", w.Status, servertest.Deref(w.Reason))
	}

	// $13.80/h spends $0.05 in 13 s: both alerts go out, once each.
	waitfor.Until(t, 90*time.Second, "two budget alerts at the webhook", func() error {
		if got, _ := rcv.deliveries(); len(got) < 2 {
			return fmt.Errorf("%d delivered", len(got))
		}
		return nil
	})
	got, refused := rcv.deliveries()
	if len(got) != 2 || refused != 0 {
		t.Fatalf("deliveries %v, refused %d; want the 80 %% and 100 %% alerts once", got, refused)
	}
	for i, th := range []float64{0.8, 1} {
		fields := got[i]["gantry"].(map[string]any)
		if fields["event"] != "budget.threshold" || fields["team"] != "vision" || fields["threshold"] != th || !strings.Contains(got[i]["text"].(string), "Team vision has spent") {
			t.Errorf("delivery %d: %v", i, got[i])
		}
	}
	// A delivery whose body was changed on the way is refused.
	tampered, _ := http.NewRequest("POST", hook.URL, strings.NewReader(`{"text":"Team vision has spent nothing"}`))
	tampered.Header.Set(notify.HeaderTimestamp, fmt.Sprint(time.Now().Unix()))
	tampered.Header.Set(notify.HeaderDelivery, "d1")
	tampered.Header.Set(notify.HeaderSignature, notify.Sign(secret, time.Now(), "d1", []byte(`{"text":"Team vision has spent $0.05"}`)))
	if resp, err := http.DefaultClient.Do(tampered); err != nil || resp.StatusCode != 401 {
		t.Fatalf("tampered delivery: %v %v", resp, err)
	}

	br := servertest.Must(g.api.ListBudgetsWithResponse(ctx, &model.ListBudgetsParams{Team: new("vision")}))(t)
	if br.StatusCode() != 200 {
		t.Fatalf("budgets: %d %s", br.StatusCode(), br.Body)
	}
	if b := br.JSON200.Items; len(b) != 1 || b[0].State != model.BudgetStateExceeded || !strings.Contains(servertest.Deref(b[0].Banner), "policy: block") || len(b[0].ThresholdsReached) != 2 {
		t.Fatalf("budgets: %s", br.Body)
	}
	// The team's report for the month carries its budget and both alerts.
	rr := servertest.Must(g.api.GetTeamReportWithResponse(ctx, "vision", nil))(t)
	if rr.StatusCode() != 200 {
		t.Fatalf("the month's report: %d %s", rr.StatusCode(), rr.Body)
	}
	if report := rr.JSON200; report.Budget == nil || report.Budget.State != model.BudgetStateExceeded || len(report.Alerts) != 2 {
		t.Errorf("the month's report: budget %s, alerts %s; want exceeded and two alerts", asJSON(report.Budget), asJSON(report.Alerts))
	}
	ar := servertest.Must(g.api.ListAuditWithResponse(ctx, &model.ListAuditParams{Limit: new(200)}))(t)
	if ar.StatusCode() != 200 {
		t.Fatalf("GET /api/v1/audit: %d %s", ar.StatusCode(), ar.Body)
	}
	audit := ar.JSON200
	alerts := 0
	for _, r := range audit.Items {
		if r.Action == "budget alert" && r.Actor == "gantry" {
			alerts++
		}
	}
	if alerts != 2 {
		t.Errorf("%d budget alerts in the audit log, want 2", alerts)
	}

	// Block: the team's queue is held; a new launch waits and says why.
	waitfor.Until(t, 30*time.Second, "the ClusterQueue held", func() error {
		cq, err := dyn.Resource(schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "clusterqueues"}).Get(context.Background(), "gantry-vision", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p, _, _ := unstructured.NestedString(cq.Object, "spec", "stopPolicy"); p != "Hold" {
			return fmt.Errorf("stopPolicy %q", p)
		}
		return nil
	})
	s, held := g.launch(model.LaunchRequest{Template: "vllm-inference", Team: "vision", Gpu: &model.GPUChoice{Class: new("L4"), Count: new(1)}})
	if s != 201 {
		t.Fatalf("launch while blocked: %d", s)
	}
	waitfor.Until(t, 60*time.Second, "the blocked launch queued with the budget's reason", func() error {
		if w := g.workload(held.Id); w.Status != "Queued" || !servertest.Deref(w.Held) || !strings.Contains(servertest.Deref(w.Reason), "held: Team vision has spent") {
			return fmt.Errorf("%s (%s)", w.Status, servertest.Deref(w.Reason))
		}
		return nil
	})
	if w := g.workload(approved.Id); w.Status != "Running" {
		t.Errorf("what ran before the block: %s", w.Status)
	}
	// Many alert passes later (one a second), still one delivery each.
	if got, _ := rcv.deliveries(); len(got) != 2 {
		t.Errorf("%d deliveries by the end, want 2", len(got))
	}
}

// policyWith is testPolicy with more teams appended to its teams section.
func policyWith(t *testing.T, teams string) string {
	dir := testPolicy(t)
	path := filepath.Join(dir, "bindings.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, teams...), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}
