package audit

import (
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// KeyID names a checkpoint key: the first 16 hex digits of the SHA-256 of the
// raw public key.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// LoadPrivateKey reads an ed25519 private key (PEM, PKCS #8) from path. A file
// every user may read is refused: the key is what makes checkpoints worth
// anything.
func LoadPrivateKey(path string) (ed25519.PrivateKey, error) {
	blk, err := readPEM(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint key: %w", err)
	}
	if blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("checkpoint key %s holds a %q, not a PKCS #8 \"PRIVATE KEY\" (make one with gantry audit keygen)", path, blk.Type)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint key: %w", err)
	}
	if fi.Mode().Perm()&0o004 != 0 {
		return nil, fmt.Errorf("checkpoint key %s is readable by every user (mode %04o): chmod 600 it (for a Kubernetes Secret volume, defaultMode: 0400)", path, fi.Mode().Perm())
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("checkpoint key %s: %w", path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("checkpoint key %s is a %s key, not ed25519 (make one with gantry audit keygen)", path, keyKind(k))
	}
	return priv, nil
}

// LoadPublicKey reads an ed25519 public key (PEM, PKIX) from path.
func LoadPublicKey(path string) (ed25519.PublicKey, error) {
	blk, err := readPEM(path)
	if err != nil {
		return nil, err
	}
	if blk.Type != "PUBLIC KEY" {
		return nil, fmt.Errorf("%s holds a %q, not a \"PUBLIC KEY\" (give the .pub file gantry audit keygen wrote)", path, blk.Type)
	}
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("%s is a %s public key, not ed25519", path, keyKind(k))
	}
	return pub, nil
}

func readPEM(path string) (*pem.Block, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("%s is not a PEM file", path)
	}
	return blk, nil
}

func keyKind(k any) string {
	switch k.(type) {
	case *rsa.PrivateKey, *rsa.PublicKey:
		return "RSA"
	case *ecdsa.PrivateKey, *ecdsa.PublicKey:
		return "ECDSA"
	case *ecdh.PrivateKey, *ecdh.PublicKey:
		return "ECDH"
	}
	return fmt.Sprintf("%T", k)
}

// GenerateKeyFiles makes a checkpoint key pair: prefix.key (the private key,
// PKCS #8 PEM, mode 0600) and prefix.pub (the public key, PKIX PEM). Existing
// files are never overwritten.
func GenerateKeyFiles(prefix string) (ed25519.PublicKey, error) {
	pub, privPEM, pubPEM, err := newKeyPEM()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(prefix), 0o700); err != nil {
		return nil, err
	}
	if err := writeNew(prefix+".pub", pubPEM, 0o644); err != nil {
		return nil, err
	}
	if err := writeNew(prefix+".key", privPEM, 0o600); err != nil {
		os.Remove(prefix + ".pub")
		return nil, err
	}
	return pub, nil
}

// EnsureKeyFiles makes the key pair at prefix unless prefix.key exists, and
// (re)writes prefix.pub from it; safe when several processes race to make it.
// For development keys.
func EnsureKeyFiles(prefix string) (ed25519.PrivateKey, error) {
	if _, err := os.Stat(prefix + ".key"); errors.Is(err, os.ErrNotExist) {
		_, privPEM, _, err := newKeyPEM()
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Dir(prefix), 0o700); err != nil {
			return nil, err
		}
		// Written aside, then linked into place: the first process to
		// link wins, and nobody reads a half-written key.
		tmp, err := os.CreateTemp(filepath.Dir(prefix), ".checkpoint-key-*")
		if err != nil {
			return nil, err
		}
		_, err = tmp.Write(privPEM)
		err = errors.Join(err, tmp.Close())
		if err == nil {
			if err = os.Link(tmp.Name(), prefix+".key"); errors.Is(err, os.ErrExist) {
				err = nil
			}
		}
		os.Remove(tmp.Name())
		if err != nil {
			return nil, err
		}
	}
	priv, err := LoadPrivateKey(prefix + ".key")
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKIXPublicKey(priv.Public())
	if err != nil {
		return nil, err
	}
	tmp := fmt.Sprintf("%s.pub.%d", prefix, os.Getpid())
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644); err != nil {
		return nil, err
	}
	return priv, os.Rename(tmp, prefix+".pub")
}

// newKeyPEM makes an ed25519 key pair, PEM-encoded.
func newKeyPEM() (pub ed25519.PublicKey, privPEM, pubPEM []byte, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	privDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, nil, nil, err
	}
	return pub, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER}), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), nil
}

// writeNew writes a file that must not exist yet.
func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s exists already: not overwritten", path)
		}
		return err
	}
	_, err = f.Write(data)
	return errors.Join(err, f.Close())
}
