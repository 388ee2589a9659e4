// Package podresources owns gantry-agent's view of which pod and container
// holds which GPU: a client of the kubelet's PodResources API (v1 List, gRPC
// over the kubelet's unix socket), giving each container's device ids per
// resource (nvidia.com/gpu, nvidia.com/mig-<profile>), and each pod's UID
// from the kubelet's pod log directory where the agent may read it.
//
// The PodResources API names pods by namespace and name only; per-process
// attribution of a shared GPU needs the pod's UID (what /proc/<pid>/cgroup
// shows). The kubelet names each pod's log directory
// <namespace>_<name>_<uid> (/var/log/pods), which maps one to the other
// without the Kubernetes API.
package podresources

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gantryhq/gantry/internal/node/agent"
	"github.com/gantryhq/gantry/internal/telemetry"
)

// DefaultSocket is where the kubelet serves the PodResources API.
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// DefaultPodLogs is where the kubelet keeps pods' logs, one directory per pod
// named <namespace>_<name>_<uid>.
const DefaultPodLogs = "/var/log/pods"

// Client lists pods' devices from the kubelet.
type Client struct {
	// PodLogs is the kubelet's pod log directory; where set and readable,
	// List fills each pod's UID from its entries' names (only the names are
	// read). Empty or unreadable: UIDs are left empty, and a time-sliced
	// GPU cannot be split by its processes.
	PodLogs string

	conn   *grpc.ClientConn
	client v1.PodResourcesListerClient
	socket string
}

// maxMessage bounds a List answer (the kubelet's own client uses 16 MiB).
const maxMessage = 16 << 20

// Dial connects to the kubelet's socket (lazily: the first List dials).
func Dial(socket string) (*Client, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage)))
	if err != nil {
		return nil, fmt.Errorf("kubelet PodResources at %s: %w", socket, err)
	}
	return &Client{conn: conn, client: v1.NewPodResourcesListerClient(conn), socket: socket}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// List implements agent.PodResources.
func (c *Client) List(ctx context.Context) ([]agent.PodDevices, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := c.client.List(ctx, &v1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("kubelet PodResources List at %s: %w", c.socket, err)
	}
	uids := podUIDs(c.PodLogs)
	var out []agent.PodDevices
	for _, p := range resp.GetPodResources() {
		for _, ct := range p.GetContainers() {
			res := map[string][]string{}
			for _, d := range ct.GetDevices() {
				res[d.GetResourceName()] = append(res[d.GetResourceName()], d.GetDeviceIds()...)
			}
			if len(res) == 0 {
				continue
			}
			out = append(out, agent.PodDevices{Pod: telemetry.PodRef{Namespace: p.GetNamespace(), Name: p.GetName(), Container: ct.GetName()},
				UID: uids[p.GetNamespace()+"/"+p.GetName()], Resources: res})
		}
	}
	return out, nil
}

// podUIDs maps namespace/name to the pod's UID from the kubelet's pod log
// directory. Namespaces and pod names cannot hold "_", so an entry splits in
// exactly three. Where a pod was recreated under the same name and the old
// directory is still there, the newer one wins.
func podUIDs(dir string) map[string]string {
	if dir == "" {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	out := make(map[string]string, len(entries))
	newest := make(map[string]time.Time, len(entries))
	for _, e := range entries {
		parts := strings.Split(e.Name(), "_")
		if !e.IsDir() || len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
			continue
		}
		key := parts[0] + "/" + parts[1]
		var mod time.Time
		if info, err := e.Info(); err == nil {
			mod = info.ModTime()
		}
		if _, seen := out[key]; seen && !mod.After(newest[key]) {
			continue
		}
		out[key], newest[key] = parts[2], mod
	}
	return out
}
