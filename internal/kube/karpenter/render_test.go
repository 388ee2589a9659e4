package karpenter

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/nodegroup"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func shipped(t *testing.T) ([]nodegroup.Group, *gpu.Catalog) {
	t.Helper()
	classes, err := gpu.LoadFile(filepath.Join("..", "..", "..", "templates", "gpu-classes.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	groups, err := nodegroup.LoadFile(filepath.Join("..", "..", "..", "templates", "node-groups.yaml"), classes.Names())
	if err != nil {
		t.Fatal(err)
	}
	return groups.List(), classes
}

// TestGolden: the shipped node groups as Karpenter objects and instance
// types (go test ./internal/kube/karpenter -update rewrites them).
func TestGolden(t *testing.T) {
	groups, classes := shipped(t)
	objs, err := Objects(groups, classes, 1)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, o := range objs {
		y, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	types, err := InstanceTypes(groups)
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string][]byte{"objects.yaml": b.Bytes(), "instance-types.json": append(types, '\n')} {
		path := filepath.Join("testdata", name)
		if *update {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test ./internal/kube/karpenter -update)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs (run with -update if intended):\n%s", path, got)
		}
	}
}

func TestOnlyScaledGroups(t *testing.T) {
	groups, classes := shipped(t)
	objs, err := Objects(groups, classes, 0.1)
	if err != nil {
		t.Fatal(err)
	}
	pools := map[string]bool{}
	for _, o := range objs {
		md := o["metadata"].(map[string]any)
		if o["kind"] == "NodePool" {
			pools[md["name"].(string)] = true
		}
		if o["kind"] == "KWOKNodeClass" && md["name"] == "h100-on-demand" {
			if d := o["spec"].(map[string]any)["nodeRegistrationDelay"]; d != "18s" {
				t.Errorf("boot 3m scaled by 0.1: %v", d)
			}
		}
	}
	if pools["h100-reserved"] || !pools["h100-on-demand"] || !pools["h100-spot"] {
		t.Fatalf("node pools %v: want the on-demand and spot groups, not the reserved one", pools)
	}
	if _, err := Objects([]nodegroup.Group{{Name: "x", Class: "B200", Purchase: nodegroup.Spot}}, classes, 1); err == nil {
		t.Fatal("a group of an unknown class rendered")
	}
}

func TestDurationText(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "0s", 90 * time.Second: "1m30s", time.Hour: "1h", 1500 * time.Millisecond: "2s", 26*time.Hour + 5*time.Second: "26h5s"} {
		if got := durationText(d); got != want {
			t.Errorf("%v: %q, want %q", d, got, want)
		}
	}
}
