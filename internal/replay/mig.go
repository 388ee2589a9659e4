package replay

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
)

var migName = regexp.MustCompile(`^([1-7])g\.(\d+)gb$`)

// migMemShares are the memory shares a MIG instance can have: its memory
// slices of 8 (1g: 1, 1g double-memory and 2g: 2, 3g and 4g: 4, 7g: 8).
var migMemShares = []float64{1.0 / 8, 2.0 / 8, 4.0 / 8, 1}

// MIGFor is a MIG instance of profile (e.g. "1g.10gb") on a GPU with
// gpuMemoryMiB of memory: its compute share is its slices of 7, its memory
// the GPU's times the memory share (1/8, 2/8, 4/8 or 8/8, as NVIDIA's MIG
// profiles cut it) that the profile's nominal size comes nearest to. The
// caller sets its UUID and instance id.
func MIGFor(gpuMemoryMiB float64, profile string) (MIG, error) {
	m := migName.FindStringSubmatch(profile)
	if m == nil {
		return MIG{}, fmt.Errorf("MIG profile %q: not <slices>g.<GB>gb", profile)
	}
	if gpuMemoryMiB <= 0 {
		return MIG{}, fmt.Errorf("MIG profile %s: the GPU's memory is unknown", profile)
	}
	slices, _ := strconv.Atoi(m[1])
	gb, _ := strconv.ParseFloat(m[2], 64)
	want := gb * 1024 / gpuMemoryMiB
	share := migMemShares[0]
	for _, s := range migMemShares {
		if math.Abs(s-want) < math.Abs(share-want) {
			share = s
		}
	}
	if want > 1.1 || math.Abs(share-want) > share/2 {
		return MIG{}, fmt.Errorf("MIG profile %s does not fit a GPU with %.0f MiB", profile, gpuMemoryMiB)
	}
	return MIG{Profile: profile, MemoryMiB: math.Floor(gpuMemoryMiB * share), ComputeShare: float64(slices) / 7}, nil
}
