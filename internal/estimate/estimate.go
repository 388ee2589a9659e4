// Package estimate answers what a launch would cost and whether it would
// start now, before it is made: its price per hour (its GPUs' share at the
// class's on-demand or spot price), its cost at the template's max runtime,
// the team's quota of the class and what of it is in use, and the free
// capacity of the class in the cluster. It checks what a launch checks (by
// previewing it) and records nothing.
package estimate

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/quota"
	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/workload"
)

// Previewer renders a launch after the checks a launch makes.
type Previewer interface {
	Preview(ctx context.Context, owner string, req workload.Request) (workload.Rendered, error)
}

// Quotas says a team's quota.
type Quotas interface {
	Quota(team string) quota.Quota
}

// Cluster says how much of a class a team's queue holds and how much of it
// is free on the nodes.
type Cluster interface {
	// QueueUsage is the GPUs of class the team's Kueue queue has admitted,
	// and how many of its workloads wait.
	QueueUsage(ctx context.Context, team, class string) (usedGPUs float64, pending int, err error)
	// FreeGPUs is the units of resource (whole GPUs, or slices of a MIG
	// profile) on the class's nodes that no pod requests: in all, and the
	// most on one node.
	FreeGPUs(ctx context.Context, class gpu.Class, resource string) (total, onOneNode int, err error)
}

// Options configure a Service. Cluster nil: there is no cluster (gantry
// serve without a kubeconfig), and whether it would start is not known.
type Options struct {
	Previewer Previewer
	Quotas    Quotas
	Cluster   Cluster
	// Kueue says quotas are enforced (config quota.kueue); without it the
	// quota is not weighed.
	Kueue bool
}

// Service estimates launches.
type Service struct{ o Options }

// New returns a Service; Previewer and Quotas are required.
func New(o Options) (*Service, error) {
	if o.Previewer == nil || o.Quotas == nil {
		return nil, fmt.Errorf("estimate.New: Previewer and Quotas are required")
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
	// Quota is the team's quota of the class (GPUs); QuotaUsed what its
	// queue has admitted; Cohort where it may borrow more.
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
}

// Estimate previews req (as owner) and prices it.
func (s *Service) Estimate(ctx context.Context, owner string, req workload.Request) (Estimate, error) {
	rd, err := s.o.Previewer.Preview(ctx, owner, req)
	if err != nil {
		return Estimate{}, err
	}
	r := rd.Choice
	spec := rd.Version.Template.Spec
	e := Estimate{Class: r.Class.Name, Count: r.Count, GPUs: float64(r.Count)}
	if r.MIG != nil {
		e.MIGProfile = r.MIG.Name
		e.GPUs = float64(r.Count) * math.Max(r.MIG.ComputeShare(), r.MIG.MemoryShare())
	}
	price, spot := r.Class.HourlyPrice(r.MIG, r.Count, spec.Scheduling.Spot)
	e.PricePerHour, e.Spot = round(price), spot
	if d, err := time.ParseDuration(spec.Lifecycle.MaxRuntime); err == nil && d > 0 {
		e.MaxRuntime = d
		e.CostAtMaxRuntime = round(e.PricePerHour * d.Hours())
	}
	q := s.o.Quotas.Quota(req.Team.String())
	e.Quota, e.Cohort = q.For(r.Class.Name), q.Cohort
	if s.o.Cluster == nil {
		e.Why = "no cluster: whether it would start is not known"
		return e, nil
	}
	if s.o.Kueue {
		if e.QuotaUsed, e.Pending, err = s.o.Cluster.QueueUsage(ctx, req.Team.String(), r.Class.Name); err != nil {
			return Estimate{}, err
		}
	}
	resource := "nvidia.com/gpu"
	switch {
	case r.MIG != nil:
		resource = r.MIG.Resource()
	case r.Confidential:
		resource = render.ResourcePassthrough
	}
	free, onOne, err := s.o.Cluster.FreeGPUs(ctx, r.Class, resource)
	if err != nil {
		return Estimate{}, err
	}
	e.Known, e.Free = true, free
	left := e.Quota - e.QuotaUsed
	switch {
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
	return e, nil
}

func round(v float64) float64 { return math.Round(v*100) / 100 }

func num(v float64) string { return fmt.Sprintf("%.3g", v) }
