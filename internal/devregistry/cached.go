package devregistry

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Real images built from Debian's packages (deploy/images/build.sh) wait in
// a cache directory, <name>/<tag>/ of each: a root filesystem layer
// and its digests. The registry serves such a layer from its file, in place
// (hundreds of MiB, read only when a node pulls it), so that every local
// registry — one per test server — publishes the image at the cost of its
// manifest.

// ImagesDir is where deploy/images/build.sh leaves the images it built
// (<name>/<tag>/layer.tar.gz and layer.json):
// $GANTRY_CACHE, else $XDG_CACHE_HOME/gantry, else ~/.cache/gantry, then
// images/.
func ImagesDir() string {
	cache := os.Getenv("GANTRY_CACHE")
	if cache == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, _ := os.UserHomeDir()
			base = filepath.Join(home, ".cache")
		}
		cache = filepath.Join(base, "gantry")
	}
	return filepath.Join(cache, "images")
}

// cachedLayer is a built image's one layer: its gzip file and the digests
// the build recorded (layer.json), so nothing reads the file to publish it.
type cachedLayer struct {
	path   string
	digest v1.Hash
	diffID v1.Hash
	size   int64
}

// loadCached returns the layer cached for name:tag under dir, or false.
func loadCached(dir, image, tag string) (cachedLayer, bool, error) {
	d := filepath.Join(dir, image, tag)
	data, err := os.ReadFile(filepath.Join(d, "layer.json"))
	if errors.Is(err, os.ErrNotExist) {
		return cachedLayer{}, false, nil
	}
	if err != nil {
		return cachedLayer{}, false, err
	}
	var rec struct {
		Digest string `json:"digest"`
		DiffID string `json:"diffID"`
		Size   int64  `json:"size"`
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		return cachedLayer{}, false, fmt.Errorf("%s: %w", filepath.Join(d, "layer.json"), err)
	}
	l := cachedLayer{path: filepath.Join(d, "layer.tar.gz"), size: rec.Size}
	if l.digest, err = v1.NewHash(rec.Digest); err != nil {
		return l, false, fmt.Errorf("%s: digest: %w", d, err)
	}
	if l.diffID, err = v1.NewHash(rec.DiffID); err != nil {
		return l, false, fmt.Errorf("%s: diffID: %w", d, err)
	}
	if fi, err := os.Stat(l.path); err != nil || fi.Size() != l.size {
		return l, false, fmt.Errorf("%s: the layer is missing or not the size recorded: rebuild it (deploy/images/build.sh)", d)
	}
	return l, true, nil
}

func (l cachedLayer) Digest() (v1.Hash, error)            { return l.digest, nil }
func (l cachedLayer) DiffID() (v1.Hash, error)            { return l.diffID, nil }
func (l cachedLayer) Size() (int64, error)                { return l.size, nil }
func (l cachedLayer) MediaType() (types.MediaType, error) { return types.OCILayer, nil }
func (l cachedLayer) Compressed() (io.ReadCloser, error)  { return os.Open(l.path) }
func (l cachedLayer) Uncompressed() (io.ReadCloser, error) {
	f, err := os.Open(l.path)
	if err != nil {
		return nil, err
	}
	z, err := gzip.NewReader(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{z, f}, nil
}

// image is the cached layer as an image for Debian's root filesystem.
func (l cachedLayer) image() (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err := mutate.AppendLayers(img, l)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"}
	cf.Config.Cmd = []string{"/bin/sh"}
	return mutate.ConfigFile(img, cf)
}

// pushCached publishes the cached image under ref: its layer is served from
// its file (blobs.serve), so only the config and manifest are written (a
// push skips the blobs the registry has). A Registry not made by Start
// pushes the layer whole.
func (r *Registry) pushCached(ctx context.Context, ref name.Tag, l cachedLayer) (name.Digest, error) {
	if r.blobs != nil {
		r.blobs.serve(l)
	}
	return r.push(ctx, ref, l.image)
}

// PushCached publishes the image deploy/images/build.sh cached as
// image:tag (ImagesDir) under ref, unsigned, and returns its digest; an
// image not built is an error that says so.
func (r *Registry) PushCached(ctx context.Context, ref name.Tag, image, tag string) (name.Digest, error) {
	l, ok, err := loadCached(r.images, image, tag)
	if err != nil {
		return name.Digest{}, err
	}
	if !ok {
		return name.Digest{}, fmt.Errorf("local registry: the image %s:%s is not built (deploy/images/build.sh, as root)", image, tag)
	}
	return r.pushCached(ctx, ref, l)
}

// blobs keeps what is pushed in memory and serves cached layers from their
// files.
type blobs struct {
	mem   registry.BlobHandler
	mu    sync.Mutex
	files map[v1.Hash]cachedLayer
}

func newBlobs() *blobs {
	return &blobs{mem: registry.NewInMemoryBlobHandler(), files: map[v1.Hash]cachedLayer{}}
}

func (b *blobs) serve(l cachedLayer) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.files[l.digest] = l
}

func (b *blobs) file(h v1.Hash) (cachedLayer, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	l, ok := b.files[h]
	return l, ok
}

func (b *blobs) Get(ctx context.Context, repo string, h v1.Hash) (io.ReadCloser, error) {
	if l, ok := b.file(h); ok {
		f, err := os.Open(l.path)
		if errors.Is(err, os.ErrNotExist) {
			return nil, registry.ErrNotFound // removed since: the registry answers 404
		}
		return f, err
	}
	return b.mem.Get(ctx, repo, h)
}

func (b *blobs) Stat(ctx context.Context, repo string, h v1.Hash) (int64, error) {
	if l, ok := b.file(h); ok {
		return l.size, nil
	}
	return b.mem.(registry.BlobStatHandler).Stat(ctx, repo, h)
}

func (b *blobs) Put(ctx context.Context, repo string, h v1.Hash, rc io.ReadCloser) error {
	return b.mem.(registry.BlobPutHandler).Put(ctx, repo, h, rc)
}

func (b *blobs) Delete(ctx context.Context, repo string, h v1.Hash) error {
	return b.mem.(registry.BlobDeleteHandler).Delete(ctx, repo, h)
}
