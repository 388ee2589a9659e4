// Package nodegroup owns the platform team's node groups: for each GPU class,
// the pools of machines it runs on — how many nodes (min and max), GPUs per
// node, the machine's price per node-hour, how it is bought (reserved,
// on-demand or spot), how long one takes to boot and how long an empty one
// stays before it goes. The groups are data the platform team edits
// (templates/node-groups.yaml); the node autoscaler is configured from them
// (package karpenter under internal/kube), and launches that no group could
// ever hold are refused here, with the numbers.
package nodegroup

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/yamldoc"
)

// APIVersion and Kind identify a node group file.
const (
	APIVersion = "gantry.dev/v1alpha1"
	Kind       = "NodeGroupList"
)

// Purchase is how a group's machines are bought.
type Purchase string

// The purchase kinds. Reserved machines are paid whether used or not: a
// reserved group keeps min nodes at all times, and what they hold idle is
// the platform's idle cost, not a team's. On-demand machines are paid while
// they run. Spot machines are cheaper and can be taken back at any time.
const (
	Reserved Purchase = "reserved"
	OnDemand Purchase = "on-demand"
	Spot     Purchase = "spot"
)

// Purchases lists the purchase kinds, cheapest commitment last.
var Purchases = []Purchase{Reserved, OnDemand, Spot}

// Defaults for what a group leaves out.
const (
	DefaultBootTime  = 3 * time.Minute
	DefaultQuietTime = 10 * time.Minute
)

// File is the on-disk form of the node groups.
type File struct {
	APIVersion string  `json:"apiVersion"`
	Kind       string  `json:"kind"`
	Groups     []Group `json:"groups"`
}

// Group is one pool of identical GPU machines of one class.
type Group struct {
	Name        string   `json:"name"`
	Class       string   `json:"class"`
	Purchase    Purchase `json:"purchase"`
	GPUsPerNode int      `json:"gpusPerNode"`
	Min         int      `json:"min"`
	Max         int      `json:"max"`
	// PricePerNodeHour is what one machine costs an hour, in the classes'
	// currency; a GPU-hour on it costs PricePerNodeHour / GPUsPerNode.
	PricePerNodeHour float64 `json:"pricePerNodeHour"`
	// BootTime is how long a new machine typically takes to join (default
	// 3m); the wait reasons quote it, and the simulated cluster boots in it.
	BootTime config.Duration `json:"bootTime,omitempty"`
	// QuietTime is how long a machine stays empty before it is removed
	// (default 10m). Reserved groups never go below min.
	QuietTime config.Duration `json:"quietTime,omitempty"`
	// WarmPerDay is the most, in the classes' currency, that machines kept
	// warm ahead of the forecast (placeholder pods that real work
	// preempts) may cost in a day (UTC); 0: the group is never warmed.
	// Reserved groups are always there and are not warmed.
	WarmPerDay float64 `json:"warmPerDay,omitempty"`
}

// GPUHourPrice is the price of one GPU-hour on the group's machines.
func (g Group) GPUHourPrice() float64 {
	return math.Round(g.PricePerNodeHour/float64(g.GPUsPerNode)*10000) / 10000
}

// MaxGPUs is the most GPUs the group can hold.
func (g Group) MaxGPUs() int { return g.Max * g.GPUsPerNode }

// Boot is the group's boot time, its default when unset.
func (g Group) Boot() time.Duration {
	if g.BootTime <= 0 {
		return DefaultBootTime
	}
	return time.Duration(g.BootTime)
}

// Quiet is the group's quiet time, its default when unset.
func (g Group) Quiet() time.Duration {
	if g.QuietTime <= 0 {
		return DefaultQuietTime
	}
	return time.Duration(g.QuietTime)
}

// Set is a validated set of node groups. A nil or empty Set means the
// cluster's nodes are fixed: nothing scales and nothing is refused for size.
// Its groups can be replaced whole (Replace: the platform team's edits over
// the file), and every holder of the Set reads the new ones.
type Set struct {
	groups atomic.Pointer[[]Group]
}

// list is the groups now (never to be modified).
func (s *Set) list() []Group {
	if s == nil {
		return nil
	}
	if p := s.groups.Load(); p != nil {
		return *p
	}
	return nil
}

// Replace puts o's groups in force in s.
func (s *Set) Replace(o *Set) {
	g := slices.Clone(o.list())
	s.groups.Store(&g)
}

var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$`)

// MaxPerGroup bounds min and max nodes of one group.
const MaxPerGroup = 10000

// LoadFile reads and validates a node group file against the GPU classes.
func LoadFile(path string, classes []string) (*Set, error) {
	data, err := yamldoc.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read node groups: %w", err)
	}
	return Parse(path, data, classes)
}

// Parse decodes and validates a node group file; every problem carries
// file:line.
func Parse(file string, data []byte, classes []string) (*Set, error) {
	return yamldoc.Parse(file, data, func(f File) (*Set, error) { return New(f, classes) })
}

// New validates decoded groups: names unique, a known class, a purchase
// kind, 1–64 GPUs per node, 0 ≤ min ≤ max, max ≥ 1, a price that is not
// negative, boot and quiet times that are not negative.
func New(f File, classes []string) (*Set, error) {
	var errs fault.List
	yamldoc.Header(&errs, f.APIVersion, f.Kind, APIVersion, Kind)
	seen := map[string]bool{}
	for i, g := range f.Groups {
		p := fmt.Sprintf("groups[%d]", i)
		if !nameRE.MatchString(g.Name) {
			errs.Addf(p+".name", "%q is not a valid group name (lower-case letters, digits and '-', at most 40)", g.Name)
		} else if seen[g.Name] {
			errs.Addf(p+".name", "duplicate group %q", g.Name)
		}
		seen[g.Name] = true
		if !slices.Contains(classes, g.Class) {
			errs.Addf(p+".class", "%q is not a GPU class (one of %s)", g.Class, strings.Join(classes, ", "))
		}
		if !slices.Contains(Purchases, g.Purchase) {
			errs.Addf(p+".purchase", "%q is not one of reserved, on-demand, spot", g.Purchase)
		}
		if g.GPUsPerNode < 1 || g.GPUsPerNode > 64 {
			errs.Addf(p+".gpusPerNode", "%d: must be between 1 and 64", g.GPUsPerNode)
		}
		if g.Min < 0 || g.Min > MaxPerGroup {
			errs.Addf(p+".min", "%d: must be between 0 and %d", g.Min, MaxPerGroup)
		}
		if g.Max < 1 || g.Max > MaxPerGroup {
			errs.Addf(p+".max", "%d: must be between 1 and %d", g.Max, MaxPerGroup)
		} else if g.Min > g.Max {
			errs.Addf(p+".max", "%d is below min (%d)", g.Max, g.Min)
		}
		if g.Purchase == Reserved && g.Min != g.Max {
			errs.Addf(p+".min", "a reserved group is bought whole: min (%d) must equal max (%d)", g.Min, g.Max)
		}
		if g.Purchase != Reserved && g.Min != 0 {
			// The autoscaler keeps no floor under a pool; machines that
			// must always be there are a reserved group.
			errs.Addf(p+".min", "%d: %s groups start from 0 (machines that are always there are a reserved group)", g.Min, g.Purchase)
		}
		if g.PricePerNodeHour < 0 || math.IsNaN(g.PricePerNodeHour) || math.IsInf(g.PricePerNodeHour, 0) {
			errs.Addf(p+".pricePerNodeHour", "must be a price, not negative")
		}
		if g.BootTime < 0 {
			errs.Addf(p+".bootTime", "cannot be negative")
		}
		switch {
		case g.WarmPerDay < 0 || math.IsNaN(g.WarmPerDay) || math.IsInf(g.WarmPerDay, 0):
			errs.Addf(p+".warmPerDay", "must be an amount a day, not negative")
		case g.WarmPerDay > 0 && g.Purchase == Reserved:
			errs.Addf(p+".warmPerDay", "a reserved group's machines are always there: there is nothing to warm")
		case g.WarmPerDay > 0 && g.PricePerNodeHour <= 0:
			errs.Addf(p+".warmPerDay", "a group without a price cannot be held to a cap in dollars (set pricePerNodeHour)")
		}
		if g.QuietTime < 0 {
			errs.Addf(p+".quietTime", "cannot be negative")
		}
	}
	if err := errs.Err(); err != nil {
		return nil, err
	}
	set := &Set{}
	g := slices.Clone(f.Groups)
	set.groups.Store(&g)
	return set, nil
}

// List returns the groups in file order.
func (s *Set) List() []Group {
	return slices.Clone(s.list())
}

// Get returns a group by name.
func (s *Set) Get(name string) (Group, bool) {
	for _, g := range s.list() {
		if g.Name == name {
			return g, true
		}
	}
	return Group{}, false
}

// ForClass returns the groups of a class, in file order.
func (s *Set) ForClass(class string) []Group {
	var out []Group
	for _, g := range s.list() {
		if g.Class == class {
			out = append(out, g)
		}
	}
	return out
}

// Request is what a launch asks of one class: Pods pods of GPUsPerPod GPUs
// each (whole GPUs; MIG slices are not placed by node groups).
type Request struct {
	Class      string
	GPUsPerPod int
	Pods       int
	Spot       bool // the launch may run on spot machines
}

// TooBigError says no node group of a class could ever hold a launch, with
// the numbers.
type TooBigError struct {
	Class   string
	Asked   int    // GPUs asked in all (or per pod, with PerPod)
	Most    int    // the most the class's groups can give
	PerPod  bool   // a single pod is bigger than the largest machine
	Details string // the groups counted
}

func (e *TooBigError) Error() string {
	if e.PerPod {
		return fmt.Sprintf("each pod asks for %d %s GPUs, but the largest machine in its node groups has %d (%s)",
			e.Asked, e.Class, e.Most, e.Details)
	}
	return fmt.Sprintf("the launch asks for %d %s GPUs, but its node groups can hold at most %d (%s)",
		e.Asked, e.Class, e.Most, e.Details)
}

// Check refuses a request that the class's node groups could never hold
// even at their max: a pod larger than the largest machine, or more GPUs in
// all than every group's max together (spot groups count only for launches
// that may run on spot). A class without groups is not checked: its nodes
// are whatever the cluster has.
func (s *Set) Check(r Request) error {
	groups := s.ForClass(r.Class)
	if len(groups) == 0 || r.GPUsPerPod <= 0 || r.Pods <= 0 {
		return nil
	}
	largest, total := 0, 0
	var parts []string
	for _, g := range groups {
		if g.Purchase == Spot && !r.Spot {
			continue
		}
		largest = max(largest, g.GPUsPerNode)
		total += g.MaxGPUs()
		parts = append(parts, fmt.Sprintf("%s: %d × %d", g.Name, g.Max, g.GPUsPerNode))
	}
	sort.Strings(parts)
	details := strings.Join(parts, ", ")
	if details == "" {
		details = "only spot groups, and the launch does not allow spot"
	}
	if r.GPUsPerPod > largest {
		return &TooBigError{Class: r.Class, Asked: r.GPUsPerPod, Most: largest, PerPod: true, Details: details}
	}
	// Pods are placed whole: count how many fit on each group's machines.
	fit := 0
	for _, g := range groups {
		if g.Purchase == Spot && !r.Spot {
			continue
		}
		fit += g.Max * (g.GPUsPerNode / r.GPUsPerPod)
	}
	if fit < r.Pods {
		return &TooBigError{Class: r.Class, Asked: r.GPUsPerPod * r.Pods, Most: min(total, fit*r.GPUsPerPod), Details: details}
	}
	return nil
}
