package portal

import "testing"

// TestReturnTo: a sign-in comes back only to one of the portal's pages.
func TestReturnTo(t *testing.T) {
	for in, want := range map[string]string{
		"/":                     "/",
		"/?tab=catalog":         "/?tab=catalog",
		"/a/../\\evil.example":  "/",
		"/auth/logout":          "/",
		"/api/v1/tokens":        "/",
		"//evil.example":        "/",
		"https://evil.example/": "/",
		"/w/abc123/lab?x=1":     "/w/abc123/lab?x=1",
		"/w/../api/v1/tokens":   "/",
		"/w/%2e%2e/api":         "/",
		"/workloads":            "/workloads",
		"/history":              "/history",
		"/workloads/abc123":     "/workloads/abc123",
		"/launch/jupyter":       "/launch/jupyter",
		"/workloads/../api":     "/",
		"/launch/%2e%2e/auth":   "/",
	} {
		if got := returnTo(in); got != want {
			t.Errorf("returnTo(%q) = %q, want %q", in, got, want)
		}
	}
}
