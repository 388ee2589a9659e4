// Package podresources owns gantry-agent's view of which pod and container
// holds which GPU: a client of the kubelet's PodResources API (v1 List, gRPC
// over the kubelet's unix socket), giving each container's device ids per
// resource (nvidia.com/gpu, nvidia.com/mig-<profile>).
package podresources

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gantryhq/gantry/internal/agent"
	"github.com/gantryhq/gantry/internal/telemetry"
)

// DefaultSocket is where the kubelet serves the PodResources API.
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// Client lists pods' devices from the kubelet.
type Client struct {
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
			out = append(out, agent.PodDevices{Pod: telemetry.PodRef{Namespace: p.GetNamespace(), Name: p.GetName(), Container: ct.GetName()}, Resources: res})
		}
	}
	return out, nil
}
