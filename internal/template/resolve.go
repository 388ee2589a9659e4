package template

import (
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/quantity"
)

// NoMIG, as Choice.MIGProfile, asks for whole GPUs even where the template's
// default is a MIG slice.
const NoMIG = "none"

// Choice is what a user picks when launching a template; zero values take the
// template's defaults.
type Choice struct {
	Class      string
	MIGProfile string
	Count      int
	Params     map[string]any
	// Confidential asks for a confidential-computing launch; a template marked
	// confidential is one whatever the request says.
	Confidential bool
	// CPUOnly asks for the template's CPU-only choice (no GPU); a template
	// whose default it is, or that offers nothing else, takes it when the
	// request names no GPU.
	CPUOnly bool
}

// Resolved is a template with every choice made and checked.
type Resolved struct {
	Template *Template
	Class    gpu.Class
	MIG      *gpu.MIGProfile // nil for whole GPUs
	Count    int
	Params   map[string]string
	// Confidential: the workload runs in a confidential VM (Kata + NVIDIA CC)
	// on whole GPUs of a class that supports it.
	Confidential bool
	// CPUOnly: no GPU; the workload runs on the classes' CPU nodes. Class
	// is then named gpu.CPUClass and nothing else; Count is 0.
	CPUOnly bool
}

// CPUCores is the CPU the workload asks for, in cores (its resources.cpu
// with the parameters applied; 0 if that is not a quantity).
func (r *Resolved) CPUCores() float64 {
	q, err := quantity.Parse(r.expandResource(r.Template.Spec.Resources.CPU))
	if err != nil {
		return 0
	}
	return q.AsApproximateFloat64()
}

// expandResource is a resource quantity with the parameters and the one
// builtin a quantity can use ({{gantry.gpuCount}}) applied, as render
// expands it.
func (r *Resolved) expandResource(v string) string {
	return r.Expand(v, map[string]string{"gantry.gpuCount": strconv.Itoa(r.Count)})
}

// wantsCPUOnly says whether c takes the template's CPU-only choice: asked
// for, or the default (or only) choice when c names no GPU.
func (t *Template) wantsCPUOnly(c Choice) bool {
	if c.CPUOnly {
		return true
	}
	o := t.Spec.CPUOnly
	return o != nil && (o.Default || len(t.Spec.GPU.Classes) == 0) && c.Class == "" && c.Count == 0 && c.MIGProfile == ""
}

// Resolve checks a choice against the template and GPU classes and fills in the
// defaults. Problems name the request field: gpu.class, gpu.migProfile,
// gpu.count, parameters.<name>.
func (t *Template) Resolve(classes *gpu.Catalog, c Choice) (*Resolved, error) {
	return t.resolve(classes, c, false)
}

// resolve with placeholders set skips required parameters that have no value, so
// that a template can be checked with its defaults alone.
func (t *Template) resolve(classes *gpu.Catalog, c Choice, placeholders bool) (*Resolved, error) {
	var errs fault.List
	r := &Resolved{Template: t, Params: map[string]string{}}
	if t.wantsCPUOnly(c) {
		r.CPUOnly, r.Class = true, gpu.Class{Name: gpu.CPUClass}
		switch {
		case t.Spec.CPUOnly == nil:
			errs.Addf("cpuOnly", "template %q offers no CPU-only choice (it runs on %s)", t.Metadata.Name, strings.Join(t.Spec.GPU.Classes, ", "))
		case c.Class != "" || c.Count != 0 || (c.MIGProfile != "" && c.MIGProfile != NoMIG):
			errs.Addf("gpu", "a CPU-only launch takes no GPU: leave gpu out, or cpuOnly")
		case c.Confidential:
			errs.Addf("confidential", "confidential launches run on confidential GPUs: a CPU-only launch cannot be one")
		}
	} else {
		t.resolveGPU(classes, c, r, &errs)
	}
	t.resolveParams(c, r, placeholders, &errs)
	if r.CPUOnly && t.Spec.CPUOnly != nil && errs.Len() == 0 {
		t.checkCPUBounds(r, &errs)
	}
	if err := errs.Err(); err != nil {
		return nil, err
	}
	return r, nil
}

// checkCPUBounds holds a CPU-only launch's CPU and memory, parameters
// applied, to the template's cpuOnly bounds.
func (t *Template) checkCPUBounds(r *Resolved, errs *fault.List) {
	o := t.Spec.CPUOnly
	for _, b := range []struct{ what, v, max string }{
		{"CPU", t.Spec.Resources.CPU, o.MaxCPU},
		{"memory", t.Spec.Resources.Memory, o.MaxMemory},
	} {
		v, err := quantity.Parse(r.expandResource(b.v))
		if err != nil {
			errs.Addf("cpuOnly", "the %s, %q, is not a quantity with the parameters given: a CPU-only launch is bounded and priced by it", b.what, clip(r.expandResource(b.v)))
			continue
		}
		if max, err := quantity.Parse(b.max); err == nil && v.Cmp(max) > 0 {
			errs.Addf("cpuOnly", "%s %s is over template %q's CPU-only bound %s", b.what, v.String(), t.Metadata.Name, b.max)
		}
	}
}

// resolveGPU resolves the GPU class, MIG profile and count of c into r.
func (t *Template) resolveGPU(classes *gpu.Catalog, c Choice, r *Resolved, errs *fault.List) {
	g := t.Spec.GPU
	if len(g.Classes) == 0 {
		errs.Addf("gpu", "template %q runs without a GPU (CPU-only): leave gpu out", t.Metadata.Name)
		return
	}
	className := c.Class
	if className == "" {
		className = g.DefaultClass
	}
	class, ok := classes.Get(className)
	if !slices.Contains(g.Classes, className) || !ok {
		errs.Addf("gpu.class", "%q is not allowed by template %q (allowed: %s)", clip(className), t.Metadata.Name, strings.Join(g.Classes, ", "))
	}
	r.Class = class
	r.Confidential = c.Confidential || t.Spec.Confidential
	if ok && r.Confidential && class.Confidential == nil {
		errs.Addf("gpu.class", "%s does not support confidential computing (classes that do: %s)", class.Name, strings.Join(confidentialClasses(classes, g.Classes), ", "))
	}
	ccMIG := !r.Confidential || (class.Confidential != nil && class.Confidential.MIG)

	if ok && c.MIGProfile != NoMIG {
		profile, explicit := c.MIGProfile, c.MIGProfile != ""
		if !explicit {
			profile = g.DefaultMIGProfile
		}
		if profile != "" {
			allowed := allowedProfiles(g.MIGProfiles, class)
			p, supported := class.Profile(profile)
			switch {
			case supported && slices.Contains(g.MIGProfiles, profile) && !ccMIG && explicit:
				errs.Addf("gpu.migProfile", "%s cannot be confidential on %s: confidential workloads get whole GPUs there (migProfile: none)", profile, class.Name)
			case supported && slices.Contains(g.MIGProfiles, profile) && !ccMIG:
				// A default MIG profile, confidential: whole GPUs instead.
			case supported && slices.Contains(g.MIGProfiles, profile):
				r.MIG = &p
			case explicit && len(allowed) == 0:
				errs.Addf("gpu.migProfile", "template %q allows no MIG profile on %s", t.Metadata.Name, class.Name)
			case explicit:
				errs.Addf("gpu.migProfile", "%q is not allowed on %s by template %q (allowed: %s)", clip(profile), class.Name, t.Metadata.Name, strings.Join(allowed, ", "))
			}
			// A default profile the chosen class lacks means whole GPUs.
		}
	}

	r.Count = c.Count
	if r.Count == 0 {
		r.Count = g.Count.Default
		if r.MIG != nil {
			r.Count = 1
		}
	}
	if r.Count < g.Count.Min || r.Count > g.Count.Max {
		errs.Addf("gpu.count", "%d is outside the range %d to %d that template %q allows", c.Count, g.Count.Min, g.Count.Max, t.Metadata.Name)
	}
	if r.MIG != nil && r.Count > r.MIG.MaxInstances {
		errs.Addf("gpu.count", "at most %d %s slices fit on one GPU", r.MIG.MaxInstances, r.MIG.Name)
	}
}

// resolveParams resolves c's parameters into r.Params.
func (t *Template) resolveParams(c Choice, r *Resolved, placeholders bool, errs *fault.List) {

	declared := map[string]bool{}
	for i := range t.Spec.Parameters {
		p := &t.Spec.Parameters[i]
		declared[p.Name] = true
		v, given := c.Params[p.Name]
		if !given || v == nil {
			if p.Default == nil && placeholders {
				continue
			}
			if p.Default == nil {
				errs.Addf("parameters."+p.Name, "is required")
				continue
			}
			v = p.Default
		}
		s, err := p.Value(v)
		if err != nil {
			errs.Addf("parameters."+p.Name, "%v", err)
			continue
		}
		r.Params[p.Name] = s
	}
	var unknown []string
	for k := range c.Params {
		if !declared[k] {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	for _, k := range unknown {
		errs.Addf("parameters."+clip(k), "template %q has no parameter %q (has: %s)", t.Metadata.Name, clip(k), strings.Join(t.parameterNames(), ", "))
	}
}

// confidentialClasses are the classes among names that support confidential
// computing.
func confidentialClasses(classes *gpu.Catalog, names []string) []string {
	var out []string
	for _, n := range names {
		if c, ok := classes.Get(n); ok && c.Confidential != nil {
			out = append(out, n)
		}
	}
	if out == nil {
		return []string{"none that this template allows"}
	}
	return out
}

func allowedProfiles(allowed []string, c gpu.Class) []string {
	var out []string
	for _, p := range allowed {
		if _, ok := c.Profile(p); ok {
			out = append(out, p)
		}
	}
	return out
}

func (t *Template) parameterNames() []string {
	out := make([]string, len(t.Spec.Parameters))
	for i, p := range t.Spec.Parameters {
		out[i] = p.Name
	}
	if len(out) == 0 {
		return []string{"none"}
	}
	return out
}

// Expand replaces every {{name}} reference in s with its value. Values are
// inserted as text into one string field; they can never add fields or objects.
func (r *Resolved) Expand(s string, builtins map[string]string) string {
	if !strings.Contains(s, "{{") {
		return s
	}
	return refRE.ReplaceAllStringFunc(s, func(m string) string {
		name := refRE.FindStringSubmatch(m)[1]
		if v, ok := r.Params[name]; ok {
			return v
		}
		if v, ok := builtins[name]; ok {
			return v
		}
		return m // Validate rejects unknown references; leave any other as written
	})
}
