package kube

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// How Gantry reaches a Service of its cluster without cluster DNS or
// kube-proxy: Gantry outside the cluster (a kubeconfig), or a cluster that
// has neither (the local cluster). In a pod of a cluster that has them,
// the Service's DNS name and kube-proxy (or the pod network, for a headless
// Service) carry the connection, and none of this is needed. Here
// DialService does their work itself: it reads the Service's
// EndpointSlices and dials a ready endpoint's pod address at the port the
// Service's port targets (config appDial: endpoints). Gantry must be able
// to route to the pods' addresses (in a pod of the cluster, or on a host
// of its network).

// dialTimeout bounds one endpoint's connect, so that a pod that drops
// packets costs seconds, not the whole request.
const dialTimeout = 5 * time.Second

// ErrNoEndpoint means a Service has no ready endpoint for the port asked.
var ErrNoEndpoint = errors.New("no ready endpoint")

// DialService dials addr: a Service by its cluster DNS name
// (<service>.<namespace>.svc[.cluster.local]:<port>) through its endpoints,
// any other address as it is. It is an http.Transport's DialContext.
func DialService(ctx context.Context, core kubernetes.Interface, network, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: dialTimeout}
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	name, ns, ok := serviceName(host)
	if !ok {
		return d.DialContext(ctx, network, addr)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, fmt.Errorf("port %q of %s: %w", portText, host, err)
	}
	targets, err := endpoints(ctx, core, ns, name, int32(port))
	if err != nil {
		return nil, fmt.Errorf("service %s/%s port %d: %w", ns, name, port, err)
	}
	// Spread over the ready pods, and past one that does not answer.
	rand.Shuffle(len(targets), func(i, j int) { targets[i], targets[j] = targets[j], targets[i] })
	var errs []error
	for _, t := range targets {
		conn, err := d.DialContext(ctx, network, t)
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("service %s/%s port %d: %w", ns, name, port, errors.Join(errs...))
}

// serviceName splits a Service's cluster DNS name into name and namespace.
func serviceName(host string) (name, ns string, ok bool) {
	host = strings.TrimSuffix(host, ".")
	rest, found := strings.CutSuffix(host, ".svc.cluster.local")
	if !found {
		if rest, found = strings.CutSuffix(host, ".svc"); !found {
			return "", "", false
		}
	}
	name, ns, ok = strings.Cut(rest, ".")
	if !ok || name == "" || ns == "" || strings.Contains(ns, ".") {
		return "", "", false
	}
	return name, ns, true
}

// endpoints are the pod addresses (host:port) behind a Service's port,
// ready ones only.
func endpoints(ctx context.Context, core kubernetes.Interface, ns, name string, port int32) ([]string, error) {
	svc, err := core.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var sp *corev1.ServicePort
	for i := range svc.Spec.Ports {
		if svc.Spec.Ports[i].Port == port {
			sp = &svc.Spec.Ports[i]
		}
	}
	if sp == nil {
		return nil, fmt.Errorf("the service has no port %d", port)
	}
	slices, err := core.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range slices.Items {
		var target int32
		for _, p := range s.Ports {
			if p.Port != nil && (p.Name == nil && sp.Name == "" || p.Name != nil && *p.Name == sp.Name) {
				target = *p.Port
			}
		}
		if target == 0 {
			continue
		}
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			for _, a := range e.Addresses {
				out = append(out, net.JoinHostPort(a, strconv.Itoa(int(target))))
			}
		}
	}
	if len(out) == 0 {
		return nil, ErrNoEndpoint
	}
	return out, nil
}
