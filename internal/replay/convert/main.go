// Command convert turns Alibaba's cluster-trace-v2026-GenAI CSVs into the
// compact file internal/replay embeds (genai/trace.csv.gz). Run it by hand
// when the source data changes (CI has no copy of it):
//
//	go run ./internal/replay/convert -dir ../shared/data/genai-train -out internal/replay/genai/trace.csv.gz
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gantryhq/gantry/internal/replay"
)

func main() {
	dir := flag.String("dir", "../shared/data/genai-train", "directory with pod_gpu_duty_cycle_anon.csv and pod_gpu_memory_used_bytes_anon.csv")
	out := flag.String("out", "internal/replay/genai/trace.csv.gz", "the compact file to write")
	flag.Parse()
	if err := run(*dir, *out); err != nil {
		fmt.Fprintln(os.Stderr, "convert:", err)
		os.Exit(1)
	}
}

func run(dir, out string) error {
	tr, err := replay.ReadAlibabaDir(dir)
	if err != nil {
		return err
	}
	f, err := os.Create(out + ".tmp")
	if err != nil {
		return err
	}
	defer os.Remove(out + ".tmp") // after a failure
	if err := tr.Compact(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(out+".tmp", out); err != nil {
		return err
	}
	// Read back what was written, as replay will.
	data, err := os.ReadFile(out)
	if err != nil {
		return err
	}
	back, err := replay.ReadCompact(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("reading back %s: %w", out, err)
	}
	fmt.Fprintf(os.Stderr, "%d pods read from %s, %d written to %s (%d bytes)\n", len(tr.Pods), filepath.Clean(dir), len(back.Pods), out, len(data))
	return nil
}
