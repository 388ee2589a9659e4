package access

import "testing"

func TestParse(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range All {
		if seen[p.String()] {
			t.Errorf("%s listed twice", p)
		}
		seen[p.String()] = true
		got, ok := Parse(p.String())
		if !ok || got != p {
			t.Errorf("Parse(%q) = %v, %v", p, got, ok)
		}
		if p.Object()+":"+p.Action() != p.String() || p.Object() == "" || p.Action() == "" {
			t.Errorf("%s: object %q, action %q", p, p.Object(), p.Action())
		}
	}
	for _, bad := range []string{"", "workloads", "workloads:fly", "Workloads:read", " workloads:read"} {
		if p, ok := Parse(bad); ok || p != (Permission{}) {
			t.Errorf("Parse(%q) = %v, %v; want nothing", bad, p, ok)
		}
	}
	if !WorkloadsRead.ReadOnly() || WorkloadsLaunch.ReadOnly() {
		t.Error("ReadOnly")
	}
}

func TestPlatformScoped(t *testing.T) {
	for _, p := range All {
		want := p == TemplatesWrite || p == GPUClassesWrite || p == ImagesWrite || p == PolicyRead || p == PolicyWrite || p == AuditRead || p == UsersManage || p == NodesRead
		if p.PlatformScoped() != want {
			t.Errorf("%s.PlatformScoped() = %v", p, p.PlatformScoped())
		}
	}
}
