package kube

import "testing"

// TestServiceName: a Service's cluster DNS names, short and long, and what
// is not one.
func TestServiceName(t *testing.T) {
	for _, c := range []struct {
		host, name, ns string
		ok             bool
	}{
		{"nb-1.gantry-vision.svc.cluster.local", "nb-1", "gantry-vision", true},
		{"nb-1.gantry-vision.svc.cluster.local.", "nb-1", "gantry-vision", true},
		{"nb-1.gantry-vision.svc", "nb-1", "gantry-vision", true},
		{"127.0.0.1", "", "", false},
		{"example.com", "", "", false},
		{"gantry-vision.svc.cluster.local", "", "", false},
		{"a.b.c.svc.cluster.local", "", "", false},
	} {
		name, ns, ok := serviceName(c.host)
		if name != c.name || ns != c.ns || ok != c.ok {
			t.Errorf("serviceName(%q) = %q, %q, %v; want %q, %q, %v", c.host, name, ns, ok, c.name, c.ns, c.ok)
		}
	}
}
