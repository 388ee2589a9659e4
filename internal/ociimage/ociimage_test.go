package ociimage

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// TestBuildReproducible: the same spec gives the same digest; another time
// gives another; the layer holds every parent directory, sorted, with the
// modes, owners and time asked for; the config names the user and the
// entrypoint.
func TestBuildReproducible(t *testing.T) {
	at := time.Unix(1764547200, 0).UTC()
	spec := func(created time.Time) Spec {
		return Spec{
			Layers:     [][]File{Base([]byte("CA")), {{Path: "/usr/local/bin/app", Data: []byte("binary"), Mode: 0o755}}},
			Entrypoint: []string{"/usr/local/bin/app"}, User: "65532:65532", Labels: map[string]string{"a": "b"}, Created: created,
		}
	}
	digest := func(img v1.Image) string {
		h, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return h.String()
	}
	a, err := Build(spec(at))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Build(spec(at))
	c, _ := Build(spec(at.Add(time.Second)))
	if digest(a) != digest(b) || digest(a) == digest(c) {
		t.Fatalf("digests %s, %s (same spec), %s (a second later)", digest(a), digest(b), digest(c))
	}
	cf, _ := a.ConfigFile()
	if cf.Config.User != "65532:65532" || cf.Config.Entrypoint[0] != "/usr/local/bin/app" || cf.OS != "linux" || !cf.Created.Time.Equal(at) {
		t.Errorf("config %+v", cf)
	}
	layers, _ := a.Layers()
	if len(layers) != 2 {
		t.Fatalf("%d layers", len(layers))
	}
	type entry struct {
		mode     int64
		uid      int
		typeflag byte
	}
	want := map[string]entry{
		"etc/": {0o755, 0, tar.TypeDir}, "etc/passwd": {0o644, 0, tar.TypeReg}, "tmp/": {0o1777, 0, tar.TypeDir},
		"home/": {0o755, 0, tar.TypeDir}, "home/nonroot/": {0o700, NonrootUID, tar.TypeDir},
		"etc/ssl/": {0o755, 0, tar.TypeDir}, "etc/ssl/certs/ca-certificates.crt": {0o644, 0, tar.TypeReg},
	}
	rc, _ := layers[0].Uncompressed()
	defer rc.Close()
	tr, last := tar.NewReader(rc), ""
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name <= last {
			t.Errorf("%s after %s: not sorted", h.Name, last)
		}
		last = h.Name
		if !h.ModTime.Equal(at) {
			t.Errorf("%s: time %v", h.Name, h.ModTime)
		}
		if w, ok := want[h.Name]; ok {
			if h.Mode != w.mode || h.Uid != w.uid || h.Typeflag != w.typeflag {
				t.Errorf("%s: mode %o uid %d type %c, want %o %d %c", h.Name, h.Mode, h.Uid, h.Typeflag, w.mode, w.uid, w.typeflag)
			}
			delete(want, h.Name)
		}
	}
	if len(want) > 0 {
		t.Errorf("missing from the base layer: %v", want)
	}
	if _, err := Build(Spec{Layers: [][]File{{{Path: "/a"}, {Path: "a"}}}}); err == nil {
		t.Error("a file twice was accepted")
	}
}

// TestWriteLayout: a layout is written and written again over itself; a
// directory holding anything else is refused and left as it was.
func TestWriteLayout(t *testing.T) {
	img, err := Build(Spec{Layers: [][]File{{{Path: "/a", Data: []byte("a")}}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "out")
	for range 2 {
		if err := WriteLayout(dir, map[string]v1.Image{"x:1": img}); err != nil {
			t.Fatal(err)
		}
	}
	other := t.TempDir()
	os.WriteFile(filepath.Join(other, "go.mod"), []byte("module x\n"), 0o644)
	if err := WriteLayout(other, map[string]v1.Image{"x:1": img}); err == nil {
		t.Fatal("a directory that is not a layout was written over")
	}
	if _, err := os.Stat(filepath.Join(other, "go.mod")); err != nil {
		t.Fatalf("the refused directory lost its files: %v", err)
	}
}
