package e2e_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	corev1 "k8s.io/api/core/v1"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/cull"
	"github.com/gantryhq/gantry/internal/devcluster/clustertest"
	"github.com/gantryhq/gantry/internal/notify"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/store/storetest"
	"github.com/gantryhq/gantry/internal/telemetry"
	"github.com/gantryhq/gantry/internal/waitfor"
)

// TestTwoReplicasLeaderKilled runs two real `gantry serve` processes on one
// PostgreSQL database and one cluster. Both serve the API; one holds the
// Lease and runs the controller and the lifecycle loop. A batch of launches
// goes to both; half-way through, the leader is killed with SIGKILL. The
// other takes over once the Lease runs out, and afterwards every launch that
// was accepted (or retried with its Idempotency-Key) is there exactly once,
// with exactly one Job on the cluster, no Job belongs to no workload, and
// every workload reaches its terminal state (Succeeded) as recorded by the
// survivor's controller.
func TestTwoReplicasLeaderKilled(t *testing.T) {
	if cluster == nil {
		t.Skip(clustertest.ErrNotRequested)
	}
	t.Parallel() // see the note on TestMain
	dsn := storetest.PostgresDSN(t)
	leader, survivor := replicaPair(t, dsn)
	tok := signInToken(t, leader.URL, "ada")

	const n = 16
	team := "ha" + strings.ToLower(rand.Text()[:4])
	req := model.LaunchRequest{Template: "pytorch-train", Team: team, Gpu: &model.GPUChoice{Count: new(1)}}
	var (
		mu       sync.Mutex
		accepted = map[string]string{} // key → workload id
		unsure   []string              // keys whose answer was lost with the leader
	)
	var wg sync.WaitGroup
	for i := range n {
		if i == n/2 {
			// Mid-batch: launches are in flight at both replicas.
			if err := leader.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			t.Logf("killed the leader (pid %d) with %d launches sent", leader.Cmd.Process.Pid, i)
		}
		key := fmt.Sprintf("%s-%02d", team, i)
		url := []*servertest.Process{leader, survivor}[i%2].URL
		wg.Go(func() {
			status, w := launchAt(url, tok, key, req)
			mu.Lock()
			defer mu.Unlock()
			if status == 201 || status == 200 {
				accepted[key] = w.Id
			} else {
				unsure = append(unsure, key)
			}
		})
	}
	wg.Wait()
	killedAt := time.Now()
	t.Logf("%d launches answered, %d lost with the leader and retried", len(accepted), len(unsure))
	// A client whose answer was lost retries with its key, at the survivor.
	for _, key := range unsure {
		waitfor.Until(t, 30*time.Second, "the retried launch "+key, func() error {
			status, w := launchAt(survivor.URL, tok, key, req)
			if status != 201 && status != 200 {
				return fmt.Errorf("answered %d", status)
			}
			accepted[key] = w.Id
			return nil
		})
	}
	waitfor.Until(t, 60*time.Second, "the survivor to lead", func() error {
		if strings.Count(survivor.Log.String(), `msg="leading:`) == 0 {
			return errors.New("it does not lead")
		}
		return nil
	})
	t.Logf("the survivor leads %v after the kill (lease %v)", time.Since(killedAt).Round(100*time.Millisecond), replicaLease)

	// Every launch is there once, applied once, and ran to its end.
	if len(accepted) != n {
		t.Fatalf("%d launches answered of %d", len(accepted), n)
	}
	servertest.CheckLaunches(t, servertest.Client(survivor.URL, tok), cluster.Client, team, accepted, 120*time.Second, nil)
}

// TestTwoReplicasLeaderKilledMidAlert kills the leader as a real process in
// the middle of a budget alert: two `gantry serve` replicas on one
// PostgreSQL database, a team whose running service spends its $0.05
// budget in seconds, and a webhook receiver that SIGKILLs the leader as the
// first alert's delivery reaches it, before answering. The survivor takes
// over once the Lease runs out and carries on from what the dead leader
// committed: each alert (80 % and 100 %) is written once (one audit record
// each), delivered under one X-Gantry-Delivery id however many times it
// was sent, and the budget says both thresholds were reached. (The fault
// suite's TestLeaderKilledAtEveryWrite kills a leader at every write of
// the pass in one process; this is the same fault with a real process's
// death: its connections dropped, its request in flight cut, its Lease
// held until it expires.)
func TestTwoReplicasLeaderKilledMidAlert(t *testing.T) {
	if cluster == nil {
		t.Skip(clustertest.ErrNotRequested)
	}
	t.Parallel() // see the note on TestMain
	dsn := storetest.PostgresDSN(t)
	team := "al" + strings.ToLower(rand.Text()[:4])
	policy := policyWith(t, "  "+team+":\n    templates: [\"*\"]\n    gpuClasses: [\"*\"]\n    quota: {gpus: {\"*\": 1000}}\n"+
		"    budget: {amount: 0.05}\n")
	secret := "e2e-webhook-secret-0123456789"
	var (
		mu         sync.Mutex
		leader     *servertest.Process
		killedAt   time.Time
		deliveries []string               // X-Gantry-Delivery of every verified delivery, in order
		alerts     = map[string]float64{} // delivery id → threshold
		refused    int
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if err := notify.Verify([]byte(secret), r.Header, body, time.Now(), 5*time.Minute); err != nil {
			refused++
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var m struct {
			Gantry struct {
				Event     string  `json:"event"`
				Team      string  `json:"team"`
				Threshold float64 `json:"threshold"`
			} `json:"gantry"`
		}
		if json.Unmarshal(body, &m) != nil || m.Gantry.Event != "budget.threshold" || m.Gantry.Team != team {
			return // another message (none expected here)
		}
		id := r.Header.Get(notify.HeaderDelivery)
		deliveries = append(deliveries, id)
		alerts[id] = m.Gantry.Threshold
		if killedAt.IsZero() && leader != nil {
			// The first alert reached us: the leader that sent it dies
			// now, its request unanswered.
			killedAt = time.Now()
			leader.Cmd.Process.Signal(syscall.SIGKILL)
			http.Error(w, "the sender died", http.StatusServiceUnavailable)
		}
	}))
	defer hook.Close()

	first, survivor := replicaPair(t, dsn, "GANTRY_POLICY_DIR="+policy, "GANTRY_NOTIFY_WEBHOOK_URL="+hook.URL, "GANTRY_NOTIFY_WEBHOOK_SECRET="+secret)
	mu.Lock()
	leader = first
	mu.Unlock()
	tok := signInToken(t, survivor.URL, "ada")
	// Two H100s ($13.80/h): 80 % of $0.05 in about 10 s, 100 % in 13 s.
	status, w := launchAt(survivor.URL, tok, team+"-svc", model.LaunchRequest{Template: "vllm-inference", Team: team, Gpu: &model.GPUChoice{Class: new("H100-80GB"), Count: new(2)}})
	if status != 201 {
		t.Fatalf("launch: %d", status)
	}
	waitfor.Until(t, 3*time.Minute, "both alerts delivered, the survivor leading", func() error {
		mu.Lock()
		defer mu.Unlock()
		if killedAt.IsZero() {
			return errors.New("no alert reached the receiver yet")
		}
		if len(alerts) < 2 {
			return fmt.Errorf("%d alerts delivered (%d deliveries) since the kill %v ago", len(alerts), len(deliveries), time.Since(killedAt).Round(time.Second))
		}
		return nil
	})
	mu.Lock()
	got := slices.Sorted(maps.Values(alerts))
	sent, ids, bad := len(deliveries), len(alerts), refused
	mu.Unlock()
	t.Logf("2 alerts in %d deliveries, both delivered %v after the kill", sent, time.Since(killedAt).Round(100*time.Millisecond))
	if ids != 2 || got[0] != 0.8 || got[1] != 1 || bad != 0 {
		t.Fatalf("alerts by delivery id %v (%d deliveries, %d refused), want 0.8 and 1 once each", alerts, sent, bad)
	}
	if !strings.Contains(survivor.Log.String(), `msg="leading:`) {
		t.Fatal("the survivor never led: who sent the rest?")
	}
	// Written once each: one audit record per alert, the budget at both.
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var audits int
	if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM audit WHERE actor = 'gantry' AND action = 'budget alert' AND object LIKE $1`, "%?team="+team).Scan(&audits); err != nil {
		t.Fatal(err)
	}
	c := servertest.Client(survivor.URL, tok)
	br := servertest.Must(c.ListBudgetsWithResponse(t.Context(), &model.ListBudgetsParams{Team: new(team)}))(t)
	if items := servertest.Deref(br.JSON200).Items; audits != 2 || len(items) != 1 || len(items[0].ThresholdsReached) != 2 {
		t.Errorf("%d audit records of %s's alerts (want 2); budgets %s", audits, team, br.Body)
	}
	if s := servertest.Must(c.DeleteWorkloadWithResponse(t.Context(), w.Id))(t).StatusCode(); s != 204 {
		t.Errorf("delete: %d", s)
	}
}

// TestTwoReplicasLeaderKilledMidCull kills the leader as a real process in
// the middle of idle culling: two replicas on one PostgreSQL database, a
// notebook whose GPU its node's agent reports idle (a one-minute idle
// timeout: warned at 30 s, stopped at a minute), and a webhook receiver
// that SIGKILLs the leader as the idle warning reaches it, before
// answering. The survivor takes over and carries on from the warning the
// dead leader committed: the warning is delivered under one
// X-Gantry-Delivery id however many times it was sent, and the notebook is
// stopped as idle, never before the time that warning gave.
func TestTwoReplicasLeaderKilledMidCull(t *testing.T) {
	if cluster == nil {
		t.Skip(clustertest.ErrNotRequested)
	}
	t.Parallel() // see the note on TestMain
	dsn := storetest.PostgresDSN(t)
	tmpl, err := os.ReadFile("../../templates/jupyter-notebook.yaml")
	if err != nil {
		t.Fatal(err)
	}
	short := strings.Replace(string(tmpl), "idleTimeout: 2h", "idleTimeout: 1m", 1)
	if short == string(tmpl) {
		t.Fatal("jupyter-notebook.yaml has no idleTimeout: 2h to shorten")
	}
	templates := t.TempDir()
	if err := os.WriteFile(filepath.Join(templates, "jupyter-notebook.yaml"), []byte(short), 0o644); err != nil {
		t.Fatal(err)
	}
	const secret = "e2e-webhook-secret-0123456789"
	var (
		mu       sync.Mutex
		leader   *servertest.Process
		killedAt time.Time
		id       string   // the notebook's workload id, once launched
		warnings []string // X-Gantry-Delivery of each delivery of its idle warning
		stopAt   string   // the time the warning gave
		refused  int
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if err := notify.Verify([]byte(secret), r.Header, body, time.Now(), 5*time.Minute); err != nil {
			refused++
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var m struct {
			Gantry struct {
				Event    string `json:"event"`
				Workload string `json:"workload"`
				StopAt   string `json:"stopAt"`
			} `json:"gantry"`
		}
		if json.Unmarshal(body, &m) != nil || m.Gantry.Event != cull.EventIdleWarning || id == "" || m.Gantry.Workload != id {
			return
		}
		warnings = append(warnings, r.Header.Get(notify.HeaderDelivery))
		if stopAt == "" {
			stopAt = m.Gantry.StopAt
		}
		if killedAt.IsZero() && leader != nil {
			killedAt = time.Now()
			leader.Cmd.Process.Signal(syscall.SIGKILL)
			http.Error(w, "the sender died", http.StatusServiceUnavailable)
		}
	}))
	defer hook.Close()
	first, survivor := replicaPair(t, dsn, "GANTRY_TEMPLATES_DIR="+templates,
		"GANTRY_NOTIFY_WEBHOOK_URL="+hook.URL, "GANTRY_NOTIFY_WEBHOOK_SECRET="+secret)
	mu.Lock()
	leader = first
	mu.Unlock()
	tok := signInToken(t, survivor.URL, "ada")
	c := servertest.Client(survivor.URL, tok)
	team := "cu" + strings.ToLower(rand.Text()[:4])
	status, nb := launchAt(survivor.URL, tok, team+"-nb", model.LaunchRequest{Template: "jupyter-notebook", Team: team})
	if status != 201 {
		t.Fatalf("launch: %d", status)
	}
	mu.Lock()
	id = nb.Id
	mu.Unlock()
	t.Cleanup(func() { servertest.Must(c.DeleteWorkloadWithResponse(context.Background(), nb.Id))(t) })
	workload := func() model.Workload {
		return servertest.Deref(servertest.Must(c.GetWorkloadWithResponse(t.Context(), nb.Id))(t).JSON200)
	}
	var pods []corev1.Pod
	waitfor.Until(t, 2*time.Minute, "the notebook running", func() error {
		if w := workload(); w.Status != "Running" {
			return fmt.Errorf("%s (%s)", w.Status, servertest.Deref(w.Reason))
		}
		if pods = podsOf(t, team, nb.Id); len(pods) != 1 || pods[0].Spec.NodeName == "" {
			return fmt.Errorf("%d pods", len(pods))
		}
		return nil
	})
	// Its node's agent reports its GPU idle every 5 s, to whichever
	// replica answers.
	pod, node := pods[0], pods[0].Spec.NodeName
	agent := agentToken(t, "gantry-system", "gantry-agent", node, "gantry")
	dev := telemetry.Device{GPU: "GPU-" + node + "-" + nb.Id, Index: 0, Model: "NVIDIA H100 80GB HBM3"}
	pushCtx, stopPushing := context.WithCancel(context.Background())
	pushed := make(chan struct{})
	go func() {
		defer close(pushed)
		for pushCtx.Err() == nil {
			batch := telemetry.Batch{Node: node, GPUs: []telemetry.GPUState{{Device: dev, MemoryMiB: 81559}},
				Readings: []telemetry.Reading{{Time: time.Now().UTC(), Device: dev, Pod: telemetry.PodRef{Namespace: pod.Namespace, Name: pod.Name, Container: "main"},
					Share: 1, Attribution: "exclusive", Values: telemetry.Values{telemetry.SMActive: 0, telemetry.GPUUtil: 0}}}}
			body, _ := json.Marshal(batch)
			for _, url := range []string{survivor.URL, first.URL} {
				req, _ := http.NewRequestWithContext(pushCtx, "POST", url+"/api/v1/telemetry", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+agent)
				req.Header.Set("Content-Type", "application/json")
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
					break
				}
			}
			select {
			case <-pushCtx.Done():
			case <-time.After(5 * time.Second):
			}
		}
	}()
	defer func() { stopPushing(); <-pushed }()
	var w model.Workload
	waitfor.Until(t, 4*time.Minute, "the notebook stopped as idle", func() error {
		if w = workload(); w.Status != "IdleStopped" {
			mu.Lock()
			defer mu.Unlock()
			return fmt.Errorf("%s (%s); %d warnings delivered", w.Status, servertest.Deref(w.Reason), len(warnings))
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	t.Logf("the warning in %d deliveries; stopped at %s (the warning said %s), %v after the kill", len(warnings), w.UpdatedAt.UTC().Format(time.RFC3339Nano), stopAt, w.UpdatedAt.Sub(killedAt).Round(100*time.Millisecond))
	if killedAt.IsZero() || len(slices.Compact(slices.Sorted(slices.Values(warnings)))) != 1 || refused != 0 {
		t.Fatalf("warning deliveries %v (%d refused): want one warning, its delivery cut by the leader's death", warnings, refused)
	}
	at, err := time.Parse(time.RFC3339, stopAt)
	if err != nil || w.UpdatedAt.Before(at) {
		t.Errorf("stopped at %v, before the warning's %q (%v)", w.UpdatedAt, stopAt, err)
	}
	if !strings.Contains(survivor.Log.String(), `msg="leading:`) {
		t.Error("the survivor never led: who stopped it?")
	}
}

// replicaLease is how long a replica pair's Lease lasts: how soon the
// survivor takes over a killed leader's loops.
const replicaLease = 4 * time.Second

// replicaPair starts two `gantry serve` replicas on one PostgreSQL database
// and the test cluster, with a Lease of their own (replicaLease), one
// development signing key and env, and waits until one of them leads: it
// returns that one first.
func replicaPair(t *testing.T, dsn string, env ...string) (leader, other *servertest.Process) {
	t.Helper()
	data := t.TempDir()
	lease := "gantry-ha-" + strings.ToLower(rand.Text()[:6])
	grantLease(t, lease)
	env = append([]string{"GANTRY_NAMESPACE=" + lease, "GANTRY_LEASE_DURATION=" + replicaLease.String()}, env...)
	a := startServe(t, "", "", data, env, "--db-driver", "postgres", "--db", dsn)
	b := startServe(t, "", "", data, env, "--db-driver", "postgres", "--db", dsn)
	waitfor.Until(t, 60*time.Second, "one replica to lead", func() error {
		la, lb := strings.Contains(a.Log.String(), `msg="leading:`), strings.Contains(b.Log.String(), `msg="leading:`)
		switch {
		case la && lb:
			return errors.New("both lead")
		case la:
			leader, other = a, b
		case lb:
			leader, other = b, a
		default:
			return errors.New("neither leads yet")
		}
		return nil
	})
	return leader, other
}
