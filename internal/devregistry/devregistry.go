// Package devregistry owns the local OCI registry of `gantry dev` and of the
// tests: go-containerregistry's registry on a loopback port, holding a small
// stand-in image for every exact tag of every catalog image (a real one for
// the few it can build here: busybox), each signed and
// attested with a development key the way the platform's pipeline signs the
// real ones. Gantry reaches it as a mirror of the catalog's registries, so
// resolution, signature and attestation checks and digest pinning run for
// real on a laptop.
package devregistry

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/imagecat"
	"github.com/gantryhq/gantry/internal/imagesign"
	"github.com/gantryhq/gantry/internal/imageverify"
	"github.com/gantryhq/gantry/internal/ociimage"
)

// KeyLabel names the development key where verification reports it.
const KeyLabel = "the development key of gantry dev"

// Registry is a running local registry.
type Registry struct {
	Host string // 127.0.0.1:port
	// Mirrors maps each catalog registry host to Host.
	Mirrors map[string]string
	Signer  *imagesign.Signer
	// Published lists what was pushed: catalog name:tag → digest.
	Published map[string]string
	blobs     *blobs
	images    string // ImagesDir
}

// Start serves a registry on addr (e.g. 127.0.0.1:0) until ctx ends and
// publishes, signs and attests a stand-in for every exact tag in the catalog.
// Tag patterns (25.*) get nothing: there is no one tag to publish.
func Start(ctx context.Context, addr string, cat *imagecat.Catalog, key *ecdsa.PrivateKey) (*Registry, error) {
	signer, err := imagesign.New(key)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("local registry: listen: %w", err)
	}
	blobs := newBlobs()
	srv := &http.Server{Handler: registry.New(registry.Logger(log.New(io.Discard, "", 0)), registry.WithBlobHandler(blobs)), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	r := &Registry{Host: ln.Addr().String(), Mirrors: map[string]string{}, Signer: signer, Published: map[string]string{}, blobs: blobs, images: ImagesDir()}
	for _, e := range cat.List() {
		repo, err := name.NewRepository(e.Image.Spec.Repository, name.StrictValidation)
		if err != nil {
			return nil, err
		}
		r.Mirrors[repo.RegistryStr()] = r.Host
		for _, tag := range e.Image.Spec.Tags {
			if strings.ContainsAny(tag, "*?[") {
				continue
			}
			d, err := r.Publish(ctx, e, tag)
			if err != nil {
				srv.Close()
				return nil, fmt.Errorf("local registry: publish %s:%s: %w", e.Image.Metadata.Name, tag, err)
			}
			r.Published[e.Image.Metadata.Name+":"+tag] = d.DigestStr()
		}
	}
	return r, nil
}

// Local is where a catalog repository lives in this registry.
func (r *Registry) Local(repository string) (name.Repository, error) {
	repo, err := name.NewRepository(repository, name.StrictValidation)
	if err != nil {
		return repo, err
	}
	return name.NewRepository(r.Host+"/"+repo.RepositoryStr(), name.Insecure)
}

// Publish pushes a stand-in for e at tag (a one-file layer naming what it
// stands for, so its digest is stable), then signs it with the entry's
// required annotations and attests every required predicate with values that
// pass the entry's checks.
func (r *Registry) Publish(ctx context.Context, e *imagecat.Entry, tag string) (name.Digest, error) {
	repo, err := r.Local(e.Image.Spec.Repository)
	if err != nil {
		return name.Digest{}, err
	}
	// A real image where there is one (cached by deploy/images/build.sh, or
	// built here); a stand-in where there is none or it cannot be had (no
	// static busybox on this machine, a broken cache entry: logged).
	var d name.Digest
	cached, isCached, err := loadCached(r.images, e.Image.Metadata.Name, tag)
	if err != nil {
		slog.Warn("local registry: a cached image cannot be used; its stand-in is published", "image", e.Image.Metadata.Name+":"+tag, "err", err)
	}
	build, isBuilt := realImages[e.Image.Metadata.Name]
	switch {
	case isCached:
		d, err = r.pushCached(ctx, repo.Tag(tag), cached)
	case isBuilt:
		if d, err = r.push(ctx, repo.Tag(tag), build); err != nil {
			slog.Warn("local registry: a real image cannot be built here; its stand-in is published", "image", e.Image.Metadata.Name+":"+tag, "err", err)
			d, err = r.Push(ctx, repo.Tag(tag), e.Image.Spec.Repository+":"+tag)
		}
	default:
		d, err = r.Push(ctx, repo.Tag(tag), e.Image.Spec.Repository+":"+tag)
	}
	if err != nil {
		return d, err
	}
	ann := map[string]any{}
	for k, v := range e.Image.Spec.Annotations {
		ann[k] = v
	}
	if err := r.Signer.Sign(ctx, d, ann); err != nil {
		return d, err
	}
	for _, a := range e.Image.Spec.Attestations {
		pred := map[string]any{}
		for _, c := range a.Checks {
			set(pred, c.Path, c.Equals)
		}
		if err := r.Signer.Attest(ctx, d, a.PredicateType, pred); err != nil {
			return d, err
		}
	}
	return d, nil
}

// realImages are the catalog images this registry builds for real (they
// run on a real node), by catalog name; the others get stand-ins. Each is
// built once a process: every registry (one per test server) pushes the
// same image.
var realImages = map[string]func() (v1.Image, error){
	"busybox": sync.OnceValues(func() (v1.Image, error) {
		files, err := ociimage.BusyBoxFiles(ociimage.BusyBoxPath)
		if err != nil {
			return nil, err
		}
		return ociimage.BusyBox(files)
	}),
}

// push writes the image build makes under ref and returns its digest.
func (r *Registry) push(ctx context.Context, ref name.Tag, build func() (v1.Image, error)) (name.Digest, error) {
	img, err := build()
	if err != nil {
		return name.Digest{}, fmt.Errorf("build %s: %w", ref, err)
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		return name.Digest{}, err
	}
	h, err := img.Digest()
	if err != nil {
		return name.Digest{}, err
	}
	return ref.Context().Digest(h.String()), nil
}

// Push writes an unsigned stand-in image under ref and returns its digest.
func (r *Registry) Push(ctx context.Context, ref name.Tag, standsFor string) (name.Digest, error) {
	return r.push(ctx, ref, func() (v1.Image, error) {
		layer, err := crane.Layer(map[string][]byte{"STAND-IN": []byte("gantry dev stand-in for " + standsFor + "\n")})
		if err != nil {
			return nil, err
		}
		return mutate.AppendLayers(empty.Image, layer)
	})
}

// set puts value at a dot path, making the maps on the way.
func set(m map[string]any, path, value string) {
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	m[parts[len(parts)-1]] = value
}

// LoadOrCreateKey reads the development signing key at path, or makes one
// there (mode 0600) on first start.
func LoadOrCreateKey(path string) (*ecdsa.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		blk, _ := pem.Decode(b)
		if blk == nil {
			return nil, fmt.Errorf("%s is not a PEM key: remove it to make a new one", path)
		}
		k, err := x509.ParseECPrivateKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w (remove it to make a new one)", path, err)
		}
		return k, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	k, err := imagesign.GenerateKey()
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	return k, nil
}

// Verified starts a registry for cat, trusts its key in cat (for this process
// only) and returns image verification that fetches from it: the whole
// supply-chain path of `gantry dev` and the tests.
func Verified(ctx context.Context, cat *imagecat.Catalog, key *ecdsa.PrivateKey, o imageverify.Options) (*Registry, *imageverify.Images, error) {
	if o.Now == nil {
		return nil, nil, errors.New("devregistry: the verifier's clock (Now) is required")
	}
	reg, err := Start(ctx, "127.0.0.1:0", cat, key)
	if err != nil {
		return nil, nil, err
	}
	cat.Trust(KeyLabel, key.Public())
	mirrors := map[string]string{}
	for k, v := range o.Mirrors {
		mirrors[k] = v
	}
	for k, v := range reg.Mirrors {
		mirrors[k] = v
	}
	o.Mirrors = mirrors
	v, err := imageverify.New(o)
	if err != nil {
		return nil, nil, err
	}
	return reg, &imageverify.Images{Catalog: cat, Verifier: v}, nil
}

// StartDir loads the image catalog in dir, makes a fresh key and starts
// Verified with it: an in-process supply chain for tests, on the wall
// clock.
func StartDir(ctx context.Context, dir string, classes *gpu.Catalog) (*Registry, *imageverify.Images, error) {
	cat, err := imagecat.Load(dir, classes)
	if err != nil {
		return nil, nil, err
	}
	key, err := imagesign.GenerateKey()
	if err != nil {
		return nil, nil, err
	}
	return Verified(ctx, cat, key, imageverify.Options{Now: time.Now}) //clock:allow tests' supply chain: cache entries expire on the wall clock
}
