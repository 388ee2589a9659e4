package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// Packages only development builds (-tags dev) may carry: the in-process
// OpenID provider, the local signed registry and its signer, the local
// cluster and its simulated node agents; and packages no build may carry:
// test helpers. (internal/replay stays in production: `gantry advise
// replay` scores the advice rules on a trace, and the agent's trace mode
// reads one.)
var (
	devOnly  = []string{"internal/devidp", "internal/devregistry", "internal/imagesign", "internal/devcluster", "internal/capreplay", "internal/node/devagent", "internal/node/devrun", "github.com/zitadel/oidc/v3/pkg/op"}
	testOnly = []string{"internal/servertest", "internal/syncbuf", "internal/workload/workloadtest", "internal/waitfor", "internal/devcluster/clustertest", "github.com/chromedp/chromedp"}
	// Third-party packages in the image verifier's graph that import
	// package testing for helpers of their own; nothing of Gantry's may.
	testingImporters = []string{"github.com/digitorus/pkcs7", "github.com/sigstore/sigstore/pkg/tuf"}
)

// deps lists the packages a build of ./cmd/gantry carries, and those among
// them that import package testing.
func deps(t *testing.T, tags string) (all, importTesting []string) {
	t.Helper()
	out, err := exec.Command("go", "list", "-tags", tags, "-deps", "-f", `{{.ImportPath}}{{range .Imports}}{{if eq . "testing"}} +testing{{end}}{{end}}`, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, testingImport := strings.CutSuffix(line, " +testing")
		all = append(all, pkg)
		if testingImport {
			importTesting = append(importTesting, pkg)
		}
	}
	return all, importTesting
}

// TestDependencies keeps development and test code out of the binaries, as
// tailscale's deptest does: the production build carries neither the
// development provider nor the registry nor the local cluster, and no build
// carries test helpers or a Gantry package that imports testing.
func TestDependencies(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	for _, build := range []struct {
		tags   string
		banned []string
	}{
		{"", append(slices.Clone(devOnly), testOnly...)},
		{"dev", testOnly},
	} {
		all, importTesting := deps(t, build.tags)
		if !slices.Contains(all, "github.com/gantryhq/gantry/internal/server") {
			t.Fatalf("tags %q: the dependency list lacks internal/server; is it the right package?", build.tags)
		}
		for _, pkg := range all {
			for _, b := range build.banned {
				if pkg == b || strings.HasSuffix(pkg, "/"+b) || strings.HasPrefix(pkg, b+"/") {
					t.Errorf("tags %q: gantry carries %s", build.tags, pkg)
				}
			}
		}
		for _, pkg := range importTesting {
			if !slices.Contains(testingImporters, pkg) {
				t.Errorf("tags %q: %s imports package testing into the binary", build.tags, pkg)
			}
		}
	}
}
