package replay

import (
	"math"
	"strings"
	"testing"
)

// TestMIGFor: MIG instances get their memory by profile (DESIGN.md's
// table: memory share 1/8, 2/8, 4/8, 4/8, 8/8) and their slices of 7.
func TestMIGFor(t *testing.T) {
	const a100_40, h100, h200 = 40960, 81559, 143771
	for _, tc := range []struct {
		gpu      float64
		profile  string
		memShare float64 // of the GPU's memory
		compute  float64 // slices
		err      string
	}{
		{a100_40, "1g.5gb", 1.0 / 8, 1, ""},
		{a100_40, "1g.10gb", 2.0 / 8, 1, ""},
		{a100_40, "2g.10gb", 2.0 / 8, 2, ""},
		{a100_40, "3g.20gb", 4.0 / 8, 3, ""},
		{a100_40, "4g.20gb", 4.0 / 8, 4, ""},
		{a100_40, "7g.40gb", 1, 7, ""},
		{h100, "1g.10gb", 1.0 / 8, 1, ""},
		{h100, "1g.20gb", 2.0 / 8, 1, ""},
		{h100, "2g.20gb", 2.0 / 8, 2, ""},
		{h100, "3g.40gb", 4.0 / 8, 3, ""},
		{h100, "4g.40gb", 4.0 / 8, 4, ""},
		{h100, "7g.80gb", 1, 7, ""},
		{h200, "1g.18gb", 1.0 / 8, 1, ""},
		{h200, "1g.35gb", 2.0 / 8, 1, ""},
		{h200, "3g.71gb", 4.0 / 8, 3, ""},
		{h200, "7g.141gb", 1, 7, ""},
		{a100_40, "7g.80gb", 0, 0, "does not fit"},
		{h100, "8g.80gb", 0, 0, "not <slices>g.<GB>gb"},
		{h100, "1g.10GB", 0, 0, "not <slices>g.<GB>gb"},
		{0, "1g.10gb", 0, 0, "memory is unknown"},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			m, err := MIGFor(tc.gpu, tc.profile)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("%+v, %v; want an error with %q", m, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.Profile != tc.profile || m.MemoryMiB != math.Floor(tc.gpu*tc.memShare) || m.MemoryMiB > tc.gpu || m.ComputeShare != tc.compute/7 {
				t.Fatalf("%+v; want memory %v of %v MiB, %v/7 compute", m, tc.memShare, tc.gpu, tc.compute)
			}
		})
	}
}
