package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/store/storetest"
	"github.com/gantryhq/gantry/internal/waitfor"
)

var vmGVR = schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachines"}

const sshKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE2eTestKeyForGantryE2EOnly000000000000000 alice@laptop"

// TestVMLifecycle: a gpu-vm launch becomes a VirtualMachine the real API
// server validated against KubeVirt's schema, with the class's GPUs passed
// through and the pinned containerDisk; its status follows the VM's (set here
// as KubeVirt's controller would: KubeVirt cannot run VMs on this machine);
// stop halts it, start runs it again, delete removes it.
func TestVMLifecycle(t *testing.T) {
	alone(t)
	g := start(t, storetest.SQLitePath(t), true)
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(cluster.Config())
	if err != nil {
		t.Fatal(err)
	}
	s, w := g.launch(model.LaunchRequest{Template: "gpu-vm", Team: "vision", Gpu: &model.GPUChoice{Count: new(2)},
		Parameters: &model.Parameters{"sshPublicKey": sshKey}})
	if s != 201 || w.Kind != model.WorkloadKindVm || !w.Applied {
		t.Fatalf("launch: %d %s", s, asJSON(w))
	}
	vms := dyn.Resource(vmGVR).Namespace("gantry-vision")
	// Queued by Gantry in Kueue: created halted, started once admitted.
	var vm *unstructured.Unstructured
	var rs string
	waitfor.Until(t, 60*time.Second, "the VM started once Kueue admits it", func() error {
		if vm, err = vms.Get(ctx, w.Name, metav1.GetOptions{}); err != nil {
			return err
		}
		if rs, _, _ = unstructured.NestedString(vm.Object, "spec", "runStrategy"); rs != "Always" {
			return fmt.Errorf("runStrategy %s", rs)
		}
		return nil
	})
	gpus, _, _ := unstructured.NestedSlice(vm.Object, "spec", "template", "spec", "domain", "devices", "gpus")
	vols, _, _ := unstructured.NestedSlice(vm.Object, "spec", "template", "spec", "volumes")
	disk, _, _ := unstructured.NestedString(vols[0].(map[string]any), "containerDisk", "image")
	if rs != "Always" || len(gpus) != 2 || gpus[0].(map[string]any)["deviceName"] != "nvidia.com/AD104GL_L4" || disk != servertest.Deref(w.Image) {
		t.Fatalf("VirtualMachine: runStrategy %q, gpus %v, disk %q (workload image %q)", rs, gpus, disk, servertest.Deref(w.Image))
	}

	// KubeVirt's controller would report the VM running, reading it again
	// when Gantry changed it in between.
	setStatus := func(printable string, conds ...map[string]any) {
		t.Helper()
		var cs []any
		for _, c := range conds {
			cs = append(cs, c)
		}
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			vm, err := vms.Get(ctx, w.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			unstructured.SetNestedField(vm.Object, map[string]any{"printableStatus": printable, "conditions": cs}, "status")
			_, err = vms.UpdateStatus(ctx, vm, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	setStatus("ErrorUnschedulable", map[string]any{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
		"message": "0/11 nodes are available: 11 Insufficient nvidia.com/AD104GL_L4."})
	// Kueue's Workload and the VM are watched apart: the first report may
	// still see it queued; the scheduler's reason follows.
	got := waitFor(t, g, w.Id, func(x model.Workload) bool { return x.Status == "Pending" && servertest.Deref(x.Reason) != "" })
	if got.Status != "Pending" || servertest.Deref(got.Reason) != "0/11 nodes are available: 11 Insufficient nvidia.com/AD104GL_L4." {
		t.Errorf("unschedulable VM: %s", asJSON(got))
	}
	setStatus("Running", map[string]any{"type": "Ready", "status": "True"})
	g.waitStatus(w.Id, "Running")

	if s, stopped := g.stop(w.Id); s != 200 || stopped.Status != "Stopped" {
		t.Fatalf("stop: %d %s", s, asJSON(stopped))
	}
	runStrategy := func() string {
		vm, err := vms.Get(ctx, w.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rs, _, _ := unstructured.NestedString(vm.Object, "spec", "runStrategy")
		return rs
	}
	if rs := runStrategy(); rs != "Halted" {
		t.Errorf("after stop, runStrategy %q", rs)
	}
	setStatus("Stopped", map[string]any{"type": "Ready", "status": "False"}) // as KubeVirt reports a halted VM
	if s, started := g.startAgain(w.Id); s != 200 || started.Status != "Pending" {
		t.Fatalf("start: %d %s", s, asJSON(started))
	}
	waitfor.Until(t, 60*time.Second, "the VM started again once Kueue admits it again", func() error {
		if rs := runStrategy(); rs != "Always" {
			return fmt.Errorf("runStrategy %s", rs)
		}
		return nil
	})
	setStatus("Running", map[string]any{"type": "Ready", "status": "True"})
	g.waitStatus(w.Id, "Running")

	if s := servertest.Must(g.api.DeleteWorkloadWithResponse(ctx, w.Id))(t).StatusCode(); s != 204 {
		t.Fatalf("delete %s: %d", w.Id, s)
	}
	waitfor.Until(t, 30*time.Second, "the VirtualMachine to go after delete", func() error {
		if _, err := vms.Get(ctx, w.Name, metav1.GetOptions{}); err == nil {
			return errors.New("still there")
		}
		return nil
	})
	// A deleted VM cannot be started again.
	if s, _ := g.startAgain(w.Id); s != 409 {
		t.Errorf("start of a deleted VM: %d, want 409", s)
	}
}

func waitFor(t *testing.T, g *gantryServer, id string, ok func(model.Workload) bool) model.Workload {
	t.Helper()
	var w model.Workload
	waitfor.Until(t, 30*time.Second, "workload "+id+" to reach the expected state", func() error {
		if w = g.workload(id); !ok(w) {
			return fmt.Errorf("%s", asJSON(w))
		}
		return nil
	})
	return w
}
