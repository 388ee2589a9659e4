package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/catalog"
	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/imagecat"
	"github.com/gantryhq/gantry/internal/render"
	"github.com/gantryhq/gantry/internal/server"
	"github.com/gantryhq/gantry/internal/template"
)

// classesFor finds the GPU classes for a template directory: DIR/gpu-classes.yaml
// when it exists, else the configured file.
func classesFor(dir, file string) (*gpu.Catalog, error) {
	if file == "" {
		file = filepath.Join(dir, "gpu-classes.yaml")
		if _, err := os.Stat(file); err != nil {
			file = config.Default().GPUClassesFile
		}
	}
	return gpu.LoadFile(file)
}

func validateCmd(args []string, stdout, stderr io.Writer) error {
	fs := flags("gantry templates validate", stderr)
	classesFile := fs.String("gpu-classes", "", "GPU class file (default: DIR/gpu-classes.yaml)")
	imagesDir := fs.String("images", "images", `image catalog the templates' images must be in ("" to skip)`)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	dir := "templates"
	if len(pos) > 1 {
		return usageError{"validate takes one directory"}
	} else if len(pos) == 1 {
		dir = pos[0]
	}
	classes, err := classesFor(dir, *classesFile)
	if err != nil {
		return err
	}
	var images template.Images
	nImages := 0
	if *imagesDir != "" {
		cat, err := imagecat.Load(*imagesDir, classes)
		if err != nil {
			return err
		}
		images, nImages = cat, len(cat.Names())
	}
	files, err := template.LoadDir(dir, classes, images)
	if err != nil {
		return err
	}
	for _, f := range files {
		fmt.Fprintf(stdout, "ok  %-20s %s\n", f.Template.Metadata.Name, f.Path)
	}
	fmt.Fprintf(stdout, "%d templates valid (%d GPU classes, %d catalog images)\n", len(files), len(classes.Names()), nImages)
	return nil
}

// setFlag collects --set key=value pairs.
type setFlag map[string]any

func (s setFlag) String() string { return "" }
func (s setFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not key=value", v)
	}
	s[k] = val
	return nil
}

func renderCmd(args []string, stdout, stderr io.Writer) error {
	fs := flags("gantry templates render", stderr)
	dir := fs.String("dir", "templates", "template directory")
	classesFile := fs.String("gpu-classes", "", "GPU class file (default: DIR/gpu-classes.yaml)")
	imagesDir := fs.String("images", "images", "image catalog")
	team := fs.String("team", "example", "team the workload would belong to")
	owner := fs.String("owner", "user@example.com", "owner of the workload")
	class := fs.String("class", "", "GPU class (default: the template's)")
	mig := fs.String("mig", "", `MIG profile, or "none" for whole GPUs (default: the template's)`)
	count := fs.Int("count", 0, "number of GPUs or MIG slices (default: the template's)")
	prefix := fs.String("namespace-prefix", config.Default().NamespacePrefix, "namespace prefix for the team")
	set := setFlag{}
	fs.Var(set, "set", "parameter value, key=value (repeatable)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError{"render takes one template name"}
	}
	classes, err := classesFor(*dir, *classesFile)
	if err != nil {
		return err
	}
	images, err := imagecat.Load(*imagesDir, classes)
	if err != nil {
		return err
	}
	files, err := template.LoadDir(*dir, classes, images)
	if err != nil {
		return err
	}
	var t *template.Template
	var names []string
	for _, f := range files {
		names = append(names, f.Template.Metadata.Name)
		if f.Template.Metadata.Name == pos[0] {
			t = f.Template
		}
	}
	if t == nil {
		return fmt.Errorf("no template %q in %s (have: %s)", pos[0], *dir, strings.Join(names, ", "))
	}
	r, err := t.Resolve(classes, template.Choice{Class: *class, MIGProfile: *mig, Count: *count, Params: set})
	if err != nil {
		return err
	}
	// Offline: the image by tag. A launch verifies it and runs it by digest.
	e, tag, err := images.Resolve(t.Spec.Image)
	if err != nil {
		return err
	}
	image := e.Image.Spec.Repository + ":" + tag
	objs, err := render.Objects(r, render.Meta{WorkloadID: "preview0", Team: *team, Owner: *owner, Namespace: *prefix + *team, TemplateVersion: 0, Image: image})
	if err != nil {
		return err
	}
	y, err := render.YAML(objs)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "# %s is shown by tag: a launch verifies its signature and attestations and runs it pinned by digest.\n", image)
	_, err = stdout.Write(y)
	return err
}

func applyCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("gantry templates apply", stderr)
	dir := fs.String("f", "", "directory of template files (required)")
	prune := fs.Bool("prune", false, "delete live templates that no file defines")
	dryRun := fs.Bool("dry-run", false, "print what would change, change nothing")
	srv := fs.String("server", "", "Gantry server URL (default: $GANTRY_SERVER, the last one signed in to)")
	cfgPath := fs.String("config", "", "with --db: configuration file (YAML)")
	db := fs.String("db", "", "write this database directly instead of going through a server: SQLite file or PostgreSQL URL")
	dbDriver := fs.String("db-driver", "", "with --db: database driver, sqlite or postgres")
	actor := fs.String("actor", "gitops", "with --db: who the change is recorded as")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if *dir == "" || len(pos) > 0 {
		return usageError{"apply needs -f DIR and no other arguments"}
	}
	if *db == "" {
		// Through the server: the diff is against what it serves, and the
		// change is recorded as whoever is signed in.
		return applyRemote(ctx, *srv, *dir, *prune, *dryRun, stdout)
	}
	cfg, err := loadConfig(*cfgPath, config.Flags{"db": *db, "db-driver": *dbDriver})
	if err != nil {
		return err
	}
	a, err := server.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer a.Store.Close()
	files, err := template.LoadDir(*dir, a.Catalog.Classes(), a.Images.Catalog)
	if err != nil {
		return err
	}
	plan, err := a.Catalog.Plan(ctx, *actor, files, catalog.PlanOptions{Prune: *prune})
	if err != nil {
		return err
	}
	counts := map[catalog.Action]int{}
	for _, st := range plan.Steps {
		counts[st.Action]++
		fmt.Fprintf(stdout, "%-9s %s\n", st.Action, st.Name)
		if st.Diff != "" {
			fmt.Fprintln(stdout, indent(st.Diff))
		}
	}
	summary := fmt.Sprintf("%d to create, %d to update, %d to delete, %d unchanged",
		counts[catalog.Create], counts[catalog.Update], counts[catalog.Delete], counts[catalog.Unchanged])
	if *dryRun {
		fmt.Fprintf(stdout, "dry run: %s; nothing changed\n", summary)
		return nil
	}
	vs, err := a.Catalog.Apply(ctx, plan)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "applied: %s (%s)\n", summary, versions(vs))
	return nil
}

func versions(vs []catalog.Version) string {
	if len(vs) == 0 {
		return "no new versions"
	}
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = v.Name + "@" + strconv.Itoa(v.Version)
	}
	return strings.Join(parts, ", ")
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// applyRemote sends a template directory to a server (POST
// /api/v1/catalog/apply), which validates, plans and applies it at once.
func applyRemote(ctx context.Context, server, dir string, prune, dryRun bool, stdout io.Writer) error {
	sources, err := template.ReadDir(dir)
	if err != nil {
		return err
	}
	cl, target, err := remote(ctx, server)
	if err != nil {
		return err
	}
	body := model.TemplateSetRequest{Prune: &prune, DryRun: &dryRun}
	for _, src := range sources {
		body.Files = append(body.Files, struct {
			Content string `json:"content"`
			Path    string `json:"path"`
		}{Content: string(src.Data), Path: src.Path})
	}
	resp, err := cl.ApplyTemplatesWithResponse(ctx, body)
	if err := ok(resp, err); err != nil {
		return err
	}
	counts := map[string]int{}
	for _, st := range resp.JSON200.Steps {
		counts[string(st.Action)]++
		fmt.Fprintf(stdout, "%-9s %s\n", st.Action, st.Name)
		if d := deref(st.Diff); d != "" && st.Action != model.TemplateSetPlanStepsActionUnchanged {
			fmt.Fprintln(stdout, indent(d))
		}
	}
	summary := fmt.Sprintf("%d to create, %d to update, %d to delete, %d unchanged", counts["create"], counts["update"], counts["delete"], counts["unchanged"])
	switch {
	case dryRun:
		fmt.Fprintf(stdout, "dry run against %s: %s; nothing changed\n", target, summary)
	case resp.JSON200.Applied:
		var made []string
		for _, v := range deref(resp.JSON200.Versions) {
			made = append(made, v.Name+"@"+strconv.Itoa(v.Version))
		}
		fmt.Fprintf(stdout, "applied to %s: %s (%s)\n", target, summary, strings.Join(made, ", "))
	default:
		fmt.Fprintf(stdout, "%s: %s; nothing to change\n", target, summary)
	}
	return nil
}
