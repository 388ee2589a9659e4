package yamldoc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/internal/fault"
)

type inner struct {
	N    int               `json:"n"`
	F    float64           `json:"f,omitempty"`
	Tags map[string]string `json:"tags,omitempty"`
}

type doc struct {
	Name  string  `json:"name"`
	On    bool    `json:"on"`
	Items []inner `json:"items"`
	Ptr   *inner  `json:"ptr,omitempty"`
	Any   any     `json:"any,omitempty"`
}

func TestDecode(t *testing.T) {
	tests := []struct {
		name, in string
		want     []string // "line: path: message fragment"; none means success
	}{
		{"ok", "name: a\non: true\nitems:\n  - {n: 1, f: 2.5, tags: {a: b}}\nptr: {n: 3}\nany: 7\n", nil},
		{"json", `{"name": "a", "items": [{"n": 1}]}`, nil},
		{"every problem", "name: [x]\non: maybe\nitems:\n  - n: one\n    extra: 1\nptr: 3\n",
			[]string{"1: name: expected a string, got a list", "2: on: expected true or false", "4: items[0].n: expected an integer",
				`5: items[0].extra: unknown field "extra" (allowed: f, n, tags)`, "6: ptr: expected a mapping, got an integer"}},
		{"duplicate", "name: a\nname: b\n", []string{"2: name: duplicate key (first at line 1)"}},
		{"overflow", "items:\n  - n: 99999999999999999999999\n", []string{"2: items[0].n: expected an integer, got a number"}},
		{"any must be scalar", "any: [1]\n", []string{"1: any: expected a single value"}},
		{"alias", "ptr: &a {n: 1}\nitems: [*a]\n", []string{"1: ptr: YAML anchors and aliases are not supported"}},
		{"two documents", "name: a\n---\nname: b\n", []string{"2: only one document per file"}},
		{"empty", "", []string{"1: empty document"}},
		{"syntax", "name: a\n  b: c\n", []string{"2: malformed YAML: mapping values are not allowed"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var d doc
			_, err := Decode("f.yaml", []byte(tc.in), &d)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var inv *fault.Invalid
			if !errors.As(err, &inv) {
				t.Fatalf("err = %v", err)
			}
			var got []string
			for _, f := range inv.Fields {
				got = append(got, f.String())
			}
			all := strings.Join(got, "\n")
			for _, w := range tc.want {
				if !strings.Contains(all, "f.yaml:"+w) {
					t.Errorf("missing %q in\n%s", w, all)
				}
			}
		})
	}
}

func TestLines(t *testing.T) {
	var d doc
	lines, err := Decode("f.yaml", []byte("name: a\nitems:\n  - n: 1\n  - n: 2\n    tags:\n      x: y\n"), &d)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]int{"items[1].n": 4, "items[1].tags.x": 6, "items[1].tags.nothing": 5, "name": 1, "nowhere": 1} {
		if got := lines.Line(path); got != want {
			t.Errorf("Line(%s) = %d, want %d", path, got, want)
		}
	}
}

// FuzzDecode: no input panics the decoder, and every problem has a message.
func FuzzDecode(f *testing.F) {
	f.Add([]byte("name: a\non: true\nitems:\n  - {n: 1, tags: {a: b}}\n"))
	f.Add([]byte(`{"items": [{"n": 1e400}], "any": null}`))
	f.Add([]byte("a: &x [*x]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var d doc
		_, err := Decode("f.yaml", data, &d)
		if err == nil {
			return
		}
		var inv *fault.Invalid
		if !errors.As(err, &inv) {
			t.Fatalf("not a field list: %v", err)
		}
		for _, fl := range inv.Fields {
			if fl.Message == "" {
				t.Fatalf("empty message: %+v", fl)
			}
		}
	})
}

// tree nests itself, as no document type does today: the depth bound holds
// whatever a type allows.
type tree struct {
	Kids []tree            `json:"kids"`
	Tags map[string]string `json:"tags"`
}

// TestDeepAndWideDocuments: a document nested past MaxDepth is refused at
// the level that passes it (not 5,000 levels of paths later), and the
// parser's own deep and wide shapes end in an error, not a crash.
func TestDeepAndWideDocuments(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"deep lists of a recursive type", "kids: " + strings.Repeat("[{kids: ", 4000) + "[]" + strings.Repeat("}]", 4000), "nested deeper than 64 levels"},
		{"deep flow past the parser's bound", "kids: " + strings.Repeat("[", 20000), "malformed YAML"},
		{"a wide mapping of scalars", "tags: {" + strings.Repeat("k: v, ", 1) + wideKeys(50000) + "}", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v tree
			_, err := Decode("f.yaml", []byte(tc.doc), &v)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("%v, want %q", err, tc.want)
			}
		})
	}
}

func wideKeys(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "k%d: v, ", i)
	}
	return b.String()
}

// TestHeader: a document of another apiVersion or kind is refused at each
// field that differs, and one of the loader's own passes.
func TestHeader(t *testing.T) {
	for _, tc := range []struct {
		api, kind string
		want      []string
	}{
		{"gantry.dev/v1alpha1", "ClusterList", nil},
		{"gantry.dev/v1", "ClusterList", []string{"apiVersion"}},
		{"gantry.dev/v1alpha1", "GPUClassList", []string{"kind"}},
		{"", "", []string{"apiVersion", "kind"}},
	} {
		var errs fault.List
		Header(&errs, tc.api, tc.kind, "gantry.dev/v1alpha1", "ClusterList")
		var got []string
		var inv *fault.Invalid
		if errors.As(errs.Err(), &inv) {
			for _, f := range inv.Fields {
				got = append(got, f.Path)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%q %q: problems at %v, want %v", tc.api, tc.kind, got, tc.want)
		}
	}
}

// TestReadFileMax: a file is read up to its bound and refused past it,
// counting what is read — a device that states no size (/dev/zero, which
// never ends) included.
func TestReadFileMax(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.yaml")
	if err := os.WriteFile(path, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	if data, err := ReadFileMax(path, 10); err != nil || string(data) != "0123456789" {
		t.Fatalf("at its bound: %q %v", data, err)
	}
	if _, err := ReadFileMax(path, 9); err == nil || !strings.Contains(err.Error(), "larger than 9 bytes") {
		t.Fatalf("past its bound: %v", err)
	}
	if _, err := ReadFileMax("/dev/zero", 1<<10); err == nil {
		t.Fatal("/dev/zero read whole")
	}
}
