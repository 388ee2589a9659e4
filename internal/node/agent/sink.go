package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/gantryhq/gantry/internal/telemetry"
	"github.com/gantryhq/gantry/internal/tlsfiles"
)

// HTTPSink pushes batches to Gantry's telemetry endpoint with the agent's
// projected ServiceAccount token, read from TokenFile at every push (the
// kubelet rotates it).
type HTTPSink struct {
	URL       string // Gantry's base URL
	TokenFile string
	Client    *http.Client // default: a client with a 30 s timeout
}

// NewHTTPSink pushes to Gantry at url with the token in tokenFile; an
// https:// URL's certificate must chain to the CAs in caFile (empty: the
// system's). Anything but http:// and https:// is refused.
func NewHTTPSink(url, tokenFile, caFile string) (*HTTPSink, error) {
	if !strings.HasPrefix(url, "https://") && !strings.HasPrefix(url, "http://") {
		return nil, fmt.Errorf("gantry URL %q: want https://host[:port] (or http:// on a trusted network)", url)
	}
	tc, err := tlsfiles.ClientConfig(caFile)
	if err != nil {
		return nil, err
	}
	return &HTTPSink{URL: url, TokenFile: tokenFile, Client: &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{TLSClientConfig: tc, Proxy: http.ProxyFromEnvironment, IdleConnTimeout: 90 * time.Second}}}, nil
}

// Push implements Sink. A 4xx is a *PermanentError (the agent drops the
// batch and counts it) except 429 (slow down) and 401/403: the token is
// re-read at every push, so a refusal while the kubelet rotates it, or
// before Gantry's TokenReview cache catches up, heals itself; dropping the
// batch would lose readings for nothing (a token that stays refused fills the
// buffer, which then drops and counts the oldest). Unreachable, 5xx and 429
// are retried.
func (s *HTTPSink) Push(ctx context.Context, b telemetry.Batch) error {
	token, err := os.ReadFile(s.TokenFile)
	if err != nil {
		return fmt.Errorf("read the agent's token: %w", err)
	}
	body, err := json.Marshal(b)
	if err != nil {
		return &PermanentError{fmt.Errorf("encode the batch: %w", err)}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(s.URL, "/")+"/api/v1/telemetry", bytes.NewReader(body))
	if err != nil {
		return &PermanentError{err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	client := s.Client
	if client == nil {
		client = &http.Client{Timeout: 30 * time.Second}
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("push to %s: %w", s.URL, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	switch {
	case resp.StatusCode < 300:
		return nil
	case resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests &&
		resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden:
		return &PermanentError{fmt.Errorf("refused by Gantry: %d %s", resp.StatusCode, msg)}
	}
	return fmt.Errorf("push to %s: %d %s", s.URL, resp.StatusCode, msg)
}
