package fleet

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/nodegroup"
)

// Launch is what one launch asks of the fleet.
type Launch struct {
	ID             string // the workload, for a round's decisions
	Team, Template string
	// Class is its GPU class, or gpu.CPUClass for a CPU-only launch,
	// which runs on a cluster's CPU nodes (Cluster.CPU) and is counted in
	// Cores.
	Class  string
	MIG    string  // a MIG profile of Class, or "" for whole GPUs
	Slices int     // MIG instances of that profile asked, in all
	GPUs   float64 // in all (a MIG slice at its share)
	Cores  float64 // a CPU-only launch's, in all
	Spot   bool    // may run on spot capacity
	// VM is a KubeVirt VM, whose GPUs are passed through (State.FreeVM)
	// and which runs only where KubeVirt does (State.VMs).
	VM     bool
	Images []string // every container's image, as its pods name it
	// repos are Images' repositories, read once a decision (Place).
	repos    []string
	Priority int   // higher is dispatched first within a round
	Order    int64 // then the older (lower) first
	// Hold is the cluster the launch is nominated to now: it stays first
	// while it may still run the launch, so that work does not flap
	// between clusters (the dispatcher clears it once a nomination waited
	// too long). Avoid are clusters tried before in vain: ranked last.
	Hold  string
	Avoid []string
	// Home is the cluster the launch's volumes are on, where alone it may
	// run (a notebook's home, on the worker it first ran on); "" :
	// anywhere. A home no longer in the fleet binds nothing.
	Home string
	// Planned is the cluster a flexible launch's start was planned on
	// (its cleanest window, chosen with the cluster: Sites): first among
	// the clusters that can start it now, a preference, never a rule.
	Planned string
}

// State is what a cluster is doing now, as the dispatcher read it.
type State struct {
	// Reachable is false when the worker cannot be reached or refuses
	// Gantry's credentials; Why says what.
	Reachable bool
	Why       string
	// Free is the GPUs of each class a launch could start on now, and
	// under gpu.CPUClass the cores of its CPU nodes.
	Free map[string]float64
	// FreeMIG is the MIG instances free now, per class and profile (the
	// profiles the cluster's offers name).
	FreeMIG map[string]map[string]float64
	// VMs says the cluster serves KubeVirt's VirtualMachines; FreeVM is
	// the GPUs of each class free now to pass through to a VM (its nodes'
	// KubeVirt device of the class, gpu.Class.VMDeviceName).
	VMs    bool
	FreeVM map[string]float64
	// Used is each team's GPUs per class running or admitted there
	// (under gpu.CPUClass, its CPU-only launches' cores).
	Used map[string]map[string]float64
	// Intensity is the grid's carbon intensity at its region this hour,
	// gCO2e/kWh (0: not known; carbon then weighs nothing there).
	Intensity float64
	// PUE is its site's power usage effectiveness as metering counts it
	// (the cluster's own, else the server's energy.pue); 0: the
	// cluster's own, else 1.
	PUE float64
}

// Candidate is a cluster that may run a launch, with what it would cost
// there and whether it fits now.
type Candidate struct {
	Cluster      string
	Offer        Offer
	PricePerHour float64 // the launch's, at the offer's GPU-hour (core-hour) price
	Free         float64 // GPUs of the class free now; a MIG launch's instances of its profile; a CPU-only one's cores
	FitsNow      bool
	// Carbon is what the fleet's carbon price adds to a GPU-hour there
	// now (USD; 0 without a carbon price or a known intensity), at
	// Intensity gCO2e/kWh.
	Carbon, Intensity float64
}

// score is what a candidate is ranked by: its GPU-hour price with carbon's
// weight.
func (c Candidate) score() float64 { return c.Offer.PricePerGPUHour + c.Carbon }

// Refusal is a cluster that may not run a launch, and why.
type Refusal struct {
	Cluster, Why string
}

// Decision is where a launch goes: the best candidate first, every other
// feasible one after it in order, and why the rest may not run it.
type Decision struct {
	Launch     Launch
	Candidates []Candidate
	Refused    []Refusal
	Reason     string
	best       string // the first by merit alone
}

// Cluster is the chosen cluster ("" when none may run the launch).
func (d Decision) Cluster() string {
	if len(d.Candidates) == 0 {
		return ""
	}
	return d.Candidates[0].Cluster
}

// rule says why a cluster may not run a launch ("" when it may), given the
// offer the launch would use there (the zero Offer when it has none).
type rule func(f *Fleet, l Launch, c Cluster, s State, o Offer) string

// rules are the feasibility rules, in the order they are told.
var rules = []rule{
	func(f *Fleet, l Launch, c Cluster, _ State, _ Offer) string {
		if l.Home == "" || c.Name == l.Home {
			return ""
		}
		if _, listed := f.Get(l.Home); listed {
			return "its volumes are on " + l.Home + ", where alone it runs"
		}
		return ""
	},
	func(_ *Fleet, _ Launch, c Cluster, _ State, _ Offer) string {
		if c.Cordoned {
			return "cordoned: no new work"
		}
		return ""
	},
	func(_ *Fleet, _ Launch, _ Cluster, s State, _ Offer) string {
		if !s.Reachable {
			return "unreachable: " + orUnknown(s.Why)
		}
		return ""
	},
	func(_ *Fleet, l Launch, _ Cluster, s State, _ Offer) string {
		if l.VM && !s.VMs {
			return "runs no VMs (it does not serve KubeVirt's VirtualMachines)"
		}
		return ""
	},
	func(_ *Fleet, l Launch, c Cluster, _ State, o Offer) string {
		switch {
		case o.Class != "":
			return ""
		case l.Class == gpu.CPUClass:
			return "runs no CPU-only launches (it states no cpu nodes)"
		}
		var classes, spot, mig bool
		for _, x := range c.Offers {
			if x.Class != l.Class {
				continue
			}
			classes = true
			spot = spot || x.Purchase == nodegroup.Spot
			mig = mig || slices.Contains(x.MIG, l.MIG)
		}
		switch {
		case !classes:
			return "offers no " + l.Class
		case l.MIG != "" && !mig:
			return fmt.Sprintf("offers no %s slices of %s", l.MIG, l.Class)
		case spot:
			return fmt.Sprintf("offers %s on spot capacity only, and the launch does not allow spot", l.Class)
		}
		return "offers no " + l.Class + " this launch may use"
	},
	func(f *Fleet, l Launch, c Cluster, _ State, _ Offer) string {
		for _, r := range []struct {
			who   string
			rules Rules
		}{{"team " + l.Team, f.TeamRules(l.Team)}, {"template " + l.Template, f.TemplateRules(l.Template)}} {
			for _, k := range sortedKeys(r.rules.Require) {
				if have, ok := c.Labels[k]; !ok || have != r.rules.Require[k] {
					return fmt.Sprintf("%s requires %s=%s; the cluster has %s", r.who, k, r.rules.Require[k], labelText(c.Labels, k))
				}
			}
			if len(r.rules.Pin) > 0 && !slices.Contains(r.rules.Pin, c.Name) {
				return fmt.Sprintf("%s runs only on %s", r.who, strings.Join(r.rules.Pin, ", "))
			}
			if slices.Contains(r.rules.Forbid, c.Name) {
				return r.who + " may not run here"
			}
		}
		return ""
	},
	func(_ *Fleet, l Launch, c Cluster, _ State, _ Offer) string {
		for i, repo := range l.repos {
			if !c.allows(repo) {
				return fmt.Sprintf("runs images from %s only, not %s", strings.Join(c.Images, ", "), l.Images[i])
			}
		}
		return ""
	},
	func(_ *Fleet, l Launch, c Cluster, s State, _ Offer) string {
		caps := c.Caps[l.Team]
		limit, ok := caps[l.Class]
		if !ok && l.Class != gpu.CPUClass { // "*" bounds GPUs, not cores
			limit, ok = caps["*"]
		}
		if !ok {
			return ""
		}
		used := s.Used[l.Team][l.Class]
		if used+l.Units() > limit+1e-9 {
			what := l.Class + " GPUs"
			if l.Class == gpu.CPUClass {
				what = "cores"
			}
			return fmt.Sprintf("team %s's cap here is %s %s: %s in use, %s asked", l.Team, num(limit), what, num(used), num(l.Units()))
		}
		return ""
	},
}

// offer is the cheapest offer of c that l may use (the zero Offer when
// none): its class, its MIG profile when it asks for one, spot only when it
// allows spot; for a CPU-only launch, c's CPU nodes.
func offer(l Launch, c Cluster) Offer {
	if l.Class == gpu.CPUClass {
		if c.CPU == nil {
			return Offer{}
		}
		return c.CPU.offer()
	}
	var best Offer
	for _, o := range c.Offers {
		if o.Class != l.Class || (l.MIG != "" && !slices.Contains(o.MIG, l.MIG)) || (o.Purchase == nodegroup.Spot && !l.Spot) {
			continue
		}
		if best.Class == "" || o.PricePerGPUHour < best.PricePerGPUHour {
			best = o
		}
	}
	return best
}

// Place decides where a launch goes among the fleet's clusters, given what
// each is doing now (a cluster without a state is unreachable). The
// feasible clusters are ranked: the one it holds first, those it was tried
// on in vain last; then those where it fits now first, then the cheapest
// for this launch, then the most GPUs free, then by name.
func (f *Fleet) Place(l Launch, states map[string]State) Decision {
	l.repos = make([]string, len(l.Images))
	for i, img := range l.Images {
		l.repos[i] = repository(img)
	}
	d := Decision{Launch: l}
	for _, c := range f.Clusters() {
		s, ok := states[c.Name]
		if !ok {
			s = State{Why: "not yet read"}
		}
		o, why := f.feasible(l, c, s)
		if why != "" {
			d.Refused = append(d.Refused, Refusal{Cluster: c.Name, Why: why})
			continue
		}
		free, need := l.room(s)
		d.Candidates = append(d.Candidates, Candidate{Cluster: c.Name, Offer: o, PricePerHour: o.PricePerGPUHour * l.Units(), Free: free, FitsNow: free+1e-9 >= need,
			Carbon: f.carbon(c, s, o.Class), Intensity: s.Intensity})
	}
	sort.SliceStable(d.Candidates, func(i, j int) bool {
		a, b := d.Candidates[i], d.Candidates[j]
		switch {
		case a.FitsNow != b.FitsNow:
			return a.FitsNow
		case a.score() != b.score():
			return a.score() < b.score()
		case a.Free != b.Free:
			return a.Free > b.Free
		}
		return a.Cluster < b.Cluster
	})
	if len(d.Candidates) > 0 {
		d.best = d.Candidates[0].Cluster
	}
	// Then the nomination held first, the planned cluster next when it
	// can start the launch as soon as the best can, and clusters tried in
	// vain last.
	bestFits := len(d.Candidates) > 0 && d.Candidates[0].FitsNow
	rank := func(c Candidate) int {
		switch {
		case c.Cluster == l.Hold:
			return 0
		case slices.Contains(l.Avoid, c.Cluster):
			return 3
		case c.Cluster == l.Planned && c.FitsNow == bestFits:
			return 1
		}
		return 2
	}
	sort.SliceStable(d.Candidates, func(i, j int) bool { return rank(d.Candidates[i]) < rank(d.Candidates[j]) })
	d.Reason = reason(d)
	return d
}

// feasible is the offer l would use on c in state s, or why c may not run
// it (the first rule that refuses it).
func (f *Fleet) feasible(l Launch, c Cluster, s State) (Offer, string) {
	o := offer(l, c)
	for _, r := range rules {
		if why := r(f, l, c, s, o); why != "" {
			return o, why
		}
	}
	return o, ""
}

// Site is a cluster a launch may be planned on ahead of its start: one
// that every rule of Place allows but those of the moment (whether it is
// reachable now, how many GPUs are free and what the team uses there now;
// its cap must still hold the launch alone).
type Site struct {
	Cluster, Region string
	// Offer is the one the launch would use there (the cheapest it may).
	Offer Offer
	// PUE is the cluster's stated PUE (0: not stated); Watts the class's
	// board power per GPU (0: not stated).
	PUE, Watts float64
}

// Sites lists the clusters l may be planned on, in the fleet's order:
// where a flexible launch's start is chosen together with its cluster.
func (f *Fleet) Sites(l Launch) []Site {
	l.repos = make([]string, len(l.Images))
	for i, img := range l.Images {
		l.repos[i] = repository(img)
	}
	cc := f.load()
	var out []Site
	for _, c := range cc.clusters {
		o, why := f.feasible(l, c, State{Reachable: true})
		if why != "" {
			continue
		}
		out = append(out, Site{Cluster: c.Name, Region: c.Region, Offer: o, PUE: c.PUE, Watts: cc.watts[o.Class]})
	}
	return out
}

// carbon is what the fleet's carbon price adds to a GPU-hour of class on
// c in state s: the GPU's kWh in an hour × the site's PUE × the
// intensity, in kg, at the price.
func (f *Fleet) carbon(c Cluster, s State, class string) float64 {
	cc := f.load()
	if cc.carbonPrice <= 0 || s.Intensity <= 0 {
		return 0
	}
	pue := s.PUE
	if pue <= 0 {
		pue = c.PUE
	}
	if pue <= 0 {
		pue = 1
	}
	return cc.carbonPrice * cc.watts[class] / 1000 * pue * s.Intensity / 1000
}

// need is what l needs of a cluster: GPUs of its class, a MIG launch's
// instances of its profile, or a CPU-only launch's cores.
func (l Launch) need() float64 {
	if l.MIG != "" {
		return float64(max(l.Slices, 1))
	}
	return l.Units()
}

// Units is what l is priced and counted against caps by: its GPUs (MIG
// slices at their share), or a CPU-only launch's cores.
func (l Launch) Units() float64 {
	if l.Class == gpu.CPUClass {
		return l.Cores
	}
	return l.GPUs
}

// room is what a cluster in state s has free for l now, counted as need is.
func (l Launch) room(s State) (free, need float64) {
	switch {
	case l.MIG != "":
		return s.FreeMIG[l.Class][l.MIG], l.need()
	case l.VM:
		return s.FreeVM[l.Class], l.need()
	}
	return s.Free[l.Class], l.need()
}

// unit names n of what room counts: "GPUs", "1g.10gb slices", or
// "cores".
func (l Launch) unit(n float64) string {
	one := n > 0.99 && n < 1.01
	switch {
	case l.Class == gpu.CPUClass && one:
		return "core"
	case l.Class == gpu.CPUClass:
		return "cores"
	case l.MIG != "" && one:
		return l.MIG + " slice"
	case l.MIG != "":
		return l.MIG + " slices"
	case one:
		return "GPU"
	}
	return "GPUs"
}

// Round decides a dispatch round: the launches by priority (then the
// older first), each taking the GPUs (cores) it fits into from what is
// free, so that the next sees what is left.
func (f *Fleet) Round(launches []Launch, states map[string]State) []Decision {
	left := map[string]State{}
	for name, s := range states {
		s.Free, s.FreeVM = maps.Clone(s.Free), maps.Clone(s.FreeVM)
		mig := map[string]map[string]float64{}
		for c, m := range s.FreeMIG {
			mig[c] = maps.Clone(m)
		}
		s.FreeMIG = mig
		used := map[string]map[string]float64{}
		for t, u := range s.Used {
			used[t] = maps.Clone(u)
		}
		s.Used = used
		left[name] = s
	}
	order := slices.Clone(launches)
	sort.SliceStable(order, func(i, j int) bool {
		if order[i].Priority != order[j].Priority {
			return order[i].Priority > order[j].Priority
		}
		return order[i].Order < order[j].Order
	})
	out := make([]Decision, 0, len(order))
	for _, l := range order {
		d := f.Place(l, left)
		if len(d.Candidates) > 0 {
			best := d.Candidates[0]
			s := left[best.Cluster]
			switch {
			case best.FitsNow && l.MIG != "":
				if s.FreeMIG[l.Class] == nil {
					s.FreeMIG[l.Class] = map[string]float64{}
				}
				s.FreeMIG[l.Class][l.MIG] -= l.need()
			case best.FitsNow && l.VM:
				if s.FreeVM == nil {
					s.FreeVM = map[string]float64{}
				}
				s.FreeVM[l.Class] -= l.need()
			case best.FitsNow:
				if s.Free == nil {
					s.Free = map[string]float64{}
				}
				s.Free[l.Class] -= l.need()
			}
			if s.Used == nil {
				s.Used = map[string]map[string]float64{}
			}
			if s.Used[l.Team] == nil {
				s.Used[l.Team] = map[string]float64{}
			}
			s.Used[l.Team][l.Class] += l.Units()
			left[best.Cluster] = s
		}
		out = append(out, d)
	}
	return out
}

// reason says a decision in words: where and why there, or why nowhere.
func reason(d Decision) string {
	if len(d.Candidates) == 0 {
		parts := make([]string, len(d.Refused))
		for i, r := range d.Refused {
			parts[i] = r.Cluster + ": " + r.Why
		}
		if len(parts) == 0 {
			return "no worker cluster is configured"
		}
		return "no cluster may run it (" + strings.Join(parts, "; ") + ")"
	}
	b := d.Candidates[0]
	var s strings.Builder
	if b.Cluster != d.best && b.Cluster == d.Launch.Hold {
		fmt.Fprintf(&s, "kept on %s, where it was nominated: %s", b.Cluster, price(b, true))
	} else if b.Cluster != d.best && b.Cluster == d.Launch.Planned && b.FitsNow {
		fmt.Fprintf(&s, "placed on %s, where its start was planned for cleaner power: %s", b.Cluster, price(b, true))
	} else if b.FitsNow {
		fmt.Fprintf(&s, "placed on %s: %s", b.Cluster, price(b, true))
	} else {
		need := d.Launch.need()
		what := d.Launch.Class + " " + d.Launch.unit(need)
		if d.Launch.Class == gpu.CPUClass {
			what = d.Launch.unit(need) + " of CPU nodes"
		}
		fmt.Fprintf(&s, "waiting for %s (no cluster has %s %s free now): %s", b.Cluster, num(need), what, price(b, true))
	}
	if b.Offer.Purchase != nodegroup.OnDemand {
		fmt.Fprintf(&s, " (%s)", b.Offer.Purchase)
	}
	for i, c := range d.Candidates[1:] {
		if i == 2 {
			fmt.Fprintf(&s, " and %d more", len(d.Candidates)-3)
			break
		}
		fmt.Fprintf(&s, " vs %s on %s", price(c, false), c.Cluster)
		if !c.FitsNow && b.FitsNow {
			s.WriteString(" (full)")
		}
	}
	fmt.Fprintf(&s, "; %s %s free", num(b.Free), d.Launch.unit(b.Free))
	return s.String()
}

// price says a candidate's GPU-hour (a CPU-only launch's core-hour)
// price, and what carbon adds to it when it weighs (with the intensity, in
// full).
func price(c Candidate, full bool) string {
	unit, p := "GPU-h", fmt.Sprintf("%.2f", c.Offer.PricePerGPUHour)
	if c.Offer.Class == gpu.CPUClass {
		unit, p = "core-h", cents(c.Offer.PricePerGPUHour)
	}
	switch {
	case c.Carbon <= 0:
		if full {
			return fmt.Sprintf("$%s/%s", p, unit)
		}
		return "$" + p
	case full:
		return fmt.Sprintf("$%s/%s + $%.2f for carbon (%.0f gCO2e/kWh)", p, unit, c.Carbon, c.Intensity)
	}
	return fmt.Sprintf("$%s + $%.2f for carbon", p, c.Carbon)
}

// cents writes a price to the cent, or as finely as it is stated below
// one (a core-hour's $0.045), up to four places.
func cents(v float64) string {
	s := strconv.FormatFloat(math.Round(v*1e4)/1e4, 'f', -1, 64)
	whole, frac, _ := strings.Cut(s, ".")
	for len(frac) < 2 {
		frac += "0"
	}
	return whole + "." + frac
}

func sortedKeys(m map[string]string) []string {
	out := slices.Collect(maps.Keys(m))
	sort.Strings(out)
	return out
}

func labelText(labels map[string]string, k string) string {
	if v, ok := labels[k]; ok {
		return k + "=" + v
	}
	return "no " + k
}

func orUnknown(s string) string {
	if s == "" {
		return "not yet read"
	}
	return s
}

// num writes a GPU count without a trailing .0.
func num(v float64) string { return strings.TrimSuffix(fmt.Sprintf("%.2f", v), ".00") }
