package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gantryhq/gantry/api/model"
)

// nodeGroupsCmd is `gantry nodes groups`: the node groups and what their
// machines are doing.
func nodeGroupsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cl, rest, output, err := verbWithOutput(ctx, "gantry nodes groups", args, stderr)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return usageError{"gantry nodes groups [-o json]"}
	}
	resp, err := cl.ListNodeGroupsWithResponse(ctx)
	if err := ok(resp, err); err != nil {
		return err
	}
	groups := resp.JSON200.Items
	return show(stdout, output, groups, func() {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "GROUP\tCLASS\tBOUGHT\tGPUS/MACHINE\tMIN-MAX\t$/MACHINE-HOUR\tWARM $/DAY\tNOW")
		for _, g := range groups {
			now := "not watched"
			if st := g.State; st != nil {
				now = fmt.Sprintf("%d joined, %d booting", st.Nodes, st.Booting)
				if st.Failed != nil {
					now += "; failed: " + *st.Failed
				}
			}
			warm := "-"
			if g.WarmPerDay != nil {
				warm = fmt.Sprintf("%.2f", *g.WarmPerDay)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d-%d\t%.2f\t%s\t%s\n", g.Name, g.Class, g.Purchase, g.GpusPerNode, g.Min, g.Max, g.PricePerNodeHour, warm, now)
		}
		if len(groups) == 0 {
			fmt.Fprintln(tw, "(no node groups declared)")
		}
		tw.Flush()
	})
}

// clustersCmd is `gantry nodes clusters`: the worker clusters and what each
// has free.
func clustersCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cl, rest, output, err := verbWithOutput(ctx, "gantry nodes clusters", args, stderr)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return usageError{"gantry nodes clusters [-o json]"}
	}
	resp, err := cl.ListClustersWithResponse(ctx)
	if err := ok(resp, err); err != nil {
		return err
	}
	items := resp.JSON200.Items
	return show(stdout, output, items, func() {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CLUSTER\tPROVIDER\tREGION\tOFFERS ($/GPU-H)\tLABELS\tNOW")
		for _, c := range items {
			var offers, labels []string
			for _, o := range c.Offers {
				offers = append(offers, fmt.Sprintf("%s %s %.2f", o.Class, o.Purchase, o.PricePerGPUHour))
			}
			if o := c.Cpu; o != nil {
				offers = append(offers, fmt.Sprintf("CPU %s %.3f/core-h", o.Purchase, o.PricePerCoreHour))
			}
			if c.Labels != nil {
				for _, k := range slices.Sorted(maps.Keys(*c.Labels)) {
					labels = append(labels, k+"="+(*c.Labels)[k])
				}
			}
			now := "not read yet"
			switch st := c.State; {
			case c.Cordoned:
				now = "cordoned"
			case st == nil:
			case !st.Reachable:
				now = "unreachable: " + deref(st.Why)
			default:
				var free []string
				for _, k := range slices.Sorted(maps.Keys(st.Free)) {
					free = append(free, fmt.Sprintf("%s %g", k, st.Free[k]))
				}
				if st.FreeMIG != nil {
					for _, k := range slices.Sorted(maps.Keys(*st.FreeMIG)) {
						for _, p := range slices.Sorted(maps.Keys((*st.FreeMIG)[k])) {
							free = append(free, fmt.Sprintf("%s %s %g", k, p, (*st.FreeMIG)[k][p]))
						}
					}
				}
				now = "free: " + strings.Join(free, ", ")
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.Name, c.Provider, c.Region, strings.Join(offers, "; "), strings.Join(labels, ","), now)
		}
		if len(items) == 0 {
			fmt.Fprintln(tw, "(no worker clusters: Gantry drives one cluster)")
			tw.Flush()
			return
		}
		tw.Flush()
		fmt.Fprintln(stdout)
		useTable(stdout, resp.JSON200.Quotas, items)
	})
}

// useTable writes each team's GPUs in use on each worker cluster beside its
// quota in force (a cluster's cap for the team in brackets): a row per team
// and class it has a quota or a cap of, or uses somewhere.
func useTable(w io.Writer, quotas map[string]map[string]float64, items []model.WorkerCluster) {
	used := func(c model.WorkerCluster) map[string]map[string]float64 {
		if c.State == nil || c.State.Used == nil {
			return nil
		}
		return *c.State.Used
	}
	rows := map[[2]string]bool{}
	for t, q := range quotas {
		for k := range q {
			rows[[2]string{t, k}] = true
		}
	}
	for _, c := range items {
		for t, u := range used(c) {
			for k := range u {
				rows[[2]string{t, k}] = true
			}
		}
		if c.Caps != nil {
			for t, cp := range *c.Caps {
				for k := range cp {
					rows[[2]string{t, k}] = true
				}
			}
		}
	}
	of := func(m map[string]float64, k string) (float64, bool) {
		if v, ok := m[k]; ok || k == "CPU" { // "*" is every GPU class, not cores
			return v, ok
		}
		v, ok := m["*"]
		return v, ok
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := []string{"TEAM", "CLASS", "QUOTA"}
	for _, c := range items {
		head = append(head, "ON "+strings.ToUpper(c.Name))
	}
	fmt.Fprintln(tw, strings.Join(append(head, "IN ALL"), "\t"))
	keys := slices.SortedFunc(maps.Keys(rows), func(a, b [2]string) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	for _, r := range keys {
		quota := "none"
		q, hasQuota := of(quotas[r[0]], r[1])
		if hasQuota {
			quota = fmt.Sprintf("%g", q)
		}
		cells := []string{r[0], r[1], quota}
		all := 0.0
		for _, c := range items {
			n := used(c)[r[0]][r[1]]
			all += n
			cell := fmt.Sprintf("%.4g", n)
			if c.Caps != nil {
				if cp, ok := of((*c.Caps)[r[0]], r[1]); ok {
					cell += fmt.Sprintf(" (cap %g)", cp)
				}
			}
			cells = append(cells, cell)
		}
		total := fmt.Sprintf("%.4g", all)
		if hasQuota && all > q+1e-9 {
			total += " (borrowing)"
		}
		fmt.Fprintln(tw, strings.Join(append(cells, total), "\t"))
	}
	tw.Flush()
}

// drainCmd is `gantry nodes drain-cluster NAME`.
func drainCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cl, rest, _, err := verbWithOutput(ctx, "gantry nodes drain-cluster", args, stderr)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usageError{"gantry nodes drain-cluster NAME"}
	}
	resp, err := cl.DrainClusterWithResponse(ctx, rest[0])
	if err := ok(resp, err); err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "cluster %s drained: no new work goes there, and its Jobs are moved to other clusters (uncordon-cluster ends it)\n", rest[0])
	return err
}

// cordonCmd is `gantry nodes cordon-cluster|uncordon-cluster NAME`.
func cordonCmd(cordon bool) func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	name := map[bool]string{true: "cordon-cluster", false: "uncordon-cluster"}[cordon]
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		cl, rest, _, err := verbWithOutput(ctx, "gantry nodes "+name, args, stderr)
		if err != nil {
			return err
		}
		if len(rest) != 1 {
			return usageError{"gantry nodes " + name + " NAME"}
		}
		if cordon {
			resp, err := cl.CordonClusterWithResponse(ctx, rest[0])
			if err := ok(resp, err); err != nil {
				return err
			}
			_, err = fmt.Fprintf(stdout, "cluster %s cordoned: no new work goes there\n", rest[0])
			return err
		}
		resp, err := cl.UncordonClusterWithResponse(ctx, rest[0])
		if err := ok(resp, err); err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "cluster %s is as its file says\n", rest[0])
		return err
	}
}

// setNodeGroupCmd is `gantry nodes set-group NAME --max N ...`: a node
// group's size, price or timings changed over the file's.
func setNodeGroupCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	const use = "gantry nodes set-group NAME [--max N] [--price USD] [--boot DUR] [--quiet DUR] [--warm-per-day USD]"
	fs := flags("gantry nodes set-group", stderr)
	srv := fs.String("server", "", "Gantry server URL")
	maxN := fs.Int("max", 0, "machines the group never goes above")
	price := fs.Float64("price", 0, "USD per machine-hour")
	boot := fs.Duration("boot", 0, "how long a new machine typically takes to join (whole seconds)")
	quiet := fs.Duration("quiet", 0, "how long an empty machine stays before it goes (whole seconds)")
	warm := fs.Float64("warm-per-day", 0, "USD a day machines kept warm may cost (0: never warmed)")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usageError{use}
	}
	var req model.NodeGroupRequest
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "max":
			req.Max = maxN
		case "price":
			req.PricePerNodeHour = price
		case "boot":
			req.BootTimeSeconds = new(int(boot.Seconds()))
		case "quiet":
			req.QuietTimeSeconds = new(int(quiet.Seconds()))
		case "warm-per-day":
			req.WarmPerDay = warm
		}
	})
	cl, _, err := remote(ctx, *srv)
	if err != nil {
		return err
	}
	resp, err := cl.SetNodeGroupWithResponse(ctx, rest[0], req)
	if err := ok(resp, err); err != nil {
		return err
	}
	// What is in force now: a change replaces an earlier one whole, so the
	// fields not given are the file's again.
	list, err := cl.ListNodeGroupsWithResponse(ctx)
	if err := ok(list, err); err != nil {
		return err
	}
	for _, g := range list.JSON200.Items {
		if g.Name == rest[0] {
			warm := "never warmed"
			if g.WarmPerDay != nil {
				warm = fmt.Sprintf("warm up to %.2f a day", *g.WarmPerDay)
			}
			fmt.Fprintf(stdout, "node group %s changed: max %d, %.2f a machine-hour, boot %ds, quiet %ds, %s (fields not given are the file's; `gantry nodes reset-group %s` goes back to it)\n",
				g.Name, g.Max, g.PricePerNodeHour, g.BootTimeSeconds, g.QuietTimeSeconds, warm, g.Name)
		}
	}
	return nil
}

// resetNodeGroupCmd is `gantry nodes reset-group NAME`.
func resetNodeGroupCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cl, rest, _, err := verbWithOutput(ctx, "gantry nodes reset-group", args, stderr)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usageError{"gantry nodes reset-group NAME"}
	}
	resp, err := cl.ResetNodeGroupWithResponse(ctx, rest[0])
	if err := ok(resp, err); err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "node group %s is as its file says\n", rest[0])
	return err
}

// forecastShowCmd is `gantry forecast show --class C`: a class's demand
// forecast from the server's launch history, and what reserving would save.
func forecastShowCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("gantry forecast show", stderr)
	srv := fs.String("server", "", "Gantry server URL")
	output := fs.String("o", "", "output: json")
	class := fs.String("class", "", "the GPU class (required)")
	horizon := fs.Duration("horizon", 2*time.Hour, "how far ahead (up to 12h)")
	step := fs.Duration("step", 10*time.Minute, "the step between points (1m to 1h)")
	share := fs.Float64("share", 0.9, "the reserved-size advice: the share of hours demand must stay at or above the level")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if *class == "" {
		return usageError{"gantry forecast show --class C [--horizon 2h] [--step 10m] [--share 0.9] [-o json]"}
	}
	cl, _, err := remote(ctx, *srv)
	if err != nil {
		return err
	}
	h, s := int(horizon.Minutes()), int(step.Minutes())
	resp, err := cl.GetCapacityForecastWithResponse(ctx, &model.GetCapacityForecastParams{Class: *class, HorizonMinutes: &h, StepMinutes: &s})
	if err := ok(resp, err); err != nil {
		return err
	}
	f := resp.JSON200
	// The advice is said when there is history to size on; a refusal (no
	// launches yet) is said in its place.
	adv, aerr := cl.GetReservedAdviceWithResponse(ctx, &model.GetReservedAdviceParams{Class: *class, Share: share})
	advErr := ok(adv, aerr)
	if *output == "json" {
		out := map[string]any{"forecast": f}
		if advErr == nil {
			out["reserved"] = adv.JSON200
		}
		return show(stdout, "json", out, nil)
	}
	return show(stdout, *output, f, func() {
		fmt.Fprintf(stdout, "%s: %.1f GPUs wanted now (from %d launches)\n", f.Class, f.Now, f.Launches)
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "AT\tGPUS\t10-90%\tDAY AGO\tWEEK AGO")
		for _, p := range f.Points {
			fmt.Fprintf(tw, "%s\t%.1f\t%.1f-%.1f\t%.1f\t%.1f\n", p.T.Local().Format("15:04"), p.Gpus, p.Lo, p.Hi, p.DayAgo, p.WeekAgo)
		}
		tw.Flush()
		if advErr != nil {
			fmt.Fprintf(stdout, "reserved: %v\n", advErr)
			return
		}
		r := adv.JSON200
		fmt.Fprintf(stdout, "reserved: demand stayed at or above %d GPUs in %.0f%% of the hours (%d reserved now)", r.Level, 100*r.Share, r.ReservedNow)
		if r.Priced {
			fmt.Fprintf(stdout, "; reserving %d saves %.2f a month against on-demand (best: %d, %.2f)", r.Level, r.SavingsPerMonth, r.Best, r.BestSavingsPerMonth)
		}
		fmt.Fprintln(stdout)
	})
}
