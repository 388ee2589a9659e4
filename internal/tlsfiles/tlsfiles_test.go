package tlsfiles_test

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/tlsfiles"
	"github.com/gantryhq/gantry/internal/tlsfiles/tlstest"
)

// serve serves TLS with cert at minVersion; the answer names nothing.
func serve(t *testing.T, cert *tlsfiles.Certificate, minVersion string) string {
	t.Helper()
	cfg, err := cert.ServerConfig(minVersion)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// handshake connects trusting only the test CA and returns the serial of
// the certificate the server presented.
func handshake(t *testing.T, addr string, roots *x509.CertPool, maxVersion uint16) (int64, uint16, error) {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, MaxVersion: maxVersion})
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	st := conn.ConnectionState()
	return st.PeerCertificates[0].SerialNumber.Int64(), st.Version, nil
}

func TestServeRotateAndRefuse(t *testing.T) {
	authority := tlstest.NewCA(t)
	roots := authority.Pool()
	dir := t.TempDir()
	now := time.Now()
	certFile, keyFile := authority.Issue(t, dir, 1, now.Add(-time.Hour), now.Add(time.Hour))
	cert, err := tlsfiles.Load(certFile, keyFile, time.Now, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, cert, "1.2")
	if serial, v, err := handshake(t, addr, roots, 0); err != nil || serial != 1 || v != tls.VersionTLS13 {
		t.Fatalf("handshake: serial %d, version %x, %v", serial, v, err)
	}
	if err := cert.Reload(); err != tlsfiles.ErrUnchanged {
		t.Fatalf("reload of unchanged files: %v", err)
	}
	// Rotated: new handshakes get the new certificate.
	authority.Issue(t, dir, 2, now.Add(-time.Hour), now.Add(2*time.Hour))
	if err := cert.Reload(); err != nil {
		t.Fatal(err)
	}
	if serial, _, err := handshake(t, addr, roots, 0); err != nil || serial != 2 {
		t.Fatalf("after rotation: serial %d, %v; want 2", serial, err)
	}
	// Rotated to an expired one: refused, the one in force stays.
	authority.Issue(t, dir, 3, now.Add(-2*time.Hour), now.Add(-time.Hour))
	if err := cert.Reload(); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("reload of an expired certificate: %v", err)
	}
	if serial, _, err := handshake(t, addr, roots, 0); err != nil || serial != 2 {
		t.Fatalf("after a refused rotation: serial %d, %v; want 2", serial, err)
	}
	// A client that does not trust the CA is refused by the handshake.
	if _, _, err := handshake(t, addr, x509.NewCertPool(), 0); err == nil {
		t.Fatal("a client without the CA completed the handshake")
	}
}

func TestLoadRefuses(t *testing.T) {
	authority := tlstest.NewCA(t)
	now := time.Now()
	for _, tc := range []struct {
		name string
		make func(dir string) (string, string)
		want string
	}{
		{"expired", func(dir string) (string, string) {
			return authority.Issue(t, dir, 1, now.Add(-2*time.Hour), now.Add(-time.Hour))
		}, "expired at"},
		{"not yet valid", func(dir string) (string, string) {
			return authority.Issue(t, dir, 1, now.Add(time.Hour), now.Add(2*time.Hour))
		}, "not valid before"},
		{"key of another certificate", func(dir string) (string, string) {
			c, _ := authority.Issue(t, dir, 1, now.Add(-time.Hour), now.Add(time.Hour))
			other := t.TempDir()
			_, k := authority.Issue(t, other, 2, now.Add(-time.Hour), now.Add(time.Hour))
			return c, k
		}, "private key does not match"},
		{"missing file", func(dir string) (string, string) {
			return filepath.Join(dir, "none.crt"), filepath.Join(dir, "none.key")
		}, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, k := tc.make(t.TempDir())
			if _, err := tlsfiles.Load(c, k, time.Now, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want %q", err, tc.want)
			}
		})
	}
}

func TestMinimumVersion(t *testing.T) {
	authority := tlstest.NewCA(t)
	roots := authority.Pool()
	now := time.Now()
	c, k := authority.Issue(t, t.TempDir(), 1, now.Add(-time.Hour), now.Add(time.Hour))
	cert, err := tlsfiles.Load(c, k, time.Now, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cert.ServerConfig("1.1"); err == nil {
		t.Fatal("TLS 1.1 accepted as a minimum")
	}
	addr := serve(t, cert, "1.3")
	if _, _, err := handshake(t, addr, roots, tls.VersionTLS12); err == nil {
		t.Fatal("a TLS 1.2 client completed a handshake with a 1.3 minimum")
	}
	if _, v, err := handshake(t, addr, roots, 0); err != nil || v != tls.VersionTLS13 {
		t.Fatalf("TLS 1.3: %x %v", v, err)
	}
}

func TestClientConfig(t *testing.T) {
	authority := tlstest.NewCA(t)
	f := filepath.Join(t.TempDir(), "ca.crt")
	os.WriteFile(f, authority.PEM, 0o600)
	if cfg, err := tlsfiles.ClientConfig(f); err != nil || cfg.RootCAs == nil {
		t.Fatalf("%v %v", cfg, err)
	}
	bad := filepath.Join(t.TempDir(), "bad.crt")
	os.WriteFile(bad, []byte("not pem"), 0o600)
	if _, err := tlsfiles.ClientConfig(bad); err == nil {
		t.Fatal("a CA file without certificates was accepted")
	}
}
