package gantry_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestOneClock: what Gantry decides or reports by time comes from the
// server's one clock (server.Overrides.Clock; the store, the API and the
// loops take it), so a test's fake clock moves all of it. A call of
// time.Now (called, or passed as a clock) is allowed only in a program's main package, in a test helper
// package (its name ends in "test"), in _test.go files, and where the line
// says why with a "//clock:allow <reason>" comment (a duration measured, a
// cache of its own, a Kubernetes object's wall time, the node agent's
// clock).
func TestOneClock(t *testing.T) {
	fset := token.NewFileSet()
	var bad []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if f.Name.Name == "main" || strings.HasSuffix(f.Name.Name, "test") {
			return nil
		}
		timePkg := ""
		for _, im := range f.Imports {
			if im.Path.Value == `"time"` {
				timePkg = "time"
				if im.Name != nil {
					timePkg = im.Name.Name
				}
			}
		}
		if timePkg == "" {
			return nil
		}
		allowed := map[int]bool{}
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				if reason, ok := strings.CutPrefix(c.Text, "//clock:allow"); ok && strings.TrimSpace(reason) != "" {
					allowed[fset.Position(c.Pos()).Line] = true
				}
			}
		}
		// time.Now read as a value ("now: time.Now", a default) reads the
		// wall clock as surely as a call.
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Now" {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == timePkg && !allowed[fset.Position(sel.Pos()).Line] {
				bad = append(bad, fset.Position(sel.Pos()).String())
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bad {
		t.Errorf("%s: time.Now outside the server's clock: take the time from the clock you were given, or say why with //clock:allow <reason>", b)
	}
}
