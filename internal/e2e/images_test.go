package e2e_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
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
// container engine by the command make images runs (cmd/gantry-images), are
// reproducible (built twice, the same digests), are pushed to a real OCI
// registry and signed there by that command, pass Gantry's own verification
// against a catalog entry naming the signing key — and the chart installs
// exactly those images, pinned by digest. (They run as pods with the Real
// node issue's kubelet; the simulated nodes do not run containers.) The
// command runs as its own process, as users run it: built into this test
// binary, its layers would be compressed under the race detector.
func TestChartImages(t *testing.T) {
	if cluster == nil {
		t.Skip(clustertest.ErrNotRequested)
	}
	beside(t)
	ctx := context.Background()
	root, err := devcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	src, err := ociimage.FromRepo(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	host := strings.TrimPrefix(reg.URL, "http://")
	key, _ := imagesign.GenerateKey()
	signer, _ := imagesign.New(key)
	keyFile := keyFileOf(t, key)
	built, pushed := gantryImages(t, root, "-out", t.TempDir(), "-push", host+"/gantryhq", "-insecure", "-key", keyFile)
	again, _ := gantryImages(t, root, "-out", t.TempDir())
	serverDigest, agentDigest := built["gantry:"+src.Version], built["gantry-agent:"+src.Version]
	if serverDigest == "" || agentDigest == "" || len(pushed) != 2 {
		t.Fatalf("built %v, pushed %v: want both images, both pushed and signed", built, pushed)
	}
	for n, d := range built {
		if again[n] != d {
			t.Errorf("image %s is not reproducible: %s, then %s", n, d, again[n])
		}
	}
	if pushed["gantry"].DigestStr() != serverDigest || pushed["gantry-agent"].DigestStr() != agentDigest {
		t.Fatalf("pushed %v, built %v", pushed, built)
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
	if err != nil || res.Digest != serverDigest {
		t.Fatalf("Gantry's verification of its own image: %+v, %v", res, err)
	}

	// The chart installs them, pinned by digest.
	chart := filepath.Join(root, "deploy", "helm", "gantry")
	helmChart(t, "install", "built", chart, "--namespace", "gantry-built", "--create-namespace",
		"-f", filepath.Join(root, "deploy", "helm", "testdata", "sqlite.yaml"), "--set", "priorityClasses.create=false",
		"--set", "image.repository="+host+"/gantryhq/gantry", "--set", "image.digest="+serverDigest,
		"--set", "agent.enabled=true", "--set", "agent.image.repository="+host+"/gantryhq/gantry-agent", "--set", "agent.image.digest="+agentDigest)
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

// keyFileOf writes key as cmd/gantry-images reads a signing key (an
// unencrypted EC PEM) and returns the file's path.
func keyFileOf(t *testing.T, key *ecdsa.PrivateKey) string {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "cosign.pem")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return keyFile
}

// gantryImages runs cmd/gantry-images with args and returns the digests it
// built ("gantry:VERSION" → sha256:…) and the references it pushed and
// signed (by repository's last element).
func gantryImages(t *testing.T, root string, args ...string) (built map[string]string, pushed map[string]name.Digest) {
	t.Helper()
	cmd := exec.Command("go", append([]string{"run", "./cmd/gantry-images", "-root", root}, args...)...)
	cmd.Dir = root
	// Without cgo, as CI builds every package but the agent's: the tool's
	// packages then come from the Go build cache.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gantry-images %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	built, pushed = map[string]string{}, map[string]name.Digest{}
	for _, line := range strings.Split(string(out), "\n") {
		if ref, ok := strings.CutPrefix(line, "pushed "); ok {
			ref, signed := strings.CutSuffix(ref, ", signed")
			d, err := name.NewDigest(ref, name.Insecure)
			if err != nil || !signed {
				t.Fatalf("gantry-images said %q: want a signed digest reference (%v)", line, err)
			}
			pushed[path.Base(d.Context().RepositoryStr())] = d
		} else if img, rest, ok := strings.Cut(line, "@"); ok && strings.Contains(rest, " in ") {
			built[img], _, _ = strings.Cut(rest, " ")
		}
	}
	return built, pushed
}
