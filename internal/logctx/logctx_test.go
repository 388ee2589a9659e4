package logctx_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/gantryhq/gantry/internal/logctx"
)

func TestContextAttributesReachEveryLine(t *testing.T) {
	var b bytes.Buffer
	log := slog.New(logctx.Handler(slog.NewJSONHandler(&b, nil))).With("component", "test")
	ctx := logctx.With(context.Background(), slog.String("request_id", "r1"))
	ctx = logctx.With(ctx, slog.String("workload_id", "w1"))
	log.InfoContext(ctx, "launched", "team", "vision")
	log.Info("no context")
	log.InfoContext(ctx, "named", "workload_id", "w1") // not twice
	lines := bytes.Split(bytes.TrimSpace(b.Bytes()), []byte("\n"))
	if len(lines) != 3 || bytes.Count(lines[2], []byte("workload_id")) != 1 {
		t.Fatalf("%d lines", len(lines))
	}
	var first, second map[string]any
	json.Unmarshal(lines[0], &first)
	json.Unmarshal(lines[1], &second)
	if first["request_id"] != "r1" || first["workload_id"] != "w1" || first["team"] != "vision" || first["component"] != "test" {
		t.Errorf("with the context: %s", lines[0])
	}
	if _, ok := second["request_id"]; ok {
		t.Errorf("without a context: %s", lines[1])
	}
	// A context's attributes are its own: the parent's are not changed.
	if a := logctx.Attrs(logctx.With(context.Background(), slog.Int("n", 1))); len(a) != 1 {
		t.Errorf("attrs %v", a)
	}
}

func TestAtLeast(t *testing.T) {
	var b bytes.Buffer
	log := slog.New(logctx.AtLeast(slog.NewTextHandler(&b, nil), slog.LevelWarn)).With("lib", "oidc")
	log.Info("request error", "oidc_error", "authorization_pending")
	log.Warn("kept")
	if got := b.String(); bytes.Contains(b.Bytes(), []byte("authorization_pending")) || !bytes.Contains(b.Bytes(), []byte("kept")) {
		t.Errorf("logged %q", got)
	}
}
