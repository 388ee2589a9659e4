package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/gantryhq/gantry/internal/advice"
	"github.com/gantryhq/gantry/internal/gpu"
)

// adviseReplayCmd replays a trace through the same online rules Gantry runs
// and writes one decision per line; with --score it measures them as the
// Advice issue defines (right-sizing saved and under-provisioned, idle
// reclaimed and false stops against fixed timeouts).
func adviseReplayCmd(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("gantry advise replay", stderr)
	format := fs.String("format", "alibaba-genai", "trace format (alibaba-genai: pod_gpu_duty_cycle_anon.csv and pod_gpu_memory_used_bytes_anon.csv, plain or .gz)")
	dir := fs.String("dir", "", "directory holding the trace")
	class := fs.String("gpu-class", "H100-80GB", "the GPU class the pods ran on (its MIG profiles are what right-sizing picks from)")
	classesFile := fs.String("gpu-classes", "templates/gpu-classes.yaml", "GPU class file")
	out := fs.String("o", "", "write the decisions (JSON lines) to this file instead of standard output")
	score := fs.Bool("score", false, "print the score (to standard output, or standard error when the decisions go there)")
	if pos, err := parse(fs, args); err != nil {
		return err
	} else if len(pos) > 0 {
		return usageError{"replay takes no arguments"}
	}
	if *format != "alibaba-genai" {
		return usageError{fmt.Sprintf("--format %q: only alibaba-genai is known", *format)}
	}
	if *dir == "" {
		return usageError{"--dir is required"}
	}
	classes, err := gpu.LoadFile(*classesFile)
	if err != nil {
		return err
	}
	c, ok := classes.Get(*class)
	if !ok {
		return usageError{fmt.Sprintf("--gpu-class %q is not one of %v", *class, classes.Names())}
	}
	tr, err := advice.LoadTrace(*dir)
	if err != nil {
		return err
	}
	e, err := advice.NewEngine(c, advice.DefaultRules)
	if err != nil {
		return err
	}
	ds := advice.Replay(tr, e, 0)
	w, report, closeOut, err := replayOutput(*out, stdout, stderr)
	if err != nil {
		return err
	}
	defer closeOut()
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for _, d := range ds {
		d.T += tr.Start // the trace's own Unix seconds
		if err := enc.Encode(d); err != nil {
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := closeOut(); err != nil {
		return fmt.Errorf("writing %s: %w", *out, err)
	}
	if !*score {
		return nil
	}
	s := advice.ScoreDecisions(tr, ds, advice.Profiles(c))
	fmt.Fprintf(report, "pods: %d (%d resized)\n", s.Pods, s.Resized)
	fmt.Fprintf(report, "right-sizing: GPU share saved %.1f %%, under-provisioned %.1f %% of pods\n", 100*s.Saved, 100*s.UnderProvisioned)
	fmt.Fprintf(report, "idle: %d stops (%d false), %.1f h reclaimed of %.1f h reclaimable (%.1f %%)\n", s.Stops, s.FalseStops, s.ReclaimedH, s.ReclaimableH, 100*s.ReclaimedShare)
	fmt.Fprintf(report, "fixed timeouts at the same reclaimed hours: %.1f false stops; ours are %.2f × that\n", s.LineFalse, s.FalseRatio)
	fmt.Fprintln(report, "fixed timeouts (minutes: reclaimed h, stops, false):")
	for _, p := range s.Line {
		fmt.Fprintf(report, "  %4d: %6.1f h %5d %5d\n", p.Minutes, p.ReclaimedH, p.Stops, p.FalseStops)
	}
	return nil
}
