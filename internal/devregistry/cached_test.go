package devregistry_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/gantryhq/gantry/internal/devregistry"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/imagecat"
)

// cacheLayer writes a one-file root filesystem layer for image:tag under
// the images cache as deploy/images/build.sh does, recording size, or the
// size given when it is not 0 (a broken entry), and returns its digests.
func cacheLayer(t *testing.T, image, tag string, size int64) (digest, diffID string) {
	t.Helper()
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	body := []byte("print(6*7)\n")
	tw.WriteHeader(&tar.Header{Name: "hello.py", Mode: 0o644, Size: int64(len(body))})
	tw.Write(body)
	tw.Close()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(raw.Bytes())
	zw.Close()
	dir := filepath.Join(devregistry.ImagesDir(), image, tag)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "layer.tar.gz"), gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	digest, diffID = fmt.Sprintf("sha256:%x", sha256.Sum256(gz.Bytes())), fmt.Sprintf("sha256:%x", sha256.Sum256(raw.Bytes()))
	if size == 0 {
		size = int64(gz.Len())
	}
	rec := fmt.Sprintf(`{"digest": %q, "diffID": %q, "size": %d}`, digest, diffID, size)
	if err := os.WriteFile(filepath.Join(dir, "layer.json"), []byte(rec), 0o644); err != nil {
		t.Fatal(err)
	}
	return digest, diffID
}

// TestCachedImages: an image cached by deploy/images/build.sh is published
// in place of its catalog entry's stand-in, its layer served from the file
// (gone from disk: 404, not a server error); a broken cache entry leaves
// the stand-in published rather than the registry down.
func TestCachedImages(t *testing.T) {
	t.Setenv("GANTRY_CACHE", t.TempDir())
	digest, diffID := cacheLayer(t, "jupyter", "6.4-debian12", 0)
	cacheLayer(t, "pytorch-notebook", "cuda12-2025-01", 1) // not the size recorded
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	classes, err := gpu.LoadFile("../../templates/gpu-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cat, err := imagecat.Load("../../images", classes)
	if err != nil {
		t.Fatal(err)
	}
	key, err := devregistry.LoadOrCreateKey(filepath.Join(t.TempDir(), "signing.key"))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := devregistry.Start(ctx, "127.0.0.1:0", cat, key)
	if err != nil {
		t.Fatal(err)
	}
	layerOf := func(repo, tag string) (string, string, []byte) {
		t.Helper()
		ref, err := name.NewTag(reg.Host+"/"+repo+":"+tag, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		img, err := remote.Image(ref, remote.WithContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("%s: %d layers, %v", ref, len(layers), err)
		}
		d, _ := layers[0].Digest()
		id, _ := layers[0].DiffID()
		rc, err := layers[0].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		b, _ := io.ReadAll(rc)
		return d.String(), id.String(), b
	}
	d, id, content := layerOf("library/jupyter", "6.4-debian12")
	if d != digest || id != diffID || !bytes.Contains(content, []byte("print(6*7)")) {
		t.Errorf("the cached image: layer %s (diffID %s), want %s (%s); content has the file: %v", d, id, digest, diffID, bytes.Contains(content, []byte("print(6*7)")))
	}
	if _, _, content := layerOf("jupyter/pytorch-notebook", "cuda12-2025-01"); !bytes.Contains(content, []byte("STAND-IN")) {
		t.Errorf("a broken cache entry: published %q, want its stand-in", content)
	}
	if err := os.Remove(filepath.Join(devregistry.ImagesDir(), "jupyter", "6.4-debian12", "layer.tar.gz")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + reg.Host + "/v2/library/jupyter/blobs/" + digest)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("a cached layer gone from disk: %s, want 404", resp.Status)
	}
}
