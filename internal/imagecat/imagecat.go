// Package imagecat owns the approved image catalog: the Image documents under
// images/ (gantry.dev/v1alpha1, kind Image) — repository, allowed tags, the
// identity that must have signed an image (public keys under images/keys/, or a
// keyless issuer and subject pattern), the signature annotations and the
// attestations it must carry, whether it is a confidential-computing image and
// for which TEE, its CUDA version, framework, layer and base image, and the GPU
// classes it supports. Files are parsed strictly (file:line for every problem)
// and checked together: bases exist and sit on a lower layer, key files hold
// public keys, GPU classes exist.
package imagecat

import (
	"crypto"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/sigstore/sigstore/pkg/cryptoutils"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/yamldoc"
)

// APIVersion and Kind identify an image document.
const (
	APIVersion = "gantry.dev/v1alpha1"
	Kind       = "Image"
)

// Layers, lowest first: an image builds on one of a lower layer.
var Layers = []string{"base", "framework", "app"}

// Image is one catalog entry.
type Image struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Metadata   Metadata `json:"metadata"`
	Spec       Spec     `json:"spec"`
}

// Metadata names an image.
type Metadata struct {
	Name        string `json:"name"`
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
}

// Spec is what an image is and what it must prove.
type Spec struct {
	Repository string `json:"repository"`
	// Tags are the tags that may be launched: exact tags or path.Match
	// patterns (e.g. "25.*-py3").
	Tags    []string `json:"tags"`
	Signing Signing  `json:"signing"`
	// Annotations must appear, with these values, in the signature's payload.
	Annotations  map[string]string `json:"annotations,omitempty"`
	Attestations []Attestation     `json:"attestations,omitempty"`
	Confidential *Confidential     `json:"confidential,omitempty"`
	CUDA         string            `json:"cuda,omitempty"`
	Framework    string            `json:"framework,omitempty"`
	Layer        string            `json:"layer"`
	Base         string            `json:"base,omitempty"`
	GPUClasses   []string          `json:"gpuClasses"`
}

// Signing is who must have signed the image: any of the keys, or a keyless
// (Fulcio certificate) identity.
type Signing struct {
	Keys    []string `json:"keys,omitempty"` // PEM public keys, relative to the catalog directory
	Keyless *Keyless `json:"keyless,omitempty"`
}

// Keyless is a certificate identity: the OIDC issuer and a subject pattern.
type Keyless struct {
	Issuer  string `json:"issuer"`
	Subject string `json:"subject"` // a regular expression, anchored
}

// Attestation is an in-toto statement the image must carry, signed by the
// same identity, with simple checks on its predicate.
type Attestation struct {
	PredicateType string  `json:"predicateType"`
	Checks        []Check `json:"checks,omitempty"`
}

// Check compares one predicate field (a dot path, e.g.
// buildDefinition.buildType) with a value.
type Check struct {
	Path   string `json:"path"`
	Equals string `json:"equals"`
}

// Confidential marks an image built for confidential computing.
type Confidential struct {
	TEE string `json:"tee"` // snp | tdx
}

// Entry is a loaded image with its public keys.
type Entry struct {
	Path  string
	Image *Image
	Keys  []crypto.PublicKey
	// KeyNames name Keys, one each: the key file, or what Trust was told.
	KeyNames []string
}

// Catalog is the loaded image catalog. Reload replaces its contents in one
// step when the files change and load cleanly; everyone holding the catalog
// sees the new entries.
type Catalog struct {
	dir     string
	classes *gpu.Catalog

	mu      sync.RWMutex
	entries map[string]*Entry
	stamp   string
	trusted []trustedKey
}

type trustedKey struct {
	label string
	key   crypto.PublicKey
}

var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// Load reads every Image document (*.yaml, *.yml, *.json) in dir and checks
// them together; every problem in every file comes back at once.
func Load(dir string, classes *gpu.Catalog) (*Catalog, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read image catalog: %w", err)
	}
	var errs fault.List
	c := &Catalog{dir: dir, classes: classes, entries: map[string]*Entry{}, stamp: stamp(dir)}
	lines := map[string]yamldoc.Lines{}
	for _, e := range entries {
		ext := strings.ToLower(filepath.Ext(e.Name()))
		if e.IsDir() || (ext != ".yaml" && ext != ".yml" && ext != ".json") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		data, err := yamldoc.ReadFile(p)
		if err != nil {
			errs.Add(fault.Field{File: p, Message: err.Error()})
			continue
		}
		img, l, err := Parse(p, data, classes)
		if err != nil {
			errs.AddErr("", err)
			continue
		}
		if prev, dup := c.entries[img.Metadata.Name]; dup {
			errs.Add(fault.Field{File: p, Line: l.Line("metadata.name"), Path: "metadata.name", Message: fmt.Sprintf("image %q is also defined in %s", img.Metadata.Name, prev.Path)})
			continue
		}
		entry := &Entry{Path: p, Image: img}
		var kerrs fault.List
		for i, k := range img.Spec.Signing.Keys {
			key, err := loadKey(filepath.Join(dir, k))
			if err != nil {
				kerrs.Addf(fmt.Sprintf("spec.signing.keys[%d]", i), "%v", err)
				continue
			}
			entry.Keys = append(entry.Keys, key)
			entry.KeyNames = append(entry.KeyNames, k)
		}
		if err := l.Locate(p, kerrs.Err()); err != nil {
			errs.AddErr("", err) // kept for the cross-entry checks; the load fails anyway
		}
		c.entries[img.Metadata.Name] = entry
		lines[img.Metadata.Name] = l
	}
	// Cross-entry checks: bases exist, sit on a lower layer, and form no cycle.
	for _, n := range c.Names() {
		e := c.entries[n]
		s := e.Image.Spec
		if s.Base == "" {
			continue
		}
		var berrs fault.List
		switch base, ok := c.entries[s.Base]; {
		case !ok:
			berrs.Addf("spec.base", "unknown image %q (catalog: %s)", s.Base, strings.Join(c.Names(), ", "))
		case layerIndex(base.Image.Spec.Layer) >= layerIndex(s.Layer):
			berrs.Addf("spec.base", "%q is a %s image: a %s image builds on a lower layer (%s)", s.Base, base.Image.Spec.Layer, s.Layer, strings.Join(Layers, " < "))
		}
		if err := lines[n].Locate(e.Path, berrs.Err()); err != nil {
			errs.AddErr("", err)
		}
	}
	if err := errs.Err(); err != nil {
		return nil, err
	}
	return c, nil
}

// Parse decodes and checks one image document on its own (not its base or
// key files). It returns the document's line table for later problems.
func Parse(file string, data []byte, classes *gpu.Catalog) (*Image, yamldoc.Lines, error) {
	var img Image
	lines, err := yamldoc.Decode(file, data, &img)
	if lines == nil {
		return nil, nil, err
	}
	if err := fault.Merge(err, lines.Locate(file, img.Validate(classes))); err != nil {
		return nil, lines, err
	}
	return &img, lines, nil
}

// Validate checks one image document's fields.
func (img *Image) Validate(classes *gpu.Catalog) error {
	var errs fault.List
	if img.APIVersion != APIVersion {
		errs.Addf("apiVersion", "%q is not %s", img.APIVersion, APIVersion)
	}
	if img.Kind != Kind {
		errs.Addf("kind", "%q is not %s", img.Kind, Kind)
	}
	if !nameRE.MatchString(img.Metadata.Name) {
		errs.Addf("metadata.name", "%q must be a lowercase DNS label", img.Metadata.Name)
	}
	s := &img.Spec
	if s.Repository == "" {
		errs.Addf("spec.repository", "is required")
	} else if _, err := name.NewRepository(s.Repository, name.StrictValidation); err != nil {
		errs.Addf("spec.repository", "%q is not a repository (registry/path, without tag or digest)", s.Repository)
	}
	if len(s.Tags) == 0 {
		errs.Addf("spec.tags", "at least one tag or tag pattern is required")
	}
	for i, t := range s.Tags {
		if _, err := path.Match(t, ""); err != nil || t == "" || strings.ContainsAny(t, "@:/ ") {
			errs.Addf(fmt.Sprintf("spec.tags[%d]", i), "%q is not a tag or tag pattern", t)
		}
	}
	if len(s.Signing.Keys) == 0 && s.Signing.Keyless == nil {
		errs.Addf("spec.signing", "a signing identity is required: keys or keyless")
	}
	for i, k := range s.Signing.Keys {
		if k == "" || filepath.IsAbs(k) || strings.HasPrefix(filepath.Clean(k), "..") {
			errs.Addf(fmt.Sprintf("spec.signing.keys[%d]", i), "%q must be a path inside the catalog directory (e.g. keys/platform.pub)", k)
		}
	}
	if kl := s.Signing.Keyless; kl != nil {
		if !strings.HasPrefix(kl.Issuer, "https://") {
			errs.Addf("spec.signing.keyless.issuer", "%q must be an https URL", kl.Issuer)
		}
		if _, err := regexp.Compile(kl.Subject); err != nil || kl.Subject == "" {
			errs.Addf("spec.signing.keyless.subject", "%q is not a regular expression", kl.Subject)
		}
	}
	for k := range s.Annotations {
		if k == "" {
			errs.Addf("spec.annotations", "an annotation needs a key")
		}
	}
	for i, a := range s.Attestations {
		p := fmt.Sprintf("spec.attestations[%d]", i)
		if !strings.Contains(a.PredicateType, "://") {
			errs.Addf(p+".predicateType", "%q is not a predicate type URI", a.PredicateType)
		}
		for j, c := range a.Checks {
			if c.Path == "" || strings.HasPrefix(c.Path, ".") || strings.HasSuffix(c.Path, ".") || strings.Contains(c.Path, "..") {
				errs.Addf(fmt.Sprintf("%s.checks[%d].path", p, j), "%q is not a dot path into the predicate", c.Path)
			}
		}
	}
	if c := s.Confidential; c != nil && !slices.Contains(gpu.TEEs, c.TEE) {
		errs.Addf("spec.confidential.tee", "%q is not one of %s", c.TEE, strings.Join(gpu.TEEs, ", "))
	}
	if !slices.Contains(Layers, s.Layer) {
		errs.Addf("spec.layer", "%q is not one of %s", s.Layer, strings.Join(Layers, ", "))
	}
	if s.Layer == "base" && s.Base != "" {
		errs.Addf("spec.base", "a base image builds on no catalog image")
	}
	if s.Layer != "base" && s.Layer != "" && s.Base == "" {
		errs.Addf("spec.base", "a %s image names the catalog image it builds on", s.Layer)
	}
	if len(s.GPUClasses) == 0 {
		errs.Addf("spec.gpuClasses", "at least one GPU class is required")
	}
	for i, g := range s.GPUClasses {
		if _, ok := classes.Get(g); !ok && g != gpu.CPUClass {
			errs.Addf(fmt.Sprintf("spec.gpuClasses[%d]", i), "unknown GPU class %q (known: %s, and %s for CPU-only)", g, strings.Join(classes.Names(), ", "), gpu.CPUClass)
		}
	}
	return errs.Err()
}

func layerIndex(l string) int { return slices.Index(Layers, l) }

func loadKey(p string) (crypto.PublicKey, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("key file: %v", err)
	}
	k, err := cryptoutils.UnmarshalPEMToPublicKey(b)
	if err != nil {
		return nil, fmt.Errorf("%s holds no PEM public key: %v", p, err)
	}
	return k, nil
}

// Trust adds a key every entry accepts, besides its own, now and after every
// reload: the development key of `gantry dev`. The files are not changed.
func (c *Catalog) Trust(label string, key crypto.PublicKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trusted = append(c.trusted, trustedKey{label, key})
	trust(c.entries, c.trusted[len(c.trusted)-1:])
}

func trust(entries map[string]*Entry, keys []trustedKey) {
	for _, e := range entries {
		for _, k := range keys {
			e.Keys = append(e.Keys, k.key)
			e.KeyNames = append(e.KeyNames, k.label)
		}
	}
}

// ErrUnchanged means Reload found the files as they were.
var ErrUnchanged = errors.New("image catalog unchanged")

// Reload reads the catalog's directory again if its files changed. A catalog
// that does not load keeps the one in force and returns why (file:line).
func (c *Catalog) Reload() error {
	c.mu.RLock()
	same := stamp(c.dir) == c.stamp
	c.mu.RUnlock()
	if same {
		return ErrUnchanged
	}
	n, err := Load(c.dir, c.classes)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	trust(n.entries, c.trusted)
	c.entries, c.stamp = n.entries, n.stamp
	return nil
}

// stamp identifies the state of the catalog's files: names, sizes and times
// of the documents and the keys.
func stamp(dir string) string {
	var b strings.Builder
	for _, sub := range []string{dir, filepath.Join(dir, "keys")} {
		entries, _ := os.ReadDir(sub)
		for _, e := range entries {
			if fi, err := e.Info(); err == nil && !e.IsDir() {
				fmt.Fprintf(&b, "%s/%s:%d:%d;", sub, e.Name(), fi.Size(), fi.ModTime().UnixNano())
			}
		}
	}
	return b.String()
}

// Get returns the entry with that name.
func (c *Catalog) Get(name string) (*Entry, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.entries[name]
	return e, ok
}

// Names lists the catalog's image names, sorted.
func (c *Catalog) Names() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.names()
}

func (c *Catalog) names() []string {
	out := make([]string, 0, len(c.entries))
	for n := range c.entries {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// List returns the entries sorted by name.
func (c *Catalog) List() []*Entry {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]*Entry, 0, len(c.entries))
	for _, n := range c.names() {
		out = append(out, c.entries[n])
	}
	return out
}

// AllowsTag reports whether the image may be launched with tag.
func (img *Image) AllowsTag(tag string) bool {
	for _, t := range img.Spec.Tags {
		if ok, _ := path.Match(t, tag); ok {
			return true
		}
	}
	return false
}

// Resolve looks up a catalog reference "name:tag" and checks the tag.
func (c *Catalog) Resolve(ref string) (*Entry, string, error) {
	n, tag, ok := strings.Cut(ref, ":")
	if !ok || n == "" || tag == "" {
		return nil, "", fmt.Errorf("%q is not a catalog image reference (name:tag, e.g. pytorch:25.01-py3)", ref)
	}
	e, found := c.Get(n)
	if !found {
		return nil, "", fmt.Errorf("unknown image %q (catalog: %s)", n, strings.Join(c.Names(), ", "))
	}
	if !e.Image.AllowsTag(tag) {
		return nil, "", fmt.Errorf("tag %q of image %q is not approved (allowed: %s)", tag, n, strings.Join(e.Image.Spec.Tags, ", "))
	}
	return e, tag, nil
}

// Describe returns the GPU classes the image of a catalog reference
// ("name:tag") supports and its TEE ("" for a non-confidential image), or why
// it cannot be launched.
func (c *Catalog) Describe(ref string) ([]string, string, error) {
	e, _, err := c.Resolve(ref)
	if err != nil {
		return nil, "", err
	}
	return e.Image.Spec.GPUClasses, e.Image.TEE(), nil
}

// TEE is the image's trusted execution environment, "" unless confidential.
func (img *Image) TEE() string {
	if img.Spec.Confidential == nil {
		return ""
	}
	return img.Spec.Confidential.TEE
}
