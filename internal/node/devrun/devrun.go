// Package devrun plays gantry dev's simulated training runs: a trial's run
// (package trial) that is Running on the local kwok cluster has no
// container to train in, so this loop reports its progress for it, as its
// pod would, at the step time a per-class model gives. Trials on the
// simulated fleet then measure something that differs by class and GPU
// count the way real hardware does. The model, and where its figures come
// from, is Model's.
package devrun

import (
	"context"
	"errors"
	"hash/fnv"
	"log/slog"
	"math"
	"time"

	"k8s.io/utils/clock"

	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/runs"
	"github.com/gantryhq/gantry/internal/template"
	"github.com/gantryhq/gantry/internal/workload"
)

// Spec is a class's figures in the model: dense BF16 tensor throughput
// (TFLOPS) and memory bandwidth (GB/s), from NVIDIA's datasheets (A100:
// the A100 Tensor Core GPU datasheet, SXM4; H100: the H100 datasheet,
// SXM5; H200: the H200 product brief; L4: the L4 datasheet), and whether
// its GPUs talk over NVLink (else PCIe).
type Spec struct {
	TFLOPS, GBps float64
	NVLink       bool
}

// Classes are the figures of the starter catalog's classes.
var Classes = map[string]Spec{
	"A100-40GB":  {TFLOPS: 312, GBps: 1555, NVLink: true},
	"A100-80GB":  {TFLOPS: 312, GBps: 2039, NVLink: true},
	"H100-80GB":  {TFLOPS: 989, GBps: 3350, NVLink: true},
	"H200-141GB": {TFLOPS: 989, GBps: 4800, NVLink: true},
	"L4":         {TFLOPS: 121, GBps: 300},
}

// The model's constants: a reference step takes RefStep on an A100-80GB,
// ComputeShare of it bound by tensor throughput and the rest by memory
// bandwidth (a transformer's training step: mostly matrix multiplies,
// then optimizer, normalisation and attention reads); each doubling of
// the GPUs adds the all-reduce's share (NVLink or PCIe); a GPU's batch is
// BatchPerGPU samples, and the full run's FullSteps on one GPU are shared
// by the GPUs (data parallel: twice the GPUs, half the steps).
const (
	RefStep       = 1.0 // seconds
	ComputeShare  = 0.7
	NVLinkAllRed  = 0.06
	PCIeAllRed    = 0.20
	BatchPerGPU   = 64
	FullSteps     = 10000
	refClass      = "A100-80GB"
	jitterPercent = 3 // each step's time varies by up to this, deterministically
)

// Model is the seconds a step takes on gpus GPUs of class, and false for a
// class it has no figures for. On an A100-80GB, one GPU: 1 s; an H100:
// 0.7·312/989 + 0.3·2039/3350 = 0.40 s (2.5× — MLPerf Training's H100 to
// A100 gains are 2–3×, under the 3.2× of the tensor figures alone); two
// GPUs over NVLink: 6 % more a step.
func Model(class string, gpus int) (float64, bool) {
	s, ok := Classes[class]
	if !ok || gpus < 1 {
		return 0, false
	}
	allReduce := PCIeAllRed
	if s.NVLink {
		allReduce = NVLinkAllRed
	}
	return stepOn(s, 1, 1) * (1 + allReduce*math.Log2(float64(gpus))), true
}

// SliceModel is the seconds a step takes on one MIG slice of class: its
// tensor throughput in proportion to the slice's share of the SMs
// (sevenths) and its memory bandwidth to its share of the memory (eighths),
// the resources NVIDIA's MIG user guide gives a slice. A 3g.40gb of an
// H100-80GB (3/7, 4/8): 0.7·312·7/(989·3) + 0.3·2039·2/3350 = 0.88 s,
// against 0.40 s for the whole GPU at about half its price; a 7g.80gb is
// the whole GPU.
func SliceModel(class string, p gpu.MIGProfile) (float64, bool) {
	s, ok := Classes[class]
	if !ok || p.ComputeShare() <= 0 || p.MemoryShare() <= 0 {
		return 0, false
	}
	return stepOn(s, min(p.ComputeShare(), 1), min(p.MemoryShare(), 1)), true
}

// stepOn is a step's seconds on one GPU of s with these shares of its
// tensor throughput and memory bandwidth.
func stepOn(s Spec, compute, memory float64) float64 {
	ref := Classes[refClass]
	return RefStep * (ComputeShare*ref.TFLOPS/(s.TFLOPS*compute) + (1-ComputeShare)*ref.GBps/(s.GBps*memory))
}

// Workloads lists the Running workloads (as Gantry).
type Workloads interface {
	ListWorkloads(ctx context.Context, f workload.Filter) ([]workload.Workload, error)
	Namespace(w workload.Workload) string
}

// Reporter takes a run's reports (runs.Service).
type Reporter interface {
	Report(ctx context.Context, id string, rs []runs.Report) (runs.Summary, error)
}

// Options configure the loop; every field but Interval, Clock and Log is
// required.
type Options struct {
	Workloads Workloads
	Runs      Reporter
	Classes   *gpu.Catalog  // a MIG slice's shares
	Interval  time.Duration // default 5 s
	Clock     clock.WithTicker
	Log       *slog.Logger
}

// Run reports for the Running trial runs every interval until ctx ends.
func Run(ctx context.Context, o Options) error {
	if o.Workloads == nil || o.Runs == nil || o.Classes == nil {
		return errors.New("devrun: Workloads, Runs and Classes are required")
	}
	if o.Interval == 0 {
		o.Interval = 5 * time.Second
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	p := &player{o: o, last: map[string]int64{}}
	t := o.Clock.NewTicker(o.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			if err := p.Pass(ctx); err != nil && ctx.Err() == nil {
				o.Log.Warn("simulated training runs: a pass failed", "err", err)
			}
		}
	}
}

// player remembers the step it last reported for each run.
type player struct {
	o    Options
	last map[string]int64
}

// Pass reports, for each Running trial run, the steps it has made since
// its last report: one report per step between, each at the time the
// model says it ended (from when the run began running).
func (p *player) Pass(ctx context.Context) error {
	ws, err := p.o.Workloads.ListWorkloads(ctx, workload.Filter{Status: workload.Running, Limit: workload.MaxLimit})
	if err != nil {
		return err
	}
	now := p.o.Clock.Now()
	seen := map[string]bool{}
	for _, w := range ws {
		if w.Trial == nil || w.RunningSince.IsZero() {
			continue
		}
		seen[w.ID] = true
		step, ok := p.model(w)
		if !ok {
			continue // no figures: the run reports nothing, as a run without the reporter
		}
		rs := plan(w, step, p.last[w.ID], now)
		if len(rs) == 0 {
			continue
		}
		ctx := identity.With(ctx, identity.Identity{Via: identity.ViaRun, Workload: w.ID, Pod: p.o.Workloads.Namespace(w) + "/devrun-" + w.ID})
		if _, err := p.o.Runs.Report(ctx, w.ID, rs); err != nil {
			p.o.Log.Warn("simulated training run: report refused", "workload_id", w.ID, "err", err)
			continue
		}
		p.last[w.ID] = rs[len(rs)-1].Step
	}
	for id := range p.last {
		if !seen[id] {
			delete(p.last, id)
		}
	}
	return nil
}

// model is the seconds a step of w takes: on its whole GPUs, or on its
// MIG slice (one the catalog no longer names is not modelled).
func (p *player) model(w workload.Workload) (float64, bool) {
	if w.MIGProfile == "" || w.MIGProfile == template.NoMIG {
		return Model(w.GPUClass, w.GPUCount)
	}
	cl, ok := p.o.Classes.Get(w.GPUClass)
	if !ok {
		return 0, false
	}
	prof, ok := cl.Profile(w.MIGProfile)
	if !ok {
		return 0, false
	}
	return SliceModel(w.GPUClass, prof)
}

// plan is the reports of w's steps after last up to now (at most the
// report limit of one request, and none past its trial's steps), a step
// taking about step seconds.
func plan(w workload.Workload, step float64, last int64, now time.Time) []runs.Report {
	gpus := max(w.GPUCount, 1)
	total := int64(FullSteps / gpus)
	end := total
	if w.Trial != nil && w.Trial.Steps < end {
		end = w.Trial.Steps // as a script that reads GANTRY_TRIAL_STEPS ends there
	}
	at := w.RunningSince
	var rs []runs.Report
	for s := int64(1); s <= end && len(rs) < runs.MaxReports; s++ {
		d := step * (1 + jitter(w.ID, s))
		at = at.Add(time.Duration(d * float64(time.Second)))
		if at.After(now) {
			break
		}
		if s <= last {
			continue
		}
		rs = append(rs, runs.Report{Time: at, Step: s, TotalSteps: total, Epoch: math.NaN(), ResumedFrom: -1, Metrics: map[string]float64{
			"loss":          2.5 * math.Pow(float64(s), -0.3),
			"samples_per_s": BatchPerGPU * float64(gpus) / d,
		}})
	}
	return rs
}

// jitter is a step's deterministic variation, within ±jitterPercent %.
func jitter(id string, step int64) float64 {
	h := fnv.New32a()
	h.Write([]byte(id))
	var b [8]byte
	for i := range b {
		b[i] = byte(step >> (8 * i))
	}
	h.Write(b[:])
	return (float64(h.Sum32()%2001)/1000 - 1) * jitterPercent / 100
}
