package devcluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/kube/karpenter"
	"github.com/gantryhq/gantry/internal/nodegroup"
)

// Karpenter runs on the local cluster as a process on loopback, like Kueue,
// with its kwok cloud provider: a NodeClaim becomes a Node annotated for kwok
// after the node class's registration delay (the group's boot time), and
// kwok makes it Ready. Karpenter's webhooks are off (v1 needs none) and it
// runs without leader election.

var (
	nodePoolResource  = schema.GroupVersionResource{Group: "karpenter.sh", Version: "v1", Resource: "nodepools"}
	nodeClassResource = schema.GroupVersionResource{Group: "karpenter.kwok.sh", Version: "v1alpha1", Resource: "kwoknodeclasses"}
)

// BuildKarpenter builds (first time) or finds Karpenter's kwok build and
// returns its directory (bin/karpenter-kwok, crds/).
func BuildKarpenter(ctx context.Context, root string, log io.Writer) (string, error) {
	return runBuild(ctx, root, "deploy/karpenter/build.sh", "Karpenter", log)
}

// startKarpenter installs Karpenter's CRDs, its NodePools and node classes
// for the scaled node groups, and runs it until Stop, waiting until every
// NodePool is Ready. Without scaled groups it does nothing.
func (c *Cluster) startKarpenter(ctx context.Context, o Options, classes *gpu.Catalog) error {
	scaled := 0
	for _, g := range o.NodeGroups {
		if karpenter.Scaled(g) {
			scaled++
		}
	}
	if scaled == 0 {
		return nil
	}
	dir, err := BuildKarpenter(ctx, o.Root, o.Log)
	if err != nil {
		return err
	}
	var crds bytes.Buffer
	files, _ := filepath.Glob(filepath.Join(dir, "crds", "*.yaml"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		crds.WriteString("\n---\n")
		crds.Write(data)
	}
	if err := c.installCRDs(ctx, crds.Bytes()); err != nil {
		return fmt.Errorf("install Karpenter's CRDs: %w", err)
	}
	scale := o.BootScale
	if scale <= 0 {
		scale = 1
	}
	objs, err := karpenter.Objects(o.NodeGroups, classes, scale)
	if err != nil {
		return err
	}
	types, err := karpenter.InstanceTypes(o.NodeGroups)
	if err != nil {
		return err
	}
	kdir := filepath.Join(c.workDir, "clusters", c.Name, "karpenter")
	if err := os.MkdirAll(kdir, 0o700); err != nil {
		return err
	}
	typesFile := filepath.Join(kdir, "instance-types.json")
	if err := os.WriteFile(typesFile, types, 0o600); err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(c.Config())
	if err != nil {
		return err
	}
	var pools []string
	for _, o := range objs {
		u := &unstructured.Unstructured{Object: o}
		res := nodeClassResource
		if u.GetKind() == "NodePool" {
			res = nodePoolResource
			pools = append(pools, u.GetName())
		}
		if _, err := dyn.Resource(res).Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	// Metrics and health on ports the kernel picks (":0"); batches of
	// pending pods end after 500 ms without a new one, or at 3 s (Karpenter's
	// defaults, 1 s and 10 s, are for clouds whose machines take minutes).
	p, err := startProcess("Karpenter", filepath.Join(dir, "bin", "karpenter-kwok"), nil, []string{
		"KUBECONFIG=" + c.Kubeconfig,
		"INSTANCE_TYPES_FILE_PATH=" + typesFile,
		"DISABLE_LEADER_ELECTION=true",
		"METRICS_PORT=0", "HEALTH_PROBE_PORT=0",
		"BATCH_IDLE_DURATION=500ms", "BATCH_MAX_DURATION=3s",
		"LOG_LEVEL=info",
	}, filepath.Join(kdir, "karpenter.log"))
	if err != nil {
		return err
	}
	if err := waitPools(ctx, dyn, p, pools); err != nil {
		p.stop()
		return err
	}
	c.karpenter, c.karpenterLog = p, filepath.Join(kdir, "karpenter.log")
	fmt.Fprintf(o.Log, "cluster: Karpenter scales %d node groups\n", len(pools))
	return nil
}

// waitPools waits until Karpenter marks every NodePool Ready.
func waitPools(ctx context.Context, dyn dynamic.Interface, p *process, pools []string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		ready := 0
		for _, name := range pools {
			if u, err := dyn.Resource(nodePoolResource).Get(ctx, name, metav1.GetOptions{}); err == nil && conditionTrue(u, "Ready") {
				ready++
			}
		}
		if ready == len(pools) {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("karpenter exited (%v):\n%s", p.err, p.output())
		case <-ctx.Done():
			return fmt.Errorf("karpenter made %d of %d NodePools Ready within 2 minutes:\n%s", ready, len(pools), p.output())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// reservedFleet is the node specs of the reserved groups: machines the
// cluster has from the start, labelled with their group.
func reservedFleet(groups []nodegroup.Group, classes *gpu.Catalog) []NodeSpec {
	var out []NodeSpec
	for _, g := range groups {
		c, ok := classes.Get(g.Class)
		if karpenter.Scaled(g) || !ok || len(c.Products) == 0 {
			continue
		}
		out = append(out, NodeSpec{Prefix: g.Name, Count: g.Min, Product: c.Products[0], MemoryMB: c.MemoryGiB * 1024, GPUs: g.GPUsPerNode, Whole: g.GPUsPerNode, Group: g.Name, Reserved: true})
	}
	return out
}

// withReserved is fleet with the reserved groups' machines in place of its
// specs of those groups.
func withReserved(fleet []NodeSpec, groups []nodegroup.Group, classes *gpu.Catalog) []NodeSpec {
	reserved := reservedFleet(groups, classes)
	mine := map[string]bool{}
	for _, s := range reserved {
		mine[s.Group] = true
	}
	var out []NodeSpec
	for _, s := range fleet {
		if s.Group == "" || !mine[s.Group] {
			out = append(out, s)
		}
	}
	return append(out, reserved...)
}
