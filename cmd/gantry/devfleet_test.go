//go:build dev

package main

import (
	"path/filepath"
	"testing"

	"github.com/gantryhq/gantry/internal/fleet"
	"github.com/gantryhq/gantry/internal/gpu"
)

// TestDevClustersFile: the clusters file gantry dev --workers writes is one
// Gantry accepts, naming each worker at its kubeconfig, cheapest A100s on
// premises.
func TestDevClustersFile(t *testing.T) {
	classes, err := gpu.LoadFile(filepath.Join("..", "..", "templates", "gpu-classes.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	kc := map[string]string{"onprem": "/tmp/a b/onprem.kubeconfig", "cloud": "/tmp/cloud.kubeconfig"}
	for n := 1; n <= len(devWorkers); n++ {
		data := devClustersFile(n, kc)
		f, err := fleet.Parse("gantry-dev-clusters.yaml", data, classes)
		if err != nil {
			t.Fatalf("%d workers: %v\n%s", n, err, data)
		}
		cs := f.Clusters()
		if len(cs) != n || cs[0].Name != "onprem" || cs[0].Kubeconfig.File != kc["onprem"] {
			t.Fatalf("%d workers: %+v", n, cs)
		}
		d := f.Place(fleet.Launch{Team: "vision", Class: "A100-80GB", GPUs: 4}, map[string]fleet.State{
			"onprem": {Reachable: true, Free: map[string]float64{"A100-80GB": 16}}, "cloud": {Reachable: true, Free: map[string]float64{"A100-80GB": 8}}})
		if d.Cluster() != "onprem" {
			t.Errorf("%d workers: an A100 launch goes to %q (%s)", n, d.Cluster(), d.Reason)
		}
	}
	// Each worker has CPU nodes where CPU-only launches run, labelled as
	// the GPU classes' cpu section says, and as many cores as its entry
	// states.
	cpu, ok := classes.CPU()
	if !ok {
		t.Fatal("the GPU classes have no cpu section")
	}
	f, err := fleet.Parse("gantry-dev-clusters.yaml", devClustersFile(len(devWorkers), kc), classes)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range f.Clusters() {
		cores := 0
		for _, s := range devWorkers[i].nodes {
			if s.CPULabel != "" {
				if s.CPULabel != cpu.NodeLabel {
					t.Errorf("%s: CPU nodes labelled %s, want %s", c.Name, s.CPULabel, cpu.NodeLabel)
				}
				cores += s.Count * s.Cores
			}
		}
		if c.CPU == nil || cores == 0 || (c.CPU.Cores > 0 && c.CPU.Cores != cores) {
			t.Errorf("%s: cpu %+v, its CPU nodes %d cores", c.Name, c.CPU, cores)
		}
	}
}
