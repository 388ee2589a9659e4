package e2e_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantryhq/gantry/internal/devcluster"
	"github.com/gantryhq/gantry/internal/devcluster/clustertest"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/imagecat"
	"github.com/gantryhq/gantry/internal/imagesign"
	"github.com/gantryhq/gantry/internal/imageverify"
	"github.com/gantryhq/gantry/internal/ociimage"
)

// TestChartImages: Gantry's own images, built from this tree without a
// container engine (what make images does), are reproducible (made twice
// from the binaries, the same digests; make images gave the same digests on
// two builds from scratch, see the README), are pushed to a real OCI registry and
// signed there, pass Gantry's own verification against a catalog entry
// naming the signing key — and the chart installs exactly those images,
// pinned by digest. (They run as pods with the Real node issue's kubelet;
// the simulated nodes do not run containers.)
func TestChartImages(t *testing.T) {
	if cluster == nil {
		t.Skip(clustertest.ErrNotRequested)
	}
	ctx := context.Background()
	root, err := devcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	src, err := ociimage.FromRepo(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	// Compiled once (go build is reproducible with -trimpath and no build
	// id: Go's own promise); the images made twice from it are the same.
	bins, err := ociimage.Compile(ctx, src, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	first, err := ociimage.GantryImages(src, bins)
	if err != nil {
		t.Fatal(err)
	}
	second, err := ociimage.GantryImages(src, bins)
	if err != nil {
		t.Fatal(err)
	}
	serverDigest, _ := first.Server.Digest()
	agentDigest, _ := first.Agent.Digest()
	if d, _ := second.Server.Digest(); d != serverDigest {
		t.Errorf("the server's image is not reproducible: %s, then %s", serverDigest, d)
	}
	if d, _ := second.Agent.Digest(); d != agentDigest {
		t.Errorf("the agent's image is not reproducible: %s, then %s", agentDigest, d)
	}
	if layout := t.TempDir(); ociimage.WriteLayout(layout, map[string]v1.Image{"gantry:" + src.Version: first.Server}) != nil {
		t.Error("write the OCI layout")
	}

	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	host := strings.TrimPrefix(reg.URL, "http://")
	key, _ := imagesign.GenerateKey()
	signer, _ := imagesign.New(key)
	pushed := map[string]name.Digest{}
	for n, img := range map[string]v1.Image{"gantry": first.Server, "gantry-agent": first.Agent} {
		ref, err := name.NewTag(host+"/gantryhq/"+n+":"+src.Version, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if pushed[n], err = ociimage.Push(ctx, img, ref, signer, map[string]any{"org.opencontainers.image.revision": src.Revision}); err != nil {
			t.Fatal(err)
		}
	}

	// Verified as the catalog's images are: the key, the annotation.
	dir := t.TempDir()
	pub, _ := signer.PublicKeyPEM()
	os.MkdirAll(filepath.Join(dir, "keys"), 0o755)
	os.WriteFile(filepath.Join(dir, "keys", "build.pub"), pub, 0o644)
	os.WriteFile(filepath.Join(dir, "gantry.yaml"), []byte(fmt.Sprintf(`apiVersion: gantry.dev/v1alpha1
kind: Image
metadata:
  name: gantry
  title: Gantry's server
spec:
  repository: %s/gantryhq/gantry
  tags: [%q]
  signing:
    keys: [keys/build.pub]
  annotations:
    org.opencontainers.image.revision: %q
  layer: base
  gpuClasses: [L4]
`, host, src.Version, src.Revision)), 0o644)
	classes, err := gpu.LoadFile(filepath.Join(root, "templates", "gpu-classes.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cat, err := imagecat.Load(dir, classes)
	if err != nil {
		t.Fatal(err)
	}
	e, _ := cat.Get("gantry")
	v, err := imageverify.New(imageverify.Options{Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	res, err := v.Verify(ctx, e, src.Version)
	if err != nil || res.Digest != serverDigest.String() {
		t.Fatalf("Gantry's verification of its own image: %+v, %v", res, err)
	}

	// The chart installs them, pinned by digest.
	chart := filepath.Join(root, "deploy", "helm", "gantry")
	helmChart(t, "install", "built", chart, "--namespace", "gantry-built", "--create-namespace",
		"-f", filepath.Join(root, "deploy", "helm", "testdata", "sqlite.yaml"), "--set", "priorityClasses.create=false",
		"--set", "image.repository="+host+"/gantryhq/gantry", "--set", "image.digest="+serverDigest.String(),
		"--set", "agent.enabled=true", "--set", "agent.image.repository="+host+"/gantryhq/gantry-agent", "--set", "agent.image.digest="+agentDigest.String())
	t.Cleanup(func() { helmChart(t, "uninstall", "built", "--namespace", "gantry-built", "--wait") })
	d, err := cluster.Client.AppsV1().Deployments("gantry-built").Get(ctx, "built-gantry", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Spec.Template.Spec.Containers[0].Image; got != pushed["gantry"].String() {
		t.Errorf("the Deployment runs %s, want %s", got, pushed["gantry"])
	}
	ds, err := cluster.Client.AppsV1().DaemonSets("gantry-built").Get(ctx, "built-gantry-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ds.Spec.Template.Spec.Containers[0].Image; got != pushed["gantry-agent"].String() {
		t.Errorf("the agent's DaemonSet runs %s, want %s", got, pushed["gantry-agent"])
	}
}
