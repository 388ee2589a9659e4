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
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	corev1 "k8s.io/api/core/v1"

	"github.com/gantryhq/gantry/api/client"
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
	beside(t)
	dsn := storetest.PostgresDSN(t)
	replicas, leads := replicaPair(t, dsn, nil)
	leader, survivor := replicas[leads], replicas[1-leads]
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
// budget in seconds, and a webhook receiver that SIGKILLs the replica that
// posts the first alert (the leader: only it sends), before answering. The
// other takes over once the Lease runs out and carries on from what the
// dead one committed: each alert (80 % and 100 %) is written once — one
// outbox message and one audit record each — and delivered, the cut one
// again under its X-Gantry-Delivery id, and the budget says both
// thresholds were reached. (The fault suite's TestLeaderKilledAtEveryWrite
// kills a leader at every write of the pass in one process; this is the
// same fault with a real process's death: its connections dropped, its
// request in flight cut, its Lease held until it expires. The budget's
// limit is warn, so the team's queue is never held and the test may run
// beside others.)
func TestTwoReplicasLeaderKilledMidAlert(t *testing.T) {
	if cluster == nil {
		t.Skip(clustertest.ErrNotRequested)
	}
	beside(t)
	dsn := storetest.PostgresDSN(t)
	team := "al" + strings.ToLower(rand.Text()[:4])
	policy := policyWith(t, "  "+team+":\n    templates: [\"*\"]\n    gpuClasses: [\"*\"]\n    quota: {gpus: {\"*\": 1000}}\n"+
		"    budget: {amount: 0.05}\n")
	rx := newKillingReceiver(t, func(m webhookMessage) bool { return m.Gantry.Event == "budget.threshold" && m.Gantry.Team == team })
	survivor := rx.start(t, dsn, "GANTRY_POLICY_DIR="+policy)
	tok := signInToken(t, survivor.URL, "ada")
	// Two H100s ($13.80/h): 80 % of $0.05 in about 10 s, 100 % in 13 s.
	status, w := launchAt(survivor.URL, tok, team+"-svc", model.LaunchRequest{Template: "vllm-inference", Team: team, Gpu: &model.GPUChoice{Class: new("H100-80GB"), Count: new(2)}})
	if status != 201 {
		t.Fatalf("launch: %d", status)
	}
	t.Cleanup(func() { servertest.Must(rx.left(tok).DeleteWorkloadWithResponse(context.Background(), w.Id))(t) })
	db := rx.db(t, dsn)
	// Every alert's message delivered: what the outbox says, not the
	// receiver alone.
	var messages []string
	waitfor.Until(t, 3*time.Minute, "both alerts delivered after the kill", func() error {
		rows, err := db.QueryContext(t.Context(), `SELECT id FROM notifications WHERE event = 'budget.threshold' AND body LIKE $1 AND delivered_at > 0 ORDER BY id`, "%\"team\":\""+team+"\"%")
		if err != nil {
			return err
		}
		defer rows.Close()
		messages = messages[:0]
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			messages = append(messages, id)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(messages) < 2 {
			return fmt.Errorf("%d alerts delivered (%s)", len(messages), rx.summary())
		}
		return nil
	})
	rx.check(t, messages)
	var undelivered, audits int
	if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM notifications WHERE event = 'budget.threshold' AND body LIKE $1 AND delivered_at = 0`, "%\"team\":\""+team+"\"%").Scan(&undelivered); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM audit WHERE actor = 'gantry' AND action = 'budget alert' AND object LIKE $1`, "%?team="+team).Scan(&audits); err != nil {
		t.Fatal(err)
	}
	br := servertest.Must(rx.left(tok).ListBudgetsWithResponse(t.Context(), &model.ListBudgetsParams{Team: new(team)}))(t)
	if items := servertest.Deref(br.JSON200).Items; len(messages) != 2 || undelivered != 0 || audits != 2 || len(items) != 1 || len(items[0].ThresholdsReached) != 2 {
		t.Errorf("%d alert messages delivered, %d not (want 2 and 0); %d audit records (want 2); budgets %s", len(messages), undelivered, audits, br.Body)
	}
}

// TestTwoReplicasLeaderKilledMidCull kills the leader as a real process in
// the middle of idle culling: two replicas on one PostgreSQL database, a
// notebook whose GPU its node's agent reports idle (a one-minute idle
// timeout: warned at 30 s, stopped at a minute), and a webhook receiver
// that SIGKILLs the replica that posts the idle warning, before answering.
// The other takes over and carries on from the warning the dead one
// committed: one warning message, delivered again under its
// X-Gantry-Delivery id, and the notebook stopped as idle, never before the
// time the warning gave (as recorded with it, to the microsecond).
func TestTwoReplicasLeaderKilledMidCull(t *testing.T) {
	if cluster == nil {
		t.Skip(clustertest.ErrNotRequested)
	}
	beside(t)
	dsn := storetest.PostgresDSN(t)
	templates := templateWith(t, "jupyter-notebook.yaml", "idleTimeout: 2h", "idleTimeout: 1m")
	var nbID atomic.Value
	nbID.Store("")
	rx := newKillingReceiver(t, func(m webhookMessage) bool {
		return m.Gantry.Event == cull.EventIdleWarning && m.Gantry.Workload != "" && m.Gantry.Workload == nbID.Load().(string)
	})
	survivor := rx.start(t, dsn, "GANTRY_TEMPLATES_DIR="+templates)
	tok := signInToken(t, survivor.URL, "ada")
	team := "cu" + strings.ToLower(rand.Text()[:4])
	status, nb := launchAt(survivor.URL, tok, team+"-nb", model.LaunchRequest{Template: "jupyter-notebook", Team: team})
	if status != 201 {
		t.Fatalf("launch: %d", status)
	}
	nbID.Store(nb.Id)
	t.Cleanup(func() { servertest.Must(rx.left(tok).DeleteWorkloadWithResponse(context.Background(), nb.Id))(t) })
	workload := func() model.Workload {
		return servertest.Deref(servertest.Must(rx.left(tok).GetWorkloadWithResponse(t.Context(), nb.Id))(t).JSON200)
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
			for _, p := range rx.replicas {
				req, _ := http.NewRequestWithContext(pushCtx, "POST", p.URL+"/api/v1/telemetry", bytes.NewReader(body))
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
	// The warning's time as the record keeps it (the webhook's text has
	// whole seconds), read while it runs: the stop clears it.
	db := rx.db(t, dsn)
	var stopAt time.Time
	var w model.Workload
	waitfor.Until(t, 4*time.Minute, "the notebook stopped as idle", func() error {
		var warned string
		if err := db.QueryRowContext(t.Context(), `SELECT warned FROM workloads WHERE id = $1`, nb.Id).Scan(&warned); err != nil {
			return err
		}
		var rec struct {
			StopAt time.Time `json:"stopAt"`
		}
		if warned != "" && json.Unmarshal([]byte(warned), &rec) == nil && !rec.StopAt.IsZero() {
			if !stopAt.IsZero() && !rec.StopAt.Equal(stopAt) {
				t.Fatalf("the warning's time changed from %v to %v: warned again", stopAt, rec.StopAt)
			}
			stopAt = rec.StopAt
		}
		if w = workload(); w.Status != "IdleStopped" {
			return fmt.Errorf("%s (%s); %s", w.Status, servertest.Deref(w.Reason), rx.summary())
		}
		return nil
	})
	var messages []string
	rows, err := db.QueryContext(t.Context(), `SELECT id FROM notifications WHERE event = $1 AND body LIKE $2`, cull.EventIdleWarning, "%"+nb.Id+"%")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		messages = append(messages, id)
	}
	rows.Close()
	rx.check(t, messages)
	ended := servertest.Deref(w.EndedAt)
	t.Logf("stopped at %s, the warning's time %s (%v later), %v after the kill", ended.UTC().Format(time.RFC3339Nano), stopAt.UTC().Format(time.RFC3339Nano), ended.Sub(stopAt), ended.Sub(rx.killedAt))
	if len(messages) != 1 || stopAt.IsZero() || ended.Before(stopAt) {
		t.Errorf("%d warning messages (want 1); stopped at %v, the warning said %v", len(messages), ended, stopAt)
	}
}

// webhookMessage is what the receiver reads of a delivery.
type webhookMessage struct {
	Gantry struct {
		Event     string  `json:"event"`
		Team      string  `json:"team"`
		Workload  string  `json:"workload"`
		Threshold float64 `json:"threshold"`
	} `json:"gantry"`
}

// killingReceiver is the webhook endpoint of a replica pair (killSender):
// each replica posts to a path of its own (/0, /1). It verifies every
// delivery; the first that match picks kills its sender with SIGKILL
// before answering (503), and every later one is answered 200 and
// counted by its X-Gantry-Delivery id.
type killingReceiver struct {
	secret   []byte
	match    func(webhookMessage) bool
	replicas [2]*servertest.Process
	hook     *httptest.Server

	mu       sync.Mutex
	waiting  int // the replica that did not lead at the start
	killed   int // the replica killed, -1 none yet
	killedAt time.Time
	cut      string         // the delivery whose post was cut
	mark     int            // the other replica's log length at the kill
	answered map[string]int // posts answered 200 by delivery id
	refused  int
}

func newKillingReceiver(t *testing.T, match func(webhookMessage) bool) *killingReceiver {
	rx := &killingReceiver{secret: []byte("e2e-webhook-secret-0123456789"), match: match, killed: -1, answered: map[string]int{}}
	rx.hook = httptest.NewServer(rx)
	t.Cleanup(rx.hook.Close)
	return rx
}

// start starts the pair with env, each posting its webhooks here, and
// returns the one that does not lead now: the one that will be left (it
// sends nothing until it takes over).
func (rx *killingReceiver) start(t *testing.T, dsn string, env ...string) *servertest.Process {
	t.Helper()
	replicas, leads := replicaPair(t, dsn, func(i int) []string {
		return []string{"GANTRY_NOTIFY_WEBHOOK_URL=" + rx.hook.URL + "/" + strconv.Itoa(i)}
	},
		append([]string{"GANTRY_NOTIFY_WEBHOOK_SECRET=" + string(rx.secret)}, env...)...)
	rx.mu.Lock()
	rx.replicas, rx.waiting = replicas, 1-leads
	rx.mu.Unlock()
	return replicas[1-leads]
}

// left is a client, as tok, of the replica that was not killed (none yet:
// the one that did not lead at the start). It is not always the one start
// returned: on a loaded machine the lead can pass to it before the kill,
// and then it is the one that sends, and dies.
func (rx *killingReceiver) left(tok string) *client.ClientWithResponses {
	rx.mu.Lock()
	defer rx.mu.Unlock()
	i := rx.waiting
	if rx.killed >= 0 {
		i = 1 - rx.killed
	}
	return servertest.Client(rx.replicas[i].URL, tok)
}

func (rx *killingReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rx.mu.Lock()
	defer rx.mu.Unlock()
	if err := notify.Verify(rx.secret, r.Header, body, time.Now(), 5*time.Minute); err != nil {
		rx.refused++
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var m webhookMessage
	if json.Unmarshal(body, &m) != nil || !rx.match(m) {
		return // another message
	}
	sender, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
	if err != nil || sender < 0 || sender > 1 || rx.replicas[sender] == nil {
		http.Error(w, "no such replica", http.StatusNotFound)
		return
	}
	id := r.Header.Get(notify.HeaderDelivery)
	if rx.killed < 0 {
		// The first: its sender dies now, its request unanswered.
		rx.killed, rx.killedAt, rx.cut = sender, time.Now(), id
		rx.mark = len(rx.replicas[1-sender].Log.String())
		rx.replicas[sender].Cmd.Process.Signal(syscall.SIGKILL)
		http.Error(w, "the sender died", http.StatusServiceUnavailable)
		return
	}
	rx.answered[id]++
}

// summary says what reached the receiver, for waits' messages.
func (rx *killingReceiver) summary() string {
	rx.mu.Lock()
	defer rx.mu.Unlock()
	return fmt.Sprintf("killed replica %d; answered %v; %d refused", rx.killed, rx.answered, rx.refused)
}

// check holds the receiver to the outbox's messages: a sender was killed
// with a post in flight, every message was answered since (the cut one
// again, under its id) and nothing else was, no signature was refused, and
// the replica left took the lead after the kill.
func (rx *killingReceiver) check(t *testing.T, messages []string) {
	t.Helper()
	rx.mu.Lock()
	defer rx.mu.Unlock()
	posts := 0
	for _, n := range rx.answered {
		posts += n
	}
	t.Logf("%d messages: %d posts answered after the cut one (%v)", len(messages), posts, rx.answered)
	if rx.killed < 0 || rx.refused != 0 || len(rx.answered) != len(messages) || rx.answered[rx.cut] == 0 {
		t.Fatalf("killed %d, cut %q, answered %v, %d refused; the outbox's messages %v", rx.killed, rx.cut, rx.answered, rx.refused, messages)
	}
	for _, id := range messages {
		if rx.answered[id] == 0 {
			t.Errorf("message %s delivered by the outbox's account, never answered here", id)
		}
	}
	if !strings.Contains(rx.replicas[1-rx.killed].Log.String()[rx.mark:], `msg="leading:`) {
		t.Error("the replica left did not take the lead after the kill: who sent the rest?")
	}
}

// db opens the pair's database.
func (rx *killingReceiver) db(t *testing.T, dsn string) *sql.DB {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// replicaLease is how long a replica pair's Lease lasts: how soon the
// survivor takes over a killed leader's loops.
const replicaLease = 4 * time.Second

// replicaPair starts two `gantry serve` replicas on one PostgreSQL database
// and the test cluster, with a Lease of their own (replicaLease), one
// development signing key, env and each one's own variables (own(i); nil:
// none), and waits until one of them leads: it returns both in start order
// and which leads.
func replicaPair(t *testing.T, dsn string, own func(i int) []string, env ...string) (replicas [2]*servertest.Process, leads int) {
	t.Helper()
	data := t.TempDir()
	lease := "gantry-ha-" + strings.ToLower(rand.Text()[:6])
	grantLease(t, lease)
	env = append([]string{"GANTRY_NAMESPACE=" + lease, "GANTRY_LEASE_DURATION=" + replicaLease.String()}, env...)
	for i := range replicas {
		e := env
		if own != nil {
			e = append(slices.Clone(env), own(i)...)
		}
		replicas[i] = startServe(t, "", "", data, e, "--db-driver", "postgres", "--db", dsn)
	}
	// Who leads now: the replica whose last word on it is "leading:"
	// (the Lease may have changed hands while they started).
	leading := func(p *servertest.Process) bool {
		log := p.Log.String()
		return strings.LastIndex(log, `msg="leading:`) > strings.LastIndex(log, `msg="no longer leading"`)
	}
	waitfor.Until(t, 60*time.Second, "one replica to lead", func() error {
		la, lb := leading(replicas[0]), leading(replicas[1])
		switch {
		case la && lb:
			return errors.New("both lead")
		case la:
			leads = 0
		case lb:
			leads = 1
		default:
			return errors.New("neither leads yet")
		}
		return nil
	})
	return replicas, leads
}
