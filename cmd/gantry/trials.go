package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gantryhq/gantry/api/client"
	"github.com/gantryhq/gantry/api/model"
)

// trialCmd starts a trial: a short run of a template per class and GPU
// count; --wait follows it until every run has ended and shows the table.
func trialCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	const usage = "gantry trial TEMPLATE --team TEAM --classes A,B --steps N [--gpus 1,2] [--mig 3g.40gb,...] [--max-runtime 30m] [--max-cost D] [--full-steps N] [--deadline 8h] [--set k=v]... [--wait]"
	fs := flags("gantry trial", stderr)
	srv := fs.String("server", "", "Gantry server URL (default: $GANTRY_SERVER, the last one signed in to)")
	teamName := fs.String("team", "", "the team (required)")
	classes := fs.String("classes", "", "the GPU classes to try, comma-separated (required)")
	gpus := fs.String("gpus", "1", "the GPU counts to try on each class, comma-separated")
	mig := fs.String("mig", "", "MIG profiles to try on each class beside its whole GPUs, comma-separated (one slice a run)")
	steps := fs.Int64("steps", 0, "each run is stopped at this step (required)")
	maxRuntime := fs.String("max-runtime", "", "each run's time cap (default 30m)")
	maxCost := fs.Float64("max-cost", 0, "each run's cap in dollars (default none: the time cap bounds it)")
	fullSteps := fs.Int64("full-steps", 0, "the full run's steps (default: each run's reported total)")
	deadline := fs.String("deadline", "", "how long the full run may take: the cheapest choice within it is named")
	wait := fs.Bool("wait", false, "follow the trial until its runs have ended, then show what they measured")
	timeout := fs.Duration("timeout", 2*time.Hour, "with --wait: give up after this long")
	output := fs.String("o", "", "output: json")
	var sets multiFlag
	fs.Var(&sets, "set", "a parameter, k=v (repeatable)")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 || *teamName == "" || *classes == "" || *steps == 0 {
		return usageError{usage}
	}
	req := model.TrialRequest{Template: rest[0], Team: *teamName, Classes: splitList(*classes), Steps: *steps}
	counts, err := intList(*gpus)
	if err != nil {
		return usageError{"--gpus " + err.Error()}
	}
	req.Gpus = &counts
	if *mig != "" {
		profiles := splitList(*mig)
		req.MigProfiles = &profiles
	}
	if *maxRuntime != "" {
		req.MaxRuntime = maxRuntime
	}
	if *maxCost > 0 {
		req.MaxCost = maxCost
	}
	if *fullSteps > 0 {
		req.FullSteps = fullSteps
	}
	if *deadline != "" {
		req.Deadline = deadline
	}
	if req.Parameters, err = setParams(sets); err != nil {
		return err
	}
	cl, _, err := remote(ctx, *srv)
	if err != nil {
		return err
	}
	// One key per intended trial: a retry after a lost answer starts one.
	key := newKey()
	resp, err := cl.CreateTrialWithResponse(ctx, &model.CreateTrialParams{IdempotencyKey: &key}, req)
	if err := ok(resp, err); err != nil {
		return err
	}
	tr, err := answered(resp.JSON201, resp.JSON200, "trial")
	if err != nil {
		return err
	}
	if !*wait {
		return show(stdout, *output, tr, func() {
			fmt.Fprintf(stdout, "trial %s of %s in team %s: %d runs, each stopped at step %d or after %s\n", tr.Id, tr.Template, tr.Team, len(tr.Runs), tr.Steps, tr.MaxRuntime)
			for _, r := range tr.Runs {
				if r.Workload != nil {
					fmt.Fprintf(stdout, "  %s: %s\n", runChoice(r), *r.Workload)
				} else {
					fmt.Fprintf(stdout, "  %s: not launched: %s\n", runChoice(r), printable(deref(r.Error)))
				}
			}
			fmt.Fprintf(stdout, "see what they measure: gantry trials %s\n", tr.Id)
		})
	}
	fmt.Fprintf(stderr, "trial %s: %d runs\n", tr.Id, len(tr.Runs))
	got, err := followTrial(ctx, cl, tr.Id, *timeout)
	if err != nil {
		return err
	}
	return show(stdout, *output, got, func() { trialTable(stdout, got) })
}

// followTrial polls a trial every 10 s until its runs have ended.
func followTrial(ctx context.Context, cl *client.ClientWithResponses, id string, timeout time.Duration) (model.Trial, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		resp, err := cl.GetTrialWithResponse(ctx, id)
		if err := ok(resp, err); err != nil {
			return model.Trial{}, err
		}
		if deref(resp.JSON200.Done) {
			return *resp.JSON200, nil
		}
		select {
		case <-ctx.Done():
			return model.Trial{}, fmt.Errorf("trial %s has runs still going after %s: gantry trials %s shows them", id, timeout, id)
		case <-tick.C:
		}
	}
}

// trialsCmd lists the trials, or shows one with what its runs measured.
func trialsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("gantry trials", stderr)
	srv := fs.String("server", "", "Gantry server URL")
	output := fs.String("o", "", "output: json")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 1 {
		return usageError{"gantry trials [ID] [-o json]"}
	}
	cl, _, err := remote(ctx, *srv)
	if err != nil {
		return err
	}
	if len(rest) == 1 {
		resp, err := cl.GetTrialWithResponse(ctx, rest[0])
		if err := ok(resp, err); err != nil {
			return err
		}
		return show(stdout, *output, resp.JSON200, func() { trialTable(stdout, *resp.JSON200) })
	}
	resp, err := cl.ListTrialsWithResponse(ctx, nil)
	if err := ok(resp, err); err != nil {
		return err
	}
	return show(stdout, *output, resp.JSON200, func() {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tTEAM\tTEMPLATE\tRUNS\tSTEPS\tSTARTED")
		for _, t := range resp.JSON200.Items {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", t.Id, t.Team, t.Template, len(t.Runs), t.Steps, t.CreatedAt.Local().Format(time.DateTime))
		}
		tw.Flush()
	})
}

// trialTable is a trial's runs and what they measured, the best marked.
func trialTable(w io.Writer, t model.Trial) {
	state := "measuring"
	if deref(t.Done) {
		state = "done"
	}
	fmt.Fprintf(w, "trial %s of %s in team %s (%s): each run capped at step %d, %s", t.Id, t.Template, t.Team, state, t.Steps, t.MaxRuntime)
	if t.MaxCost != nil {
		fmt.Fprintf(w, ", $%.2f", *t.MaxCost)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\tCHOICE\tSTATUS\tSTEP\tSEC/STEP (P10–P90)\tTHROUGHPUT\tSCALING\tFULL RUN\tCOST\t$/H")
	for i, r := range t.Runs {
		mark := ""
		if t.Best != nil && *t.Best == i {
			mark = "*"
		}
		status := "not launched: " + printable(deref(r.Error))
		if r.Status != nil {
			status = string(*r.Status)
		}
		secs, thr, scaling, full, cost := "-", "-", "-", "-", "-"
		if r.StepSeconds != nil {
			secs = fmt.Sprintf("%.3g (%.3g–%.3g)", *r.StepSeconds, deref(r.StepSecondsP10), deref(r.StepSecondsP90))
		}
		if r.Throughput != nil {
			thr = fmt.Sprintf("%.4g %s", *r.Throughput, strings.TrimSuffix(string(deref(r.ThroughputMetric)), "_per_s")+"/s")
		}
		if r.Scaling != nil {
			scaling = fmt.Sprintf("%.0f%%", *r.Scaling*100)
		}
		if r.FullSeconds != nil {
			full = (time.Duration(*r.FullSeconds) * time.Second).String()
			if r.MeetsDeadline != nil && !*r.MeetsDeadline {
				full += " (late)"
			}
			cost = fmt.Sprintf("$%.2f", deref(r.FullCost))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%.2f\n", mark, runChoice(r), status, deref(r.LastStep), secs, thr, scaling, full, cost, deref(r.PricePerHour))
	}
	tw.Flush()
	if t.Why != nil {
		fmt.Fprintln(w, printable(*t.Why))
	}
}

// intList reads "1,2,4".
func intList(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, errors.New(strconv.Quote(s) + ": want positive numbers, comma-separated")
		}
		out = append(out, n)
	}
	return out, nil
}

// runChoice names a trial run's choice: "H100-80GB × 2", "H100-80GB 3g.40gb".
func runChoice(r model.TrialRun) string {
	if p := deref(r.MigProfile); p != "" {
		return r.Class + " " + p
	}
	return fmt.Sprintf("%s × %d", r.Class, r.Gpus)
}

// splitList is a comma-separated flag's items, each trimmed ("a, b": a and b).
func splitList(s string) []string {
	items := strings.Split(s, ",")
	for i := range items {
		items[i] = strings.TrimSpace(items[i])
	}
	return items
}
