// Package yamldoc owns strict decoding of YAML (and JSON, which is YAML) documents
// into Go structs: every unknown field, wrong type and syntax error is reported at
// once, each with its field path and line, and the line of every field is kept so
// that later semantic checks can point at the right line too.
package yamldoc

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/gantryhq/gantry/internal/fault"
)

// MaxFileSize bounds a document file (a template, an image catalog entry).
const MaxFileSize = 1 << 20

// ReadFile reads a document file of at most MaxFileSize bytes.
func ReadFile(path string) ([]byte, error) { return ReadFileMax(path, MaxFileSize) }

// MaxPolicyFileSize bounds the policy's files, which list people (ten
// thousand bindings are under a megabyte).
const MaxPolicyFileSize = 16 << 20

// ReadFileMax reads a file of at most max bytes, counting what it reads
// (a file's stated size can change, and a device or a pipe states none).
func ReadFileMax(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s: file is larger than %d bytes", path, max)
	}
	return data, nil
}

// Lines maps a dotted field path to the line it was read from.
type Lines map[string]int

// Line returns the line of path, or of its nearest ancestor that has one.
func (l Lines) Line(path string) int {
	for {
		if n, ok := l[path]; ok {
			return n
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			return l[""]
		}
		path = path[:i]
	}
}

// Locate fills in File and Line of every field problem in err (an *fault.Invalid)
// from these lines; other errors are returned as they are.
func (l Lines) Locate(file string, err error) error {
	var inv *fault.Invalid
	if !errors.As(err, &inv) {
		return err
	}
	var out fault.List
	for _, f := range inv.Fields {
		if f.Line == 0 {
			f.Line = l.Line(f.Path)
		}
		if f.File == "" {
			f.File = file
		}
		out.Add(f)
	}
	return out.Err()
}

var lineRE = regexp.MustCompile(`line (\d+)`)

// Header checks a document's apiVersion and kind against what its loader
// reads, adding a problem at each field that differs.
func Header(errs *fault.List, apiVersion, kind, wantAPIVersion, wantKind string) {
	if apiVersion != wantAPIVersion {
		errs.Addf("apiVersion", "must be %q", wantAPIVersion)
	}
	if kind != wantKind {
		errs.Addf("kind", "must be %q", wantKind)
	}
}

// Parse decodes one YAML document of file into a T and builds from it with
// build (which validates); build's problems carry file:line.
func Parse[T, R any](file string, data []byte, build func(T) (R, error)) (R, error) {
	var v T
	var zero R
	lines, err := Decode(file, data, &v)
	if err != nil {
		return zero, err
	}
	r, err := build(v)
	if err != nil {
		return zero, lines.Locate(file, err)
	}
	return r, nil
}

// Decode decodes one YAML document from data into v (a pointer to a struct whose
// fields carry json tags). Problems come back as an *fault.Invalid naming file.
func Decode(file string, data []byte, v any) (Lines, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if err == io.EOF {
			return nil, &fault.Invalid{Fields: []fault.Field{{File: file, Line: 1, Message: "empty document"}}}
		}
		return nil, syntaxError(file, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err != io.EOF {
		line := extra.Line
		if err != nil {
			return nil, syntaxError(file, err)
		}
		return nil, &fault.Invalid{Fields: []fault.Field{{File: file, Line: line, Message: "only one document per file is allowed"}}}
	}
	d := &decoder{lines: Lines{}}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	d.lines[""] = root.Line
	d.value(root, reflect.ValueOf(v).Elem(), "")
	for i := range d.errs {
		d.errs[i].File = file
	}
	var l fault.List
	l.Add(d.errs...)
	return d.lines, l.Err()
}

func syntaxError(file string, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := lineRE.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = strings.TrimSpace(strings.Replace(msg, m[0]+":", "", 1))
	}
	return &fault.Invalid{Fields: []fault.Field{{File: file, Line: line, Message: "malformed YAML: " + msg}}}
}

// MaxDepth bounds how deeply a document may nest mappings and lists (the
// parser's own bound is 10,000 levels; paths grow with depth).
const MaxDepth = 64

type decoder struct {
	lines Lines
	errs  []fault.Field
	depth int
}

func (d *decoder) fail(n *yaml.Node, path, format string, args ...any) {
	d.errs = append(d.errs, fault.Field{Path: path, Line: n.Line, Message: fmt.Sprintf(format, args...)})
}

var anyType = reflect.TypeOf((*any)(nil)).Elem()

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	switch n.Tag {
	case "!!int":
		return "an integer"
	case "!!float":
		return "a number"
	case "!!bool":
		return "a boolean"
	case "!!null":
		return "null"
	}
	return "a string"
}

func (d *decoder) value(n *yaml.Node, v reflect.Value, path string) {
	d.lines[path] = n.Line
	if d.depth++; d.depth > MaxDepth {
		d.fail(n, path, "nested deeper than %d levels, the most accepted", MaxDepth)
		d.depth--
		return
	}
	defer func() { d.depth-- }()
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		d.fail(n, path, "YAML anchors and aliases are not supported")
		return
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		v.Set(reflect.Zero(v.Type()))
		return
	}
	if v.Type() == anyType {
		d.anyScalar(n, v, path)
		return
	}
	if v.CanAddr() {
		if u, ok := v.Addr().Interface().(encoding.TextUnmarshaler); ok {
			// Types that parse their own text (durations, quantities).
			if n.Kind != yaml.ScalarNode {
				d.fail(n, path, "expected a single value, got %s", kindName(n))
				return
			}
			if err := u.UnmarshalText([]byte(n.Value)); err != nil {
				d.fail(n, path, "%v", err)
			}
			return
		}
	}
	switch v.Kind() {
	case reflect.Pointer:
		nv := reflect.New(v.Type().Elem())
		d.value(n, nv.Elem(), path)
		v.Set(nv)
	case reflect.Struct:
		d.structure(n, v, path)
	case reflect.Map:
		d.mapping(n, v, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.fail(n, path, "expected a list, got %s", kindName(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			d.value(item, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
		v.Set(s)
	case reflect.String:
		if n.Kind != yaml.ScalarNode || n.Tag == "!!bool" {
			d.fail(n, path, "expected a string, got %s", kindName(n))
			return
		}
		v.SetString(n.Value)
	case reflect.Int, reflect.Int32, reflect.Int64:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
			d.fail(n, path, "expected an integer, got %s", kindName(n))
			return
		}
		i, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
		if err != nil || v.OverflowInt(i) {
			d.fail(n, path, "integer %s is out of range", n.Value)
			return
		}
		v.SetInt(i)
	case reflect.Float64:
		if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") {
			d.fail(n, path, "expected a number, got %s", kindName(n))
			return
		}
		f, err := strconv.ParseFloat(n.Value, 64)
		if err != nil {
			d.fail(n, path, "%s is not a number", n.Value)
			return
		}
		v.SetFloat(f)
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			d.fail(n, path, "expected true or false, got %s", kindName(n))
			return
		}
		v.SetBool(n.Value == "true" || n.Value == "True" || n.Value == "TRUE")
	default:
		panic(fmt.Sprintf("yamldoc: unsupported field type %s at %s", v.Type(), path))
	}
}

// anyScalar stores a scalar as string, int64, float64 or bool according to its tag.
func (d *decoder) anyScalar(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.ScalarNode {
		d.fail(n, path, "expected a single value, got %s", kindName(n))
		return
	}
	var x any
	switch n.Tag {
	case "!!int":
		i, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
		if err != nil {
			d.fail(n, path, "integer %s is out of range", n.Value)
			return
		}
		x = i
	case "!!float":
		f, err := strconv.ParseFloat(n.Value, 64)
		if err != nil {
			d.fail(n, path, "%s is not a number", n.Value)
			return
		}
		x = f
	case "!!bool":
		x = n.Value == "true" || n.Value == "True" || n.Value == "TRUE"
	default:
		x = n.Value
	}
	v.Set(reflect.ValueOf(x))
}

func (d *decoder) mapping(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "expected a mapping, got %s", kindName(n))
		return
	}
	m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		p := fault.JoinPath(path, k.Value)
		if prev, dup := seen[k.Value]; dup {
			d.fail(k, p, "duplicate key (first at line %d)", prev)
			continue
		}
		seen[k.Value] = k.Line
		ev := reflect.New(v.Type().Elem()).Elem()
		d.value(val, ev, p)
		m.SetMapIndex(reflect.ValueOf(k.Value), ev)
	}
	v.Set(m)
}

func (d *decoder) structure(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "expected a mapping, got %s", kindName(n))
		return
	}
	fields := fieldsOf(v.Type())
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		p := fault.JoinPath(path, k.Value)
		idx, ok := fields[k.Value]
		if !ok {
			d.lines[p] = k.Line
			d.fail(k, p, "unknown field %q (allowed: %s)", k.Value, allowed(fields))
			continue
		}
		if prev, dup := seen[k.Value]; dup {
			d.fail(k, p, "duplicate key (first at line %d)", prev)
			continue
		}
		seen[k.Value] = k.Line
		d.value(val, v.Field(idx), p)
		d.lines[p] = k.Line
	}
}

// fieldsOf maps json names to field indexes.
func fieldsOf(t reflect.Type) map[string]int {
	m := map[string]int{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = i
	}
	return m
}

func allowed(fields map[string]int) string {
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
