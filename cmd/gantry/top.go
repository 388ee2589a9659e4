package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/gantryhq/gantry/api/client"
	"github.com/gantryhq/gantry/api/model"
)

// isTerminal says whether w is a terminal (progress spinners and screen
// redraws only there; pipes and files get plain lines).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// topRow is one running workload's GPU use over the last minutes.
type topRow struct {
	ID           string  `json:"id"`
	Name         string  `json:"name"`
	Team         string  `json:"team"`
	GPU          string  `json:"gpu"`
	GPUUtil      float64 `json:"gpuUtil"`      // percent, mean over its GPUs at the latest point
	SMActive     float64 `json:"smActive"`     // ratio
	MemUsedMiB   float64 `json:"memUsedMiB"`   // summed over its GPUs
	MemTotalMiB  float64 `json:"memTotalMiB"`  // summed over its GPUs
	PricePerHour float64 `json:"pricePerHour"` // USD
	CostSoFar    float64 `json:"costSoFar"`    // USD
	Measured     bool    `json:"measured"`     // false: no reading in the window yet
	// Progress is what a Job's run reported of itself ("40% ETA 10:42",
	// "step 120"; "-": nothing).
	Progress string `json:"progress"`
}

// topCmd shows the live GPU use of the caller's running workloads.
func topCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("gantry top", stderr)
	srv := fs.String("server", "", "Gantry server URL")
	teamName := fs.String("team", "", "only this team's")
	watch := fs.Duration("watch", 0, "redraw this often (5s, 1m); 0: once")
	output := fs.String("o", "", "output: json")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if *watch != 0 && *watch < time.Second {
		return usageError{"gantry top: --watch must be at least 1s"}
	}
	cl, _, err := remote(ctx, *srv)
	if err != nil {
		return err
	}
	for {
		rows, err := topRows(ctx, cl, *teamName)
		if err != nil {
			return err
		}
		if *output == "json" {
			if err := json.NewEncoder(stdout).Encode(rows); err != nil {
				return err
			}
		} else {
			if *watch != 0 && isTerminal(stdout) {
				fmt.Fprint(stdout, "\x1b[H\x1b[2J") // home, clear
			}
			printTop(stdout, rows)
		}
		if *watch == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(*watch):
		}
	}
}

func topRows(ctx context.Context, cl *client.ClientWithResponses, teamName string) ([]topRow, error) {
	running := model.Running
	params := &model.ListWorkloadsParams{Status: &running}
	if teamName != "" {
		params.Team = &teamName
	}
	resp, err := cl.ListWorkloadsWithResponse(ctx, params)
	if err := ok(resp, err); err != nil {
		return nil, err
	}
	from := time.Now().Add(-5 * time.Minute)
	series := "gpu_util,sm_active,fb_used,fb_total"
	step := "1m"
	rows := []topRow{}
	for _, w := range resp.JSON200.Items {
		r := topRow{ID: w.Id, Name: w.Name, Team: w.Team, GPU: gpuText(w), PricePerHour: w.PricePerHour, CostSoFar: w.CostSoFar, Progress: progressCell(w.Progress)}
		m, err := cl.GetWorkloadMetricsWithResponse(ctx, w.Id, &model.GetWorkloadMetricsParams{From: &from, Series: &series, Step: &step})
		if err := ok(m, err); err != nil {
			return nil, err
		}
		utils, sms := 0, 0
		for _, s := range m.JSON200.Series {
			if len(s.Points) == 0 {
				continue
			}
			p := s.Points[len(s.Points)-1]
			r.Measured = true
			switch s.Metric {
			case "gpu_util":
				r.GPUUtil += p.Avg
				utils++
			case "sm_active":
				r.SMActive += p.Avg
				sms++
			case "fb_used":
				r.MemUsedMiB += p.Avg
			case "fb_total":
				r.MemTotalMiB += p.Avg
			}
		}
		if utils > 0 {
			r.GPUUtil /= float64(utils)
		}
		if sms > 0 {
			r.SMActive /= float64(sms)
		}
		rows = append(rows, r)
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].PricePerHour > rows[j].PricePerHour })
	return rows, nil
}

func printTop(w io.Writer, rows []topRow) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tTEAM\tGPU\tGPU UTIL\tSM ACTIVE\tMEMORY\tPROGRESS\t$/H\tCOST")
	for _, r := range rows {
		util, sm, mem := "-", "-", "-"
		if r.Measured {
			util = fmt.Sprintf("%.0f%%", r.GPUUtil)
			sm = fmt.Sprintf("%.0f%%", r.SMActive*100)
			if r.MemTotalMiB > 0 {
				mem = fmt.Sprintf("%.1f/%.0f GiB", r.MemUsedMiB/1024, r.MemTotalMiB/1024)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t$%.2f\t$%.2f\n", r.ID, r.Name, r.Team, r.GPU, util, sm, mem, r.Progress, r.PricePerHour, r.CostSoFar)
	}
	tw.Flush()
	if len(rows) == 0 {
		fmt.Fprintln(w, "no running workloads")
	}
}

// imagesCmd lists the server's approved image catalog.
func imagesCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "ls" {
		return usageError{"gantry images ls [-o json]"}
	}
	fs := flags("gantry images ls", stderr)
	srv := fs.String("server", "", "Gantry server URL")
	output := fs.String("o", "", "output: json")
	if _, err := parse(fs, args[1:]); err != nil {
		return err
	}
	cl, _, err := remote(ctx, *srv)
	if err != nil {
		return err
	}
	resp, err := cl.ListImagesWithResponse(ctx)
	if err := ok(resp, err); err != nil {
		return err
	}
	return show(stdout, *output, resp.JSON200.Items, func() {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tREPOSITORY\tLAYER\tCUDA\tGPU CLASSES\tSIGNED BY")
		for _, im := range resp.JSON200.Items {
			signer := "-"
			if k := im.Signing.Keys; k != nil && len(*k) > 0 {
				signer = "key " + (*k)[0].File
			} else if kl := im.Signing.Keyless; kl != nil {
				signer = kl.Subject
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%s\n", im.Name, im.Repository, im.Layer, deref(im.Cuda), im.GpuClasses, signer)
		}
		tw.Flush()
	})
}
