package advice

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestLull: while the fleet is quiet, pods on the whole GPU are sized to
// their peak; one whose memory rises goes back to the whole GPU until it
// has stayed low for LullHold; when the fleet wakes, every pod sized in the
// lull goes back at once.
func TestLull(t *testing.T) {
	e, err := NewEngine(h100(t), DefaultRules)
	if err != nil {
		t.Fatal(err)
	}
	const gib = 1 << 30
	pods := []string{"a", "b", "c"}
	var ds []Decision
	var bumpEnd int64
	for m := int64(0); m < 6*60; m++ {
		tt := m * 60
		for _, pod := range pods {
			duty, mem := 50.0, 20.0
			switch {
			case m == 12:
				mem = 30 // the peak every pod saw, after its warm-up
			case m >= 60 && m < 300:
				duty = 0 // the fleet's quiet hours
			}
			if pod == "b" && m >= 200 && m < 210 {
				mem = 28 // passes MoveUp of a 40 GiB slice during the lull
				bumpEnd = tt
			}
			ds = append(ds, e.Observe(pod, Obs{T: tt, Duty: duty, MemBytes: mem * gib})...)
		}
	}
	byPod := map[string][]Decision{}
	for _, d := range ds {
		if d.Action == Resize {
			byPod[d.Pod] = append(byPod[d.Pod], d)
		}
	}
	profiles := func(pod string) []string {
		var out []string
		for _, d := range byPod[pod] {
			out = append(out, d.Profile)
		}
		return out
	}
	// Warm-up (20 GiB × 1.2), the move up at 30 GiB, the lull (30 × 1.05),
	// the wake.
	want := []string{"3g.40gb", "7g.80gb", "3g.40gb", "7g.80gb"}
	for _, pod := range []string{"a", "c"} {
		if got := profiles(pod); !slices.Equal(got, want) {
			t.Fatalf("%s: %v, want %v", pod, got, want)
		}
	}
	wantB := []string{"3g.40gb", "7g.80gb", "3g.40gb", "7g.80gb", "3g.40gb", "7g.80gb"}
	if got := profiles("b"); !slices.Equal(got, wantB) {
		t.Fatalf("b: %v, want %v", got, wantB)
	}
	b := byPod["b"]
	if back := b[4].T - bumpEnd; back < DefaultRules.LullHold {
		t.Errorf("b came back %d s after its memory fell, before LullHold", back)
	}
	// The lull starts once the quiet hour has been watched, and ends for
	// every pod at the same sample, soon after the fleet wakes.
	lullStart, wake := byPod["a"][2].T, byPod["a"][3].T
	if lullStart < 60*60 || lullStart > 2*60*60 {
		t.Errorf("lull began at minute %d", lullStart/60)
	}
	if wake < 300*60 || wake > 310*60 {
		t.Errorf("the fleet woke at minute 300; the lull ended at minute %d", wake/60)
	}
	if byPod["b"][5].T != wake || byPod["c"][3].T != wake {
		t.Errorf("lull ended at %d, %d and %d", wake, byPod["b"][5].T, byPod["c"][3].T)
	}
}

// TestSampleShareMatchesBruteForce: the sliding share of active samples
// equals a recount at every step.
func TestSampleShareMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	w := sampleShare{window: 600}
	type s struct {
		t      int64
		active bool
	}
	var all []s
	var now int64
	for i := 0; i < 20000; i++ {
		now += int64(r.IntN(20))
		act := r.IntN(4) == 0
		w.add(now, act)
		all = append(all, s{now, act})
		n, a := 0, 0
		for _, x := range all {
			if x.t > now-600 {
				n++
				if x.active {
					a++
				}
			}
		}
		want := 0.0
		if n > 0 {
			want = float64(a) / float64(n)
		}
		if got := w.share(now); got != want {
			t.Fatalf("step %d: %v, want %v", i, got, want)
		}
	}
}
