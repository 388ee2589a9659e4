package devcluster

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/ociimage"
)

// The real node is one kubelet on containerd and runc beside the simulated
// fleet: real CPU and memory, no GPU, labelled and tainted RealNodeLabel so
// that only pods meant for it land there (kwok manages only nodes annotated
// kwok.x-k8s.io/node=fake, so it leaves this one alone).
//
// It changes nothing of the host's but a veth pair, a route and cgroups of
// its own:
//   - containerd and the kubelet share one private mount namespace, where
//     the /proc/sys files the kubelet writes are bind-mounted stand-ins;
//   - containerd runs in a network namespace of its own (gantry-node-<n>), so
//     the CNI bridge and the pods' addresses (10.244.<n>.0/24) live there,
//     joined to the host by a veth pair (10.243.<n>.1 host side, .2 inside)
//     and one host route; the kubelet stays in the host's network namespace
//     to reach the API server on loopback and listens on 10.243.<n>.1;
//   - the kubelet writes no iptables rules (makeIPTablesUtilChains: false)
//     and keeps its pods under a cgroup root of its own;
//   - n is the first of the machine's node slots whose lock file this
//     process could take (/run/gantry/node-<n>.lock, root's alone): held for
//     the node's life, released by the kernel if the process dies, so a slot
//     a dead run left behind is cleaned and used again.
//
// Images come from Debian's busybox-static, built here as OCI images and
// imported into containerd (pods use imagePullPolicy: Never): PauseImage is
// containerd's sandbox image, ShellImage has a shell and busybox's tools.

const (
	// RealNodeName is the real node's name.
	RealNodeName = "gantry-real"
	// RealNodeLabel labels the real node "true" and taints it NoSchedule
	// unless the GPU classes' cpu section names another label: CPU-only
	// launches run there.
	RealNodeLabel = "gantry.dev/cpu-node"
	// PauseImage is the sandbox (pause) image on the real node.
	PauseImage = "gantry.local/pause:1"
	// ShellImage is busybox: a shell and its tools, on the real node.
	ShellImage = "gantry.local/busybox:1"
)

// realNode is the running real node.
type realNode struct {
	proc   *process
	dir    string // its files: configs, kubelet's and containerd's roots
	run    string // short-path runtime directory (sockets)
	netns  string // the network namespace of containerd and the pods
	veth   string // the host's end of the veth pair
	hostIP string // the host's address on the veth pair
	// forwarders carry pulls from the node's namespace to registries on
	// the host's loopback (MirrorRegistries); closed with the node.
	mu         sync.Mutex
	forwarders map[string]net.Listener // by target
	mirrors    map[string][]string     // registry host → forwarders' addresses, newest first
	cgroup     string                  // the kubelet's cgroup root, under every hierarchy
	slot       *os.File                // the node slot's lock, held while it runs
}

// RealNode returns the real node's name, or why the cluster has none.
func (c *Cluster) RealNode() (string, error) {
	if c.realNode == nil {
		if c.realNodeWhy == nil {
			return "", errors.New("the cluster was started without a real node (devcluster.Options.RealNode)")
		}
		return "", c.realNodeWhy
	}
	return RealNodeName, nil
}

// BuildKubelet builds (first time) or finds the real node's kubelet and
// returns its directory.
func BuildKubelet(ctx context.Context, root string, log io.Writer) (string, error) {
	return runBuild(ctx, root, "deploy/cluster/build-kubelet.sh", "the kubelet", log)
}

// lacking is what this machine lacks for a real node (not root, Debian's
// packages missing, no cgroups), as against a real node that could run here
// and failed to start.
type lacking struct{ error }

func (l lacking) Unwrap() error { return l.error }

// RealNodeRequired reports whether tests must have the real node, given
// why a cluster has none (Cluster.RealNode's error): always in CI (CI
// set), which runs as root with the packages installed; and with
// GANTRY_TEST_REALNODE set (.ci/test sets it) unless this machine lacks
// what a real node needs — so a real node that could run here and did not
// fails the suite instead of skipping its tests.
func RealNodeRequired(why error) bool {
	if os.Getenv("CI") != "" {
		return true
	}
	var l lacking
	return os.Getenv("GANTRY_TEST_REALNODE") != "" && !errors.As(why, &l)
}

// PrepareRealNode installs what the real node runs on where missing (as
// root, from Debian: deploy/cluster/realnode-deps.sh) and builds the real
// images (deploy/images/build.sh, cached by version). Each says in one line
// what it cannot do here (not root, say) and succeeds; an error is a build
// or an install that failed.
func PrepareRealNode(ctx context.Context, root string, log io.Writer) error {
	if _, err := runBuild(ctx, root, "deploy/cluster/realnode-deps.sh", "the real node's packages", log); err != nil {
		return err
	}
	_, err := runBuild(ctx, root, "deploy/images/build.sh", "the real images", log)
	return err
}

// CanRunRealNode says what this machine lacks for a real node (not root,
// Debian's packages, cgroups), or nil where it has what one needs.
func CanRunRealNode() error {
	if err := machineLacks(); err != nil {
		return lacking{err}
	}
	return nil
}

func machineLacks() error {
	if os.Geteuid() != 0 {
		return errors.New("not root (containerd, runc and the node's network namespace need root)")
	}
	var missing []string
	for _, bin := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "unshare", "nsenter", "ip"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, bin)
		}
	}
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniBinDir, p)); err != nil {
			missing = append(missing, filepath.Join(cniBinDir, p))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s (Debian: apt-get install containerd runc containernetworking-plugins busybox-static iproute2)", strings.Join(missing, ", "))
	}
	if _, err := ociimage.BusyBoxFiles(busybox); err != nil {
		return err
	}
	if len(cgroupMounts()) == 0 {
		return errors.New("no cgroup hierarchy mounted under /sys/fs/cgroup")
	}
	return nil
}

const (
	cniBinDir = "/usr/lib/cni"
	busybox   = ociimage.BusyBoxPath
)

// cgroupMounts are the mount points of the machine's cgroup hierarchies.
func cgroupMounts() []string {
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && (f[2] == "cgroup" || f[2] == "cgroup2") && strings.HasPrefix(f[1], "/sys/fs/cgroup") {
			out = append(out, f[1])
		}
	}
	return out
}

// startRealNode starts the real node and waits until it is Ready. On an
// error, nothing of it is left running.
func (c *Cluster) startRealNode(ctx context.Context, o Options, classes *gpu.Catalog) (err error) {
	if err := CanRunRealNode(); err != nil {
		return err
	}
	kubeletDir, err := BuildKubelet(ctx, o.Root, o.Log)
	if err != nil {
		return err
	}
	n := &realNode{dir: filepath.Join(c.workDir, "clusters", c.Name, "node")}
	defer func() {
		if err != nil {
			n.stop()
			// A kubelet that registered and then failed leaves no Node
			// that pods meant for the real node would wait on.
			c.Client.CoreV1().Nodes().Delete(context.Background(), RealNodeName, metav1.DeleteOptions{})
		}
	}()
	slot, err := n.takeSlot()
	if err != nil {
		return err
	}
	if err := n.network(ctx, slot); err != nil {
		return err
	}
	for _, m := range cgroupMounts() {
		if err := os.MkdirAll(filepath.Join(m, n.cgroup), 0o755); err != nil {
			return fmt.Errorf("the node's cgroup: %w", err)
		}
	}
	for _, d := range []string{n.dir, n.run, filepath.Join(n.dir, "cni"), filepath.Join(n.dir, "sys")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("the node's directories: %w", err)
		}
	}
	images := filepath.Join(n.dir, "images.tar")
	if err := writeNodeImages(images); err != nil {
		return fmt.Errorf("the node's images: %w", err)
	}
	hostIP := fmt.Sprintf("10.243.%d.1", slot)
	n.hostIP = hostIP
	label := RealNodeLabel
	if cpu, ok := classes.CPU(); ok {
		label = cpu.NodeLabel
	}
	files := map[string]string{
		"containerd.toml":        containerdConfig(n.dir, n.run, fmt.Sprintf("10.243.%d.2", slot)),
		"cni/10-gantry.conflist": cniConfig(slot, n.dir),
		"kubelet.yaml":           kubeletConfig(hostIP, n.cgroup, n.run, filepath.Join(c.workDir, "clusters", c.Name, "pki", "ca.crt"), label),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(n.dir, name), []byte(data), 0o600); err != nil {
			return fmt.Errorf("the node's %s: %w", name, err)
		}
	}
	args := []string{"--mount", "--propagation", "private", "/bin/sh", "-c", nodeScript, "node",
		n.dir, n.run, "/run/netns/" + n.netns, images, filepath.Join(kubeletDir, "kubelet"), c.Kubeconfig, hostIP, label}
	if n.proc, err = startProcess("the real node", "unshare", args, nil, filepath.Join(n.dir, "node.log")); err != nil {
		return err
	}
	if err := c.waitNodeReady(ctx, n); err != nil {
		return err
	}
	c.realNode = n
	fmt.Fprintf(o.Log, "cluster: real node %s (kubelet on containerd, pods on 10.244.%d.0/24)\n", RealNodeName, slot)
	return nil
}

// nodeScript runs in the node's private mount namespace: the sysctl
// stand-ins; a /var/log/pods and /var/log/containers of the node's own (the
// kubelet's container GC removes every pod log directory and container log
// link there of a pod it does not run, so two nodes on one machine would
// remove each other's logs from under their running containers);
// containerd in the node's network namespace, the images, then the kubelet
// in its place. $1 the node's directory, $2 its runtime directory, $3 the
// network namespace, $4 the images, $5 the kubelet, $6 the kubeconfig, $7
// the node's address, $8 its label.
const nodeScript = `set -e
mount --make-rprivate /
for f in vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys kernel/keys/root_maxbytes; do
  [ -e /proc/sys/$f ] || continue
  s="$1/sys/$(echo $f | tr / _)"
  cat /proc/sys/$f > "$s"
  mount --bind "$s" /proc/sys/$f
done
mkdir -p "$1/pods-log" /var/log/pods "$1/containers-log" /var/log/containers
mount --bind "$1/pods-log" /var/log/pods
mount --bind "$1/containers-log" /var/log/containers
nsenter --net="$3" containerd --config "$1/containerd.toml" > "$1/containerd.log" 2>&1 &
i=0
until ctr -a "$2/containerd.sock" version > /dev/null 2>&1; do
  i=$((i+1)); [ $i -lt 300 ] || { echo "containerd did not answer within 30 s:"; tail -20 "$1/containerd.log"; exit 1; }
  sleep 0.1
done
ctr -a "$2/containerd.sock" -n k8s.io images import "$4" > /dev/null
exec "$5" --config "$1/kubelet.yaml" --kubeconfig "$6" --hostname-override ` + RealNodeName + ` --node-ip "$7" \
  --root-dir "$1/kubelet" --cert-dir "$1/kubelet/pki" --node-labels "$8=true"
`

// slotDir holds the node slots' lock files: root's alone (the real node
// needs root), at a fixed path every process finds.
const slotDir = "/run/gantry"

// takeSlot takes the first free node slot of the machine, cleaning what a
// dead run left in it.
func (n *realNode) takeSlot() (int, error) {
	if err := os.MkdirAll(slotDir, 0o700); err != nil {
		return 0, fmt.Errorf("the node slots' directory: %w", err)
	}
	for slot := 0; slot < 250; slot++ {
		f, err := os.OpenFile(filepath.Join(slotDir, fmt.Sprintf("node-%d.lock", slot)), os.O_RDONLY|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return 0, fmt.Errorf("node slot %d: %w", slot, err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			continue
		}
		n.slot = f
		n.netns = fmt.Sprintf("gantry-node-%d", slot)
		n.veth = fmt.Sprintf("gtn%d", slot)
		n.run = fmt.Sprintf("/run/gantry/node-%d", slot)
		n.cgroup = fmt.Sprintf("/gantry-node-%d", slot)
		n.cleanSlot()
		return slot, nil
	}
	return 0, errors.New("no free node slot (250 taken)")
}

// cleanSlot ends whatever runs in the slot — in its network namespace
// (containerd, the shims) or its cgroups (the containers) — and removes the
// namespace, the host's end of the veth pair (with it, the host's route),
// the runtime directory and the cgroups. Only the slot's holder calls it.
func (n *realNode) cleanSlot() {
	pids := func() []int {
		out, _ := exec.Command("ip", "netns", "pids", n.netns).Output()
		var ps []int
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil {
				ps = append(ps, pid)
			}
		}
		return ps
	}
	for _, pid := range pids() {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, m := range cgroupMounts() {
		killCgroup(filepath.Join(m, n.cgroup))
	}
	for try := 0; try < 100 && len(pids()) > 0; try++ {
		time.Sleep(50 * time.Millisecond) // the killed leave the namespace
	}
	for _, m := range cgroupMounts() {
		removeCgroup(filepath.Join(m, n.cgroup))
	}
	exec.Command("ip", "netns", "delete", n.netns).Run()
	exec.Command("ip", "link", "delete", n.veth).Run()
	os.RemoveAll(n.run)
}

// network makes the slot's network namespace, its veth pair and route.
func (n *realNode) network(ctx context.Context, slot int) error {
	host := n.veth
	steps := [][]string{
		{"netns", "add", n.netns},
		{"link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", n.netns},
		{"addr", "add", fmt.Sprintf("10.243.%d.1/30", slot), "dev", host},
		{"link", "set", host, "up"},
		{"-n", n.netns, "addr", "add", fmt.Sprintf("10.243.%d.2/30", slot), "dev", "eth0"},
		{"-n", n.netns, "link", "set", "eth0", "up"},
		{"-n", n.netns, "link", "set", "lo", "up"},
		{"-n", n.netns, "route", "add", "default", "via", fmt.Sprintf("10.243.%d.1", slot)},
		// add, not replace: someone else's route to these addresses is an
		// error, not overwritten.
		{"route", "add", fmt.Sprintf("10.244.%d.0/24", slot), "via", fmt.Sprintf("10.243.%d.2", slot)},
		// Forwarding between the veth and the bridge, in the namespace only.
		{"netns", "exec", n.netns, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"},
	}
	for _, s := range steps {
		if out, err := exec.CommandContext(ctx, "ip", s...).CombinedOutput(); err != nil {
			return fmt.Errorf("the node's network: ip %s: %v: %s", strings.Join(s, " "), err, bytes.TrimSpace(out))
		}
	}
	return nil
}

// waitNodeReady waits until the kubelet has registered the node and it is
// Ready (the runtime and the CNI network up). Its error's first line says
// why and where the logs are; the end of the node's output follows.
func (c *Cluster) waitNodeReady(ctx context.Context, n *realNode) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	logs := fmt.Sprintf("logs: %s, %s", filepath.Join(n.dir, "node.log"), filepath.Join(n.dir, "containerd.log"))
	state := "not registered"
	for {
		node, err := c.Client.CoreV1().Nodes().Get(ctx, RealNodeName, metav1.GetOptions{})
		if err == nil {
			if nodeReady(node) {
				return nil
			}
			state = "registered, not Ready"
			for _, cond := range node.Status.Conditions {
				if cond.Type == corev1.NodeReady {
					state = fmt.Sprintf("Ready %s: %s %s", cond.Status, cond.Reason, cond.Message)
				}
			}
		}
		select {
		case <-n.proc.done:
			return fmt.Errorf("the real node's kubelet or containerd exited (%v; %s):\n%s", n.proc.err, logs, n.proc.output())
		case <-ctx.Done():
			return fmt.Errorf("the real node was not Ready within 2 minutes (%s; %s):\n%s", state, logs, n.proc.output())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// stop ends the kubelet and containerd, the containers' shims and
// processes, removes the node's network namespace and cgroups, and gives
// its slot back.
func (n *realNode) stop() {
	if n == nil {
		return
	}
	n.proc.stop()
	n.mu.Lock()
	for _, ln := range n.forwarders {
		ln.Close()
	}
	n.forwarders = nil
	n.mu.Unlock()
	if n.slot != nil {
		n.cleanSlot()
		n.slot.Close()
	}
}

// killCgroup kills every process in a cgroup and those under it.
func killCgroup(dir string) {
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		data, _ := os.ReadFile(p)
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		return nil
	})
}

// removeCgroup removes a cgroup and those under it, deepest first, waiting
// a little for killed processes to leave them.
func removeCgroup(dir string) {
	var dirs []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		for try := 0; try < 50; try++ {
			if err := os.Remove(dirs[i]); err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// containerdConfig: its state and socket under the short runtime directory,
// images and snapshots under the node's, the CRI's sandbox image, pods'
// network namespaces kept off the host's /run/netns, and its streaming
// server (exec, attach, port-forward) on the namespace's side of the veth,
// where the kubelet in the host's namespace reaches it.
func containerdConfig(dir, run, address string) string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[4]q
  # The sandbox has no CAP_SYS_RESOURCE: runc cannot lower a score below its own.
  restrict_oom_score_adj = true
  stream_server_address = %[7]q
  # Pods' network namespaces under the node's runtime directory, not the
  # host's /run/netns.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[5]q
    conf_dir = %[6]q
  # Registries' mirrors, read at each pull (MirrorRegistries writes them).
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %[8]q
`, filepath.Join(dir, "containerd"), filepath.Join(run, "state"), filepath.Join(run, "containerd.sock"), PauseImage, cniBinDir, filepath.Join(dir, "cni"), address, filepath.Join(dir, "certs.d"))
}

// cniConfig: a bridge in containerd's network namespace, the pods'
// addresses from 10.244.<slot>.0/24, no masquerade (the host routes to them).
func cniConfig(slot int, dir string) string {
	return fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "gantry", "plugins": [{
  "type": "bridge", "bridge": "gantry0", "isGateway": true, "ipMasq": false,
  "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.%d.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": %q}
}]}
`, slot, filepath.Join(dir, "ipam"))
}

// kubeletConfig: the kubelet on cgroup v1 (failCgroupV1, cgroupfs) without
// swap checks, serving its API on the node's address to clients of the
// cluster's CA (the API server presents the admin certificate) and asking
// the API server who may do what; no iptables rules, no image GC (its
// images are imported, not pulled), evictions only near the edge.
func kubeletConfig(address, cgroup, run, clientCA, label string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: 10250
healthzPort: 0
readOnlyPort: 0
cgroupDriver: cgroupfs
cgroupRoot: %[2]s
failSwapOn: false
failCgroupV1: false
makeIPTablesUtilChains: false
containerRuntimeEndpoint: unix://%[3]s/containerd.sock
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[4]q}
authorization: {mode: Webhook}
registerWithTaints:
- {key: %[5]s, value: "true", effect: NoSchedule}
evictionHard: {memory.available: 100Mi, nodefs.available: "1%%", imagefs.available: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
resolvConf: ""
`, address, cgroup, run, clientCA, label)
}

// busyboxImages are the real node's images (PauseImage, ShellImage), of
// Debian's static busybox.
func busyboxImages() (pause, shell v1.Image, err error) {
	files, err := ociimage.BusyBoxFiles(busybox)
	if err != nil {
		return nil, nil, err
	}
	if pause, err = ociimage.BusyBox(files, "/bin/sleep", "2147483647"); err != nil {
		return nil, nil, err
	}
	shell, err = ociimage.BusyBox(files)
	return pause, shell, err
}

// writeNodeImages writes the real node's images as one OCI layout tar that
// ctr imports by their names.
func writeNodeImages(path string) error {
	pause, shell, err := busyboxImages()
	if err != nil {
		return err
	}
	dir := path + ".d"
	os.RemoveAll(dir)
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("an OCI layout at %s: %w", dir, err)
	}
	for ref, img := range map[string]v1.Image{PauseImage: pause, ShellImage: shell} {
		tag := ref[strings.LastIndex(ref, ":")+1:]
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
			"org.opencontainers.image.ref.name": tag, "io.containerd.image.name": ref})); err != nil {
			return fmt.Errorf("write %s: %w", ref, err)
		}
	}
	return tarDir(dir, path)
}

// tarDir writes the files under dir to a tar at path, named relative to dir.
func tarDir(dir, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name, _ = filepath.Rel(dir, p)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// MirrorRegistries has the real node pull images of each registry host
// (mirrors' keys: registry.gantry.internal, say) from a registry on the
// host's loopback (their values: 127.0.0.1:port, plain HTTP), as a
// registry mirror does: containerd, in the node's network namespace, cannot
// reach the host's loopback, so a forwarder on the host's side of the veth
// pair carries its connections there. A host mirrored again keeps its
// earlier mirrors after the new one (containerd tries them in turn: several
// test servers, each with a registry of its own, publish the same digests).
// Without a real node it does nothing.
func (c *Cluster) MirrorRegistries(mirrors map[string]string) error {
	n := c.realNode
	if n == nil {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.forwarders == nil {
		n.forwarders, n.mirrors = map[string]net.Listener{}, map[string][]string{}
	}
	for host, target := range mirrors {
		ln, ok := n.forwarders[target]
		if !ok {
			var err error
			if ln, err = net.Listen("tcp", net.JoinHostPort(n.hostIP, "0")); err != nil {
				return fmt.Errorf("a forwarder to %s for the real node: %w", target, err)
			}
			n.forwarders[target] = ln
			go forward(ln, target)
		}
		dir := filepath.Join(n.dir, "certs.d", host)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("the real node's mirror of %s: %w", host, err)
		}
		addr := "http://" + ln.Addr().String()
		list := []string{addr}
		for _, a := range n.mirrors[host] {
			if a != addr {
				list = append(list, a)
			}
		}
		n.mirrors[host] = list
		hosts := fmt.Sprintf("server = %q\n", "https://"+host)
		for _, a := range list {
			hosts += fmt.Sprintf("\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", a)
		}
		if err := os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(hosts), 0o600); err != nil {
			return fmt.Errorf("the real node's mirror of %s: %w", host, err)
		}
	}
	return nil
}

// Forward returns an address on the host that the real node's pods reach
// (host:port on the host's side of its veth pair), whose connections go
// to the address target returns when each comes (a server on the host's
// loopback, started later, say), and stop, which closes it (connections
// under way go on). It closes with the node otherwise; without a real node
// it is an error.
func (c *Cluster) Forward(target func() string) (addr string, stop func(), err error) {
	n := c.realNode
	if n == nil {
		return "", nil, errors.New("no real node: its pods reach nothing on the host")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	ln, err := net.Listen("tcp", net.JoinHostPort(n.hostIP, "0"))
	if err != nil {
		return "", nil, fmt.Errorf("a forwarder for the real node: %w", err)
	}
	if n.forwarders == nil {
		n.forwarders, n.mirrors = map[string]net.Listener{}, map[string][]string{}
	}
	key := "func:" + ln.Addr().String()
	n.forwarders[key] = ln
	go Relay(ln, target)
	return ln.Addr().String(), func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.forwarders[key] == ln {
			delete(n.forwarders, key)
			ln.Close()
		}
	}, nil
}

// forward carries each connection ln accepts to target, until ln closes.
func forward(ln net.Listener, target string) { Relay(ln, func() string { return target }) }

// Relay carries each connection ln accepts to the address target returns
// then (none yet, "": the connection is closed), until ln closes.
func Relay(ln net.Listener, target func() string) {
	for {
		in, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer in.Close()
			out, err := net.DialTimeout("tcp", target(), 10*time.Second)
			if err != nil {
				return
			}
			defer out.Close()
			done := make(chan struct{}, 2)
			go func() { io.Copy(out, in); done <- struct{}{} }()
			go func() { io.Copy(in, out); done <- struct{}{} }()
			<-done
		}()
	}
}
