// Package logctx owns the attributes a context carries into every log line
// written with it: the request id of an API request, the workload id of work
// on one workload. The server's slog handler adds them (Handler), so code
// deep in a request logs with its ids without passing them along. AtLeast
// quiets the handler libraries log through on their own.
package logctx

import (
	"context"
	"log/slog"
)

type key struct{}

// With returns ctx carrying attrs besides those it carries already.
func With(ctx context.Context, attrs ...slog.Attr) context.Context {
	prev, _ := ctx.Value(key{}).([]slog.Attr)
	all := make([]slog.Attr, 0, len(prev)+len(attrs))
	all = append(all, prev...)
	all = append(all, attrs...)
	return context.WithValue(ctx, key{}, all)
}

// Attrs are the attributes ctx carries.
func Attrs(ctx context.Context) []slog.Attr {
	a, _ := ctx.Value(key{}).([]slog.Attr)
	return a
}

// Handler wraps h: every record logged with a context gets that context's
// attributes. A handler wrapped already is returned as it is.
func Handler(h slog.Handler) slog.Handler {
	if _, ok := h.(handler); ok {
		return h
	}
	return handler{h}
}

type handler struct{ slog.Handler }

// Handle adds the context's attributes the record does not name itself.
func (h handler) Handle(ctx context.Context, r slog.Record) error {
	if a := Attrs(ctx); len(a) > 0 {
		r = r.Clone()
		for _, x := range a {
			named := false
			r.Attrs(func(y slog.Attr) bool { named = y.Key == x.Key; return !named })
			if !named {
				r.AddAttrs(x)
			}
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return handler{h.Handler.WithAttrs(attrs)}
}

func (h handler) WithGroup(name string) slog.Handler { return handler{h.Handler.WithGroup(name)} }

// AtLeast wraps h to drop records below level, whatever h itself passes.
func AtLeast(h slog.Handler, level slog.Level) slog.Handler { return atLeast{h, level} }

type atLeast struct {
	slog.Handler
	level slog.Level
}

func (h atLeast) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.level && h.Handler.Enabled(ctx, l)
}

func (h atLeast) WithAttrs(attrs []slog.Attr) slog.Handler {
	return atLeast{h.Handler.WithAttrs(attrs), h.level}
}

func (h atLeast) WithGroup(name string) slog.Handler {
	return atLeast{h.Handler.WithGroup(name), h.level}
}
