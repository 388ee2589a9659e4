package imageverify_test

import (
	"context"
	"crypto"
	"encoding/base64"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sigstore/sigstore/pkg/cryptoutils"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/imagecat"
	"github.com/gantryhq/gantry/internal/imagesign"
	"github.com/gantryhq/gantry/internal/imageverify"
)

const provenance = "https://slsa.dev/provenance/v1"

type rig struct {
	t        testing.TB
	host     string
	platform *imagesign.Signer
	other    *imagesign.Signer
	entry    *imagecat.Entry
}

func setup(t testing.TB) *rig {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	r := &rig{t: t, host: strings.TrimPrefix(srv.URL, "http://")}
	r.platform, r.other = signer(t), signer(t)
	r.entry = r.catalogEntry(r.platform)
	return r
}

func signer(t testing.TB) *imagesign.Signer {
	k, err := imagesign.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	s, err := imagesign.New(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// catalogEntry is the pytorch image as the catalog describes it, trusting s.
func (r *rig) catalogEntry(s *imagesign.Signer) *imagecat.Entry {
	pem, _ := s.PublicKeyPEM()
	k, err := cryptoPublic(pem)
	if err != nil {
		r.t.Fatal(err)
	}
	return &imagecat.Entry{Path: "images/pytorch.yaml", Keys: []crypto.PublicKey{k}, KeyNames: []string{"keys/platform.pub"}, Image: &imagecat.Image{
		APIVersion: imagecat.APIVersion, Kind: imagecat.Kind, Metadata: imagecat.Metadata{Name: "pytorch"},
		Spec: imagecat.Spec{
			Repository: r.host + "/nvidia/pytorch", Tags: []string{"25.*-py3"},
			Signing:      imagecat.Signing{Keys: []string{"keys/platform.pub"}},
			Annotations:  map[string]string{"gantry.dev/reviewed": "true"},
			Attestations: []imagecat.Attestation{{PredicateType: provenance, Checks: []imagecat.Check{{Path: "buildDefinition.buildType", Equals: "https://gantry.dev/mirror/v1"}}}},
			Layer:        "framework", Base: "cuda", GPUClasses: []string{"H100-80GB"},
		}}}
}

// push writes a random image under tag and returns its digest reference.
func (r *rig) push(tag string) name.Digest {
	r.t.Helper()
	img, _ := random.Image(512, 1)
	ref, _ := name.NewTag(r.host + "/nvidia/pytorch:" + tag)
	if err := remote.Write(ref, img); err != nil {
		r.t.Fatal(err)
	}
	d, _ := img.Digest()
	return ref.Context().Digest(d.String())
}

func (r *rig) sign(s *imagesign.Signer, d name.Digest, ann map[string]any) {
	r.t.Helper()
	if err := s.Sign(context.Background(), d, ann); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) attest(s *imagesign.Signer, d name.Digest, buildType string) {
	r.t.Helper()
	if err := s.Attest(context.Background(), d, provenance, map[string]any{"buildDefinition": map[string]any{"buildType": buildType}}); err != nil {
		r.t.Fatal(err)
	}
}

// good pushes a fully signed, annotated and attested image.
func (r *rig) good(tag string) name.Digest {
	d := r.push(tag)
	r.sign(r.platform, d, map[string]any{"gantry.dev/reviewed": "true"})
	r.attest(r.platform, d, "https://gantry.dev/mirror/v1")
	return d
}

func refused(t *testing.T, err error, check, reason string) {
	t.Helper()
	var rf *imageverify.Refused
	if !errors.As(err, &rf) || rf.Check != check || !strings.Contains(rf.Reason, reason) {
		t.Fatalf("got %v; want refused by the %s check with %q", err, check, reason)
	}
}

func TestVerify(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name       string
		prepare    func(r *rig, tag string)
		check, why string
	}{
		{"signed, annotated and attested", func(r *rig, tag string) { r.good(tag) }, "", ""},
		{"unsigned", func(r *rig, tag string) { r.push(tag) }, imageverify.CheckSignature, "not signed"},
		{"signed by another key", func(r *rig, tag string) {
			d := r.push(tag)
			r.sign(r.other, d, map[string]any{"gantry.dev/reviewed": "true"})
			r.attest(r.other, d, "https://gantry.dev/mirror/v1")
		}, imageverify.CheckSignature, "no signature verifies with keys/platform.pub"},
		{"missing annotation", func(r *rig, tag string) {
			d := r.push(tag)
			r.sign(r.platform, d, map[string]any{"team": "platform"})
			r.attest(r.platform, d, "https://gantry.dev/mirror/v1")
		}, imageverify.CheckAnnotations, `gantry.dev/reviewed="true"`},
		{"missing attestation", func(r *rig, tag string) {
			r.sign(r.platform, r.push(tag), map[string]any{"gantry.dev/reviewed": "true"})
		}, imageverify.CheckAttestation, "no verified " + provenance + " attestation"},
		{"attestation by another key", func(r *rig, tag string) {
			d := r.push(tag)
			r.sign(r.platform, d, map[string]any{"gantry.dev/reviewed": "true"})
			r.attest(r.other, d, "https://gantry.dev/mirror/v1")
		}, imageverify.CheckAttestation, "no verified"},
		{"wrong attestation", func(r *rig, tag string) {
			d := r.push(tag)
			r.sign(r.platform, d, map[string]any{"gantry.dev/reviewed": "true"})
			r.attest(r.platform, d, "https://evil.example/build")
		}, imageverify.CheckAttestation, `buildDefinition.buildType is "https://evil.example/build", want "https://gantry.dev/mirror/v1"`},
		{"tag not approved", func(r *rig, tag string) {}, imageverify.CheckTag, "not approved"},
		{"tag not in the registry", func(r *rig, tag string) {}, imageverify.CheckResolve, "not in the registry"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := setup(t)
			tag := "25.01-py3"
			if c.check == imageverify.CheckTag {
				tag = "latest"
			}
			c.prepare(r, tag)
			v := newVerifier(t, imageverify.Options{Now: time.Now})
			res, err := v.Verify(ctx, r.entry, tag)
			if c.check != "" {
				refused(t, err, c.check, c.why)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(res.Digest, "sha256:") || res.Pinned != r.host+"/nvidia/pytorch@"+res.Digest || res.Cached ||
				len(res.Attestations) != 1 || !strings.HasPrefix(res.Signer, "keys/platform.pub (SHA256:") {
				t.Errorf("result %+v", res)
			}
		})
	}
}

// TestCacheNeverTurnsFailureIntoSuccess: a verified tag is cached; moved to an
// unsigned digest it is refused; a failure is never cached; the TTL expires.
func TestCache(t *testing.T) {
	ctx := context.Background()
	r := setup(t)
	now := time.Now()
	v := newVerifier(t, imageverify.Options{TTL: time.Minute, Now: func() time.Time { return now }})
	first := r.good("25.01-py3")
	res, err := v.Verify(ctx, r.entry, "25.01-py3")
	if err != nil || res.Cached || res.Digest != first.DigestStr() {
		t.Fatalf("first: %+v %v", res, err)
	}
	if res, err = v.Verify(ctx, r.entry, "25.01-py3"); err != nil || !res.Cached {
		t.Fatalf("second: %+v %v; want a cached success", res, err)
	}
	// The tag moves to an unsigned image: resolved afresh, refused.
	moved := r.push("25.01-py3")
	_, err = v.Verify(ctx, r.entry, "25.01-py3")
	refused(t, err, imageverify.CheckSignature, "not signed")
	// Signed later: verified now (the refusal was not cached).
	r.sign(r.platform, moved, map[string]any{"gantry.dev/reviewed": "true"})
	r.attest(r.platform, moved, "https://gantry.dev/mirror/v1")
	if res, err = v.Verify(ctx, r.entry, "25.01-py3"); err != nil || res.Cached || res.Digest != moved.DigestStr() {
		t.Fatalf("after signing: %+v %v", res, err)
	}
	// A stricter catalog entry is a different policy: not served from the cache.
	strict := *r.entry
	img := *strict.Image
	img.Spec.Annotations = map[string]string{"gantry.dev/reviewed": "true", "gantry.dev/cve-scan": "passed"}
	strict.Image = &img
	_, err = v.Verify(ctx, &strict, "25.01-py3")
	refused(t, err, imageverify.CheckAnnotations, "gantry.dev/cve-scan")
	// Past the TTL the success is verified again.
	now = now.Add(2 * time.Minute)
	if res, err = v.Verify(ctx, r.entry, "25.01-py3"); err != nil || res.Cached {
		t.Fatalf("after the TTL: %+v %v", res, err)
	}
}

// TestRegistryCredentials: a registry that wants a password is asked with the
// credentials of a docker config; without them the registry is unavailable.
func TestRegistryCredentials(t *testing.T) {
	ctx := context.Background()
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if u, p, ok := req.BasicAuth(); !ok || u != "robot" || p != "s3cret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, req)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	cfg := `{"auths":{"` + host + `":{"auth":"` + base64.StdEncoding.EncodeToString([]byte("robot:s3cret")) + `"}}}`
	kc, err := imageverify.Keychain([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, host: host, platform: signer(t)}
	r.entry = r.catalogEntry(r.platform)
	img, _ := random.Image(512, 1)
	ref, _ := name.NewTag(host + "/nvidia/pytorch:25.01-py3")
	auth := remote.WithAuthFromKeychain(kc)
	if err := remote.Write(ref, img, auth); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	dref := ref.Context().Digest(d.String())
	if err := r.platform.Sign(ctx, dref, map[string]any{"gantry.dev/reviewed": "true"}, auth); err != nil {
		t.Fatal(err)
	}
	if err := r.platform.Attest(ctx, dref, provenance, map[string]any{"buildDefinition": map[string]any{"buildType": "https://gantry.dev/mirror/v1"}}, auth); err != nil {
		t.Fatal(err)
	}
	var un *fault.Unavailable
	if _, err := newVerifier(t, imageverify.Options{Now: time.Now}).Verify(ctx, r.entry, "25.01-py3"); !errors.As(err, &un) {
		t.Errorf("without credentials: %v; want the registry unavailable", err)
	}
	if _, err := newVerifier(t, imageverify.Options{Keychain: kc, Now: time.Now}).Verify(ctx, r.entry, "25.01-py3"); err != nil {
		t.Errorf("with credentials: %v", err)
	}
	if _, err := imageverify.Keychain([]byte(`{"auths":{"x":{"auth":"%%%"}}}`)); err == nil || strings.Contains(err.Error(), "%%%") {
		t.Errorf("a bad auth entry: %v", err)
	}
}

func TestKeyless(t *testing.T) {
	r := setup(t)
	r.good("25.01-py3")
	e := *r.entry
	e.Keys = nil
	_, err := newVerifier(t, imageverify.Options{Now: time.Now}).Verify(context.Background(), &e, "25.01-py3")
	refused(t, err, imageverify.CheckSignature, "keyless verification needs a trust root")
}

func cryptoPublic(pem []byte) (crypto.PublicKey, error) {
	return cryptoutils.UnmarshalPEMToPublicKey(pem)
}

// BenchmarkVerify: verifying an image from scratch (tag → digest at the
// registry, signature and attestation fetched and checked) against the cached
// path (the tag still resolved at the registry, then the cache), both with an
// in-process registry on loopback.
func BenchmarkVerify(b *testing.B) {
	ctx := context.Background()
	r := setup(b)
	r.good("25.01-py3")
	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			if _, err := newVerifier(b, imageverify.Options{Now: time.Now}).Verify(ctx, r.entry, "25.01-py3"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		v := newVerifier(b, imageverify.Options{Now: time.Now})
		if _, err := v.Verify(ctx, r.entry, "25.01-py3"); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if res, err := v.Verify(ctx, r.entry, "25.01-py3"); err != nil || !res.Cached {
				b.Fatal(err)
			}
		}
	})
}

// TestMirrorScheme: a mirror named by its host is asked over HTTPS only, as
// any registry is; plain HTTP only when written http:// (after HTTPS, as
// go-containerregistry tries an insecure registry).
func TestMirrorScheme(t *testing.T) {
	r := &rig{t: t, host: "registry.example.com", platform: signer(t)}
	entry := r.catalogEntry(r.platform)
	for _, tc := range []struct {
		mirror string
		http   bool
	}{
		{"mirror.example.com:5000", false},
		{"https://mirror.example.com:5000", false},
		{"http://mirror.example.com:5000", true},
	} {
		var asked []string
		var mu sync.Mutex
		v := newVerifier(t, imageverify.Options{Now: time.Now, Mirrors: map[string]string{r.host: tc.mirror},
			Transport: roundTripper(func(req *http.Request) (*http.Response, error) {
				mu.Lock()
				defer mu.Unlock()
				asked = append(asked, req.URL.Scheme+"://"+req.URL.Host)
				return nil, errors.New("no network in this test")
			})})
		if _, err := v.Verify(context.Background(), entry, "25.01-py3"); err == nil {
			t.Fatalf("%s: verified without a registry", tc.mirror)
		}
		mu.Lock()
		https, plain := slices.Contains(asked, "https://mirror.example.com:5000"), slices.Contains(asked, "http://mirror.example.com:5000")
		if !https || plain != tc.http || slices.ContainsFunc(asked, func(a string) bool { return !strings.HasSuffix(a, "://mirror.example.com:5000") }) {
			t.Errorf("mirror %q: asked %v; want the mirror over HTTPS, and over HTTP %v", tc.mirror, asked, tc.http)
		}
		mu.Unlock()
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func newVerifier(t testing.TB, o imageverify.Options) *imageverify.Verifier {
	t.Helper()
	v, err := imageverify.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
