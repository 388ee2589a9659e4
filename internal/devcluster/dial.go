package devcluster

import (
	"context"
	"net"

	"github.com/gantryhq/gantry/internal/kube"
)

// DialService dials addr: a Service by its cluster DNS name
// (<service>.<namespace>.svc[.cluster.local]:<port>) through its ready
// endpoints (kube.DialService: the local cluster has neither DNS nor
// kube-proxy), any other address as it is. Pods on the real node have
// addresses the host routes to (realnode.go); the simulated nodes' pods have
// addresses nothing answers on, so a dial to those fails as it should. It is
// an http.Transport's DialContext.
func (c *Cluster) DialService(ctx context.Context, network, addr string) (net.Conn, error) {
	return kube.DialService(ctx, c.Client, network, addr)
}
