package devregistry_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/devregistry"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/imagecat"
	"github.com/gantryhq/gantry/internal/imageverify"
)

// TestStarterCatalogVerifies: every starter image, published and signed by
// the local registry, passes real verification through the mirror and is
// pinned under the catalog's registry name.
func TestStarterCatalogVerifies(t *testing.T) {
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
	keyPath := filepath.Join(t.TempDir(), "dev", "signing.key")
	key, err := devregistry.LoadOrCreateKey(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(keyPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", err, fi.Mode())
	}
	again, err := devregistry.LoadOrCreateKey(keyPath)
	if err != nil || !again.Equal(key) {
		t.Fatalf("the key was not kept: %v", err)
	}
	reg, err := devregistry.Start(ctx, "127.0.0.1:0", cat, key)
	if err != nil {
		t.Fatal(err)
	}
	v, err := imageverify.New(imageverify.Options{Mirrors: reg.Mirrors, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	// Without the development key trusted, the platform key alone verifies nothing.
	e, tag, _ := cat.Resolve("pytorch:25.01-py3")
	if _, err := v.Verify(ctx, e, tag); err == nil || !strings.Contains(err.Error(), "no signature verifies with keys/platform.pub") {
		t.Fatalf("before trusting the dev key: %v", err)
	}
	cat.Trust(devregistry.KeyLabel, key.Public())
	if len(reg.Published) != len(cat.Names()) {
		t.Errorf("published %v", reg.Published)
	}
	for ref, digest := range reg.Published {
		e, tag, err := cat.Resolve(ref)
		if err != nil {
			t.Fatal(err)
		}
		res, err := v.Verify(ctx, e, tag)
		if err != nil {
			t.Errorf("%s: %v", ref, err)
			continue
		}
		if res.Digest != digest || res.Pinned != e.Image.Spec.Repository+"@"+digest || !strings.HasPrefix(res.Signer, devregistry.KeyLabel) {
			t.Errorf("%s: %+v", ref, res)
		}
	}
}
