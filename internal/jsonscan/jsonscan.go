// Package jsonscan owns the one pass every JSON document a person sends takes
// before anything decodes it: a streaming walk over its tokens that refuses a
// document nested deeper, or holding more members, than a limit, or naming a
// key twice in one object, in time and memory linear in its size. Paths are
// built only for the error it returns, and the caller's context is honoured.
package jsonscan

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/gantryhq/gantry/internal/fault"
)

// Limits bound a document's shape. Zero fields take Default's.
type Limits struct {
	// Depth is the deepest nesting of objects and arrays accepted.
	Depth int
	// Members is the most members (keys and elements) one object or array
	// may hold.
	Members int
	// Values is the most values (scalars, objects and arrays) in the whole
	// document.
	Values int
}

// Default is what Gantry's API accepts: deeper than any request of its spec
// (the deepest is a template document, about 8 levels), wider than a
// telemetry batch of a full node.
var Default = Limits{Depth: 64, Members: 50_000, Values: 2_000_000}

func (l Limits) withDefaults() Limits {
	if l.Depth <= 0 {
		l.Depth = Default.Depth
	}
	if l.Members <= 0 {
		l.Members = Default.Members
	}
	if l.Values <= 0 {
		l.Values = Default.Values
	}
	return l
}

// ErrNotJSON says the document is not well-formed JSON; callers that leave
// syntax to a later decoder may ignore it.
var ErrNotJSON = errors.New("not well-formed JSON")

// frame is one open object or array.
type frame struct {
	object  bool
	members int
	key     string          // the member being read, in an object
	pending bool            // a key is read and its value is not yet
	seen    map[string]bool // keys so far, in an object
}

// Check walks data once. It returns nil for a well-formed document within
// limits; a *fault.Malformed naming the field path and the limit past which
// it goes; a *fault.Invalid naming a key that appears twice in one object; an error wrapping ErrNotJSON for a document that
// is not JSON; or the context's error.
func Check(ctx context.Context, data []byte, lim Limits) error {
	return CheckReader(ctx, bytes.NewReader(data), lim)
}

// CheckReader is Check over a reader.
func CheckReader(ctx context.Context, r io.Reader, lim Limits) error {
	lim = lim.withDefaults()
	dec := json.NewDecoder(r)
	dec.UseNumber() // numbers are not parsed, only delimited
	var stack []frame
	values := 0
	for n := 0; ; n++ {
		if n&1023 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("%w: %v", ErrNotJSON, err)
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				return end(dec)
			}
			if top := &stack[len(stack)-1]; top.object {
				top.pending = false // its value is read: a key comes next
			}
			continue
		}
		// In an object with no value pending, the token is a key.
		if top := len(stack) - 1; top >= 0 && stack[top].object && !stack[top].pending {
			f := &stack[top]
			key, _ := tok.(string)
			f.key, f.pending = key, true
			if f.seen[key] {
				// Not malformed but ambiguous: refused as template files
				// refuse it, with the key's path.
				return &fault.Invalid{Fields: []fault.Field{{Path: path(stack), Message: "appears twice in the same object"}}}
			}
			if f.members++; f.members > lim.Members {
				return malformed(stack[:top], fmt.Sprintf("holds more than %d members, the most one object may have", lim.Members))
			}
			f.seen[key] = true
			continue
		}
		// A value.
		if top := len(stack) - 1; top >= 0 && !stack[top].object {
			stack[top].members++
			if stack[top].members > lim.Members {
				return malformed(stack[:top], fmt.Sprintf("holds more than %d members, the most one array may have", lim.Members))
			}
		}
		values++
		if values > lim.Values {
			return malformed(stack, fmt.Sprintf("the document holds more than %d values, the most accepted", lim.Values))
		}
		if d, ok := tok.(json.Delim); ok {
			if len(stack) >= lim.Depth {
				return malformed(stack, fmt.Sprintf("nested deeper than %d levels, the most accepted", lim.Depth))
			}
			f := frame{object: d == '{'}
			if f.object {
				f.seen = map[string]bool{}
			}
			stack = append(stack, f)
			continue
		}
		if len(stack) == 0 {
			return end(dec)
		}
		if stack[len(stack)-1].object {
			stack[len(stack)-1].pending = false // the value is read: a key comes next
		}
	}
}

// end checks that nothing follows the top-level value.
func end(dec *json.Decoder) error {
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: data after the top-level value", ErrNotJSON)
	}
	return nil
}

// malformed builds the error for the value being read in stack.
func malformed(stack []frame, msg string) error {
	return &fault.Malformed{Fields: []fault.Field{{Path: path(stack), Message: msg}}}
}

// path renders the field path of the member being read in each frame, as
// fault's paths read: a.b[2].c. Only a refused document pays for it.
func path(stack []frame) string {
	var b strings.Builder
	for _, f := range stack {
		if f.object {
			if !f.pending {
				continue
			}
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(f.key)
			continue
		}
		if f.members == 0 {
			continue
		}
		b.WriteByte('[')
		b.WriteString(strconv.Itoa(f.members - 1))
		b.WriteByte(']')
	}
	return b.String()
}
