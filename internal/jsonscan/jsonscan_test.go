package jsonscan_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/jsonscan"
)

func nested(open, close string, depth int) string {
	return strings.Repeat(open, depth) + strings.Repeat(close, depth)
}

func TestCheck(t *testing.T) {
	small := jsonscan.Limits{Depth: 4, Members: 3, Values: 10}
	for _, tc := range []struct {
		name string
		doc  string
		lim  jsonscan.Limits
		want string // "" ok; "not json"; else "malformed|invalid path: message part"
	}{
		{"scalar", `1`, small, ""},
		{"string", `"a"`, small, ""},
		{"empty object", `{}`, small, ""},
		{"launch", `{"template":"t","team":"vision","gpu":{"class":"H100-80GB","count":1}}`, small, ""},
		{"empty key then string value", `{"":"x","a":"y"}`, small, ""},
		{"string values equal to keys", `{"a":"a","b":"a"}`, small, ""},
		{"duplicate at top", `{"a":1,"a":2}`, small, "invalid a: appears twice"},
		{"duplicate nested", `{"p":{"epochs":1,"epochs":9}}`, small, "invalid p.epochs: appears twice"},
		{"duplicate in array element", `{"x":[{"k":1},{"k":1,"k":2}]}`, small, "invalid x[1].k: appears twice"},
		{"duplicate after nested value", `{"a":{"b":1},"a":2}`, small, "invalid a: appears twice"},
		{"same key in sibling objects", `[{"a":1},{"a":1}]`, small, ""},
		{"depth at the limit", nested("[", "]", 4), small, ""},
		{"depth past the limit", nested("[", "]", 5), small, "malformed [0][0][0][0]: nested deeper than 4"},
		{"objects past the limit", `{"a":{"b":{"c":{"d":{}}}}}`, small, "malformed a.b.c.d: nested deeper than 4"},
		{"object members at the limit", `{"a":1,"b":2,"c":3}`, small, ""},
		{"object members past the limit", `{"o":{"a":1,"b":2,"c":3,"d":4}}`, small, "malformed o: holds more than 3 members"},
		{"array members past the limit", `{"o":[1,2,3,4]}`, small, "malformed o: holds more than 3 members"},
		{"values past the limit", `[[1,2,3],[1,2,3],[1,2,3]]`, small, "malformed [2][0]: the document holds more than 10 values"},
		{"not json", `{"a":`, small, "not json"},
		{"trailing data", `{} {}`, small, "not json"},
		{"empty", ``, small, "not json"},
		{"default limits take 64 levels", `{"a":` + nested("[", "]", 63) + `}`, jsonscan.Limits{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := jsonscan.Check(context.Background(), []byte(tc.doc), tc.lim)
			got := describe(err)
			if tc.want == "" && err != nil || tc.want != "" && !strings.HasPrefix(got, tc.want) {
				t.Errorf("Check(%s) = %q, want %q", tc.doc, got, tc.want)
			}
		})
	}
}

func describe(err error) string {
	var mal *fault.Malformed
	var inv *fault.Invalid
	switch {
	case err == nil:
		return ""
	case errors.Is(err, jsonscan.ErrNotJSON):
		return "not json"
	case errors.As(err, &mal):
		return "malformed " + mal.Fields[0].Path + ": " + mal.Fields[0].Message
	case errors.As(err, &inv):
		return "invalid " + inv.Fields[0].Path + ": " + inv.Fields[0].Message
	}
	return "other: " + err.Error()
}

// TestDeepDocumentsAreRefusedAtTheLimit: the bodies of the outside probe
// (arrays nested 60,000 and 100,000 deep, objects as deep) are refused at the
// 65th level, naming it, having read only that far.
func TestDeepDocumentsAreRefusedAtTheLimit(t *testing.T) {
	for _, doc := range []string{
		`{"team":"vision","gpu":` + nested("[", "]", 60_000) + `}`,
		nested("[", "]", 100_000),
		strings.Repeat(`{"a":`, 100_000) + "1" + strings.Repeat("}", 100_000),
		strings.Repeat("[", 1<<20), // never closed: refused before the end is seen
	} {
		err := jsonscan.Check(context.Background(), []byte(doc), jsonscan.Default)
		var mal *fault.Malformed
		if !errors.As(err, &mal) || !strings.Contains(mal.Fields[0].Message, "nested deeper than 64 levels") {
			t.Errorf("%.30s… (%d bytes): %v, want refused past 64 levels", doc, len(doc), err)
		}
	}
}

func TestContextHonoured(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	doc := "[" + strings.Repeat("1,", 10_000) + "1]"
	if err := jsonscan.Check(ctx, []byte(doc), jsonscan.Default); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

// FuzzCheck: Check agrees with encoding/json on what is JSON (a limit may
// refuse first), never panics, and refuses nothing that is valid, within
// limits and free of duplicate keys.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{`{}`, `[]`, `{"a":[1,{"b":"c"}]}`, `{"a":1,"a":2}`, `[[[[[[]]]]]]`, `{"":""}`, `"x"`, `1e5`, `{"a":{}} x`} {
		f.Add([]byte(s))
	}
	lim := jsonscan.Limits{Depth: 5, Members: 8, Values: 40}
	f.Fuzz(func(t *testing.T, data []byte) {
		err := jsonscan.Check(context.Background(), data, lim)
		valid := json.Valid(data)
		var mal *fault.Malformed
		var inv *fault.Invalid
		switch {
		case err == nil && !valid:
			t.Fatalf("accepted what is not JSON: %q", data)
		case errors.Is(err, jsonscan.ErrNotJSON) && valid:
			t.Fatalf("refused valid JSON as not JSON: %q: %v", data, err)
		case errors.As(err, &mal):
			if len(mal.Fields) != 1 {
				t.Fatalf("a refusal without its field: %v", err)
			}
		case errors.As(err, &inv):
			if len(inv.Fields) != 1 {
				t.Fatalf("a duplicate key without its field: %v", err)
			}
		case err != nil && !errors.Is(err, jsonscan.ErrNotJSON):
			t.Fatalf("unexpected error: %v", err)
		}
	})
}

// BenchmarkCheck: what the scan costs every JSON body (a launch request and
// a template document, the largest usual bodies), next to decoding the same
// body, and on the probe's 60,000-deep body.
func BenchmarkCheck(b *testing.B) {
	launch := []byte(`{"template":"pytorch-train","team":"vision","gpu":{"class":"H100-80GB","count":4},"parameters":{"epochs":3,"script":"train.py"}}`)
	tmpl, err := os.ReadFile("../../templates/pytorch-train.yaml")
	if err != nil {
		b.Fatal(err)
	}
	tmplJSON, err := yaml.YAMLToJSON(tmpl)
	if err != nil {
		b.Fatal(err)
	}
	deep := []byte(`{"team":"vision","gpu":` + nested("[", "]", 60_000) + `}`)
	for name, body := range map[string][]byte{"launch": launch, "template": tmplJSON, "deep-60000": deep} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				_ = jsonscan.Check(context.Background(), body, jsonscan.Default)
			}
		})
		if name == "deep-60000" {
			continue
		}
		b.Run(name+"/baseline-decode", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				var v any
				if err := json.Unmarshal(body, &v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
