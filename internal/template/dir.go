package template

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/yamldoc"
)

// File is a template read from a file.
type File struct {
	Path     string
	Template *Template
}

// LoadCatalog reads a template directory as the platform team keeps it: the GPU
// classes from DIR/gpu-classes.yaml, then every template, checked against them.
func LoadCatalog(dir string) (*gpu.Catalog, []File, error) {
	classes, err := gpu.LoadFile(filepath.Join(dir, "gpu-classes.yaml"))
	if err != nil {
		return nil, nil, err
	}
	files, err := LoadDir(dir, classes, nil)
	if err != nil {
		return nil, nil, err
	}
	return classes, files, nil
}

// LoadDir reads every template (*.yaml, *.yml, *.json of kind Template) in dir,
// skipping GPU class files, checks their images against images (when not nil)
// and reports every problem in every file at once.
func LoadDir(dir string, classes *gpu.Catalog, images Images) ([]File, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read template directory: %w", err)
	}
	var errs fault.List
	var out []File
	seen := map[string]string{}
	for _, e := range entries {
		ext := strings.ToLower(filepath.Ext(e.Name()))
		if e.IsDir() || (ext != ".yaml" && ext != ".yml" && ext != ".json") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		data, err := yamldoc.ReadFile(path)
		if err != nil {
			errs.Add(fault.Field{File: path, Message: err.Error()})
			continue
		}
		if kindOf(data) == gpu.Kind {
			continue
		}
		t, err := Parse(path, data, classes, images)
		if err != nil {
			errs.AddErr("", err)
			continue
		}
		if prev, dup := seen[t.Metadata.Name]; dup {
			errs.Add(fault.Field{File: path, Path: "metadata.name", Message: fmt.Sprintf("template %q is also defined in %s", t.Metadata.Name, prev)})
			continue
		}
		seen[t.Metadata.Name] = path
		out = append(out, File{Path: path, Template: t})
	}
	if err := errs.Err(); err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Template.Metadata.Name < out[j].Template.Metadata.Name })
	return out, nil
}

// kindOf peeks at a document's kind; anything unreadable counts as a template so
// that Parse reports the problem.
func kindOf(data []byte) string {
	var head struct {
		Kind string `yaml:"kind"`
	}
	_ = yaml.Unmarshal(data, &head)
	return head.Kind
}
