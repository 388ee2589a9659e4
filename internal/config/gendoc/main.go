// Command gendoc writes the options table of internal/config into
// docs/configuration.md, between its generated-section markers (go generate
// in internal/config runs it; CI fails when the file drifts).
package main

import (
	"bytes"
	"fmt"
	"os"

	"github.com/gantryhq/gantry/internal/config"
)

const (
	begin = "<!-- BEGIN GENERATED: go generate ./internal/config -->\n"
	end   = "<!-- END GENERATED -->\n"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gendoc FILE")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "gendoc:", err)
		os.Exit(1)
	}
}

func run(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	i, j := bytes.Index(data, []byte(begin)), bytes.Index(data, []byte(end))
	if i < 0 || j < i {
		return fmt.Errorf("%s has no generated section (%q … %q)", path, begin, end)
	}
	var out bytes.Buffer
	out.Write(data[:i+len(begin)])
	out.WriteString(config.Doc())
	out.Write(data[j:])
	if bytes.Equal(out.Bytes(), data) {
		return nil
	}
	return os.WriteFile(path, out.Bytes(), 0o644)
}
