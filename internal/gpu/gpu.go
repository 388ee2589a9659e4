// Package gpu owns the GPU class catalog: which GPU Feature Discovery products a
// class matches, its memory, the MIG profiles it can be cut into (with their share
// of compute and memory) and its price per GPU-hour. The catalog is data the
// platform team edits (templates/gpu-classes.yaml), never code.
package gpu

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/yamldoc"
)

// APIVersion and Kind identify a GPU class file.
const (
	APIVersion = "gantry.dev/v1alpha1"
	Kind       = "GPUClassList"
)

// File is the on-disk form of the catalog.
type File struct {
	APIVersion string  `json:"apiVersion"`
	Kind       string  `json:"kind"`
	Classes    []Class `json:"classes"`
	// CPU is where and at what price launches without a GPU run (a
	// template's CPU-only choice); without it, none can.
	CPU *CPU `json:"cpu,omitempty"`
}

// CPU says where CPU-only launches run and what they cost: on nodes
// labelled NodeLabel=true, tolerating its NoSchedule taint, at a price per
// core-hour (Price.OnDemand; Spot unused).
type CPU struct {
	NodeLabel string `json:"nodeLabel"`
	Price     Price  `json:"price"`
}

// CPUClass is the class name a CPU-only workload is recorded, grouped and
// entitled under. No GPU class may take it.
const CPUClass = "CPU"

// HourlyPrice is what cores cost an hour.
func (c CPU) HourlyPrice(cores float64) float64 { return cores * c.Price.OnDemand }

// Class is one kind of GPU that workloads can ask for.
type Class struct {
	Name        string   `json:"name"`
	Description string   `json:"description,omitempty"`
	Products    []string `json:"products"`
	MemoryGiB   int      `json:"memoryGiB"`
	// Watts is the GPU's typical board power under load (0: not stated):
	// what a fleet's carbon weight prices a GPU-hour's emissions by.
	Watts float64      `json:"watts,omitempty"`
	Price Price        `json:"price"`
	MIG   []MIGProfile `json:"mig,omitempty"`
	// Confidential says whether the GPU runs in confidential-computing mode
	// (NVIDIA CC, passed through to a Kata VM) and on which CPU TEEs.
	Confidential *Confidential `json:"confidential,omitempty"`
	// VMDeviceName is the resource KubeVirt passes the GPU to VMs under
	// (its permittedHostDevices resourceName), e.g. nvidia.com/GH100_H100_SXM5_80GB.
	VMDeviceName string `json:"vmDeviceName,omitempty"`
}

// Confidential is how a class supports confidential computing.
type Confidential struct {
	TEEs []string `json:"tees"` // snp | tdx
	// MIG allows MIG slices in CC mode; off, confidential workloads get whole GPUs.
	MIG bool `json:"mig,omitempty"`
}

// TEEs are the CPU trusted execution environments confidential workloads run in.
var TEEs = []string{"snp", "tdx"}

// SupportsTEE reports whether the class runs confidential workloads on tee.
func (c Class) SupportsTEE(tee string) bool {
	return c.Confidential != nil && slices.Contains(c.Confidential.TEEs, tee)
}

// Price is per GPU-hour, in Currency (USD, the only currency Gantry bills
// in: budgets are USD too).
type Price struct {
	OnDemand float64 `json:"onDemand"`
	Spot     float64 `json:"spot,omitempty"`
	Currency string  `json:"currency,omitempty"` // "" is USD
}

// Unit is what a price is for.
const Unit = "gpu-hour"

// Currencies are the currencies a price may be in.
var Currencies = []string{"USD"}

// PriceRecord is a class's price from Since until the next record of the
// class (the price history).
type PriceRecord struct {
	Class string
	Since time.Time
	Price Price
}

// HourlyPrice is the price per hour of count GPUs of the class, or count
// slices of mig (each priced at its share of the GPU, max(compute/7,
// memory/8)), at the spot price when spot is asked for and the class has
// one (spotUsed), else on demand. USD.
func (c Class) HourlyPrice(mig *MIGProfile, count int, spot bool) (price float64, spotUsed bool) {
	per := c.Price.OnDemand
	if spot && c.Price.Spot > 0 {
		per, spotUsed = c.Price.Spot, true
	}
	gpus := float64(count)
	if mig != nil {
		gpus *= mig.Share()
	}
	return math.Round(gpus*per*10000) / 10000, spotUsed
}

// MIGProfile is one way of slicing the GPU: Compute sevenths of its SMs and
// Memory eighths of its memory, at most MaxInstances per GPU.
type MIGProfile struct {
	Name         string `json:"name"`
	Compute      int    `json:"compute"`
	Memory       int    `json:"memory"`
	MaxInstances int    `json:"maxInstances"`
}

// ComputeShare is the fraction of the GPU's SMs the profile gets.
func (p MIGProfile) ComputeShare() float64 { return float64(p.Compute) / 7 }

// MemoryShare is the fraction of the GPU's memory the profile gets.
func (p MIGProfile) MemoryShare() float64 { return float64(p.Memory) / 8 }

// Share is what one instance counts as of a whole GPU wherever Gantry
// counts GPUs (quota, prices, caps, forecasts): the larger of its compute
// and memory shares.
func (p MIGProfile) Share() float64 { return math.Max(p.ComputeShare(), p.MemoryShare()) }

// Resource is the extended resource the NVIDIA device plugin (mixed strategy)
// exposes for the profile.
func (p MIGProfile) Resource() string { return "nvidia.com/mig-" + p.Name }

// Profile returns the class's MIG profile of that name.
func (c Class) Profile(name string) (MIGProfile, bool) {
	for _, p := range c.MIG {
		if p.Name == name {
			return p, true
		}
	}
	return MIGProfile{}, false
}

// ProfileNames lists the class's MIG profiles.
func (c Class) ProfileNames() []string {
	out := make([]string, len(c.MIG))
	for i, p := range c.MIG {
		out[i] = p.Name
	}
	return out
}

// Catalog is a validated set of classes. Replace puts another in force for
// whoever holds it (a reload of the class file); each call reads one set.
type Catalog struct {
	set atomic.Pointer[classSet]
}

// classSet is one version of the classes, immutable.
type classSet struct {
	classes []Class
	byName  map[string]int
	cpu     *CPU
}

func (c *Catalog) now() *classSet { return c.set.Load() }

// Get returns the class of that name.
func (c *Catalog) Get(name string) (Class, bool) {
	s := c.now()
	i, ok := s.byName[name]
	if !ok {
		return Class{}, false
	}
	return s.classes[i], true
}

// Snapshot is a catalog of c's classes as they are now, which a later
// Replace of c leaves as it is.
func (c *Catalog) Snapshot() *Catalog {
	out := &Catalog{}
	out.set.Store(c.now())
	return out
}

// CPU returns where and at what price CPU-only launches run, and whether
// the catalog allows them at all.
func (c *Catalog) CPU() (CPU, bool) {
	s := c.now()
	if s.cpu == nil {
		return CPU{}, false
	}
	return *s.cpu, true
}

// Share is what count instances of class's MIG profile count as of whole
// GPUs (MIGProfile.Share); count whole GPUs when profile is "" or one the
// catalog does not name (a class or profile since removed: counted whole,
// never less than it may hold).
func (c *Catalog) Share(class, profile string, count float64) float64 {
	if profile == "" {
		return count
	}
	if cl, ok := c.Get(class); ok {
		if p, ok := cl.Profile(profile); ok {
			return count * p.Share()
		}
	}
	return count
}

// ForProduct returns the name of the class whose products include the GPU
// Feature Discovery product label value, or "" when none does.
func (c *Catalog) ForProduct(product string) string {
	for _, cl := range c.now().classes {
		for _, p := range cl.Products {
			if p == product {
				return cl.Name
			}
		}
	}
	return ""
}

// List returns the classes sorted by name.
func (c *Catalog) List() []Class { return append([]Class(nil), c.now().classes...) }

// Names returns the class names sorted.
func (c *Catalog) Names() []string {
	s := c.now()
	out := make([]string, len(s.classes))
	for i, cl := range s.classes {
		out[i] = cl.Name
	}
	return out
}

// Replace puts n's classes in force. A class or MIG profile that is in
// force must stay (templates, the image catalog, quotas and workloads name
// them): n without one is refused, naming it, and c is left as it was.
// Prices, products, memory and new classes or profiles may change freely.
func (c *Catalog) Replace(n *Catalog) error {
	var errs fault.List
	next := n.now()
	for _, old := range c.now().classes {
		i, ok := next.byName[old.Name]
		if !ok {
			errs.Addf("classes", "class %q is in force and may be named by templates, images, quotas and workloads: it cannot be removed by a reload", old.Name)
			continue
		}
		for _, p := range old.MIG {
			if _, ok := next.classes[i].Profile(p.Name); !ok {
				errs.Addf("classes["+old.Name+"].mig", "MIG profile %q is in force: it cannot be removed by a reload", p.Name)
			}
		}
	}
	if c.now().cpu != nil && next.cpu == nil {
		errs.Addf("cpu", "CPU-only launches are in force (templates may offer them): the cpu section cannot be removed by a reload")
	}
	if err := errs.Err(); err != nil {
		return err
	}
	c.set.Store(next)
	return nil
}

var (
	classNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.-]{0,38}[A-Za-z0-9]$`)
	profileRE   = regexp.MustCompile(`^[1-7]g\.[0-9]+gb$`)
	labelValRE  = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)
	labelKeyRE  = regexp.MustCompile(`^([a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)
	deviceRE    = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?/[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$`)
)

// LoadFile reads and validates a GPU class file.
func LoadFile(path string) (*Catalog, error) {
	data, err := yamldoc.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read GPU classes: %w", err)
	}
	return Parse(path, data)
}

// Parse decodes and validates a GPU class file; every problem carries file:line.
func Parse(file string, data []byte) (*Catalog, error) {
	return yamldoc.Parse(file, data, New)
}

// New validates a decoded file and builds the catalog.
func New(f File) (*Catalog, error) {
	var errs fault.List
	yamldoc.Header(&errs, f.APIVersion, f.Kind, APIVersion, Kind)
	if len(f.Classes) == 0 {
		errs.Addf("classes", "at least one class is required")
	}
	cat := &classSet{byName: map[string]int{}}
	products := map[string]string{}
	for i, c := range f.Classes {
		p := fmt.Sprintf("classes[%d]", i)
		if !classNameRE.MatchString(c.Name) {
			errs.Addf(p+".name", "%q is not a valid class name (letters, digits, '.', '-'; 2-40 characters)", c.Name)
		}
		if c.Name == CPUClass {
			errs.Addf(p+".name", "%q names CPU-only launches (the file's cpu section), not a GPU class", CPUClass)
		}
		if _, dup := cat.byName[c.Name]; dup {
			errs.Addf(p+".name", "duplicate class %q", c.Name)
		}
		if len(c.Products) == 0 {
			errs.Addf(p+".products", "at least one nvidia.com/gpu.product value is required")
		}
		for j, prod := range c.Products {
			pp := fmt.Sprintf("%s.products[%d]", p, j)
			if !labelValRE.MatchString(prod) {
				errs.Addf(pp, "%q is not a valid label value", prod)
			}
			if other, dup := products[prod]; dup {
				errs.Addf(pp, "product %q already belongs to class %q", prod, other)
			}
			products[prod] = c.Name
		}
		if c.MemoryGiB <= 0 {
			errs.Addf(p+".memoryGiB", "must be positive")
		}
		if c.Watts < 0 || c.Watts > 5000 || math.IsNaN(c.Watts) {
			errs.Addf(p+".watts", "%g: a board power from 0 to 5000 W", c.Watts)
		}
		if c.Price.OnDemand < 0 || c.Price.Spot < 0 {
			errs.Addf(p+".price", "prices cannot be negative")
		}
		if c.Price.Currency != "" && !slices.Contains(Currencies, c.Price.Currency) {
			errs.Addf(p+".price.currency", "%q: prices are in %s (budgets are too)", c.Price.Currency, strings.Join(Currencies, ", "))
		}
		if cc := c.Confidential; cc != nil {
			if len(cc.TEEs) == 0 {
				errs.Addf(p+".confidential.tees", "at least one TEE (%s) is required", strings.Join(TEEs, ", "))
			}
			for j, t := range cc.TEEs {
				if !slices.Contains(TEEs, t) {
					errs.Addf(fmt.Sprintf("%s.confidential.tees[%d]", p, j), "%q is not one of %s", t, strings.Join(TEEs, ", "))
				}
			}
		}
		if c.VMDeviceName != "" && !deviceRE.MatchString(c.VMDeviceName) {
			errs.Addf(p+".vmDeviceName", "%q is not a device resource name like nvidia.com/GH100_H100_SXM5_80GB", c.VMDeviceName)
		}
		seen := map[string]bool{}
		for j, m := range c.MIG {
			mp := fmt.Sprintf("%s.mig[%d]", p, j)
			if !profileRE.MatchString(m.Name) {
				errs.Addf(mp+".name", "%q is not a MIG profile name like 1g.10gb", m.Name)
			}
			if seen[m.Name] {
				errs.Addf(mp+".name", "duplicate MIG profile %q", m.Name)
			}
			seen[m.Name] = true
			if m.Compute < 1 || m.Compute > 7 {
				errs.Addf(mp+".compute", "must be between 1 and 7 (sevenths of the GPU's SMs)")
			} else if !strings.HasPrefix(m.Name, fmt.Sprintf("%dg.", m.Compute)) {
				errs.Addf(mp+".compute", "%d does not match profile %q", m.Compute, m.Name)
			}
			if m.Memory < 1 || m.Memory > 8 {
				errs.Addf(mp+".memory", "must be between 1 and 8 (eighths of the GPU's memory)")
			}
			if m.MaxInstances < 1 || m.MaxInstances > 7 {
				errs.Addf(mp+".maxInstances", "must be between 1 and 7")
			}
		}
		cat.byName[c.Name] = i
		cat.classes = append(cat.classes, c)
	}
	if c := f.CPU; c != nil {
		if !labelKeyRE.MatchString(c.NodeLabel) {
			errs.Addf("cpu.nodeLabel", "%q is not a label key like gantry.dev/cpu-node", c.NodeLabel)
		}
		if c.Price.OnDemand < 0 || c.Price.Spot != 0 {
			errs.Addf("cpu.price", "onDemand is the price of a core-hour and cannot be negative; spot does not apply")
		}
		if c.Price.Currency != "" && !slices.Contains(Currencies, c.Price.Currency) {
			errs.Addf("cpu.price.currency", "%q: prices are in %s (budgets are too)", c.Price.Currency, strings.Join(Currencies, ", "))
		}
		cpu := *c
		cat.cpu = &cpu
	}
	if err := errs.Err(); err != nil {
		return nil, err
	}
	sort.Slice(cat.classes, func(i, j int) bool { return cat.classes[i].Name < cat.classes[j].Name })
	for i, c := range cat.classes {
		cat.byName[c.Name] = i
	}
	out := &Catalog{}
	out.set.Store(cat)
	return out, nil
}
