// Package interactive owns opening interactive workloads (notebooks, IDEs)
// in the browser: the path Gantry serves each one at (/w/{id}/) and the
// authenticating reverse proxy behind it, which forwards — websockets
// included — only what the workload service allows (its owner's requests),
// with Gantry's own credentials removed; what of that traffic counts as a
// person's use; and Gantry's one question of its own to an app, whether a
// notebook's kernel is executing (Kernels, for the idle culler).
package interactive

import (
	"strings"

	"github.com/gantryhq/gantry/internal/template"
)

// Prefix is where interactive workloads are served.
const Prefix = template.InteractivePrefix

// Split returns the workload id and the rest of a path under Prefix
// (with its leading slash, "" for /w/{id}); ok is false for other paths.
func Split(path string) (id, rest string, ok bool) {
	after, found := strings.CutPrefix(path, Prefix)
	if !found {
		return "", "", false
	}
	id, rest, _ = strings.Cut(after, "/")
	if id == "" {
		return "", "", false
	}
	if rest != "" || strings.HasSuffix(after, "/") {
		rest = "/" + rest
	}
	return id, rest, true
}
