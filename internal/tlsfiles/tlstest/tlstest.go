// Package tlstest makes certificates for tests: a certificate authority and
// serving certificates it signs — for 127.0.0.1 and localhost, written as the
// PEM files a Secret's projection holds, or for any hosts, in memory.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a test certificate authority.
type CA struct {
	Cert *x509.Certificate
	PEM  []byte
	key  *ecdsa.PrivateKey
}

// NewCA makes a CA valid for a day around now.
func NewCA(t testing.TB) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gantry test CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Pool trusts the CA alone.
func (c *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.Cert)
	return p
}

// WriteCA writes the CA's certificate to dir/ca.crt.
func (c *CA) WriteCA(t testing.TB, dir string) string {
	t.Helper()
	f := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(f, c.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// Issue writes a certificate for 127.0.0.1 and localhost valid from
// notBefore to notAfter, and its key, to dir/tls.crt and dir/tls.key
// (replaced whole, as a Secret's projection rotates them); serial tells
// certificates apart.
func (c *CA) Issue(t testing.TB, dir string, serial int64, notBefore, notAfter time.Time) (certFile, keyFile string) {
	t.Helper()
	der, key := c.leaf(t, serial, []string{"127.0.0.1", "localhost"}, notBefore, notAfter)
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	write := func(path string, data []byte) {
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
		// A new modification time even within the file system's resolution.
		later := time.Now().Add(time.Duration(serial) * time.Second)
		os.Chtimes(path, later, later)
	}
	write(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	write(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}))
	return certFile, keyFile
}

// Serving is a serving certificate, in memory, for hosts (IP addresses or
// DNS names), valid for a day around now.
func (c *CA) Serving(t testing.TB, hosts ...string) tls.Certificate {
	t.Helper()
	der, key := c.leaf(t, 2, hosts, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// leaf signs a serving certificate for hosts and returns it (DER) and its key.
func (c *CA) leaf(t testing.TB, serial int64, hosts []string, notBefore, notAfter time.Time) ([]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "gantry"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature, NotBefore: notBefore, NotAfter: notAfter}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.Cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}
