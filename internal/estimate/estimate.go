// Package estimate answers what a launch would cost and whether it would
// start now, before it is made: its price per hour (its GPUs' share at the
// class's on-demand or spot price, and what spot saves), its cost at the
// template's max runtime, the team's quota of the class and what of it is in
// use, the free capacity of the class in the cluster, the team's budget left
// and whether the launch would wait for approval or be held; and, for "N
// GPUs with at least M GiB each", the cheapest class or MIG profile the
// template and the team allow that holds it. It checks what a launch checks
// (by previewing it) and records nothing.
package estimate

import (
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/gantryhq/gantry/internal/budget"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/quota"
	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/team"
	"github.com/gantryhq/gantry/internal/template"
	"github.com/gantryhq/gantry/internal/workload"
)

// Previewer renders a launch after the checks a launch makes.
type Previewer interface {
	Preview(ctx context.Context, owner string, req workload.Request) (workload.Rendered, error)
}

// Quotas says a team's quota.
type Quotas interface {
	Quota(t team.Name) quota.Quota
}

// Cluster says how much of a class a team's queue holds and how much of it
// is free on the nodes.
type Cluster interface {
	// QueueUsage is the GPUs of class the team's Kueue queue has admitted,
	// and how many of its workloads wait.
	QueueUsage(ctx context.Context, t team.Name, class string) (usedGPUs float64, pending int, err error)
	// FreeGPUs is the units of resource (whole GPUs, or slices of a MIG
	// profile) on the class's nodes that no pod requests: in all, and the
	// most on one node.
	// mostOnOneNode is the most any one node of the class has at all
	// (allocatable, cordoned ones too): what could ever be placed on one.
	// nodes is how many nodes the class has; mostOnOneNode is -1 when a node
	// lists the resource at 0 and none has more.
	FreeGPUs(ctx context.Context, class gpu.Class, resource string) (total, onOneNode, mostOnOneNode, nodes int, err error)
	// FreeCPU is the millicores no pod requests on the freest CPU node
	// (labelled label=true), the most any one has at all, and how many
	// there are.
	FreeCPU(ctx context.Context, label string) (onOneNode, mostOnOneNode int64, nodes int, err error)
}

// Budgets say where a team's budget stands and what it makes of a launch.
type Budgets interface {
	Status(ctx context.Context, t team.Name) (*budget.Status, []budget.Status, error)
	Verdict(ctx context.Context, t team.Name, pricePerHour, hours float64) (budget.Verdict, time.Duration, error)
}

// Options configure a Service. Cluster nil: there is no cluster (gantry
// serve without a kubeconfig), and whether it would start is not known.
type Options struct {
	Previewer Previewer
	Quotas    Quotas
	Budgets   Budgets
	Cluster   Cluster
	// Kueue says quotas are enforced (config quota.kueue); without it the
	// quota is not weighed.
	Kueue bool
}

// Service estimates launches.
type Service struct{ o Options }

// New returns a Service; Previewer, Quotas and Budgets are required.
func New(o Options) (*Service, error) {
	if o.Previewer == nil || o.Quotas == nil || o.Budgets == nil {
		return nil, fmt.Errorf("estimate.New: Previewer, Quotas and Budgets are required")
	}
	return &Service{o: o}, nil
}

// Estimate is the answer.
type Estimate struct {
	Class        string
	MIGProfile   string
	Count        int
	GPUs         float64 // whole GPUs' worth: a MIG slice is its share
	Spot         bool
	PricePerHour float64 // USD
	// MaxRuntime and CostAtMaxRuntime are zero when the template sets none.
	MaxRuntime       time.Duration
	CostAtMaxRuntime float64
	// Quota is the team's quota of the class (GPUs; a CPU-only launch's:
	// the team's cores, 0 when unset); QuotaUsed what its queue has
	// admitted of it; Cohort where it may borrow more GPUs.
	Quota     float64
	QuotaUsed float64
	Cohort    string
	// Known says the cluster answered; then Pending is how many of the
	// team's workloads wait in its queue, Free the free units of what it
	// asks for (whole GPUs or slices of its MIG profile) in the class,
	// StartsNow whether it would be admitted and placed at once, and Why
	// says why not.
	Known     bool
	Pending   int
	Free      int
	StartsNow bool
	Why       string
	// Never: no node of the fleet has what it asks for on one node, so it
	// cannot start however long it waits (Why says so).
	Never bool
	// OnDemandPerHour is the on-demand price, when it runs on spot (what
	// spot saves is the difference).
	OnDemandPerHour float64
	// Budget is the team's budget as it stands (nil: none).
	Budget *budget.Status
	// Approval: the launch would wait for a team-admin's approval; Held:
	// the team's spent budget would hold it in its queue. Verdict says why.
	Approval bool
	Held     bool
	Verdict  string
	// Options are the classes and MIG profiles, cheapest first, that the
	// template and the team allow and that give each GPU or slice at least
	// the memory asked for (EstimateOptions with MinMemoryGiB).
	Options []Option
}

// Option is one way to run a launch asking for a minimum memory per GPU.
type Option struct {
	Class        string
	MIGProfile   string // "": whole GPUs
	Count        int
	MemoryGiB    float64 // per GPU or slice
	Spot         bool
	PricePerHour float64
	Free         int  // free units in the cluster (Known)
	Known        bool // the cluster answered
}

// Request is what to estimate: a launch, and optionally the least memory
// each GPU or slice needs (0: none), for the cheapest options.
type Request struct {
	workload.Request
	MinMemoryGiB float64
}

// Estimate previews req (as owner) and prices it.
func (s *Service) Estimate(ctx context.Context, owner string, er Request) (Estimate, error) {
	req := er.Request
	rd, err := s.o.Previewer.Preview(ctx, owner, req)
	if err != nil {
		return Estimate{}, err
	}
	e, err := s.price(ctx, rd, req)
	if err != nil {
		return Estimate{}, err
	}
	if er.MinMemoryGiB > 0 {
		if e.Options, err = s.options(ctx, owner, req, rd, er.MinMemoryGiB); err != nil {
			return Estimate{}, err
		}
	}
	return e, nil
}

// cpuOnly is whether a CPU-only launch starts now: GPU quotas do not
// apply; the team's quota of cores (where set and Kueue enforces quotas)
// and the CPU nodes' room do. Its quota fields are in cores.
func (s *Service) cpuOnly(ctx context.Context, e Estimate, rd workload.Rendered, t team.Name) (Estimate, error) {
	const runs = "CPU-only: it runs on the CPU nodes, priced per core-hour; GPU quotas do not apply"
	if s.o.Cluster == nil {
		e.Why = "no cluster: whether it would start is not known"
		return held(e), nil
	}
	label := rd.Meta.CPUNodeLabel
	need := int64(math.Round(rd.Choice.CPUCores() * 1000))
	onOne, most, nodes, err := s.o.Cluster.FreeCPU(ctx, label)
	if err != nil {
		return Estimate{}, err
	}
	bounded := false
	if q := s.o.Quotas.Quota(t); s.o.Kueue && q.Cores != nil {
		// A bound in a cohort too: the team borrows no cores.
		bounded, e.Quota = true, *q.Cores
		if e.QuotaUsed, e.Pending, err = s.o.Cluster.QueueUsage(ctx, t, gpu.CPUClass); err != nil {
			return Estimate{}, err
		}
	}
	e.Known = true
	cores := func(milli int64) string { return num(float64(milli) / 1000) }
	left := math.Max(0, e.Quota-e.QuotaUsed)
	switch {
	case bounded && float64(need)/1000 > e.Quota+1e-9:
		e.Never = true
		e.Why = fmt.Sprintf("it can never start under the team's quota: it asks for %s cores, more than the team's quota of cores (%s; CPU-only launches borrow none)", cores(need), num(e.Quota))
	case nodes == 0:
		e.Why = fmt.Sprintf("waiting for a CPU node: no node in the cluster is labelled %s=true (CPU-only launches run only there)", label)
	case most < need:
		e.Never = true
		e.Why = fmt.Sprintf("it can never start here: no CPU node has %s cores (the most on one is %s)", cores(need), cores(most))
	case bounded && float64(need)/1000 > left+1e-9:
		e.Why = fmt.Sprintf("queued: it needs %s cores and the team's quota of %s cores has %s left", cores(need), num(e.Quota), num(left))
	case onOne < need:
		e.Why = fmt.Sprintf("waiting for room: no CPU node has %s cores free now (the freest has %s)", cores(need), cores(onOne))
	default:
		e.StartsNow, e.Why = true, runs
	}
	return held(e), nil
}

// price is the estimate of one rendered launch.
func (s *Service) price(ctx context.Context, rd workload.Rendered, req workload.Request) (Estimate, error) {
	var err error
	r := rd.Choice
	spec := rd.Version.Template.Spec
	e := Estimate{Class: r.Class.Name, Count: r.Count, GPUs: float64(r.Count)}
	if r.MIG != nil {
		e.MIGProfile = r.MIG.Name
		e.GPUs = float64(r.Count) * r.MIG.Share()
	}
	price := rd.PricePerHour // GPUs' or, CPU-only, cores'
	_, spot := r.Class.HourlyPrice(r.MIG, r.Count, spec.Scheduling.Spot)
	e.PricePerHour, e.Spot = budget.Round(price), spot
	if spot {
		onDemand, _ := r.Class.HourlyPrice(r.MIG, r.Count, false)
		e.OnDemandPerHour = budget.Round(onDemand)
	}
	if d, err := time.ParseDuration(spec.Lifecycle.MaxRuntime); err == nil && d > 0 {
		e.MaxRuntime = d
		e.CostAtMaxRuntime = budget.Round(e.PricePerHour * d.Hours())
	}
	if e.Budget, _, err = s.o.Budgets.Status(ctx, req.Team); err != nil {
		return Estimate{}, err
	}
	v, _, err := s.o.Budgets.Verdict(ctx, req.Team, price, e.MaxRuntime.Hours())
	if err != nil {
		return Estimate{}, err
	}
	e.Approval, e.Held, e.Verdict = v.Approval, v.Hold, v.Why
	if r.CPUOnly {
		return s.cpuOnly(ctx, e, rd, req.Team)
	}
	q := s.o.Quotas.Quota(req.Team)
	e.Quota, e.Cohort = q.For(r.Class.Name), q.Cohort
	if s.o.Cluster == nil {
		e.Why = "no cluster: whether it would start is not known"
		return held(e), nil
	}
	if s.o.Kueue {
		if e.QuotaUsed, e.Pending, err = s.o.Cluster.QueueUsage(ctx, req.Team, r.Class.Name); err != nil {
			return Estimate{}, err
		}
	}
	resource := render.GPUResource(r)
	free, onOne, most, nodes, err := s.o.Cluster.FreeGPUs(ctx, r.Class, resource)
	if err != nil {
		return Estimate{}, err
	}
	e.Known, e.Free = true, free
	left := e.Quota - e.QuotaUsed
	switch {
	case most == 0 && nodes > 0 && r.Template.Spec.Workload != template.VM:
		e.Never = true
		e.Why = fmt.Sprintf("it can never start here: no node of %s (%d in all) offers %s", r.Class.Name, nodes, resource)
	case most > 0 && most < r.Count && r.Template.Spec.Workload != template.VM:
		// (No node reporting the resource at all is not known: a pool
		// may be scaled to zero; a VM's devices are the cluster's to judge.)
		e.Never = true
		e.Why = fmt.Sprintf("it can never start here: no node of %s has %d %s (the most on one node is %d)", r.Class.Name, r.Count, resource, most)
	case !s.o.Kueue && onOne < r.Count:
		e.Why = fmt.Sprintf("waiting for capacity: no node of %s has %d free %s (quotas are not enforced: quota.kueue is off)", r.Class.Name, r.Count, resource)
	case !s.o.Kueue:
		e.StartsNow = true
	case left+1e-9 < e.GPUs && e.Cohort == "":
		e.Why = fmt.Sprintf("queued: it needs %s GPUs of %s and the team's quota has %s left", num(e.GPUs), r.Class.Name, num(math.Max(0, left)))
	case left+1e-9 < e.GPUs:
		e.Why = fmt.Sprintf("queued unless cohort %s lends: it needs %s GPUs of %s and the team's quota has %s left", e.Cohort, num(e.GPUs), r.Class.Name, num(math.Max(0, left)))
	case onOne < r.Count:
		e.Why = fmt.Sprintf("admitted but waiting for capacity: no node of %s has %d free %s (%d free in all)", r.Class.Name, r.Count, resource, free)
	default:
		e.StartsNow = true
	}
	return held(e), nil
}

// held says that a launch held by the team's budget or waiting for approval
// does not start now, whatever the capacity.
func held(e Estimate) Estimate {
	switch {
	case e.Held:
		e.StartsNow, e.Why = false, workload.HeldPrefix+e.Verdict
	case e.Approval:
		e.StartsNow, e.Why = false, "waits for a team-admin's approval: "+e.Verdict
	}
	return e
}

// options are the classes and MIG profiles of the template that the team
// may launch with the request's count and whose GPU or slice holds at
// least minGiB, cheapest first (then the most free units).
func (s *Service) options(ctx context.Context, owner string, req workload.Request, rd workload.Rendered, minGiB float64) ([]Option, error) {
	g := rd.Version.Template.Spec.GPU
	var out []Option
	for _, class := range g.Classes {
		for _, profile := range append([]string{template.NoMIG}, g.MIGProfiles...) {
			c := req.Choice
			c.Class, c.MIGProfile, c.Count = class, profile, rd.Choice.Count
			alt := req
			alt.Choice = c
			ard, err := s.o.Previewer.Preview(ctx, owner, alt)
			if err != nil {
				continue // the template or the team does not allow it
			}
			r := ard.Choice
			mem := float64(r.Class.MemoryGiB)
			if r.MIG != nil {
				mem = float64(r.Class.MemoryGiB) * float64(r.MIG.Memory) / 8
			}
			if mem < minGiB {
				continue
			}
			e, err := s.price(ctx, ard, alt)
			if err != nil {
				return nil, err
			}
			out = append(out, Option{Class: e.Class, MIGProfile: e.MIGProfile, Count: e.Count, MemoryGiB: mem, Spot: e.Spot,
				PricePerHour: e.PricePerHour, Free: e.Free, Known: e.Known})
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].PricePerHour != out[j].PricePerHour {
			return out[i].PricePerHour < out[j].PricePerHour
		}
		return out[i].Free > out[j].Free
	})
	return out, nil
}

func num(v float64) string { return fmt.Sprintf("%.3g", v) }
