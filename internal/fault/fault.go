// Package fault owns the typed errors that Gantry's domain returns and that callers
// branch on: invalid input (with a field path and, for files, file:line for every
// problem), not found, conflict (including a transition the workload lifecycle
// refuses), forbidden, unavailable, and an image refused by a supply-chain check.
// The HTTP layer maps them to status codes in one place; the CLI prints them.
package fault

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Field is one problem with one field of some input.
type Field struct {
	Path    string // dotted field path, e.g. spec.gpu.count.max or parameters[2].name
	Message string
	File    string // set for input read from a file
	Line    int    // 1-based; 0 when unknown
}

func (f Field) String() string {
	var b strings.Builder
	if f.File != "" {
		b.WriteString(f.File)
		if f.Line > 0 {
			fmt.Fprintf(&b, ":%d", f.Line)
		}
		b.WriteString(": ")
	} else if f.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", f.Line)
	}
	if f.Path != "" {
		b.WriteString(f.Path)
		b.WriteString(": ")
	}
	b.WriteString(f.Message)
	return b.String()
}

// Invalid reports every problem found in one piece of input at once.
type Invalid struct {
	Fields []Field
}

func (e *Invalid) Error() string {
	if len(e.Fields) == 1 {
		return "invalid input: " + e.Fields[0].String()
	}
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.String()
	}
	return fmt.Sprintf("invalid input (%d problems): %s", len(e.Fields), strings.Join(parts, "; "))
}

// Malformed says input cannot be read at all: it is not the shape any
// request takes (nested too deep, too many members, a key named twice). It
// is the client's error, answered before anything interprets the input.
type Malformed struct {
	Fields []Field
}

func (e *Malformed) Error() string { return "malformed input: " + (&Invalid{Fields: e.Fields}).Error() }

// List collects field problems; its zero value is ready to use.
type List struct {
	fields []Field
}

// Addf records a problem with the field at path.
func (l *List) Addf(path, format string, args ...any) {
	l.fields = append(l.fields, Field{Path: path, Message: fmt.Sprintf(format, args...)})
}

// Add records ready-made problems.
func (l *List) Add(fields ...Field) { l.fields = append(l.fields, fields...) }

// AddErr records err: the fields of an *Invalid (with prefix joined to their
// paths), or err's message for path.
func (l *List) AddErr(prefix string, err error) {
	var inv *Invalid
	if errors.As(err, &inv) {
		for _, f := range inv.Fields {
			f.Path = JoinPath(prefix, f.Path)
			l.fields = append(l.fields, f)
		}
		return
	}
	l.Addf(prefix, "%s", err.Error())
}

// Len is the number of problems recorded.
func (l *List) Len() int { return len(l.fields) }

// Err returns an *Invalid holding every recorded problem, sorted by file, line and
// path, or nil when there are none.
func (l *List) Err() error {
	if len(l.fields) == 0 {
		return nil
	}
	fs := append([]Field(nil), l.fields...)
	sort.SliceStable(fs, func(i, j int) bool {
		if fs[i].File != fs[j].File {
			return fs[i].File < fs[j].File
		}
		return fs[i].Line < fs[j].Line
	})
	return &Invalid{Fields: fs}
}

// JoinPath joins two dotted field paths; an index suffix such as "[2]" joins
// without a dot.
func JoinPath(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	case strings.HasPrefix(b, "["):
		return a + b
	}
	return a + "." + b
}

// NotFound says that the named object does not exist (or must look as if it did not).
type NotFound struct {
	Kind string
	Name string
	// Denied, when set, says that the object exists but the caller may not
	// see it: the answer is the same 404 (existence does not leak), the audit
	// log records the denial and this reason.
	Denied string
}

func (e *NotFound) Error() string { return fmt.Sprintf("%s %q not found", e.Kind, e.Name) }

// Conflict says that a change cannot be made in the object's current state.
type Conflict struct {
	Kind   string
	Name   string
	Reason string
}

func (e *Conflict) Error() string { return fmt.Sprintf("%s %q: %s", e.Kind, e.Name, e.Reason) }

// Forbidden says that the caller may see the object but not do this to it.
type Forbidden struct {
	Reason string
	// SecondFactor: the caller would be allowed after signing in again with
	// a second factor.
	SecondFactor bool
}

func (e *Forbidden) Error() string { return "forbidden: " + e.Reason }

// Unavailable says that a dependency (database, cluster) cannot serve the request now.
type Unavailable struct {
	What string
	Err  error
}

func (e *Unavailable) Error() string { return e.What + " unavailable: " + e.Err.Error() }
func (e *Unavailable) Unwrap() error { return e.Err }

// Stale says a change was made from a version of an object that is no
// longer the current one (If-Match): read it again.
type Stale struct {
	Kind string
	Name string
}

func (e *Stale) Error() string {
	return fmt.Sprintf("%s %q changed since the version this change was made from: read it again", e.Kind, e.Name)
}

// TooMany says the caller holds as many of something as it may, or the
// server does: try again after RetryAfter.
type TooMany struct {
	What       string
	RetryAfter time.Duration
}

func (e *TooMany) Error() string { return "too many: " + e.What }

// ImageRefused says that an image failed a supply-chain check (catalog, tag,
// resolve, signature, annotations, attestation), which one and why.
type ImageRefused struct {
	Image  string // catalog reference, name:tag
	Digest string // when resolved
	Check  string
	Reason string
}

func (e *ImageRefused) Error() string {
	at := ""
	if e.Digest != "" {
		at = " (" + e.Digest + ")"
	}
	return fmt.Sprintf("image %s%s refused by the %s check: %s", e.Image, at, e.Check, e.Reason)
}

// Merge reports decoding and semantic problems of one document together,
// leaving out semantic problems about fields that could not be decoded (they
// would only repeat them). Either may be nil.
func Merge(decode, semantic error) error {
	if decode == nil && semantic == nil {
		return nil
	}
	var errs List
	var bad []string
	if inv, ok := decode.(*Invalid); ok {
		errs.Add(inv.Fields...)
		for _, f := range inv.Fields {
			bad = append(bad, f.Path)
		}
	} else if decode != nil {
		return decode
	}
	if inv, ok := semantic.(*Invalid); ok {
		for _, f := range inv.Fields {
			if !related(f.Path, bad) {
				errs.Add(f)
			}
		}
	} else if semantic != nil {
		errs.AddErr("", semantic)
	}
	return errs.Err()
}

// related reports whether path is, contains or lies within one of paths.
func related(path string, paths []string) bool {
	for _, p := range paths {
		if p == path || within(path, p) || within(p, path) {
			return true
		}
	}
	return false
}

func within(path, parent string) bool {
	return parent == "" || strings.HasPrefix(path, parent+".") || strings.HasPrefix(path, parent+"[")
}
