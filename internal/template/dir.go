package template

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/fleet"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/nodegroup"
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
// skipping GPU class, node group and cluster files, checks their images against images (when not nil)
// and reports every problem in every file at once.
func LoadDir(dir string, classes *gpu.Catalog, images Images) ([]File, error) {
	sources, rerr := ReadDir(dir)
	var unreadable *fault.Invalid
	if rerr != nil && !errors.As(rerr, &unreadable) {
		return nil, rerr
	}
	files, perr := ParseSources(sources, func(path string, data []byte) (*Template, error) { return Parse(path, data, classes, images) })
	if rerr == nil {
		return files, perr
	}
	// Files that could not be read, and the problems of those that could.
	var errs fault.List
	errs.AddErr("", rerr)
	if perr != nil {
		errs.AddErr("", perr)
	}
	return nil, errs.Err()
}

// Source is one file of a template directory: its path and contents.
type Source struct {
	Path string
	Data []byte
}

// ReadDir reads the files of dir that may hold templates (*.yaml, *.yml,
// *.json; GPU class files too: ParseSources skips them).
func ReadDir(dir string) ([]Source, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read template directory: %w", err)
	}
	var errs fault.List
	var out []Source
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
		out = append(out, Source{Path: path, Data: data})
	}
	return out, errs.Err()
}

// ParseSources parses the templates among sources with parse (GPU class,
// node group and cluster files are skipped), refuses a name defined twice, reports every problem
// in every file at once (file:line), and sorts the templates by name.
func ParseSources(sources []Source, parse func(path string, data []byte) (*Template, error)) ([]File, error) {
	var errs fault.List
	var out []File
	seen := map[string]string{}
	for _, src := range sources {
		if k := kindOf(src.Data); k == gpu.Kind || k == nodegroup.Kind || k == fleet.Kind {
			continue
		}
		t, err := parse(src.Path, src.Data)
		if err != nil {
			errs.AddErr("", err)
			continue
		}
		if prev, dup := seen[t.Metadata.Name]; dup {
			errs.Add(fault.Field{File: src.Path, Path: "metadata.name", Message: fmt.Sprintf("template %q is also defined in %s", t.Metadata.Name, prev)})
			continue
		}
		seen[t.Metadata.Name] = src.Path
		out = append(out, File{Path: src.Path, Template: t})
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
