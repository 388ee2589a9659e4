package advice

import (
	"math"
	"math/rand/v2"
	"reflect"
	"sort"
	"testing"

	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/replay"
)

// trainingTrace is the public half of Alibaba's GenAI trace, kept gzipped
// under testdata (a copy of ../shared/data/genai-train), read with its own
// timestamps.
func trainingTrace(t testing.TB) *replay.Trace {
	t.Helper()
	tr, err := LoadTrace("testdata/genai-train")
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func h100(t testing.TB) gpu.Class {
	t.Helper()
	classes, err := gpu.LoadFile("../../templates/gpu-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, ok := classes.Get("H100-80GB")
	if !ok {
		t.Fatal("no H100-80GB class")
	}
	return c
}

// simple right-sizing rules of the reference points, each deciding
// once per pod with hindsight or after a window.
func hindsight(tr *replay.Trace, ps []Profile) []Decision {
	var out []Decision
	for _, pod := range tr.Pods {
		pts := points(tr.Series[pod], memory)
		if len(pts) == 0 {
			continue
		}
		peak := 0.0
		for _, p := range pts {
			peak = math.Max(peak, p.MemBytes/(1<<30))
		}
		out = append(out, Decision{Pod: pod, T: pts[0].T - 1, Action: Resize, Profile: fitIn(ps, peak)})
	}
	return out
}

func fitIn(ps []Profile, gib float64) string {
	for _, p := range ps {
		if gib <= underFill*p.MemGiB {
			return p.Name
		}
	}
	return ps[len(ps)-1].Name
}

// firstWindow: at the end of the pod's first hours, the peak so far ×
// factor (pods shorter than the window are left alone).
func firstWindow(tr *replay.Trace, ps []Profile, hours, factor float64) []Decision {
	var out []Decision
	for _, pod := range tr.Pods {
		pts := points(tr.Series[pod], memory)
		if len(pts) == 0 {
			continue
		}
		end := pts[0].T + int64(hours*3600)
		if pts[len(pts)-1].T < end {
			continue
		}
		peak := 0.0
		for _, p := range pts {
			if p.T < end {
				peak = math.Max(peak, p.MemBytes/(1<<30))
			}
		}
		out = append(out, Decision{Pod: pod, T: end - 1, Action: Resize, Profile: fitIn(ps, peak*factor)})
	}
	return out
}

// firstHourMoveUp: the first hour's peak × 1.5, then up one profile (by
// memory) whenever memory passes 70 % of the slice, from that sample on.
func firstHourMoveUp(tr *replay.Trace, ps []Profile) []Decision {
	// up is the next profile by memory (the cheapest of the next size).
	up := func(p Profile) (Profile, bool) {
		var best Profile
		for _, q := range ps {
			if q.MemGiB > p.MemGiB && (best.Name == "" || q.MemGiB < best.MemGiB || q.MemGiB == best.MemGiB && q.Share < best.Share) {
				best = q
			}
		}
		return best, best.Name != ""
	}
	var out []Decision
	for _, d := range firstWindow(tr, ps, 1, 1.5) {
		cur := Profile{}
		for _, p := range ps {
			if p.Name == d.Profile {
				cur = p
			}
		}
		out = append(out, d)
		for _, p := range points(tr.Series[d.Pod], memory) {
			if p.T <= d.T || p.MemBytes <= 0.7*cur.MemGiB*(1<<30) {
				continue
			}
			next, ok := up(cur)
			if !ok {
				break
			}
			out = append(out, Decision{Pod: d.Pod, T: p.T - 1, Action: Resize, Profile: next.Name})
			cur = next
		}
	}
	return out
}

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

// TestReferencePoints: the scorer reproduces the reference points
// for the same simple rules on the training half.
func TestReferencePoints(t *testing.T) {
	tr := trainingTrace(t)
	ps := Profiles(h100(t))
	for _, tc := range []struct {
		name         string
		ds           []Decision
		saved, under float64
		tol          float64
	}{
		{"perfect hindsight", hindsight(tr, ps), 0.254, 0, 0.001},
		{"peak of the first hour × 1.1", firstWindow(tr, ps, 1, 1.1), 0.481, 0.421, 0.001},
		// Ours saves 27.8 %: the reference's 27.5 % decides a little
		// differently for pods near the window's end; under-provisioning
		// agrees exactly.
		{"first 3 h × 1.25", firstWindow(tr, ps, 3, 1.25), 0.275, 0.237, 0.004},
	} {
		s := ScoreDecisions(tr, tc.ds, ps)
		if !near(s.Saved, tc.saved, tc.tol) || !near(s.UnderProvisioned, tc.under, 0.001) {
			t.Errorf("%s: saved %.3f, under-provisioned %.3f; the reference says %.3f and %.3f", tc.name, s.Saved, s.UnderProvisioned, tc.saved, tc.under)
		}
	}
	// The best simple rule with ≤ 2 % under-provisioned: 6.2 % saved (ours
	// 6.4 %; the reference counts a move up from the sample that triggers it,
	// as this rule's decisions do).
	if s := ScoreDecisions(tr, firstHourMoveUp(tr, ps), ps); !near(s.Saved, 0.062, 0.003) || s.UnderProvisioned > 0.02 {
		t.Errorf("first hour × 1.5 moving up at 70 %%: saved %.3f, under-provisioned %.3f; the reference says 0.062 at ≤ 0.02", s.Saved, s.UnderProvisioned)
	}
	s := ScoreDecisions(tr, nil, ps)
	if !near(s.ReclaimableH, 450.4, 0.05) || s.Pods != 76 {
		t.Errorf("reclaimable %.2f h over %d pods, the reference says 450.4 h (76 pods)", s.ReclaimableH, s.Pods)
	}
	for _, tc := range []struct {
		minutes   int64
		stops     int
		hours     float64
		falseRate float64
	}{{30, 344, 264.1, 0.512}, {120, 47, 99.3, 0.064}} {
		s := scoreIdle(tr, FixedTimeout(tr, tc.minutes))
		if s.Stops != tc.stops || !near(s.ReclaimedH, tc.hours, 0.05) || !near(float64(s.FalseStops)/float64(s.Stops), tc.falseRate, 0.0005) {
			t.Errorf("fixed %d min: %d stops, %.1f h, %.3f false; the reference says %d, %.1f, %.3f", tc.minutes, s.Stops, s.ReclaimedH, float64(s.FalseStops)/float64(s.Stops), tc.stops, tc.hours, tc.falseRate)
		}
	}
}

// TestRulesOnTheTrainingTrace: Gantry's rules, online, scored on the
// training half, meet the targets: right-sizing saves ≥ 10 % of
// the GPU share with ≤ 2 % of pods under-provisioned; idle reclaims ≥ 50 %
// of the reclaimable hours with ≤ 0.4 × the fixed timeouts' false stops.
func TestRulesOnTheTrainingTrace(t *testing.T) {
	tr := trainingTrace(t)
	c := h100(t)
	e, err := NewEngine(c, DefaultRules)
	if err != nil {
		t.Fatal(err)
	}
	ds := Replay(tr, e, 0)
	s := ScoreDecisions(tr, ds, Profiles(c))
	t.Logf("saved %.1f %% with %.1f %% under-provisioned (%d of %d pods resized); idle: %d stops, %d false, %.1f of %.1f h reclaimed (%.0f %%), %.2f × the fixed timeouts' false stops",
		100*s.Saved, 100*s.UnderProvisioned, s.Resized, s.Pods, s.Stops, s.FalseStops, s.ReclaimedH, s.ReclaimableH, 100*s.ReclaimedShare, s.FalseRatio)
	if s.UnderProvisioned > 0.02 || s.Saved < 0.10 {
		t.Errorf("right-sizing saved %.3f with %.3f under-provisioned; the target is ≥ 0.10 at ≤ 0.02", s.Saved, s.UnderProvisioned)
	}
	if s.ReclaimedShare < 0.5 || s.FalseRatio > 0.4 {
		t.Errorf("idle: reclaimed %.3f of the reclaimable hours with %.3f × the line's false stops; the target is ≥ 0.5 at ≤ 0.4", s.ReclaimedShare, s.FalseRatio)
	}
}

// TestRulesOnFleetSubsets stands in for the pods advice is scored on but
// never saw: each third of the training pods, replayed as a fleet of its
// own, stays within the under-provisioning bound and saves close to the
// whole trace's share. (The rules' numbers were chosen on the whole
// training half; a subset has a different fleet rhythm to learn.)
func TestRulesOnFleetSubsets(t *testing.T) {
	full := trainingTrace(t)
	c := h100(t)
	for k := range 3 {
		tr := &replay.Trace{Series: full.Series, Start: full.Start}
		for i, p := range full.Pods {
			if i%3 == k {
				tr.Pods = append(tr.Pods, p)
			}
		}
		e, err := NewEngine(c, DefaultRules)
		if err != nil {
			t.Fatal(err)
		}
		s := ScoreDecisions(tr, Replay(tr, e, 0), Profiles(c))
		t.Logf("third %d (%d pods): saved %.1f %% with %.1f %% under-provisioned; idle %.0f %% reclaimed at %.2f × the line's false stops",
			k, s.Pods, 100*s.Saved, 100*s.UnderProvisioned, 100*s.ReclaimedShare, s.FalseRatio)
		if s.UnderProvisioned > 0.02 || s.Saved < 0.08 {
			t.Errorf("third %d: saved %.3f with %.3f under-provisioned", k, s.Saved, s.UnderProvisioned)
		}
	}
}

// BenchmarkIdleOnRandomFleets scores the idle rule as held-out pods are
// scored — on a fleet it was not chosen on — over the training pods split
// at random into thirds, eight splits (24 fleets of about 25 pods, each
// replayed as a fleet of its own). It reports the reclaimed share and the
// false-stop ratio on average, the worst ratio and how many fleets miss
// the target (≥ 50 % reclaimed at ≤ 0.4 × the fixed timeouts' false
// stops). docs/advice.md has the figures.
//
//	go test -run '^$' -bench IdleOnRandomFleets -benchtime 1x ./internal/advice
func BenchmarkIdleOnRandomFleets(b *testing.B) {
	full := trainingTrace(b)
	c := h100(b)
	for b.Loop() {
		var reclaimed, ratio, worst float64
		n, missed := 0, 0
		for seed := range uint64(8) {
			r := rand.New(rand.NewPCG(seed, 7))
			fleets := make([]*replay.Trace, 3)
			for i := range fleets {
				fleets[i] = &replay.Trace{Series: full.Series, Start: full.Start}
			}
			for j, i := range r.Perm(len(full.Pods)) {
				fleets[j%3].Pods = append(fleets[j%3].Pods, full.Pods[i])
			}
			for _, tr := range fleets {
				e, err := NewEngine(c, DefaultRules)
				if err != nil {
					b.Fatal(err)
				}
				s := ScoreDecisions(tr, Replay(tr, e, 0), Profiles(c))
				reclaimed += s.ReclaimedShare
				ratio += s.FalseRatio
				worst = max(worst, s.FalseRatio)
				if s.ReclaimedShare < 0.5 || s.FalseRatio > 0.4 {
					missed++
				}
				n++
			}
		}
		b.ReportMetric(100*reclaimed/float64(n), "reclaimed-%")
		b.ReportMetric(ratio/float64(n), "false-ratio")
		b.ReportMetric(worst, "worst-false-ratio")
		b.ReportMetric(float64(missed), "fleets-missing")
		b.ReportMetric(float64(n), "fleets")
	}
}

// TestCausal: a trace cut at T gives exactly the decisions before T that
// the full trace gives.
func TestCausal(t *testing.T) {
	tr := trainingTrace(t)
	c := h100(t)
	run := func(cut int64) []Decision {
		e, _ := NewEngine(c, DefaultRules)
		return Replay(tr, e, cut)
	}
	full := run(0)
	for _, cut := range []int64{3600, 5 * 3600, 12*3600 + 17, 20 * 3600} {
		var want []Decision
		for _, d := range full {
			if d.T < cut {
				want = append(want, d)
			}
		}
		got := run(cut)
		sort.SliceStable(got, func(i, j int) bool { return got[i].T < got[j].T })
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("cut at %d s: %d decisions, the full run had %d before it", cut, len(got), len(want))
		}
		if len(want) == 0 {
			t.Fatalf("no decisions before %d s: the test proves nothing", cut)
		}
	}
}
