// Package tlsfiles owns TLS from files: a serving certificate and key read
// from PEM files (refused at start when unreadable, mismatched, expired or
// not yet valid), reloaded when the files change — a new pair that is bad
// or expired is refused and the one in force stays — and the TLS settings
// Gantry serves and dials with (minimum version, trusted CAs).
package tlsfiles

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Versions are the minimum versions that may be configured.
var Versions = map[string]uint16{"1.2": tls.VersionTLS12, "1.3": tls.VersionTLS13}

// Certificate is a serving certificate kept in step with its files.
type Certificate struct {
	certFile, keyFile string
	now               func() time.Time
	log               *slog.Logger

	mu      sync.RWMutex
	current *tls.Certificate
	stamp   string // the files' sizes and times when current was read
}

// Load reads the pair; now is the clock validity is checked against
// (required).
func Load(certFile, keyFile string, now func() time.Time, log *slog.Logger) (*Certificate, error) {
	if now == nil {
		return nil, errors.New("tlsfiles: a clock is required")
	}
	if log == nil {
		log = slog.Default()
	}
	c := &Certificate{certFile: certFile, keyFile: keyFile, now: now, log: log}
	cert, stamp, err := c.read()
	if err != nil {
		return nil, err
	}
	c.current, c.stamp = cert, stamp
	return c, nil
}

func (c *Certificate) read() (*tls.Certificate, string, error) {
	stamp := stampOf(c.certFile, c.keyFile)
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return nil, "", fmt.Errorf("tls: certificate %s and key %s: %w", c.certFile, c.keyFile, err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, "", fmt.Errorf("tls: certificate %s: %w", c.certFile, err)
	}
	now := c.now()
	switch {
	case now.After(leaf.NotAfter):
		return nil, "", fmt.Errorf("tls: certificate %s expired at %s", c.certFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return nil, "", fmt.Errorf("tls: certificate %s is not valid before %s", c.certFile, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	cert.Leaf = leaf
	return &cert, stamp, nil
}

func stampOf(files ...string) string {
	s := ""
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil {
			s += fmt.Sprintf("%s:%d:%d;", f, fi.Size(), fi.ModTime().UnixNano())
		}
	}
	return s
}

// ErrUnchanged says Reload found the files as they were.
var ErrUnchanged = errors.New("tls: certificate files unchanged")

// Reload reads the files again if they changed; a pair that fails is
// returned as the error and the certificate in force stays.
func (c *Certificate) Reload() error {
	c.mu.RLock()
	same := stampOf(c.certFile, c.keyFile) == c.stamp
	c.mu.RUnlock()
	if same {
		return ErrUnchanged
	}
	cert, stamp, err := c.read()
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.current, c.stamp = cert, stamp
	c.mu.Unlock()
	return nil
}

// Run reloads every interval until ctx ends, logging what changed.
func (c *Certificate) Run(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		switch err := c.Reload(); {
		case err == nil:
			c.log.Info("tls certificate reloaded", "file", c.certFile, "not_after", c.Leaf().NotAfter)
		case !errors.Is(err, ErrUnchanged):
			c.log.Error("tls certificate not reloaded; the one in force stays", "err", err)
		}
	}
}

// Leaf is the certificate in force.
func (c *Certificate) Leaf() *x509.Certificate {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.current.Leaf
}

// ServerConfig serves the certificate in force, at minVersion ("1.2" or
// "1.3") and above.
func (c *Certificate) ServerConfig(minVersion string) (*tls.Config, error) {
	v, ok := Versions[minVersion]
	if !ok {
		return nil, fmt.Errorf("tls: minimum version %q is not 1.2 or 1.3", minVersion)
	}
	return &tls.Config{MinVersion: v, NextProtos: []string{"h2", "http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			c.mu.RLock()
			defer c.mu.RUnlock()
			return c.current, nil
		}}, nil
}

// ClientConfig trusts the CA certificates in caFile (PEM) besides none
// other; empty: the system's.
func ClientConfig(caFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("tls: CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls: CA file %s holds no PEM certificate", caFile)
	}
	cfg.RootCAs = pool
	return cfg, nil
}
