package server_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/server"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/tlsfiles/tlstest"
)

// TestServesHTTPS: given a certificate and key, Gantry serves HTTPS only,
// at the configured minimum version; a client trusting the CA completes the
// handshake and is served, a plain HTTP request is not; an expired
// certificate is refused at start, naming the file and when it expired.
func TestServesHTTPS(t *testing.T) {
	ca := tlstest.NewCA(t)
	dir := t.TempDir()
	certFile, keyFile := ca.Issue(t, dir, 1, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	g := servertest.New(t, func(c *config.Config) {
		c.TLS = config.TLS{CertFile: certFile, KeyFile: keyFile, MinVersion: "1.3"}
	})
	if !strings.HasPrefix(g.URL, "https://") {
		t.Fatalf("URL %s, want https", g.URL)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	resp, err := client.Get(g.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.TLS == nil || resp.TLS.Version != tls.VersionTLS13 {
		t.Fatalf("GET /healthz over TLS: %d %+v", resp.StatusCode, resp.TLS)
	}
	old := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MaxVersion: tls.VersionTLS12}}}
	if _, err := old.Get(g.URL + "/healthz"); err == nil {
		t.Fatal("a TLS 1.2 client was served with minimum version 1.3")
	}
	if resp, err := http.Get(strings.Replace(g.URL, "https://", "http://", 1) + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("plain HTTP was served on the HTTPS port")
		}
	}

	expiredDir := t.TempDir()
	ec, ek := ca.Issue(t, expiredDir, 2, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour))
	cfg := servertest.Config(t)
	cfg.TLS = config.TLS{CertFile: ec, KeyFile: ek, MinVersion: "1.2"}
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	if _, err := server.New(context.Background(), cfg, server.Overrides{}); err == nil || !strings.Contains(err.Error(), "expired at") {
		t.Fatalf("an expired certificate at start: %v", err)
	}
}
