// Package imageverify owns checking an image before Gantry runs it: resolving
// the tag to a digest at the registry (go-containerregistry, with credentials
// from a docker config or pull secret), verifying cosign signatures against the
// catalog entry's keys — offline, no transparency log — and its required
// signature annotations, verifying its required in-toto attestations (DSSE
// envelopes signed by the same keys) and their predicate checks, and pinning
// the digest. Successes are cached per digest and policy for a TTL; failures
// are never cached, and a tag that moves is resolved and verified afresh.
package imageverify

import (
	"context"
	"crypto"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/sigstore/cosign/v2/pkg/cosign"
	"github.com/sigstore/cosign/v2/pkg/oci"
	ociremote "github.com/sigstore/cosign/v2/pkg/oci/remote"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	sigpayload "github.com/sigstore/sigstore/pkg/signature/payload"

	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/imagecat"
)

// Checks name what failed.
const (
	CheckCatalog     = "catalog"     // the image is not in the catalog
	CheckTag         = "tag"         // the tag is not approved in the catalog
	CheckResolve     = "resolve"     // the registry has no such tag
	CheckSignature   = "signature"   // unsigned, or no signature verifies with the catalog's keys
	CheckAnnotations = "annotations" // no verified signature carries the required annotations
	CheckAttestation = "attestation" // a required attestation is missing, unverified or fails a check
)

// Refused says that an image failed a check, which one and why; it is
// fault.ImageRefused, where every error callers branch on lives.
type Refused = fault.ImageRefused

// Result is a verified image.
type Result struct {
	Image        string    `json:"image"`     // name:tag
	Reference    string    `json:"reference"` // repository:tag
	Digest       string    `json:"digest"`
	Pinned       string    `json:"pinned"` // repository@digest: what runs
	Signer       string    `json:"signer"` // the key that verified, by fingerprint
	Annotations  []string  `json:"annotations,omitempty"`
	Attestations []string  `json:"attestations,omitempty"` // predicate types verified
	TEE          string    `json:"tee,omitempty"`          // the catalog's TEE for a confidential image
	VerifiedAt   time.Time `json:"verifiedAt"`
	Cached       bool      `json:"cached"`
}

// Options configure a Verifier.
type Options struct {
	// Keychain gives registry credentials (see Keychain); default anonymous.
	Keychain authn.Keychain
	// TTL is how long a success stays cached (default 10m).
	TTL time.Duration
	// Mirrors maps a registry host in the catalog to the host actually asked
	// (e.g. a local mirror; "http://host" for plain HTTP, see mirror); the
	// pinned reference keeps the catalog's host.
	Mirrors map[string]string
	// Transport for registry requests (default http.DefaultTransport).
	Transport http.RoundTripper
	// Now is the clock successes expire by (required).
	Now func() time.Time
}

// Verifier verifies images and caches successes.
type Verifier struct {
	o   Options
	now func() time.Time
	// puller keeps each repository's registry ping and token between
	// verifications, so a cached verification is one round trip.
	puller *remote.Puller

	mu    sync.Mutex
	cache map[cacheKey]Result

	hits, misses atomic.Uint64 // cache lookups, for Gantry's metrics
}

// CacheHits is how many verifications the cache answered.
func (v *Verifier) CacheHits() uint64 { return v.hits.Load() }

// CacheMisses is how many verifications went to the registry.
func (v *Verifier) CacheMisses() uint64 { return v.misses.Load() }

type cacheKey struct{ digest, policy string }

// New returns a Verifier.
func New(o Options) (*Verifier, error) {
	if o.Now == nil {
		return nil, errors.New("imageverify: Now is required")
	}
	if o.Keychain == nil {
		o.Keychain = authn.NewMultiKeychain()
	}
	if o.TTL == 0 {
		o.TTL = 10 * time.Minute
	}
	if o.Transport == nil {
		o.Transport = http.DefaultTransport
	}
	v := &Verifier{o: o, now: o.Now, cache: map[cacheKey]Result{}}
	p, err := remote.NewPuller(remote.WithAuthFromKeychain(o.Keychain), remote.WithTransport(o.Transport))
	if err == nil { // it cannot fail with these options; without it each call sets up afresh
		v.puller = p
	}
	return v, nil
}

// Verify checks e at tag. A *Refused says which check failed; a
// *fault.Unavailable means the registry could not be asked.
func (v *Verifier) Verify(ctx context.Context, e *imagecat.Entry, tag string) (Result, error) {
	img := e.Image
	ref := img.Metadata.Name + ":" + tag
	if !img.AllowsTag(tag) {
		return Result{}, &Refused{Image: ref, Check: CheckTag, Reason: fmt.Sprintf("tag %q is not approved (allowed: %s)", tag, strings.Join(img.Spec.Tags, ", "))}
	}
	repo, err := name.NewRepository(img.Spec.Repository, name.StrictValidation)
	if err != nil {
		return Result{}, fmt.Errorf("image %s: repository: %w", ref, err)
	}
	fetchRepo := v.mirror(repo)
	ropts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(v.o.Keychain), remote.WithTransport(v.o.Transport)}
	if v.puller != nil {
		ropts = append(ropts, remote.Reuse(v.puller))
	}
	digest, err := resolve(repo, fetchRepo, ref, tag, ropts)
	if err != nil {
		return Result{}, err
	}
	key := cacheKey{digest: digest, policy: policyOf(e)}
	now := v.now()
	if r, ok := v.cached(key, now); ok {
		r.Cached = true
		r.Image, r.Reference = ref, repo.String()+":"+tag
		return r, nil
	}

	res := Result{Image: ref, Reference: repo.String() + ":" + tag, Digest: digest, Pinned: repo.String() + "@" + digest, VerifiedAt: now, TEE: img.TEE()}
	c := &verification{ctx: ctx, e: e, ref: ref, digest: digest, repo: fetchRepo, dref: fetchRepo.Digest(digest),
		regOpts: []ociremote.Option{ociremote.WithRemoteOptions(ropts...)}}
	sigs, verifier, signer, err := c.signatures()
	if err != nil {
		return Result{}, err
	}
	res.Signer = signer
	if res.Annotations, err = c.annotations(sigs); err != nil {
		return Result{}, err
	}
	if res.Attestations, err = c.attestations(verifier); err != nil {
		return Result{}, err
	}
	v.store(key, res)
	return res, nil
}

// resolve asks the registry (fetchRepo, repo's mirror) for the digest of tag.
func resolve(repo, fetchRepo name.Repository, ref, tag string, ropts []remote.Option) (string, error) {
	desc, err := remote.Head(fetchRepo.Tag(tag), ropts...)
	if err != nil {
		var terr *transport.Error
		if errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound {
			return "", &Refused{Image: ref, Check: CheckResolve, Reason: fmt.Sprintf("%s:%s is not in the registry", repo, tag)}
		}
		return "", &fault.Unavailable{What: "image registry " + fetchRepo.RegistryStr(), Err: err}
	}
	return desc.Digest.String(), nil
}

// cached returns the cached success for key, if younger than the TTL.
func (v *Verifier) cached(key cacheKey, now time.Time) (Result, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	r, ok := v.cache[key]
	if !ok || now.Sub(r.VerifiedAt) >= v.o.TTL {
		v.misses.Add(1)
		return Result{}, false
	}
	v.hits.Add(1)
	return r, true
}

// store caches a success.
func (v *Verifier) store(key cacheKey, res Result) {
	v.mu.Lock()
	if len(v.cache) > 10_000 {
		clear(v.cache)
	}
	v.cache[key] = res
	v.mu.Unlock()
}

// verification is the signature, annotation and attestation checks of one
// image digest.
type verification struct {
	ctx     context.Context
	e       *imagecat.Entry
	ref     string          // name:tag
	digest  string          // what tag resolved to
	repo    name.Repository // where it is fetched from
	dref    name.Digest
	regOpts []ociremote.Option
}

func (c *verification) refuse(check, format string, args ...any) error {
	return &Refused{Image: c.ref, Digest: c.digest, Check: check, Reason: fmt.Sprintf(format, args...)}
}

func (c *verification) unavailable(err error) error {
	return &fault.Unavailable{What: "image registry " + c.repo.RegistryStr(), Err: err}
}

// signatures verifies the image's signatures with any of the catalog's keys
// and returns them, the key's verifier and the key by name and fingerprint.
func (c *verification) signatures() ([]oci.Signature, signature.Verifier, string, error) {
	e := c.e
	if len(e.Keys) == 0 {
		return nil, nil, "", c.refuse(CheckSignature, "keyless verification needs a trust root (Fulcio certificates and a transparency log); this server has none, so only key-based identities can be verified")
	}
	var lastErr error
	for i, k := range e.Keys {
		sv, err := signature.LoadVerifier(k, crypto.SHA256)
		if err != nil {
			return nil, nil, "", fmt.Errorf("image %s: key %s: %w", c.ref, e.KeyNames[i], err)
		}
		co := &cosign.CheckOpts{SigVerifier: sv, RegistryClientOpts: c.regOpts, IgnoreTlog: true, IgnoreSCT: true, Offline: true, ClaimVerifier: cosign.SimpleClaimVerifier}
		sigs, _, err := cosign.VerifyImageSignatures(c.ctx, c.dref, co)
		if err == nil && len(sigs) > 0 {
			return sigs, sv, e.KeyNames[i] + " (" + Fingerprint(k) + ")", nil
		}
		lastErr = err
	}
	var none *cosign.ErrNoSignaturesFound
	if errors.As(lastErr, &none) {
		return nil, nil, "", c.refuse(CheckSignature, "the image is not signed")
	}
	if isUnavailable(lastErr) {
		return nil, nil, "", c.unavailable(lastErr)
	}
	return nil, nil, "", c.refuse(CheckSignature, "no signature verifies with %s", strings.Join(e.KeyNames, " or "))
}

// annotations checks that one verified signature carries all the required
// annotations and returns them as sorted key=value.
func (c *verification) annotations(sigs []oci.Signature) ([]string, error) {
	want := c.e.Image.Spec.Annotations
	if len(want) == 0 {
		return nil, nil
	}
	var missing []string
	ok := false
	for _, s := range sigs {
		m := annotationsOf(s)
		var miss []string
		for k, w := range want {
			if got, found := m[k]; !found || fmt.Sprint(got) != w {
				miss = append(miss, fmt.Sprintf("%s=%q", k, w))
			}
		}
		if len(miss) == 0 {
			ok = true
			break
		}
		missing = miss
	}
	if !ok {
		sort.Strings(missing)
		return nil, c.refuse(CheckAnnotations, "no verified signature carries %s", strings.Join(missing, ", "))
	}
	var out []string
	for k, val := range want {
		out = append(out, k+"="+val)
	}
	sort.Strings(out)
	return out, nil
}

// attestations checks each required predicate type: verified with the key
// that verified the signatures, and passing its checks. It returns the
// predicate types.
func (c *verification) attestations(verifier signature.Verifier) ([]string, error) {
	img := c.e.Image
	if len(img.Spec.Attestations) == 0 {
		return nil, nil
	}
	co := &cosign.CheckOpts{SigVerifier: verifier, RegistryClientOpts: c.regOpts, IgnoreTlog: true, IgnoreSCT: true, Offline: true, ClaimVerifier: cosign.IntotoSubjectClaimVerifier}
	atts, _, err := cosign.VerifyImageAttestations(c.ctx, c.dref, co)
	if err != nil && isUnavailable(err) {
		return nil, c.unavailable(err)
	}
	statements := statementsOf(atts)
	var out []string
	for _, want := range img.Spec.Attestations {
		if reason := satisfied(want, statements); reason != "" {
			return nil, c.refuse(CheckAttestation, "%s", reason)
		}
		out = append(out, want.PredicateType)
	}
	return out, nil
}

// Images verifies catalog references ("name:tag") against a catalog.
type Images struct {
	Catalog  *imagecat.Catalog
	Verifier *Verifier
}

// Mirrors maps each catalog registry host to the host images are fetched
// from instead (Options.Mirrors, without an http:// prefix), a copy: a node
// that runs the images pulls them from the same place.
func (v *Verifier) Mirrors() map[string]string {
	out := make(map[string]string, len(v.o.Mirrors))
	for k, m := range v.o.Mirrors {
		out[k], _ = config.MirrorHost(m)
	}
	return out
}

// Verify looks ref up in the catalog and verifies it.
func (i *Images) Verify(ctx context.Context, ref string) (Result, error) {
	name, tag, _ := strings.Cut(ref, ":")
	e, ok := i.Catalog.Get(name)
	if !ok {
		return Result{}, &Refused{Image: ref, Check: CheckCatalog, Reason: fmt.Sprintf("no image %q in the catalog (catalog: %s)", name, strings.Join(i.Catalog.Names(), ", "))}
	}
	return i.Verifier.Verify(ctx, e, tag)
}

// PinImage verifies ref and returns what runs, pinned by digest, and the
// image's TEE (the workload service's view of verification).
func (i *Images) PinImage(ctx context.Context, ref string) (pinned, tee string, err error) {
	r, err := i.Verify(ctx, ref)
	return r.Pinned, r.TEE, err
}

// mirror swaps the registry host for its configured mirror. A mirror is
// fetched as any registry is — over HTTPS, plain HTTP only where
// go-containerregistry allows it for every registry (localhost, 127.0.0.1,
// *.local, private addresses) — unless it is written "http://host": plain
// HTTP by the operator's choice (config.MirrorHost).
func (v *Verifier) mirror(repo name.Repository) name.Repository {
	to, ok := v.o.Mirrors[repo.RegistryStr()]
	if !ok {
		return repo
	}
	host, plain := config.MirrorHost(to)
	var opts []name.Option
	if plain {
		opts = append(opts, name.Insecure)
	}
	m, err := name.NewRepository(host+"/"+repo.RepositoryStr(), opts...)
	if err != nil {
		return repo
	}
	return m
}

// policyOf identifies what an entry demands: a change to its keys,
// annotations or attestations is a different cache key.
func policyOf(e *imagecat.Entry) string {
	h := sha256.New()
	json.NewEncoder(h).Encode(struct {
		Repo string
		Keys []string
		Spec imagecat.Signing
		Ann  map[string]string
		Att  []imagecat.Attestation
	}{e.Image.Spec.Repository, e.KeyNames, e.Image.Spec.Signing, e.Image.Spec.Annotations, e.Image.Spec.Attestations})
	for _, k := range e.Keys {
		h.Write([]byte(Fingerprint(k)))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Fingerprint names a public key: the start of the SHA-256 of its DER form.
func Fingerprint(k crypto.PublicKey) string {
	der, err := cryptoutils.MarshalPublicKeyToDER(k)
	if err != nil {
		return "unknown"
	}
	sum := sha256.Sum256(der)
	return "SHA256:" + hex.EncodeToString(sum[:8])
}

func annotationsOf(s oci.Signature) map[string]any {
	p, err := s.Payload()
	if err != nil {
		return nil
	}
	var c sigpayload.SimpleContainerImage
	if json.Unmarshal(p, &c) != nil {
		return nil
	}
	return c.Optional
}

type statement struct {
	PredicateType string         `json:"predicateType"`
	Predicate     map[string]any `json:"predicate"`
}

// statementsOf decodes verified attestations (DSSE envelopes of in-toto
// statements).
func statementsOf(atts []oci.Signature) []statement {
	var out []statement
	for _, a := range atts {
		p, err := a.Payload()
		if err != nil {
			continue
		}
		var env struct {
			Payload string `json:"payload"`
		}
		if json.Unmarshal(p, &env) != nil {
			continue
		}
		body, err := base64.StdEncoding.DecodeString(env.Payload)
		if err != nil {
			continue
		}
		var st statement
		if json.Unmarshal(body, &st) == nil {
			out = append(out, st)
		}
	}
	return out
}

// satisfied returns "" when some statement has the predicate type and passes
// every check, else why not.
func satisfied(want imagecat.Attestation, statements []statement) string {
	reason := fmt.Sprintf("no verified %s attestation", want.PredicateType)
	for _, st := range statements {
		if st.PredicateType != want.PredicateType {
			continue
		}
		failed := ""
		for _, c := range want.Checks {
			got, ok := lookup(st.Predicate, c.Path)
			if !ok {
				failed = fmt.Sprintf("%s attestation: predicate has no %s (want %q)", want.PredicateType, c.Path, c.Equals)
				break
			}
			if fmt.Sprint(got) != c.Equals {
				failed = fmt.Sprintf("%s attestation: predicate %s is %q, want %q", want.PredicateType, c.Path, fmt.Sprint(got), c.Equals)
				break
			}
		}
		if failed == "" {
			return ""
		}
		reason = failed
	}
	return reason
}

func lookup(m map[string]any, path string) (any, bool) {
	var cur any = m
	for _, part := range strings.Split(path, ".") {
		obj, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = obj[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// isUnavailable tells a registry that did not answer from one that answered.
func isUnavailable(err error) bool {
	var terr *transport.Error
	if errors.As(err, &terr) {
		return terr.StatusCode >= 500 || terr.StatusCode == http.StatusTooManyRequests
	}
	var nerr interface{ Timeout() bool }
	return errors.As(err, &nerr)
}
