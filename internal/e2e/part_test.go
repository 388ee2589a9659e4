package e2e_test

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// partEnv names the part of the suite a run takes (.ci/test runs the two
// side by side, each on a cluster of its own): "realnode", the tests that
// use the real node (realNodeTests); "others", the rest, on a cluster
// without a real node.
// Unset, a run takes every test selected as usual, the real node started.
//
// The real node's tests are e2e's long pole: two at a time (the node's two
// cores), after the serial tests, they took about 330 of the package's
// 545 s on a warm run (2026-12-06); the rest, about 300.
const partEnv = "GANTRY_TEST_E2E_PART"

// withRealNode is whether the package's cluster starts the real node: not
// for the part without its tests.
var withRealNode = true

// selectPart narrows the run to part (partEnv's value) by setting
// -test.run or -test.skip to the real node's tests.
func selectPart(part string) error {
	if part == "" {
		return nil
	}
	names, err := realNodeTests(".")
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return fmt.Errorf("%s=%s: no test of this package uses the real node", partEnv, part)
	}
	if !flag.Parsed() {
		flag.Parse()
	}
	only := "^(" + strings.Join(names, "|") + ")$"
	switch part {
	case "realnode":
		return flag.Set("test.run", only)
	case "others":
		withRealNode = false
		return flag.Set("test.skip", only)
	}
	return fmt.Errorf("%s=%q: want realnode or others", partEnv, part)
}

// realNodeTests are the package's Test functions (read from its source in
// dir) that reach the cluster's RealNode: they call it, or a function or
// method of the package that does (holdRealNode, realNode, appGantry…),
// however deep. (By name: a method named as one that reaches it counts
// too, which can only add a test to the real node's part.)
func realNodeTests(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	calls := map[string]map[string]bool{} // a function's or method's name: the names it calls
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			return nil, err
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			called := calls[fn.Name.Name]
			if called == nil {
				called = map[string]bool{}
				calls[fn.Name.Name] = called
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if call, ok := n.(*ast.CallExpr); ok {
					switch f := call.Fun.(type) {
					case *ast.Ident:
						called[f.Name] = true
					case *ast.SelectorExpr:
						called[f.Sel.Name] = true
					}
				}
				return true
			})
		}
	}
	reaches := map[string]bool{"RealNode": true}
	for changed := true; changed; {
		changed = false
		for name, called := range calls {
			if reaches[name] {
				continue
			}
			for c := range called {
				if reaches[c] {
					reaches[name], changed = true, true
					break
				}
			}
		}
	}
	var names []string
	for name := range calls {
		if reaches[name] && strings.HasPrefix(name, "Test") && name != "TestMain" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names, nil
}

// TestRealNodeTestsFound: the real node's part holds its tests, each by
// name, and none of the others.
func TestRealNodeTestsFound(t *testing.T) {
	names, err := realNodeTests(".")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the real node's tests: %v", names)
	for _, want := range []string{"TestCPUJobRunsForReal", "TestCPUTrainingResumes", "TestMaxRuntimeKillsContainer", "TestGantryAsAPod", "TestPortalCPUNotebook"} {
		if !slices.Contains(names, want) {
			t.Errorf("%s not among the real node's tests %v", want, names)
		}
	}
	for _, not := range []string{"TestStopStartDelete", "TestChartImages", "TestTwoReplicasLeaderKilled", "TestRealNodeTestsFound"} {
		if slices.Contains(names, not) {
			t.Errorf("%s among the real node's tests %v", not, names)
		}
	}
}
