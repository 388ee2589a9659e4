package quantity

import (
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, good := range []string{"1", "64Gi", "500m", "1e3", "1E3", "2.5", "1.5Ti", "+1", "1e-3", "100M"} {
		if _, err := Parse(good); err != nil {
			t.Errorf("Parse(%q): %v", good, err)
		}
	}
	// Each of these would spin in math/big for minutes, or is not a quantity.
	for _, bad := range []string{"1E8000000000", "1e8000000000", "000000000001000000000000000000000000000E0000008000000000",
		"1e25", "1e-25", "1E+99", "", "Gi", "1Gi1", "1 Gi", "1e", "0x10"} {
		start := time.Now()
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("Parse(%q) took %v", bad, d)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"64Gi", "1e3", "1E8000000000", "500m", ".5", "-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		start := time.Now()
		q, err := Parse(s)
		if d := time.Since(start); d > time.Second {
			t.Fatalf("Parse(%q) took %v", s, d)
		}
		if err == nil {
			_ = q.String()
		}
	})
}
