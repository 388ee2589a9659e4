// Package workloadtest holds test doubles for the workload service's
// dependencies, for tests only: an authorizer that allows everything (the
// explicit stand-in for "no checks", which production cannot express) and an
// in-memory cluster that records what it is asked and can be told to fail.
package workloadtest

import (
	"context"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gantryhq/gantry/internal/access"
	"github.com/gantryhq/gantry/internal/budget"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/workload"
)

// AllowAll is an authorizer that allows every operation in every team.
type AllowAll struct{}

// Allowed implements workload.Authorizer.
func (AllowAll) Allowed(identity.Identity, team.Name, access.Permission) bool { return true }

// Teams implements workload.Authorizer.
func (AllowAll) Teams(identity.Identity, access.Permission) (bool, []string) { return true, nil }

// MayUse implements workload.Authorizer.
func (AllowAll) MayUse(team.Name, access.Use) error { return nil }

// Cluster is an in-memory workload.Cluster: applied primary objects and
// whether each runs. SetErr makes every call fail.
type Cluster struct {
	mu         sync.Mutex
	objects    map[string]workload.ObjectRef // by namespace/name
	admissions map[string]workload.Admission // by workload id
	held       map[string]bool               // teams whose queue was held
	applied    map[string][]render.Object    // the objects last applied, by workload id
	err        error
	// Most is what MostOnOneNode answers (0: 8, a node of eight GPUs; -1:
	// none of the class's nodes has the resource).
	Most int
	// CPUCores is the allocatable CPU of the one CPU node FreeCPU answers
	// with (0: 16 cores; -1: no CPU node at all).
	CPUCores float64
}

// FreeCPU implements workload.Cluster: one CPU node, all of it free.
func (c *Cluster) FreeCPU(context.Context, string) (int64, int64, int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.CPUCores {
	case 0:
		return 16000, 16000, 1, nil
	case -1:
		return 0, 0, 0, nil
	}
	milli := int64(c.CPUCores * 1000)
	return milli, milli, 1, nil
}

// MostOnOneNode implements workload.Cluster: the class has one node.
func (c *Cluster) MostOnOneNode(context.Context, gpu.Class, string) (int, int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.Most {
	case 0:
		return 8, 1, nil
	case -1:
		return 0, 1, nil
	}
	return c.Most, 1, nil
}

// NewCluster returns an empty cluster.
func NewCluster() *Cluster { return &Cluster{objects: map[string]workload.ObjectRef{}} }

// fail is the error every call answers with (nil: none).
func (c *Cluster) fail() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// SetErr makes every later call fail with err (nil: succeed).
func (c *Cluster) SetErr(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
}

// EnsureNamespace implements workload.Cluster.
func (c *Cluster) EnsureNamespace(context.Context, string, team.Name) error {
	return c.fail()
}

// Apply implements workload.Cluster: the primary object is kept, running;
// one created once (render.CreatedOnce) that is already there is left as
// it is, as kube.Cluster leaves it.
func (c *Cluster) Apply(_ context.Context, objs []render.Object) error {
	if err := c.fail(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.applied == nil {
		c.applied = map[string][]render.Object{}
	}
	for _, o := range objs {
		kind := o.GetObjectKind().GroupVersionKind().Kind
		if id := o.GetLabels()[render.LabelWorkloadID]; id != "" && kind != "" {
			c.applied[id] = objs
		}
		key := o.GetNamespace() + "/" + o.GetName()
		if _, there := c.objects[key]; there && render.CreatedOnce(kind) {
			continue
		}
		if render.IsPrimary(kind) {
			c.objects[key] = workload.ObjectRef{Namespace: o.GetNamespace(), Kind: kind, Name: o.GetName(),
				WorkloadID: o.GetLabels()[render.LabelWorkloadID], Running: true}
		}
	}
	return nil
}

// Applied is what was last applied for workload id (nil: nothing).
func (c *Cluster) Applied(id string) []render.Object {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.applied[id]
}

// Delete implements workload.Cluster.
func (c *Cluster) Delete(_ context.Context, namespace, kind, name string) error {
	if err := c.fail(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.objects, namespace+"/"+name)
	return nil
}

// SetRunning implements workload.Cluster.
func (c *Cluster) SetRunning(_ context.Context, o workload.ObjectRef, run bool) error {
	if err := c.fail(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := o.Namespace + "/" + o.Name
	got, ok := c.objects[k]
	if !ok {
		return &fault.NotFound{Kind: o.Kind, Name: o.Name}
	}
	got.Running = run
	c.objects[k] = got
	return nil
}

// SetAdmission implements workload.Cluster: it records the check.
func (c *Cluster) SetAdmission(_ context.Context, _ string, id string, a workload.Admission) error {
	if err := c.fail(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.admissions == nil {
		c.admissions = map[string]workload.Admission{}
	}
	c.admissions[id] = a
	return nil
}

// HoldQueue implements workload.Cluster: it records the hold.
func (c *Cluster) HoldQueue(_ context.Context, t team.Name) error {
	team := t.String()
	if err := c.fail(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held == nil {
		c.held = map[string]bool{}
	}
	c.held[team] = true
	return nil
}

// Held says whether the team's queue was held.
func (c *Cluster) Held(t team.Name) bool {
	team := t.String()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.held[team]
}

// Admission is the check last set on workload id.
func (c *Cluster) Admission(id string) (workload.Admission, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.admissions[id]
	return a, ok
}

// NoBudgets is a budget service for teams without budgets or approval
// rules: every launch goes ahead.
type NoBudgets struct{}

// Verdict implements workload.Budgets.
func (NoBudgets) Verdict(context.Context, team.Name, float64, float64) (budget.Verdict, time.Duration, error) {
	return budget.Verdict{}, budget.DefaultExpiry, nil
}

// Held implements workload.Budgets.
func (NoBudgets) Held(context.Context, team.Name) (string, bool, error) { return "", false, nil }

// Month implements workload.Budgets: no monthly budget.
func (NoBudgets) Month(context.Context, team.Name, float64, time.Time, time.Time) (*budget.Status, []budget.Alert, error) {
	return nil, nil, nil
}

// Events implements workload.Cluster: none.
func (c *Cluster) Events(context.Context, string, string, string) ([]workload.Event, error) {
	return []workload.Event{}, c.fail()
}

// Logs implements workload.Cluster.
func (c *Cluster) Logs(context.Context, string, string, bool, int64) (io.ReadCloser, error) {
	if err := c.fail(); err != nil {
		return nil, err
	}
	return io.NopCloser(strings.NewReader("")), nil
}

// Managed implements workload.Cluster.
func (c *Cluster) Managed(context.Context) ([]workload.ObjectRef, error) {
	if err := c.fail(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := slices.Collect(maps.Values(c.objects))
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}

// Primary implements workload.Cluster.
func (c *Cluster) Primary(_ context.Context, o workload.ObjectRef) (workload.ObjectRef, error) {
	if err := c.fail(); err != nil {
		return o, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, got := range c.objects {
		if got.Kind == o.Kind && got.Namespace == o.Namespace && got.Name == o.Name {
			return got, nil
		}
	}
	return o, &fault.NotFound{Kind: o.Kind, Name: o.Name}
}

// Object returns the primary object of a workload, if the cluster has it.
func (c *Cluster) Object(workloadID string) (workload.ObjectRef, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, o := range c.objects {
		if o.WorkloadID == workloadID {
			return o, true
		}
	}
	return workload.ObjectRef{}, false
}

// Put places an object on the cluster as if someone else had applied it.
func (c *Cluster) Put(o workload.ObjectRef) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.objects[o.Namespace+"/"+o.Name] = o
}
