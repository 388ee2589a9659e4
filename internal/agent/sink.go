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
)

// HTTPSink pushes batches to Gantry's telemetry endpoint with the agent's
// projected ServiceAccount token, read from TokenFile at every push (the
// kubelet rotates it).
type HTTPSink struct {
	URL       string // Gantry's base URL
	TokenFile string
	Client    *http.Client // default: a client with a 30 s timeout
}

// Push implements Sink. Gantry refusing the batch itself (400, 413, 422) is
// a *PermanentError; anything else (unreachable, 401/403 while a token
// rotates, 429, 5xx) is worth retrying.
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
	case resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusRequestEntityTooLarge || resp.StatusCode == http.StatusUnprocessableEntity:
		return &PermanentError{fmt.Errorf("refused by Gantry: %d %s", resp.StatusCode, msg)}
	}
	return fmt.Errorf("push to %s: %d %s", s.URL, resp.StatusCode, msg)
}
