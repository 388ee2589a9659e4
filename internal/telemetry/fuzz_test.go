package telemetry

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
)

// FuzzBatch decodes arbitrary bytes as an agent's batch: a decoded batch is
// checked without panicking, and its values survive a round trip (NaN — not
// measured — stays out of the JSON, never a zero).
func FuzzBatch(f *testing.F) {
	f.Add([]byte(`{"node":"n1","readings":[{"t":"2026-11-30T10:00:00Z","device":{"gpu":"GPU-1","index":0},"pod":{"namespace":"a","pod":"b"},"share":0.5,"values":{"sm_active":0.4,"gpu_util":40}}]}`))
	f.Add([]byte(`{"node":"n1","readings":[{"values":{"DCGM_FI_DEV_FB_USED":1e300}}],"events":[{"gpu":"x","xid":79}]}`))
	f.Add([]byte(`{"readings":[{"values":{"nope":1}}]}`))
	f.Add([]byte(`{"readings":[{"device":{"gpu":"g","mig":{"uuid":""}},"share":-1,"values":{}}]}`))
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, data []byte) {
		var b Batch
		if err := json.Unmarshal(data, &b); err != nil {
			return
		}
		var errs fault.List
		for _, r := range b.Readings {
			checkReading(&errs, "r", r, now.Add(-48*time.Hour), now.Add(time.Minute))
			out, err := json.Marshal(r.Values)
			if err != nil {
				t.Fatalf("marshal %v: %v", r.Values, err)
			}
			var back Values
			if err := json.Unmarshal(out, &back); err != nil {
				t.Fatalf("unmarshal %s: %v", out, err)
			}
			for m := range back {
				a, z := r.Values[m], back[m]
				if math.IsInf(a, 0) {
					a = math.NaN() // infinities are not JSON: left out like NaN
				}
				if !(a == z || math.IsNaN(a) && math.IsNaN(z)) {
					t.Fatalf("%s: %v came back as %v", Metric(m), a, z)
				}
			}
		}
		_ = errs.Err()
	})
}
