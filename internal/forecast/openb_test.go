package forecast

import (
	"strings"
	"testing"
	"time"
)

const openbHeader = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"

func TestReadOpenB(t *testing.T) {
	in := openbHeader +
		"openb-pod-0000,12000,16384,1,1000,,LS,Running,0,12537496,0\n" +
		"openb-pod-0001,6000,12288,1,460,V100M16|V100M32,LS,Running,427061,12902960,427061\n" +
		"openb-pod-0002,4000,8000,0,0,,BE,Succeeded,5,10,5\n" + // no GPU: left out
		"openb-pod-0003,88000,327680,8,1000,G3,Burstable,Succeeded,9437497,10769854,9437497\n"
	recs, err := ReadOpenB(strings.NewReader(in), "pods.csv", "")
	if err != nil {
		t.Fatal(err)
	}
	want := []Record{
		{Created: time.Unix(0, 0).UTC(), Ended: time.Unix(12537496, 0).UTC(), GPUs: 1, Kind: "1/1000/12000/16384/LS"},
		{Created: time.Unix(427061, 0).UTC(), Ended: time.Unix(12902960, 0).UTC(), GPUs: 0.46, Kind: "1/460/6000/12288/LS"},
		{Created: time.Unix(9437497, 0).UTC(), Ended: time.Unix(10769854, 0).UTC(), GPUs: 8, Kind: "8/1000/88000/327680/Burstable"},
	}
	if len(recs) != len(want) {
		t.Fatalf("%d records, want %d: %+v", len(recs), len(want), recs)
	}
	for i := range want {
		if recs[i] != want[i] {
			t.Errorf("record %d: %+v, want %+v", i, recs[i], want[i])
		}
	}
	v100, err := ReadOpenB(strings.NewReader(in), "pods.csv", "V100M32")
	if err != nil {
		t.Fatal(err)
	}
	if len(v100) != 1 || v100[0].GPUs != 0.46 || v100[0].Class != "V100M32" {
		t.Errorf("class V100M32: %+v, want the one pod whose gpu_spec names it", v100)
	}
}

func TestReadOpenBErrors(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"", "pods.csv:1: reading the header"},
		{"name,num_gpu\n", `pods.csv:1: no "gpu_milli" column`},
		{openbHeader + "p,1,1,x,1000,,LS,Running,0,1,0\n", `pods.csv:2: num_gpu: "x" is not a count`},
		{openbHeader + "p,1,1,1,1000,,LS,Running,0,1,0\np,1,1,1,1000,,LS,Running,-5,1,0\n", `pods.csv:3: creation_time: "-5" is not a count`},
		{openbHeader + "p,1,1,1,1000,,LS,Running,10,5,0\n", "pods.csv:2: deletion_time 5 is before creation_time 10"},
		{openbHeader + "p,1,1,1,5000,,LS,Running,0,5,0\n", "pods.csv:2: num_gpu 1, gpu_milli 5000"},
		{openbHeader + "p,1,1\n", "pods.csv:2: record on line 2: wrong number of fields"},
	} {
		_, err := ReadOpenB(strings.NewReader(tc.in), "pods.csv", "")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error with %q", tc.in, err, tc.want)
		}
	}
}

// FuzzReadOpenB: any input gives records or an error with its place, never
// a panic; whatever is read replays.
func FuzzReadOpenB(f *testing.F) {
	f.Add(openbHeader + "openb-pod-0000,12000,16384,1,1000,,LS,Running,0,12537496,0\n")
	f.Add(openbHeader + "a,1,1,8,1000,G3|V100M32,BE,Failed,100,7300,200\nb,1,1,1,220,,BE,Running,200,,\n")
	f.Fuzz(func(t *testing.T, in string) {
		recs, err := ReadOpenB(strings.NewReader(in), "fuzz.csv", "")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.csv:") {
				t.Fatalf("error without its place: %v", err)
			}
			return
		}
		if len(recs) > 50 {
			return
		}
		h := NewHistory(recs)
		if err := Replay(h, ReplayOptions{Warmup: time.Hour, Horizon: time.Hour, Step: 30 * time.Minute, Every: 6 * time.Hour}, func(pts []Point) error {
			for _, p := range pts {
				if p.Lo > p.GPUs || p.GPUs > p.Hi || p.Lo < 0 {
					t.Fatalf("point %+v: out of order", p)
				}
			}
			return nil
		}); err != nil && !strings.Contains(err.Error(), "origins every") {
			t.Fatal(err)
		}
	})
}
