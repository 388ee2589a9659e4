package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/gantryhq/gantry/internal/forecast"
)

// forecastReplayCmd replays a trace through the demand forecast: for each
// origin, the forecast made from what was known then, one JSON line per
// point; with --score, its sMAPE and MASE against the naive baselines on
// the same origins.
func forecastReplayCmd(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("gantry forecast replay", stderr)
	format := fs.String("format", "openb", "trace format (openb: Alibaba's 2023 GPU cluster pod list, CSV)")
	file := fs.String("file", "", "the trace file")
	class := fs.String("class", "", "forecast this GPU class only (openb: the pods whose gpu_spec names it); default: the whole fleet")
	horizon := fs.Duration("horizon", 2*time.Hour, "how far each forecast looks ahead")
	step := fs.Duration("step", 10*time.Minute, "the forecast's steps")
	every := fs.Duration("every", 0, "how far apart the origins are (default: one step)")
	out := fs.String("o", "", "write the forecasts (JSON lines) to this file instead of standard output")
	score := fs.Bool("score", false, "print the score (to standard output, or standard error when the forecasts go there)")
	if pos, err := parse(fs, args); err != nil {
		return err
	} else if len(pos) > 0 {
		return usageError{"replay takes no arguments"}
	}
	if *format != "openb" {
		return usageError{fmt.Sprintf("--format %q: only openb is known", *format)}
	}
	if *file == "" {
		return usageError{"--file is required"}
	}
	f, err := os.Open(*file)
	if err != nil {
		return err
	}
	recs, err := forecast.ReadOpenB(bufio.NewReader(f), *file, *class)
	f.Close()
	if err != nil {
		return err
	}
	h := forecast.NewHistory(recs)
	w, report, closeOut, err := replayOutput(*out, stdout, stderr)
	if err != nil {
		return err
	}
	defer closeOut()
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	sc := forecast.NewScorer(h)
	type line struct {
		Origin int64   `json:"origin"`
		T      int64   `json:"t"`
		GPUs   float64 `json:"gpus"`
		Lo     float64 `json:"lo"`
		Hi     float64 `json:"hi"`
	}
	opts, err := forecast.ReplayOptions{Horizon: *horizon, Step: *step, Every: *every}.Check()
	if err != nil {
		return usageError{err.Error()}
	}
	err = forecast.Replay(h, opts, func(pts []forecast.Point) error {
		for _, p := range pts {
			if err := enc.Encode(line{p.Origin.Unix(), p.T.Unix(), p.GPUs, p.Lo, p.Hi}); err != nil {
				return err
			}
		}
		sc.Add(pts)
		return nil
	})
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return fmt.Errorf("writing the forecasts: %w", err)
	}
	if err := closeOut(); err != nil {
		return fmt.Errorf("writing %s: %w", *out, err)
	}
	if *score {
		writeForecastScore(report, sc.Score(), *horizon)
	}
	return nil
}

func writeForecastScore(w io.Writer, s forecast.Score, horizon time.Duration) {
	fmt.Fprintf(w, "origins: %d\n", s.Origins)
	for _, e := range []struct {
		name string
		e    forecast.Errors
	}{{fmt.Sprintf("at the horizon (%s)", horizon), s.Horizon}, {"over every step", s.All}} {
		fmt.Fprintf(w, "%s: sMAPE %.3f %%", e.name, e.e.SMAPE)
		names := make([]string, 0, len(e.e.Baseline))
		for n := range e.e.Baseline {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			fmt.Fprintf(w, "; %s %.3f %% (MASE %.3f)", n, e.e.Baseline[n], e.e.MASE[n])
		}
		fmt.Fprintf(w, "; %.1f %% below the best baseline (%s)\n", e.e.Gain, e.e.Best)
	}
}

// replayOutput is where a replay writes: the file out, its report going to
// stdout; or stdout, the report going to stderr. closeOut closes the file
// (once; later calls return nil) and says whether its writes landed.
func replayOutput(out string, stdout, stderr io.Writer) (w, report io.Writer, closeOut func() error, err error) {
	if out == "" {
		return stdout, stderr, func() error { return nil }, nil
	}
	f, err := os.Create(out)
	if err != nil {
		return nil, nil, nil, err
	}
	var once sync.Once
	return f, stdout, func() error {
		err := error(nil)
		once.Do(func() { err = f.Close() })
		return err
	}, nil
}
