package e2e_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gantryhq/gantry/deploy"
	"github.com/gantryhq/gantry/internal/devcluster"
	"github.com/gantryhq/gantry/internal/devcluster/clustertest"
)

// The Helm chart is installed into the package's cluster before its tests
// (release gantry in gantry-system), and every Gantry the tests start talks
// to the cluster as the chart's ServiceAccount (impersonated): the chart's
// RBAC is what the whole suite runs under. After the tests, the API server's
// audit log says what that ServiceAccount asked for, and the chart must grant
// exactly that (TestMain's After hook, checkRBAC).
const (
	chartNamespace = "gantry-system"
	chartIdentity  = "system:serviceaccount:" + chartNamespace + ":gantry"
)

var (
	helmBin          string
	gantryKubeconfig string // the cluster as the chart's ServiceAccount
)

var chartHooks = clustertest.Hooks{Before: installChart, After: checkRBAC,
	// A real node beside the simulated fleet: CPU-only launches run there,
	// and Kueue counts their cores against the teams' quota.cores, as in
	// `gantry dev`.
	Options: func(o *devcluster.Options) { o.RealNode, o.KueueCountsCPU = true, true }}

func helmChart(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command(helmBin, append(args, "--kubeconfig", cluster.Kubeconfig)...).CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// installChart installs the chart as an operator would (PostgreSQL, OpenID,
// catalog from ConfigMaps; the local cluster has its PriorityClasses
// already) and writes a kubeconfig that impersonates its ServiceAccount.
func installChart(c *devcluster.Cluster) error {
	root, err := devcluster.RepoRoot()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if helmBin, err = devcluster.Helm(ctx, root, os.Stderr); err != nil {
		return err
	}
	chart := filepath.Join(root, "deploy", "helm", "gantry")
	out, err := exec.CommandContext(ctx, helmBin, "install", "gantry", chart, "--namespace", chartNamespace, "--create-namespace",
		"--kubeconfig", c.Kubeconfig, "-f", filepath.Join(root, "deploy", "helm", "testdata", "postgres.yaml"),
		"--set", "agent.enabled=false", "--set", "priorityClasses.create=false",
		// The real node's tests reach their apps as the local cluster
		// allows: through the Services' endpoints.
		"--set", "appDial=endpoints").CombinedOutput()
	if err != nil {
		return fmt.Errorf("helm install: %v\n%s", err, out)
	}
	cfg, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		return err
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate = chartIdentity
	}
	gantryKubeconfig = filepath.Join(filepath.Dir(c.Kubeconfig), "kubeconfig-gantry")
	return clientcmd.WriteToFile(*cfg, gantryKubeconfig)
}

// grantLease gives the chart's ServiceAccount its Role in namespace ns, as
// the chart does in the release's namespace: each test server holds a Lease
// of its own, in a namespace of its own.
func grantLease(t testing.TB, ns string) {
	t.Helper()
	ctx := context.Background()
	rules, err := clustertest.Rules(deploy.RoleRules)
	if err != nil {
		t.Fatal(err)
	}
	cs := cluster.Client
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "gantry"}, Rules: rules}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "gantry"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "gantry"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "gantry", Namespace: chartNamespace}},
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// notExercised are rules the chart grants that the e2e suite does not reach,
// each with where its use is tested instead.
var notExercised = map[string]string{
	// SyncQuotas prunes the Kueue objects of teams, classes and priorities
	// the policy no longer names (internal/kube TestKueueAdmitsUpToTheQuota
	// runs it; the e2e suite never removes a team).
	"kueue.x-k8s.io/admissionchecks delete":         "pruned by kueue.SyncQuotas",
	"kueue.x-k8s.io/clusterqueues delete":           "pruned by kueue.SyncQuotas",
	"kueue.x-k8s.io/resourceflavors delete":         "pruned by kueue.SyncQuotas",
	"kueue.x-k8s.io/workloadpriorityclasses delete": "pruned by kueue.SyncQuotas",
	// The e2e cluster runs no Karpenter; internal/kube/karpenter's cluster
	// does (TestWatcherSaysWhyAWorkloadWaits: kube.Cluster.RunPools).
	"karpenter.sh/nodeclaims list":  "watched by karpenter.Pools",
	"karpenter.sh/nodeclaims watch": "watched by karpenter.Pools",
	"karpenter.sh/nodepools get":    "read by karpenter.Sizes (TestNodeGroupEditReachesItsNodePool)",
	"karpenter.sh/nodepools patch":  "applied by karpenter.Sizes (TestNodeGroupEditReachesItsNodePool)",
	// Read back only when the lifecycle loop finds a service or a notebook
	// out of step with its record (workload
	// TestConvergeConfirmsWithTheCluster).
	"apps/deployments get":  "read by kube.Cluster.Primary before the lifecycle loop stops or starts it",
	"apps/statefulsets get": "read by kube.Cluster.Primary before the lifecycle loop stops or starts it",
	// The e2e cluster runs no KubeVirt controller: a VM moved off a
	// quarantined node has its instance deleted (quarantine TestKinds).
	"kubevirt.io/virtualmachineinstances delete": "restarted by kube.Quarantine.RestartVM",
}

// checkRBAC compares what the chart's ServiceAccount asked the API server
// for during the whole suite (its audit log) with what the chart grants:
// nothing it asked for was refused, and nothing granted went unused.
func checkRBAC(c *devcluster.Cluster) error {
	if f := flag.Lookup("test.run"); f != nil && f.Value.String() != "" {
		return nil // a partial run exercises part of Gantry
	}
	granted, err := clustertest.Grants(deploy.ClusterRoleRules, deploy.EndpointsClusterRoleRules, deploy.RoleRules)
	if err != nil {
		return err
	}
	used, refused, err := clustertest.Audited(c.AuditLog(), chartIdentity)
	if err != nil {
		return err
	}
	var problems []string
	for _, k := range refused {
		problems = append(problems, fmt.Sprintf("refused %s: the chart must grant it (deploy/helm/gantry/files)", k))
	}
	for k := range used {
		if !granted[k] && !slices.Contains(refused, k) {
			problems = append(problems, fmt.Sprintf("used %s without a rule that grants it", k))
		}
	}
	for k := range granted {
		// A server-side apply of a new object is authorized as create too,
		// and audited as patch.
		applied := strings.HasSuffix(k, " create") && used[strings.TrimSuffix(k, " create")+" patch"]
		if !used[k] && !applied && notExercised[k] == "" {
			problems = append(problems, fmt.Sprintf("granted %s, never used by the suite: drop it from the chart, or list it in notExercised with where it is used", k))
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		var all []string
		for k := range used {
			all = append(all, k)
		}
		sort.Strings(all)
		return fmt.Errorf("the chart's RBAC is not what Gantry uses:\n  %s\nwhat it used: %s", strings.Join(problems, "\n  "), strings.Join(all, ", "))
	}
	return nil
}

// TestChart: every value set of the chart's tests is accepted by the API
// server (server-side dry run), and a second release with everything on
// (agent, git-sync) installs, upgrades and uninstalls cleanly.
func TestChart(t *testing.T) {
	alone(t)
	if cluster == nil {
		t.Skip(clustertest.ErrNotRequested)
	}
	root, err := devcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	chart := filepath.Join(root, "deploy", "helm", "gantry")
	kubectl := filepath.Join(cluster.Bin, "kubectl")
	// The tls set's certificate comes from a Secret here: the local cluster
	// has no cert-manager, so its Certificate kind is unknown to it.
	for _, v := range []string{"postgres", "sqlite", "gitsync", "tls"} {
		manifest := helmChart(t, "template", "dry-"+v, chart, "--namespace", chartNamespace, "-f", filepath.Join(root, "deploy", "helm", "testdata", v+".yaml"),
			"--set", "runtimeClasses.create=true", "--set", "tls.certManager.enabled=false")
		cmd := exec.Command(kubectl, "--kubeconfig", cluster.Kubeconfig, "apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", "-")
		cmd.Stdin = strings.NewReader(manifest)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("%s: the API server refuses the chart: %v\n%s", v, err, out)
			continue
		}
		if n := strings.Count(string(out), "(server dry run)"); n != strings.Count(manifest, "\nkind: ") {
			t.Errorf("%s: %d objects dry-run, the manifest has %d:\n%s", v, n, strings.Count(manifest, "\nkind: "), out)
		}
	}

	// Everything on, in a namespace of its own.
	values := filepath.Join(root, "deploy", "helm", "testdata", "gitsync.yaml")
	helmChart(t, "install", "full", chart, "--namespace", "gantry-chart", "--create-namespace", "-f", values, "--set", "priorityClasses.create=false")
	ctx := context.Background()
	if _, err := cluster.Client.AppsV1().DaemonSets("gantry-chart").Get(ctx, "full-gantry-agent", metav1.GetOptions{}); err != nil {
		t.Errorf("the agent's DaemonSet: %v", err)
	}
	helmChart(t, "upgrade", "full", chart, "--namespace", "gantry-chart", "-f", values, "--set", "priorityClasses.create=false", "--set", "replicas=3")
	d, err := cluster.Client.AppsV1().Deployments("gantry-chart").Get(ctx, "full-gantry", metav1.GetOptions{})
	if err != nil || *d.Spec.Replicas != 3 {
		t.Fatalf("after the upgrade: %v %+v", err, d)
	}
	helmChart(t, "uninstall", "full", "--namespace", "gantry-chart", "--wait")
	if _, err := cluster.Client.RbacV1().ClusterRoles().Get(ctx, "gantry-chart-full-gantry", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the ClusterRole outlived its release: %v", err)
	}
}
