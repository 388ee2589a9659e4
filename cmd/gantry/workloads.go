package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gantryhq/gantry/api/client"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/gpu"
)

// The workload verbs talk to a server through the generated client
// (package api/client): launch, ls, get, stop, start, rm, approve, deny,
// estimate and cost.

// launchCmd launches a template; with --wait it follows the launch until it
// runs (or ends) and says each step.
func launchCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("gantry launch", stderr)
	srv := fs.String("server", "", "Gantry server URL (default: $GANTRY_SERVER, the last one signed in to)")
	request := launchFlags(fs)
	maxDelay := fs.String("max-delay", "", "a flexible template's job: hold it for cleaner power at most this long (0s: start at once)")
	deadline := fs.String("deadline", "", "a flexible template's job: when it must have finished, RFC 3339 or a duration from now (8h)")
	wait := fs.Bool("wait", false, "follow the launch until it runs or ends")
	timeout := fs.Duration("timeout", 30*time.Minute, "with --wait: give up after this long")
	output := fs.String("o", "", "output: json")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	req, err := request(rest, "gantry launch TEMPLATE --team TEAM [--gpu CLASS[:COUNT]] [--mig PROFILE] [--cpu-only] [--set k=v]... [--max-delay D] [--deadline T] [--wait]")
	if err != nil {
		return err
	}
	if *maxDelay != "" {
		req.MaxDelay = maxDelay
	}
	if *deadline != "" {
		at, err := time.Parse(time.RFC3339, *deadline)
		if err != nil {
			d, derr := time.ParseDuration(*deadline)
			if derr != nil || d <= 0 {
				return usageError{fmt.Sprintf("--deadline %q: want an RFC 3339 time (2026-12-05T06:00:00Z) or a duration from now (8h)", *deadline)}
			}
			at = time.Now().Add(d)
		}
		req.Deadline = &at
	}
	cl, _, err := remote(ctx, *srv)
	if err != nil {
		return err
	}
	// One key per intended launch: a retry after a lost answer launches once.
	key := newKey()
	resp, err := cl.CreateWorkloadWithResponse(ctx, &model.CreateWorkloadParams{IdempotencyKey: &key}, req)
	if err := ok(resp, err); err != nil {
		return err
	}
	w, err := answered(resp.JSON201, resp.JSON200, "workload")
	if err != nil {
		return err
	}
	if w.Warnings != nil {
		for _, m := range *w.Warnings {
			fmt.Fprintf(stderr, "warning: %s\n", printable(m))
		}
	}
	if held := w.Deferral != nil && w.Deferral.Until != nil; !*wait || held {
		// One held for cleaner power waits hours by design: not followed.
		return show(stdout, *output, *w, func() { fmt.Fprintf(stdout, "launched %s (%s) in team %s: %s\n", w.Id, w.Name, w.Team, describe(*w)) })
	}
	fmt.Fprintf(stderr, "launched %s (%s) in team %s\n", w.Id, w.Name, w.Team)
	got, err := follow(ctx, cl, *w, *timeout, stderr)
	if err != nil {
		return err
	}
	return show(stdout, *output, got, func() { fmt.Fprintf(stdout, "%s: %s\n", got.Id, describe(got)) })
}

// follow polls a workload (w, as launched) until it runs or ends, printing
// each change of status or reason with the time since it began; a failure
// is an error, and so is the timeout, which says the status last read.
func follow(ctx context.Context, cl *client.ClientWithResponses, w model.Workload, timeout time.Duration, stderr io.Writer) (model.Workload, error) {
	id := w.Id
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := ""
	// On a terminal the current state's line is redrawn each second with a
	// spinner and the elapsed time; elsewhere each state is one line.
	tty := isTerminal(stderr)
	spin := 0
	defer func() {
		if tty && last != "" {
			fmt.Fprintln(stderr)
		}
	}()
	for {
		resp, err := cl.GetWorkloadWithResponse(ctx, id)
		if err := ok(resp, err); err != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				// The wait ran out while a read was under way: it is the
				// wait's time that is up, not the server that failed.
				return w, fmt.Errorf("workload %s still %s after %s", id, w.Status, timeout)
			}
			return model.Workload{}, err
		}
		w = *resp.JSON200
		line := describe(w)
		switch {
		case tty:
			if line != last && last != "" {
				fmt.Fprintln(stderr)
			}
			spin++
			fmt.Fprintf(stderr, "\r\x1b[K%c %6s  %s", `|/-\`[spin%4], time.Since(start).Round(time.Second), line)
			last = line
		case line != last:
			fmt.Fprintf(stderr, "%6s  %s\n", time.Since(start).Round(time.Second), line)
			last = line
		}
		switch {
		case w.Status == model.Running || w.Status == model.Succeeded:
			return w, nil
		case w.EndedAt != nil: // it ended otherwise (the server says when)
			return w, fmt.Errorf("workload %s is %s: %s", id, w.Status, deref(w.Reason))
		}
		select {
		case <-ctx.Done():
			return w, fmt.Errorf("workload %s still %s after %s", id, w.Status, timeout)
		case <-time.After(time.Second):
		}
	}
}

// describe says a workload's status as a person reads it.
func describe(w model.Workload) string {
	s := string(w.Status)
	if r := deref(w.Reason); r != "" {
		s += ": " + r
	}
	if a := w.Approval; w.Status == model.PendingApproval && a != nil {
		s += " (may decide: " + strings.Join(a.Approvers, ", ") + ")"
	}
	if d := w.Deferral; d != nil && d.Until != nil {
		s += " (gantry start " + w.Id + " starts it now)"
	}
	return s
}

// lsCmd lists workloads, a table or JSON.
func lsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("gantry ls", stderr)
	srv := fs.String("server", "", "Gantry server URL")
	teamName := fs.String("team", "", "only this team's")
	st := fs.String("status", "", "only workloads in this status")
	ended := fs.Bool("ended", false, "only workloads that have ended: a history (with -o wide: when each started, how long it ran, its attempts and exit code)")
	output := fs.String("o", "", "output: wide or json")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	cl, _, err := remote(ctx, *srv)
	if err != nil {
		return err
	}
	params := &model.ListWorkloadsParams{}
	if *teamName != "" {
		params.Team = teamName
	}
	if *st != "" {
		s := model.WorkloadStatus(*st)
		params.Status = &s
	}
	if *ended {
		params.Ended = ended
	}
	var all []model.Workload
	for {
		resp, err := cl.ListWorkloadsWithResponse(ctx, params)
		if err := ok(resp, err); err != nil {
			return err
		}
		all = append(all, resp.JSON200.Items...)
		if resp.JSON200.NextCursor == nil || len(all) >= 10000 {
			break
		}
		params.Cursor = resp.JSON200.NextCursor
	}
	if *output == "json" {
		return json.NewEncoder(stdout).Encode(all)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tTEAM\tSTATUS\tPROGRESS\tGPU\tCOST\tAGE"+map[bool]string{true: "\tOWNER\tSTARTED\tRAN\tATTEMPTS\tEXIT\tREASON"}[*output == "wide"])
	for _, w := range all {
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t$%.2f\t%s", w.Id, w.Name, w.Team, w.Status, progressCell(w.Progress), gpuText(w), w.CostSoFar, age(w.CreatedAt))
		if *output == "wide" {
			line += fmt.Sprintf("\t%s\t%s\t%s\t%d\t%s\t%s", ownerText(w, false), when(w.StartedAt), ran(w.RanSeconds), w.Attempts, exit(w.ExitCode), deref(w.Reason))
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}

// getCmd prints one workload.
func getCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("gantry get", stderr)
	srv := fs.String("server", "", "Gantry server URL")
	output := fs.String("o", "", "output: json")
	cl, id, err := oneArgument(ctx, fs, args, srv, "gantry get ID")
	if err != nil {
		return err
	}
	resp, err := cl.GetWorkloadWithResponse(ctx, id)
	if err := ok(resp, err); err != nil {
		return err
	}
	w := *resp.JSON200
	return show(stdout, *output, w, func() {
		fmt.Fprintf(stdout, "%s (%s)\nteam:     %s\nowner:    %s\ntemplate: %s v%d\ngpu:      %s\nstatus:   %s\ncost:     $%.2f ($%.2f/h)\n",
			w.Id, w.Name, w.Team, ownerText(w, true), w.Template, w.TemplateVersion, gpuText(w), describe(w), w.CostSoFar, w.PricePerHour)
		if w.Trial != nil {
			fmt.Fprintf(stdout, "trial:    %s (gantry trials %s)\n", *w.Trial, *w.Trial)
		}
		if w.Moves != nil {
			for _, m := range *w.Moves {
				fmt.Fprintf(stdout, "moved:    %s\n", m.Notice)
			}
		}
		if w.StartedAt != nil {
			fmt.Fprintf(stdout, "started:  %s\n", when(w.StartedAt))
		}
		if w.EndedAt != nil {
			fmt.Fprintf(stdout, "ended:    %s\n", when(w.EndedAt))
		}
		if w.Attempts > 0 {
			fmt.Fprintf(stdout, "ran:      %s over %d attempt%s\n", ran(w.RanSeconds), w.Attempts, map[bool]string{true: "s"}[w.Attempts != 1])
		}
		if w.ExitCode != nil {
			fmt.Fprintf(stdout, "exit:     %d\n", *w.ExitCode)
		}
		if w.Actions != nil && len(*w.Actions) > 0 {
			// What its lifecycle allows now, as the server says, by verb.
			var verbs []string
			for _, a := range *w.Actions {
				v := string(a)
				if a == model.WorkloadActionsDelete {
					v = "rm"
				}
				verbs = append(verbs, v)
			}
			fmt.Fprintf(stdout, "next:     gantry %s %s\n", strings.Join(verbs, "|"), w.Id)
		}
		if w.Url != nil {
			fmt.Fprintf(stdout, "url:      %s\n", *w.Url)
		}
	})
}

// changeCmd is stop, start and rm.
func changeCmd(ctx context.Context, verb string, args []string, stdout, stderr io.Writer) error {
	fs := flags("gantry "+verb, stderr)
	srv := fs.String("server", "", "Gantry server URL")
	cl, id, err := oneArgument(ctx, fs, args, srv, "gantry "+verb+" ID")
	if err != nil {
		return err
	}
	switch verb {
	case "stop":
		resp, err := cl.StopWorkloadWithResponse(ctx, id)
		if err := ok(resp, err); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: %s\n", id, describe(*resp.JSON200))
	case "start":
		resp, err := cl.StartWorkloadWithResponse(ctx, id)
		if err := ok(resp, err); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: %s\n", id, describe(*resp.JSON200))
	case "rm":
		resp, err := cl.DeleteWorkloadWithResponse(ctx, id)
		if err := ok(resp, err); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: deleted\n", id)
	}
	return nil
}

// decideCmd approves or denies a launch held for approval.
func decideCmd(ctx context.Context, verb string, args []string, stdout, stderr io.Writer) error {
	fs := flags("gantry "+verb, stderr)
	srv := fs.String("server", "", "Gantry server URL")
	reason := fs.String("reason", "", "why (required; the requester and the audit log read it)")
	cl, id, err := oneArgument(ctx, fs, args, srv, "gantry "+verb+" ID --reason TEXT")
	if err != nil {
		return err
	}
	if strings.TrimSpace(*reason) == "" {
		return usageError{"gantry " + verb + " ID --reason TEXT"}
	}
	in := model.DecisionRequest{Reason: *reason}
	var w *model.Workload
	if verb == "approve" {
		resp, err := cl.ApproveWorkloadWithResponse(ctx, id, in)
		if err := ok(resp, err); err != nil {
			return err
		}
		w = resp.JSON200
	} else {
		resp, err := cl.DenyWorkloadWithResponse(ctx, id, in)
		if err := ok(resp, err); err != nil {
			return err
		}
		w = resp.JSON200
	}
	fmt.Fprintf(stdout, "%s: %s\n", w.Id, describe(*w))
	return nil
}

// estimateCmd prices a launch without making it.
func estimateCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("gantry estimate", stderr)
	srv := fs.String("server", "", "Gantry server URL")
	request := launchFlags(fs)
	minMem := fs.Float64("min-memory", 0, "list every class and profile with at least this many GiB per GPU, cheapest first")
	output := fs.String("o", "", "output: json")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	req, err := request(rest, "gantry estimate TEMPLATE --team TEAM [--gpu CLASS[:COUNT]] [--mig PROFILE] [--cpu-only] [--set k=v]... [--min-memory GIB]")
	if err != nil {
		return err
	}
	cl, _, err := remote(ctx, *srv)
	if err != nil {
		return err
	}
	params := &model.EstimateWorkloadParams{}
	if *minMem > 0 {
		params.MinMemoryGiB = minMem
	}
	resp, err := cl.EstimateWorkloadWithResponse(ctx, params, req)
	if err := ok(resp, err); err != nil {
		return err
	}
	e := *resp.JSON200
	return show(stdout, *output, e, func() {
		if e.Gpu.Class == gpu.CPUClass {
			fmt.Fprintf(stdout, "CPU only: $%.2f/h", e.PricePerHour)
		} else {
			fmt.Fprintf(stdout, "%s × %d%s: $%.2f/h", e.Gpu.Class, e.Gpu.Count, prefixed(" ", deref(e.Gpu.MigProfile)), e.PricePerHour)
		}
		if e.Spot && e.OnDemandPerHour != nil {
			fmt.Fprintf(stdout, " on spot (on demand $%.2f/h)", *e.OnDemandPerHour)
		}
		if e.CostAtMaxRuntime != nil {
			fmt.Fprintf(stdout, ", $%.2f over its max runtime of %s", *e.CostAtMaxRuntime, deref(e.MaxRuntime))
		}
		switch {
		case e.Gpu.Class != gpu.CPUClass:
			fmt.Fprintf(stdout, "\nquota: %.3g of %.3g GPUs in use\n", e.QuotaUsed, e.Quota)
		case e.Quota > 0:
			fmt.Fprintf(stdout, "\nquota: %.3g of %.3g cores in use\n", e.QuotaUsed, e.Quota)
		default:
			fmt.Fprintln(stdout)
		}
		if b := e.Budget; b != nil {
			fmt.Fprintf(stdout, "budget: $%.2f of $%.2f spent (%s)\n", b.Spent, b.Amount, b.State)
		}
		if e.StartsNow {
			fmt.Fprintln(stdout, "starts now")
		} else {
			fmt.Fprintf(stdout, "does not start now: %s\n", deref(e.Why))
		}
		if e.Options != nil {
			for _, o := range *e.Options {
				fmt.Fprintf(stdout, "  %-10s %-8s %5.1f GiB  $%.2f/h%s\n", o.Gpu.Class, deref(o.Gpu.MigProfile), o.MemoryGiB, o.PricePerHour, map[bool]string{true: " spot"}[o.Spot])
			}
		}
	})
}

// costCmd prints showback over a period.
func costCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("gantry cost", stderr)
	srv := fs.String("server", "", "Gantry server URL")
	by := fs.String("by", "team", "group by team, user, template, gpuClass, costCenter, nodeGroup or cluster")
	since := fs.Duration("since", 0, "the period's length back from now (default: this month)")
	output := fs.String("o", "", "output: json")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	cl, _, err := remote(ctx, *srv)
	if err != nil {
		return err
	}
	g := model.GetCostsParamsGroupBy(*by)
	params := &model.GetCostsParams{GroupBy: &g}
	if *since > 0 {
		from := time.Now().Add(-*since)
		params.From = &from
	}
	resp, err := cl.GetCostsWithResponse(ctx, params)
	if err := ok(resp, err); err != nil {
		return err
	}
	c := *resp.JSON200
	return show(stdout, *output, c, func() {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "%s\tCOST\tUSED\tIDLE\tUNMEASURED\tGPU-HOURS\tWORKLOADS\tKWH\tFACILITY-KWH\n", strings.ToUpper(c.GroupBy))
		for _, l := range c.Items {
			fmt.Fprintf(tw, "%s\t$%.2f\t$%.2f\t$%.2f\t$%.2f\t%.1f\t%d\t%.1f\t%.1f\n", orDash(l.Key), l.Cost, l.Used, l.Idle, l.Unmeasured, l.GpuHours, l.Workloads, l.KWh, l.FacilityKWh)
		}
		fmt.Fprintf(tw, "total\t$%.2f\t$%.2f\t$%.2f\t$%.2f\t\t\t%.1f\t%.1f\n", c.Total, c.Used, c.Idle, c.Unmeasured, c.KWh, c.FacilityKWh)
		tw.Flush()
		if c.CarbonSource != nil {
			fmt.Fprintf(stdout, "carbon: %.1f kg CO2e of the facility's energy, by %s", deref(c.KgCO2e), *c.CarbonSource)
			if u := deref(c.UnratedKWh); u > 0 {
				fmt.Fprintf(stdout, " (%.1f kWh in hours it had no figure for, left out)", u)
			}
			fmt.Fprintln(stdout)
		}
		if c.Reserved != nil && len(*c.Reserved) > 0 {
			fmt.Fprintln(stdout, "\nReserved node groups (paid whether used or not; idle is the platform's cost):")
			tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NODE GROUP\tCLASS\tNODES\tCOST\tCHARGED\tIDLE\tGPU-HOURS USED")
			for _, r := range *c.Reserved {
				fmt.Fprintf(tw, "%s\t%s\t%d\t$%.2f\t$%.2f\t$%.2f\t%.1f of %.1f\n", r.NodeGroup, r.GpuClass, r.Nodes, r.Cost, r.Charged, r.Idle, r.UsedGpuHours, r.GpuHours)
			}
			tw.Flush()
		}
		if c.Warm != nil && len(*c.Warm) > 0 {
			fmt.Fprintln(stdout, "\nMachines kept warm ahead of the forecast (the platform's cost):")
			tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NODE GROUP\tCLASS\tCOST\tGPU-HOURS")
			for _, w := range *c.Warm {
				fmt.Fprintf(tw, "%s\t%s\t$%.2f\t%.1f\n", w.NodeGroup, w.GpuClass, w.Cost, w.GpuHours)
			}
			tw.Flush()
		}
		if c.PlatformIdle != nil {
			fmt.Fprintf(stdout, "\nplatform idle cost: $%.2f\n", *c.PlatformIdle)
		}
	})
}

// show prints v as JSON with -o json, else as text says it.
func show(stdout io.Writer, output string, v any, text func()) error {
	if output == "json" {
		return json.NewEncoder(stdout).Encode(v)
	}
	text()
	return nil
}

// ownerText is the owner as people read them: the name the provider gave
// (with the stable issuer#subject after it, when long), else the subject.
func ownerText(w model.Workload, long bool) string {
	name := printable(deref(w.OwnerName))
	switch {
	case name == "":
		return printable(w.Owner)
	case long:
		return name + " (" + printable(w.Owner) + ")"
	}
	return name
}

func gpuText(w model.Workload) string {
	if w.Gpu.Class == gpu.CPUClass {
		return "CPU only"
	}
	s := fmt.Sprintf("%s×%d", w.Gpu.Class, w.Gpu.Count)
	if p := deref(w.Gpu.MigProfile); p != "" {
		s += " " + p
	}
	return s
}

func age(t time.Time) string {
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// when is a moment in local time to the second, "-" for none.
func when(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

// ran is a running time as 1h2m3s ("-" for none).
func ran(seconds float64) string {
	if seconds <= 0 {
		return "-"
	}
	return (time.Duration(seconds) * time.Second).String()
}

// exit is an exit code, "-" when not known.
func exit(code *int) string {
	if code == nil {
		return "-"
	}
	return fmt.Sprint(*code)
}

// typed reads a --set value as the JSON it would be: a number, a boolean,
// else a string.
func typed(v string) any {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return n
	}
	if b, err := strconv.ParseBool(v); err == nil && (v == "true" || v == "false") {
		return b
	}
	return v
}

func newKey() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func prefixed(p, s string) string {
	if s == "" {
		return ""
	}
	return p + s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// logsCmd prints, or with -f follows, a workload's log.
func logsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("gantry logs", stderr)
	srv := fs.String("server", "", "Gantry server URL")
	followLog := fs.Bool("f", false, "follow: keep printing new lines")
	tail := fs.Int("tail", 0, "only the last N lines")
	cl, id, err := oneArgument(ctx, fs, args, srv, "gantry logs ID [-f] [--tail N]")
	if err != nil {
		return err
	}
	params := &model.GetWorkloadLogsParams{}
	if *followLog {
		params.Follow = followLog
	}
	if *tail > 0 {
		params.TailLines = tail
	}
	// The raw client: a followed log is streamed, not read whole.
	resp, err := cl.ClientInterface.(*client.Client).GetWorkloadLogs(ctx, id, params)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return problem(resp.StatusCode, b)
	}
	_, err = io.Copy(stdout, resp.Body)
	if ctx.Err() != nil {
		return nil // interrupted while following
	}
	return err
}

// eventsCmd prints a workload's Kubernetes events.
func eventsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("gantry events", stderr)
	srv := fs.String("server", "", "Gantry server URL")
	output := fs.String("o", "", "output: json")
	cl, id, err := oneArgument(ctx, fs, args, srv, "gantry events ID")
	if err != nil {
		return err
	}
	resp, err := cl.ListWorkloadEventsWithResponse(ctx, id)
	if err := ok(resp, err); err != nil {
		return err
	}
	return show(stdout, *output, resp.JSON200.Items, func() {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TIME\tTYPE\tREASON\tOBJECT\tMESSAGE")
		for _, e := range resp.JSON200.Items {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Time.Local().Format(time.TimeOnly), e.Type, e.Reason, e.Object, e.Message)
		}
		tw.Flush()
	})
}

// tokensCmd creates, lists and revokes the caller's personal access tokens.
func tokensCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{"gantry tokens create|ls|revoke"}
	}
	fs := flags("gantry tokens "+args[0], stderr)
	srv := fs.String("server", "", "Gantry server URL")
	name := fs.String("name", "cli", "create: the token's name")
	days := fs.Int("days", 30, "create: days until it expires")
	teamName := fs.String("team", "", "create: narrow it to one team")
	readOnly := fs.Bool("read-only", false, "create: reads only")
	rest, err := parse(fs, args[1:])
	if err != nil {
		return err
	}
	cl, _, err := remote(ctx, *srv)
	if err != nil {
		return err
	}
	switch args[0] {
	case "create":
		req := model.TokenRequest{Name: *name, ExpiresInDays: *days}
		if *teamName != "" {
			req.Team = teamName
		}
		if *readOnly {
			req.ReadOnly = readOnly
		}
		resp, err := cl.CreateTokenWithResponse(ctx, req)
		if err := ok(resp, err); err != nil {
			return err
		}
		created := resp.JSON201
		if created == nil {
			return errors.New("the server's answer carried no token")
		}
		fmt.Fprintln(stderr, "token "+created.Id+" (shown once; keep it secret):")
		fmt.Fprintln(stdout, created.Token)
	case "ls":
		resp, err := cl.ListTokensWithResponse(ctx)
		if err := ok(resp, err); err != nil {
			return err
		}
		_, err = stdout.Write(append(resp.Body, '\n'))
		return err
	case "revoke":
		if len(rest) != 1 {
			return usageError{"gantry tokens revoke ID"}
		}
		resp, err := cl.RevokeTokenWithResponse(ctx, rest[0])
		if err := ok(resp, err); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: revoked\n", rest[0])
	default:
		return usageError{"gantry tokens create|ls|revoke"}
	}
	return nil
}

// catalogCmd is templates ls|show against a server.
func catalogCmd(ctx context.Context, sub string, args []string, stdout, stderr io.Writer) error {
	fs := flags("gantry templates "+sub, stderr)
	srv := fs.String("server", "", "Gantry server URL")
	output := fs.String("o", "", "output: json")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	cl, _, err := remote(ctx, *srv)
	if err != nil {
		return err
	}
	if sub == "ls" {
		resp, err := cl.ListTemplatesWithResponse(ctx)
		if err := ok(resp, err); err != nil {
			return err
		}
		return show(stdout, *output, resp.JSON200.Items, func() {
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tVERSION\tKIND\tTITLE")
			for _, v := range resp.JSON200.Items {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", v.Name, v.Version, v.Template.Spec.Workload, v.Template.Metadata.Title)
			}
			tw.Flush()
		})
	}
	if len(rest) != 1 {
		return usageError{"gantry templates show NAME"}
	}
	resp, err := cl.GetTemplateWithResponse(ctx, rest[0], &model.GetTemplateParams{})
	if err := ok(resp, err); err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(resp.JSON200)
}

// adviceCmd prints a workload's findings, or the caller's teams' open
// advice, biggest dollars first.
func adviceCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("gantry advice", stderr)
	srv := fs.String("server", "", "Gantry server URL")
	output := fs.String("o", "", "output: json")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	cl, _, err := remote(ctx, *srv)
	if err != nil {
		return err
	}
	line := func(w io.Writer, f model.Finding) {
		fmt.Fprintf(w, "%s\t%s\t$%.0f/mo\t%s\n", f.Kind, f.Severity, f.MonthlyUSD, f.Reason)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	if len(rest) == 1 {
		resp, err := cl.GetWorkloadAdviceWithResponse(ctx, rest[0])
		if err := ok(resp, err); err != nil {
			return err
		}
		return show(stdout, *output, resp.JSON200, func() {
			fmt.Fprintln(tw, "KIND\tSEVERITY\tSAVES\tWHY")
			for _, f := range resp.JSON200.Findings {
				line(tw, f)
			}
			tw.Flush()
		})
	}
	resp, err := cl.ListAdviceWithResponse(ctx, &model.ListAdviceParams{})
	if err := ok(resp, err); err != nil {
		return err
	}
	return show(stdout, *output, resp.JSON200, func() {
		fmt.Fprintln(tw, "WORKLOAD\tKIND\tSEVERITY\tSAVES\tWHY")
		for _, it := range resp.JSON200.Items {
			fmt.Fprintf(tw, "%s\t", it.Workload)
			line(tw, it.Finding)
		}
		tw.Flush()
	})
}

// oneArgument parses a command's flags and its one argument (an id, a
// name), and signs in to the server: the preamble of most verbs.
func oneArgument(ctx context.Context, fs *flag.FlagSet, args []string, server *string, usage string) (*client.ClientWithResponses, string, error) {
	cl, arg, _, err := oneArgumentTo(ctx, fs, args, server, usage)
	return cl, arg, err
}

// oneArgumentTo is oneArgument that also says which server it talks to.
func oneArgumentTo(ctx context.Context, fs *flag.FlagSet, args []string, server *string, usage string) (*client.ClientWithResponses, string, string, error) {
	rest, err := parse(fs, args)
	if err != nil {
		return nil, "", "", err
	}
	if len(rest) != 1 {
		return nil, "", "", usageError{usage}
	}
	cl, target, err := remote(ctx, *server)
	return cl, rest[0], target, err
}

// launchFlags defines the flags a launch request is made of (a launch's,
// an estimate's) and returns what builds the request from them and the
// command's one argument, the template.
func launchFlags(fs *flag.FlagSet) func(rest []string, usage string) (model.LaunchRequest, error) {
	teamName := fs.String("team", "", "the team (required)")
	gpu := fs.String("gpu", "", "GPU class and count, CLASS[:COUNT] (default: the template's)")
	mig := fs.String("mig", "", `MIG profile such as 1g.10gb, or "none" for whole GPUs (default: the template's)`)
	cpuOnly := fs.Bool("cpu-only", false, "the template's CPU-only choice: no GPU, on the CPU nodes, priced per core-hour")
	var sets multiFlag
	fs.Var(&sets, "set", "a parameter, k=v (repeatable)")
	return func(rest []string, usage string) (model.LaunchRequest, error) {
		if len(rest) != 1 || *teamName == "" {
			return model.LaunchRequest{}, usageError{usage}
		}
		req := model.LaunchRequest{Template: rest[0], Team: *teamName}
		var err error
		if req.Gpu, err = gpuChoice(*gpu, *mig); err != nil {
			return req, err
		}
		if *cpuOnly {
			if req.Gpu != nil {
				return req, usageError{"--cpu-only takes no --gpu or --mig"}
			}
			req.CpuOnly = cpuOnly
		}
		req.Parameters, err = setParams(sets)
		return req, err
	}
}

// setParams reads --set k=v flags into parameters (nil: none given).
func setParams(sets multiFlag) (*model.Parameters, error) {
	if len(sets) == 0 {
		return nil, nil
	}
	p := model.Parameters{}
	for _, kv := range sets {
		k, v, found := strings.Cut(kv, "=")
		if !found || k == "" {
			return nil, usageError{fmt.Sprintf("--set %q: want name=value", kv)}
		}
		p[k] = typed(v)
	}
	return &p, nil
}

// answered is what a create answered: the new object (201) or, repeated
// under its Idempotency-Key, the first one (200).
func answered[T any](created, repeated *T, what string) (*T, error) {
	if created != nil {
		return created, nil
	}
	if repeated != nil {
		return repeated, nil
	}
	return nil, errors.New("the server's answer carried no " + what)
}

// gpuChoice reads --gpu CLASS[:COUNT] and --mig PROFILE (nil: the
// template's defaults).
func gpuChoice(gpu, mig string) (*model.GPUChoice, error) {
	if gpu == "" && mig == "" {
		return nil, nil
	}
	c := &model.GPUChoice{}
	if gpu != "" {
		class, count, found := strings.Cut(gpu, ":")
		c.Class = &class
		if found {
			n, err := strconv.Atoi(count)
			if err != nil || n < 1 {
				return nil, usageError{fmt.Sprintf("--gpu %q: the count after : must be a positive number", gpu)}
			}
			c.Count = &n
		}
	}
	if mig != "" {
		c.MigProfile = &mig
	}
	return c, nil
}

// progressCmd shows how far a training run is: its step of its total, its
// pace and when it will finish, its latest metrics.
func progressCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("gantry progress", stderr)
	srv := fs.String("server", "", "Gantry server URL")
	output := fs.String("o", "", "output: json")
	cl, id, err := oneArgument(ctx, fs, args, srv, "gantry progress ID")
	if err != nil {
		return err
	}
	resp, err := cl.GetWorkloadProgressWithResponse(ctx, id, &model.GetWorkloadProgressParams{Limit: new(0)})
	if err := ok(resp, err); err != nil {
		return err
	}
	p := resp.JSON200
	return show(stdout, *output, p, func() {
		if !p.Reported {
			fmt.Fprintln(stdout, "no progress reported (a training Job reports with gantry.run.report; see docs/runs.md)")
			return
		}
		fmt.Fprintln(stdout, progressLine(*p))
		if r := deref(p.Restarts); r > 0 {
			fmt.Fprintf(stdout, "restarted %d time(s)", r)
			if p.ResumedFrom != nil {
				fmt.Fprintf(stdout, "; resumed from step %d", *p.ResumedFrom)
			}
			fmt.Fprintln(stdout)
		}
		m := deref(p.Metrics)
		names := make([]string, 0, len(m))
		for k := range m {
			names = append(names, k)
		}
		sort.Strings(names)
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		for _, k := range names {
			fmt.Fprintf(tw, "  %s\t%.6g\n", k, m[k])
		}
		tw.Flush()
		fmt.Fprintf(stdout, "last report %s\n", deref(p.ReportedAt).Local().Format(time.DateTime))
		if v := p.Verdict; v != nil {
			fmt.Fprintf(stdout, "early stopping (%s, %s) at %s: %s\n", v.Rule, v.Action, v.At.Local().Format(time.DateTime), v.Reason)
		}
		if p.KeptBy != nil {
			fmt.Fprintf(stdout, "kept going by %s at %s: its rules judge it no more\n", *p.KeptBy, deref(p.KeptAt).Local().Format(time.DateTime))
		} else if p.Verdict != nil {
			fmt.Fprintf(stdout, "keep it going: gantry keep %s\n", id)
		}
	})
}

// keepCmd keeps a training run going whatever its early-stopping rules say.
func keepCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("gantry keep", stderr)
	srv := fs.String("server", "", "Gantry server URL")
	cl, id, err := oneArgument(ctx, fs, args, srv, "gantry keep ID")
	if err != nil {
		return err
	}
	resp, err := cl.KeepRunWithResponse(ctx, id)
	if err := ok(resp, err); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: kept going; its early-stopping rules judge it no more\n", id)
	return nil
}

// progressCell is a run's progress in a table: "40% ETA 10:42", "step 7"
// without a total, "-" when it reported nothing.
func progressCell(p *model.Progress) string {
	switch {
	case p == nil || !p.Reported:
		return "-"
	case p.Fraction == nil:
		return fmt.Sprintf("step %d", deref(p.Step))
	case p.Eta != nil && *p.Fraction < 1:
		return fmt.Sprintf("%.0f%% ETA %s", 100**p.Fraction, p.Eta.Local().Format("15:04"))
	}
	return fmt.Sprintf("%.0f%%", 100**p.Fraction)
}

// progressLine is "step 120 of 300 (40%), 2.1 steps/s, about 1m26s left
// (ETA 10:42:07)", as far as the run said.
func progressLine(p model.Progress) string {
	s := fmt.Sprintf("step %d", deref(p.Step))
	if p.TotalSteps != nil {
		s += fmt.Sprintf(" of %d (%.0f%%)", *p.TotalSteps, 100*deref(p.Fraction))
	}
	if p.StepsPerSecond != nil {
		s += fmt.Sprintf(", %.3g steps/s", *p.StepsPerSecond)
	}
	if p.RemainingSeconds != nil && p.Eta != nil {
		s += fmt.Sprintf(", about %s left (ETA %s)", (time.Duration(*p.RemainingSeconds) * time.Second).String(), p.Eta.Local().Format(time.TimeOnly))
	}
	return s
}
