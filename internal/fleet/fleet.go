// Package fleet owns Gantry's worker clusters and where each launch goes:
// the clusters the platform team lists (templates/clusters.yaml: region,
// provider, credentials, the GPU classes each offers at what price, its
// CPU nodes for CPU-only launches at a price per core-hour, labels such as
// data residency, per-team caps) with the placement rules of teams
// and templates, and the dispatch decision — an ordered list of plain rules
// that says which clusters could run a launch and why the others could not,
// then ranks the feasible ones by price, capacity free now and name, with
// the reason said in words. It knows nothing of Kueue or client-go: the
// dispatcher under internal/kube writes its decisions as MultiKueue
// nominations.
package fleet

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/nodegroup"
	"github.com/gantryhq/gantry/internal/yamldoc"
)

// APIVersion and Kind identify a clusters file.
const (
	APIVersion = "gantry.dev/v1alpha1"
	Kind       = "ClusterList"
)

// Provider is who runs a cluster's machines.
type Provider string

// The providers.
const (
	Cloud      Provider = "cloud"
	OnPremises Provider = "on-premises"
)

// File is the on-disk form of the fleet.
type File struct {
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	Clusters   []Cluster `json:"clusters"`
	// Teams and Templates are placement rules, by team and by template.
	Teams     map[string]Rules `json:"teams,omitempty"`
	Templates map[string]Rules `json:"templates,omitempty"`
	// CarbonPrice is the weight carbon has in placement, declared as an
	// internal carbon price in USD per kg CO2e (0: none, price alone).
	// Each feasible cluster's price for a launch gains its GPUs' emissions
	// per hour there now at that price: the class's watts × the cluster's
	// PUE × its region's grid intensity this hour (the carbon source's).
	CarbonPrice float64 `json:"carbonPrice,omitempty"`
}

// Cluster is one worker cluster.
type Cluster struct {
	Name     string   `json:"name"`
	Region   string   `json:"region"`
	Zone     string   `json:"zone,omitempty"`
	Provider Provider `json:"provider"`
	// Kubeconfig is how Gantry and MultiKueue reach the worker: a file
	// (read again when it changes, as credentials rotate) or a Secret the
	// deployment mounts; Gantry copies what it reads into a Secret in
	// Kueue's namespace for MultiKueue.
	Kubeconfig Kubeconfig        `json:"kubeconfig"`
	Labels     map[string]string `json:"labels,omitempty"`
	Offers     []Offer           `json:"offers"`
	// CPU is its CPU nodes, where CPU-only launches run (nil: it runs
	// none).
	CPU *CPUOffer `json:"cpu,omitempty"`
	// Caps bound a team's GPUs per class on this cluster ("*": any GPU
	// class), and under CPU its cores of CPU-only launches.
	Caps map[string]map[string]float64 `json:"caps,omitempty"`
	// Images are where the images it may run come from: a registry
	// ("registry.example.com", every repository it serves) or a
	// repository ("ghcr.io/acme/train", it and the repositories under
	// it). Empty: any image the catalog allows. A worker that can pull
	// only from the company's mirror, or may not run a licensed image,
	// says so here; a launch with an image from elsewhere is not placed
	// on it.
	Images []string `json:"images,omitempty"`
	// Cordoned clusters get no new work (maintenance).
	Cordoned bool `json:"cordoned,omitempty"`
	// PUE is its site's power usage effectiveness as the platform team
	// states it (1 to 3; 0: not stated, taken as the server's energy.pue,
	// in metering and placement alike): what the facility draws per kWh
	// its GPUs use (docs/energy.md).
	PUE float64 `json:"pue,omitempty"`
	// Draining clusters, cordoned, have the work that can move requeued
	// and placed elsewhere (set through the API: fleet.Change.Drain).
	Draining bool `json:"-"`
}

// Kubeconfig names a worker's credentials: exactly one of File, Secret.
type Kubeconfig struct {
	File   string `json:"file,omitempty"`
	Secret string `json:"secret,omitempty"`
}

// Offer is a GPU class a cluster runs, bought one way, at a price per
// GPU-hour (for owned hardware, the amortised price the platform team
// states).
type Offer struct {
	Class           string             `json:"class"`
	Purchase        nodegroup.Purchase `json:"purchase"`
	PricePerGPUHour float64            `json:"pricePerGPUHour"`
	// GPUs is how many the cluster has of it (0: as many as its
	// autoscaler gives; what is free is read from the cluster).
	GPUs int `json:"gpus,omitempty"`
	// MIG lists the MIG profiles its nodes are partitioned into; empty:
	// none (whole GPUs only).
	MIG []string `json:"mig,omitempty"`
}

// CPUOffer is a cluster's CPU nodes for CPU-only launches — the nodes the
// GPU classes' cpu section names by its nodeLabel — bought reserved or on
// demand (CPU-only pods do not tolerate spot machines), at a price per
// core-hour.
type CPUOffer struct {
	Purchase         nodegroup.Purchase `json:"purchase"`
	PricePerCoreHour float64            `json:"pricePerCoreHour"`
	// Cores is how many the cluster has (0: as many as its autoscaler
	// gives; what is free is read from the cluster).
	Cores int `json:"cores,omitempty"`
}

// offer is the CPU nodes as Place weighs them beside the GPU offers: an
// Offer of gpu.CPUClass priced per core-hour, counted in cores.
func (o *CPUOffer) offer() Offer {
	return Offer{Class: gpu.CPUClass, Purchase: o.Purchase, PricePerGPUHour: o.PricePerCoreHour, GPUs: o.Cores}
}

// Rules are a team's or template's placement: clusters it must run on
// (Pin; empty: any), must not (Forbid), and labels a cluster must carry —
// data residency is one — which are hard rules, never preferences.
type Rules struct {
	Pin     []string          `json:"pin,omitempty"`
	Forbid  []string          `json:"forbid,omitempty"`
	Require map[string]string `json:"require,omitempty"`
}

// Fleet is a validated set of worker clusters with placement rules. Its
// contents can be replaced whole (Replace: the platform team's cordons
// over the file), and every holder of the Fleet reads the new ones.
type Fleet struct {
	v atomic.Pointer[contents]
}

type contents struct {
	clusters  []Cluster
	teams     map[string]Rules
	templates map[string]Rules
	// carbonPrice is File.CarbonPrice; watts the classes' board power.
	carbonPrice float64
	watts       map[string]float64
}

func (f *Fleet) load() *contents {
	if f == nil {
		return &contents{}
	}
	if c := f.v.Load(); c != nil {
		return c
	}
	return &contents{}
}

// Replace puts o's clusters and rules in force in f.
func (f *Fleet) Replace(o *Fleet) { f.v.Store(o.load()) }

var (
	nameRE   = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$`)
	secretRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$`)
)

// LoadFile reads and validates a clusters file against the GPU classes.
func LoadFile(path string, classes *gpu.Catalog) (*Fleet, error) {
	data, err := yamldoc.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read clusters: %w", err)
	}
	return Parse(path, data, classes)
}

// Parse decodes and validates a clusters file; every problem carries
// file:line.
func Parse(file string, data []byte, classes *gpu.Catalog) (*Fleet, error) {
	return yamldoc.Parse(file, data, func(f File) (*Fleet, error) { return New(f, classes) })
}

// New validates a decoded fleet.
func New(f File, classes *gpu.Catalog) (*Fleet, error) {
	var errs fault.List
	yamldoc.Header(&errs, f.APIVersion, f.Kind, APIVersion, Kind)
	names := map[string]bool{}
	f.Clusters = slices.Clone(f.Clusters) // image sources are written as read
	for i, c := range f.Clusters {
		f.Clusters[i].Images = slices.Clone(c.Images)
		if c.CPU != nil {
			cpu := *c.CPU // the caller's stays the caller's
			f.Clusters[i].CPU = &cpu
		}
		p := fmt.Sprintf("clusters[%d]", i)
		switch {
		case !nameRE.MatchString(c.Name):
			errs.Addf(p+".name", "%q is not a valid cluster name (lower-case letters, digits and '-', at most 40)", c.Name)
		case names[c.Name]:
			errs.Addf(p+".name", "duplicate cluster %q", c.Name)
		}
		names[c.Name] = true
		if c.Region == "" {
			errs.Addf(p+".region", "required")
		}
		if c.PUE != 0 && (c.PUE < 1 || c.PUE > 3) {
			errs.Addf(p+".pue", "%g: a power usage effectiveness from 1 to 3", c.PUE)
		}
		if c.Provider != Cloud && c.Provider != OnPremises {
			errs.Addf(p+".provider", "%q is not one of cloud, on-premises", c.Provider)
		}
		if (c.Kubeconfig.File == "") == (c.Kubeconfig.Secret == "") {
			errs.Addf(p+".kubeconfig", "give exactly one of file or secret")
		} else if s := c.Kubeconfig.Secret; s != "" && !secretRE.MatchString(s) {
			errs.Addf(p+".kubeconfig.secret", "%q is not a Secret's name (lower-case letters, digits, '-' and '.', at most 253)", s)
		}
		if len(c.Offers) == 0 && c.CPU == nil {
			errs.Addf(p+".offers", "a cluster offers at least one GPU class, or CPU nodes (cpu)")
		}
		if o := c.CPU; o != nil {
			if _, ok := classes.CPU(); !ok {
				errs.Addf(p+".cpu", "the GPU classes have no cpu section (templates/gpu-classes.yaml): no launch is CPU-only")
			}
			if o.Purchase != nodegroup.Reserved && o.Purchase != nodegroup.OnDemand {
				errs.Addf(p+".cpu.purchase", "%q is not one of reserved, on-demand (CPU-only launches do not run on spot machines)", o.Purchase)
			}
			if o.PricePerCoreHour <= 0 || math.IsNaN(o.PricePerCoreHour) || math.IsInf(o.PricePerCoreHour, 0) {
				errs.Addf(p+".cpu.pricePerCoreHour", "must be a price above 0 (for owned machines, their amortised price)")
			}
			if o.Cores < 0 {
				errs.Addf(p+".cpu.cores", "cannot be negative")
			}
		}
		for j, o := range c.Offers {
			op := fmt.Sprintf("%s.offers[%d]", p, j)
			cl, ok := classes.Get(o.Class)
			if !ok {
				errs.Addf(op+".class", "%q is not a GPU class (one of %s)", o.Class, strings.Join(classes.Names(), ", "))
			}
			if !slices.Contains(nodegroup.Purchases, o.Purchase) {
				errs.Addf(op+".purchase", "%q is not one of reserved, on-demand, spot", o.Purchase)
			}
			if o.PricePerGPUHour <= 0 || math.IsNaN(o.PricePerGPUHour) || math.IsInf(o.PricePerGPUHour, 0) {
				errs.Addf(op+".pricePerGPUHour", "must be a price above 0 (for owned machines, their amortised price)")
			}
			if o.GPUs < 0 {
				errs.Addf(op+".gpus", "cannot be negative")
			}
			for k, m := range o.MIG {
				if ok && !slices.ContainsFunc(cl.MIG, func(x gpu.MIGProfile) bool { return x.Name == m }) {
					errs.Addf(fmt.Sprintf("%s.mig[%d]", op, k), "%q is not a MIG profile of %s", m, o.Class)
				}
			}
			for _, prev := range c.Offers[:j] {
				if prev.Class == o.Class && prev.Purchase == o.Purchase {
					errs.Addf(op, "%s bought %s is offered twice", o.Class, o.Purchase)
				}
			}
		}
		for k, img := range c.Images {
			if src, err := imageSource(img); err != nil {
				errs.Addf(fmt.Sprintf("%s.images[%d]", p, k), "%v", err)
			} else {
				f.Clusters[i].Images[k] = src
			}
		}
		for team, caps := range c.Caps {
			for class, n := range caps {
				if _, ok := classes.Get(class); !ok && class != "*" && class != gpu.CPUClass {
					errs.Addf(fmt.Sprintf("%s.caps.%s.%s", p, team, class), "not a GPU class (or %s: cores)", gpu.CPUClass)
				}
				if class == gpu.CPUClass && c.CPU == nil {
					errs.Addf(fmt.Sprintf("%s.caps.%s.%s", p, team, class), "a cap on cores, but the cluster states no cpu nodes")
				}
				if n < 0 {
					errs.Addf(fmt.Sprintf("%s.caps.%s.%s", p, team, class), "cannot be negative")
				}
			}
		}
	}
	check := func(kind string, rules map[string]Rules) {
		for key, r := range rules {
			for i, n := range r.Pin {
				if !names[n] {
					errs.Addf(fmt.Sprintf("%s.%s.pin[%d]", kind, key, i), "%q is not a cluster of this file", n)
				}
			}
			for i, n := range r.Forbid {
				if !names[n] {
					errs.Addf(fmt.Sprintf("%s.%s.forbid[%d]", kind, key, i), "%q is not a cluster of this file", n)
				}
			}
		}
	}
	check("teams", f.Teams)
	check("templates", f.Templates)
	watts := map[string]float64{}
	for _, name := range classes.Names() {
		if c, ok := classes.Get(name); ok && c.Watts > 0 {
			watts[name] = c.Watts
		}
	}
	if p := f.CarbonPrice; p < 0 || p > 100 || math.IsNaN(p) {
		errs.Addf("carbonPrice", "%g: USD per kg CO2e from 0 to 100", p)
	} else if p > 0 {
		for i, c := range f.Clusters {
			for j, o := range c.Offers {
				if _, ok := watts[o.Class]; !ok && !slices.ContainsFunc(c.Offers[:j], func(x Offer) bool { return x.Class == o.Class }) {
					errs.Addf(fmt.Sprintf("clusters[%d].offers[%d].class", i, j), "carbonPrice weighs each GPU's emissions: GPU class %s states no watts (templates/gpu-classes.yaml)", o.Class)
				}
			}
		}
	}
	if err := errs.Err(); err != nil {
		return nil, err
	}
	fl := &Fleet{}
	fl.v.Store(&contents{clusters: slices.Clone(f.Clusters), teams: maps.Clone(f.Teams), templates: maps.Clone(f.Templates), carbonPrice: f.CarbonPrice, watts: watts})
	return fl, nil
}

// imageSource reads a registry or a repository of one, as the image
// references it is matched with name it: in lower case, Docker Hub as
// index.docker.io (docker.io/acme is the acme organisation there, its
// official images docker.io/library). A repository names its registry:
// "acme/train" would be Docker Hub's to a container runtime, which a
// platform team rarely means.
func imageSource(s string) (string, error) {
	s = strings.ToLower(s)
	host, path, repo := strings.Cut(s, "/")
	switch {
	case s == "":
		return "", errors.New("empty: a registry or a repository")
	case strings.Contains(s, "://"):
		return "", fmt.Errorf("%q: a registry or a repository, without a scheme", s)
	case strings.ContainsAny(s, "@") || repo && strings.Contains(path, ":"):
		return "", fmt.Errorf("%q: a registry or a repository, without a tag or digest", s)
	case !strings.ContainsAny(host, ".:") && host != "localhost":
		return "", fmt.Errorf("%q does not start with a registry (a host name with a '.', a port, or localhost): write it as docker.io/%s for Docker Hub", s, s)
	case repo && strings.Contains("/"+path+"/", "//"):
		return "", fmt.Errorf("%q: a repository's path has no empty parts", s)
	}
	if !repo {
		r, err := name.NewRegistry(host, name.StrictValidation)
		if err != nil {
			return "", fmt.Errorf("%q is not a registry: %w", s, err)
		}
		return r.Name(), nil
	}
	r, err := name.NewRepository(s, name.WeakValidation)
	if err != nil {
		return "", fmt.Errorf("%q is not a repository: %w", s, err)
	}
	return r.RegistryStr() + "/" + path, nil // the path as written: no library/ added
}

// ImageAllowed says whether a cluster may run an image (a reference with a
// tag or digest, as a pod names it): true when it lists no image sources,
// or when the image's repository is one of them or under one.
func (c Cluster) ImageAllowed(image string) bool { return c.allows(repository(image)) }

// repository is an image reference's repository as sources are read (lower
// case, Docker Hub as index.docker.io); "" when it cannot be read.
func repository(image string) string {
	ref, err := name.ParseReference(image, name.WeakValidation)
	if err != nil {
		return ""
	}
	return strings.ToLower(ref.Context().Name())
}

// allows says whether the cluster may run an image of repo (repository's):
// any when it lists no sources; none that could not be read.
func (c Cluster) allows(repo string) bool {
	if len(c.Images) == 0 {
		return true
	}
	if repo == "" {
		return false // what cannot be read is not allowed
	}
	for _, src := range c.Images {
		if repo == src || strings.HasPrefix(repo, src+"/") {
			return true
		}
	}
	return false
}

// CarbonPrice is the weight carbon has in placement, USD per kg CO2e (0:
// none).
func (f *Fleet) CarbonPrice() float64 { return f.load().carbonPrice }

// Clusters lists the clusters in file order.
func (f *Fleet) Clusters() []Cluster {
	return slices.Clone(f.load().clusters)
}

// Get returns a cluster by name.
func (f *Fleet) Get(name string) (Cluster, bool) {
	for _, c := range f.Clusters() {
		if c.Name == name {
			return c, true
		}
	}
	return Cluster{}, false
}

// TeamRules and TemplateRules are the placement rules of a team and of a
// template (none: the zero Rules).
func (f *Fleet) TeamRules(team string) Rules     { return f.load().teams[team] }
func (f *Fleet) TemplateRules(name string) Rules { return f.load().templates[name] }

// Change is the platform team's edit of a cluster through the API.
type Change struct {
	// Cordoned: the cluster gets no new work (maintenance).
	Cordoned bool `json:"cordoned"`
	// Drain: cordoned, and what runs there is requeued to run elsewhere.
	Drain bool `json:"drain,omitempty"`
}

// With is the fleet with changes (by cluster) laid over it; a change of a
// cluster the fleet does not hold is left out and named in the error.
func (f *Fleet) With(changes map[string]Change) (*Fleet, error) {
	c := f.load()
	out := &contents{clusters: slices.Clone(c.clusters), teams: c.teams, templates: c.templates, carbonPrice: c.carbonPrice, watts: c.watts}
	var errs fault.List
	for name, ch := range changes {
		i := slices.IndexFunc(out.clusters, func(x Cluster) bool { return x.Name == name })
		if i < 0 {
			errs.Addf(name, "no worker cluster of that name")
			continue
		}
		out.clusters[i].Cordoned = out.clusters[i].Cordoned || ch.Cordoned || ch.Drain
		out.clusters[i].Draining = out.clusters[i].Draining || ch.Drain
	}
	fl := &Fleet{}
	fl.v.Store(out)
	return fl, errs.Err()
}

// ClassNames lists the classes any cluster offers, sorted.
func (f *Fleet) ClassNames() []string {
	seen := map[string]bool{}
	for _, c := range f.Clusters() {
		for _, o := range c.Offers {
			seen[o.Class] = true
		}
	}
	out := slices.Collect(maps.Keys(seen))
	sort.Strings(out)
	return out
}

// Watch reports what each cluster is doing now; ok is false until it has
// read them once.
type Watch interface {
	States() (states map[string]State, ok bool)
}

// NoWatch reads nothing (no worker clusters, or none watched here).
type NoWatch struct{}

// States implements Watch.
func (NoWatch) States() (map[string]State, bool) { return nil, false }

// Status is a cluster and, once read, its state.
type Status struct {
	Cluster
	State *State
}

// Statuses lists the clusters in file order with their states from w.
func (f *Fleet) Statuses(w Watch) []Status {
	states, ok := w.States()
	var out []Status
	for _, c := range f.Clusters() {
		st := Status{Cluster: c}
		if s, have := states[c.Name]; ok && have {
			st.State = &s
		}
		out = append(out, st)
	}
	return out
}
