package advice

import (
	"slices"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/telemetry"
)

// series is one device's metric: a point a minute, value v(i).
type series struct {
	dev string
	m   telemetry.Metric
	v   func(i int) float64
}

func flat(x float64) func(int) float64 { return func(int) float64 { return x } }

// input is n minutes of the series on an H100, launched as count GPUs of
// profile (whole GPUs when "").
func input(t *testing.T, n int, profile string, count int, ss ...series) Input {
	t.Helper()
	start := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	in := Input{Workload: "w1", Class: h100(t), Count: count, Profile: profile, Template: "tpl", Step: time.Minute,
		Allowed: []string{"1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb"}, From: start, To: start.Add(time.Duration(n) * time.Minute)}
	for _, s := range ss {
		out := telemetry.Series{Metric: s.m, Device: telemetry.Device{GPU: s.dev}}
		for i := 0; i < n; i++ {
			v := s.v(i)
			out.Points = append(out.Points, telemetry.Point{T: start.Add(time.Duration(i) * time.Minute), Avg: v, Max: v, P95: v, N: 1})
		}
		in.Series = append(in.Series, out)
	}
	return in
}

type ruleCase struct {
	name string
	in   Input
	want []string // kinds, in order
	last bool
}

// runRule checks one rule alone on each case.
func runRule(t *testing.T, judge func(*facts) ([]Finding, bool), cases []ruleCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			found, last := judge(measure(tc.in))
			if got := kinds(found); !slices.Equal(got, tc.want) {
				t.Errorf("kinds %v, want %v", got, tc.want)
			}
			if last != tc.last {
				t.Errorf("last = %v, want %v", last, tc.last)
			}
			for _, f := range found {
				if f.Reason == "" || f.Action == "" {
					t.Errorf("%s without a reason or action: %+v", f.Kind, f)
				}
			}
		})
	}
}

const gib = 1024.0 // MiB

func TestRules(t *testing.T) {
	sm := func(v func(int) float64) series { return series{"GPU-1", telemetry.SMActive, v} }
	fb := func(mib float64) series { return series{"GPU-1", telemetry.FBUsed, flat(mib)} }
	fbTotal := series{"GPU-1", telemetry.FBTotal, flat(80 * gib)}
	// busy in bursts: near zero one minute in four.
	bursty := func(i int) float64 {
		if i%4 == 0 {
			return 0
		}
		return 0.9
	}
	t.Run("unhealthy", func(t *testing.T) {
		sick := input(t, 60, "", 1, sm(flat(0.9)))
		sick.Unhealthy = []string{"critical XID 79", "double-bit ECC"}
		runRule(t, unhealthyRule, []ruleCase{
			{"healthy", input(t, 60, "", 1, sm(flat(0.9))), nil, false},
			{"two reasons, two findings", sick, []string{KindUnhealthy, KindUnhealthy}, false},
		})
	})
	t.Run("stalled-run", func(t *testing.T) {
		stalled := input(t, 5, "", 1) // no samples to speak of: the run's verdict stands alone
		stalled.Stalled = &Stalled{Rule: "plateau", Reason: "val_loss flat for 5 reports; $37.00 so far, $120.00 to finish", At: stalled.From}
		runRule(t, stalledRule, []ruleCase{
			{"no verdict", input(t, 60, "", 1, sm(flat(0.9))), nil, false},
			{"stalled, with no GPU samples", stalled, []string{KindStalledRun}, false},
		})
	})
	t.Run("enough-data", func(t *testing.T) {
		runRule(t, enoughDataRule, []ruleCase{
			{"no series", input(t, 60, "", 1), []string{KindTooLittleSamples}, true},
			{"five minutes", input(t, 5, "", 1, sm(flat(0.9))), []string{KindTooLittleSamples}, true},
			{"ten minutes", input(t, 10, "", 1, sm(flat(0.9))), nil, false},
			{"utilization stands in for SM activity", input(t, 60, "", 1, series{"GPU-1", telemetry.GPUUtil, flat(50)}), nil, false},
		})
	})
	t.Run("idle", func(t *testing.T) {
		runRule(t, idleRule, []ruleCase{
			{"no kernel", input(t, 60, "", 1, sm(flat(0))), []string{KindIdle}, true},
			{"at the threshold", input(t, 60, "", 1, sm(flat(idleSM))), []string{KindIdle}, true},
			{"busy now and then", input(t, 60, "", 1, sm(func(i int) float64 { return float64(i%10) / 10 })), nil, false},
			{"utilization 0 %", input(t, 60, "", 1, series{"GPU-1", telemetry.GPUUtil, flat(0)}), []string{KindIdle}, true},
		})
	})
	t.Run("memory", func(t *testing.T) {
		runRule(t, memoryRule, []ruleCase{
			{"no memory series", input(t, 180, "", 1, sm(flat(0.1))), nil, false},
			{"near OOM on a whole GPU", input(t, 60, "", 1, sm(flat(0.9)), fb(79*gib), fbTotal), []string{KindNearOOM}, false},
			{"small peak, short window: too soon to right-size", input(t, 60, "", 1, sm(flat(0.1)), fb(4*gib), fbTotal), nil, false},
			{"small peak, low activity, 3 h: a smaller profile", input(t, 180, "", 1, sm(flat(0.1)), fb(4*gib), fbTotal), []string{KindOverProvisioned}, false},
			{"small peak, busy: stays", input(t, 180, "", 1, sm(flat(0.9)), fb(4*gib), fbTotal), nil, false},
			{"large peak: stays", input(t, 180, "", 1, sm(flat(0.1)), fb(60*gib), fbTotal), nil, false},
		})
		oom := input(t, 60, "1g.10gb", 1, sm(flat(0.9)), series{"GPU-1", telemetry.FBUsed, flat(9.9 * gib)}, series{"GPU-1", telemetry.FBTotal, flat(10 * gib)})
		f, _ := memoryRule(measure(oom))
		if len(f) != 1 || f[0].Recommend == nil || f[0].Recommend.Profile != "1g.20gb" || f[0].MonthlyUSD >= 0 {
			t.Errorf("near OOM on 1g.10gb: want the next allowed profile up at a cost, got %+v", f)
		}
	})
	t.Run("fewer-gpus", func(t *testing.T) {
		two := func(second float64) Input {
			return input(t, 60, "", 2, sm(flat(0.9)), series{"GPU-2", telemetry.SMActive, flat(second)})
		}
		runRule(t, fewerGPUsRule, []ruleCase{
			{"one GPU", input(t, 60, "", 1, sm(flat(0.9))), nil, false},
			{"both busy", two(0.8), nil, false},
			{"one of two idle", two(0), []string{KindFewerGPUs}, false},
		})
	})
	t.Run("bottleneck", func(t *testing.T) {
		dram := func(v float64) series { return series{"GPU-1", telemetry.DRAMActive, flat(v)} }
		runRule(t, bottleneckRule, []ruleCase{
			{"steady and busy", input(t, 60, "", 1, sm(flat(0.9))), nil, false},
			{"bursts: input-starved", input(t, 60, "", 1, sm(bursty)), []string{KindInputStarved}, false},
			{"DRAM busy, SM not: memory bound", input(t, 60, "", 1, sm(flat(0.6)), dram(0.7)), []string{KindMemoryBound}, false},
			{"DRAM busy, SM busy too", input(t, 60, "", 1, sm(flat(0.9)), dram(0.7)), nil, false},
		})
	})
	t.Run("interconnect", func(t *testing.T) {
		link := func(rx, tx telemetry.Metric, each float64) []series {
			return []series{{"GPU-1", rx, flat(each)}, {"GPU-1", tx, flat(each)}}
		}
		runRule(t, interconnectRule, []ruleCase{
			{"no link series", input(t, 60, "", 1, sm(flat(0.3))), nil, false},
			{"PCIe busy, SM low", input(t, 60, "", 1, append(link(telemetry.PCIeRX, telemetry.PCIeTX, 25e9), sm(flat(0.3)))...), []string{KindInterconnect}, false},
			{"PCIe busy, SM busy", input(t, 60, "", 1, append(link(telemetry.PCIeRX, telemetry.PCIeTX, 25e9), sm(flat(0.9)))...), nil, false},
			{"NVLink busy, SM low", input(t, 60, "", 1, append(link(telemetry.NVLinkRX, telemetry.NVLinkTX, 200e9), sm(flat(0.3)))...), []string{KindInterconnect}, false},
		})
	})
	t.Run("well-used", func(t *testing.T) {
		runRule(t, wellUsedRule, []ruleCase{
			{"p50 0.9", input(t, 60, "", 1, sm(flat(0.9))), []string{KindWellUsed}, false},
			{"p50 0.5", input(t, 60, "", 1, sm(flat(0.5))), nil, false},
		})
	})
	t.Run("tensor-unused", func(t *testing.T) {
		tensor := func(v float64) series { return series{"GPU-1", telemetry.TensorActive, flat(v)} }
		runRule(t, tensorUnusedRule, []ruleCase{
			{"busy, no tensor cores", input(t, 60, "", 1, sm(flat(0.7)), tensor(0)), []string{KindTensorUnused}, false},
			{"busy on tensor cores", input(t, 60, "", 1, sm(flat(0.7)), tensor(0.4)), nil, false},
			{"not busy", input(t, 60, "", 1, sm(flat(0.1)), tensor(0)), nil, false},
			{"not measured", input(t, 60, "", 1, sm(flat(0.7))), nil, false},
		})
	})
	t.Run("throttled", func(t *testing.T) {
		runRule(t, throttledRule, []ruleCase{
			{"power-capped half the time", input(t, 60, "", 1, sm(flat(0.9)), series{"GPU-1", telemetry.PowerThrottled, func(i int) float64 { return float64(i % 2) }}), []string{KindThrottled}, false},
			{"hot a tenth of the time", input(t, 60, "", 1, sm(flat(0.9)), series{"GPU-1", telemetry.ThermalThrottled, func(i int) float64 { return float64(min(1, i%10/9)) }}), []string{KindThrottled}, false},
			{"never", input(t, 60, "", 1, sm(flat(0.9)), series{"GPU-1", telemetry.PowerThrottled, flat(0)}), nil, false},
		})
	})
}

// TestRuleOrder: the rules run in this order (a new one adds its table to
// TestRules), and those that end judging end it.
func TestRuleOrder(t *testing.T) {
	var names []string
	for _, r := range rules {
		names = append(names, r.name)
	}
	want := []string{"unhealthy", "stalled-run", "enough-data", "idle", "memory", "fewer-gpus", "bottleneck", "interconnect", "well-used", "tensor-unused", "throttled"}
	if !slices.Equal(names, want) {
		t.Fatalf("rules %v, want %v (add the new rule's table to TestRules)", names, want)
	}
	// The rules that end judging end it: an idle GPU gets no other finding
	// but an unhealthy one.
	in := input(t, 60, "", 1, sm0())
	in.Unhealthy = []string{"XID 79"}
	if got := kinds(Advise(in)); !slices.Equal(got, []string{KindUnhealthy, KindIdle}) {
		t.Fatalf("idle and unhealthy: %v", got)
	}
}

func sm0() series { return series{"GPU-1", telemetry.SMActive, flat(0)} }
