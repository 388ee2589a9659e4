package gantry_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestArchitecturePackages: ARCHITECTURE.md's package table names every Go
// package of the module — in its first column, or (a test helper, a
// generator) in backticks in its parent's row — and names no package that
// is gone, so the table cannot fall behind the tree.
func TestArchitecturePackages(t *testing.T) {
	data, err := os.ReadFile("ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{} // first column → the row
	first := regexp.MustCompile("^\\| `([^`]+)`")
	for _, line := range strings.Split(string(data), "\n") {
		if m := first.FindStringSubmatch(line); m != nil {
			path := strings.TrimSpace(strings.TrimSuffix(m[1], "(root)"))
			if path == "gantry" {
				path = "."
			}
			rows[path] = line
		}
	}
	if len(rows) < 40 {
		t.Fatalf("found %d rows: is the package table still a table of `path` | owns rows?", len(rows))
	}
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, _ := os.Getwd()
	packages := map[string]bool{}
	for _, dir := range strings.Fields(string(out)) {
		rel, _ := filepath.Rel(root, dir)
		packages[rel] = true
		if _, ok := rows[rel]; ok {
			continue
		}
		parent, name := filepath.Dir(rel), filepath.Base(rel)
		if row, ok := rows[parent]; ok && strings.Contains(row, "`"+name+"`") {
			continue
		}
		t.Errorf("package %s is not in ARCHITECTURE.md's package table (a row of its own, or `%s` in %s's row)", rel, name, parent)
	}
	for path := range rows {
		if packages[path] {
			continue
		}
		if fi, err := os.Stat(path); err == nil && fi.IsDir() {
			continue // a directory of its own kind (api/python, deploy/helm)
		}
		t.Errorf("ARCHITECTURE.md's package table names %s, which is not in the tree", path)
	}
}
