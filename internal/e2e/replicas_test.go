package e2e_test

import (
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/devcluster/clustertest"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/store/storetest"
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
	data := t.TempDir() // one development signing key for both
	lease := "gantry-ha-" + strings.ToLower(rand.Text()[:6])
	const leaseDuration = 4 * time.Second
	replica := func() *servertest.Process {
		return startServe(t, "", "", data, []string{"GANTRY_NAMESPACE=" + lease, "GANTRY_LEASE_DURATION=" + leaseDuration.String()},
			"--db-driver", "postgres", "--db", dsn)
	}
	grantLease(t, lease)
	a, b := replica(), replica()
	var leader, survivor *servertest.Process
	waitfor.Until(t, 60*time.Second, "one replica to lead", func() error {
		la, lb := strings.Contains(a.Log.String(), `msg="leading:`), strings.Contains(b.Log.String(), `msg="leading:`)
		switch {
		case la && lb:
			return errors.New("both lead")
		case la:
			leader, survivor = a, b
		case lb:
			leader, survivor = b, a
		default:
			return errors.New("neither leads yet")
		}
		return nil
	})
	tok := signInToken(t, a.URL, "ada")

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
		url := []*servertest.Process{a, b}[i%2].URL
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
	t.Logf("the survivor leads %v after the kill (lease %v)", time.Since(killedAt).Round(100*time.Millisecond), leaseDuration)

	// Every launch is there once, applied once, and ran to its end.
	if len(accepted) != n {
		t.Fatalf("%d launches answered of %d", len(accepted), n)
	}
	servertest.CheckLaunches(t, servertest.Client(survivor.URL, tok), cluster.Client, team, accepted, 120*time.Second, nil)
}
