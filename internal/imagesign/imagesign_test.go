package imagesign

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
)

// TestParseKey: an EC key in either PEM form is read; an RSA key, another
// block or no PEM at all is refused, saying what is needed.
func TestParseKey(t *testing.T) {
	k, _ := GenerateKey()
	ec, _ := x509.MarshalECPrivateKey(k)
	p8, _ := x509.MarshalPKCS8PrivateKey(k)
	r, _ := rsa.GenerateKey(rand.Reader, 1024)
	rsa8, _ := x509.MarshalPKCS8PrivateKey(r)
	for _, tc := range []struct {
		name, pemType string
		der           []byte
		err           string
	}{
		{"EC", "EC PRIVATE KEY", ec, ""},
		{"PKCS8", "PRIVATE KEY", p8, ""},
		{"RSA", "PRIVATE KEY", rsa8, "an ECDSA key is needed"},
		{"cosign's encrypted", "ENCRYPTED SIGSTORE PRIVATE KEY", ec, "unencrypted"},
	} {
		got, err := ParseKey(pem.EncodeToMemory(&pem.Block{Type: tc.pemType, Bytes: tc.der}))
		switch {
		case tc.err == "" && (err != nil || !got.Equal(k)):
			t.Errorf("%s: %v", tc.name, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
	}
	if _, err := ParseKey([]byte("not pem")); err == nil {
		t.Error("not PEM: accepted")
	}
}
