package replay

import (
	"bufio"
	"bytes"
	"compress/gzip"
	_ "embed"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Trace is per-pod GPU series: duty cycle (percent: the share of time a
// kernel ran) and memory used (bytes), one sample a minute or so.
type Trace struct {
	Pods []string // sorted
	// Series holds each pod's samples in time order.
	Series map[string][]TracePoint
}

// TracePoint is one sample; NaN where the trace has no value.
type TracePoint struct {
	T        int64 // seconds since the trace's start
	Duty     float64
	MemBytes float64
}

// ReadAlibaba reads Alibaba's cluster-trace-v2026-GenAI format:
// pod_gpu_duty_cycle_anon.csv (value, timestamp_anon, container_ip) and
// pod_gpu_memory_used_bytes_anon.csv (timestamp_anon, value, container_ip),
// columns found by their header. Times become seconds since the earliest;
// a bad row is an error naming the file and line.
func ReadAlibaba(duty io.Reader, dutyName string, mem io.Reader, memName string) (*Trace, error) {
	points := map[string]map[int64]*TracePoint{}
	var t0 int64 = math.MaxInt64
	read := func(r io.Reader, name string, set func(p *TracePoint, v float64)) error {
		cr := csv.NewReader(bufio.NewReader(r))
		cr.ReuseRecord = true
		head, err := cr.Read()
		if err != nil {
			return fmt.Errorf("%s:1: %w", name, err)
		}
		col := map[string]int{}
		for i, h := range head {
			col[strings.TrimSpace(h)] = i
		}
		for _, want := range []string{"value", "timestamp_anon", "container_ip"} {
			if _, ok := col[want]; !ok {
				return fmt.Errorf("%s:1: no %q column (have %s)", name, want, strings.Join(head, ", "))
			}
		}
		for line := 2; ; line++ {
			rec, err := cr.Read()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("%s:%d: %w", name, line, err)
			}
			v, err := strconv.ParseFloat(rec[col["value"]], 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				return fmt.Errorf("%s:%d: value %q is not a non-negative number", name, line, rec[col["value"]])
			}
			ts, err := strconv.ParseFloat(rec[col["timestamp_anon"]], 64)
			if err != nil || ts < 0 || ts > 1e12 {
				return fmt.Errorf("%s:%d: timestamp_anon %q is not a Unix time", name, line, rec[col["timestamp_anon"]])
			}
			pod := rec[col["container_ip"]]
			if pod == "" {
				return fmt.Errorf("%s:%d: container_ip is empty", name, line)
			}
			t := int64(ts)
			t0 = min(t0, t)
			ps := points[pod]
			if ps == nil {
				ps = map[int64]*TracePoint{}
				points[pod] = ps
			}
			p := ps[t]
			if p == nil {
				p = &TracePoint{T: t, Duty: math.NaN(), MemBytes: math.NaN()}
				ps[t] = p
			}
			set(p, v)
		}
	}
	if err := read(duty, dutyName, func(p *TracePoint, v float64) { p.Duty = min(v, 100) }); err != nil {
		return nil, err
	}
	if err := read(mem, memName, func(p *TracePoint, v float64) { p.MemBytes = v }); err != nil {
		return nil, err
	}
	tr := &Trace{Series: map[string][]TracePoint{}}
	for pod, ps := range points {
		s := make([]TracePoint, 0, len(ps))
		for _, p := range ps {
			q := *p
			q.T -= t0
			s = append(s, q)
		}
		sort.Slice(s, func(i, j int) bool { return s[i].T < s[j].T })
		tr.Series[pod] = s
		tr.Pods = append(tr.Pods, pod)
	}
	sort.Strings(tr.Pods)
	return tr, nil
}

// Compact writes the trace as the embedded file is kept: gzipped CSV rows
// "pod,t,duty,mem_mib" (pod ids cut to 12 characters, duty to a tenth of a
// percent, memory to MiB; an empty field where the trace has no value).
func (tr *Trace) Compact(w io.Writer) error {
	zw, _ := gzip.NewWriterLevel(w, gzip.BestCompression)
	bw := bufio.NewWriter(zw)
	seen := map[string]string{}
	for _, pod := range tr.Pods {
		short := pod
		if len(short) > 12 {
			short = short[:12]
		}
		if o, dup := seen[short]; dup {
			return fmt.Errorf("pods %s and %s share the id prefix %s", o, pod, short)
		}
		seen[short] = pod
		for _, p := range tr.Series[pod] {
			duty, mem := "", ""
			if !math.IsNaN(p.Duty) {
				duty = strconv.FormatFloat(math.Round(p.Duty*10)/10, 'f', -1, 64)
			}
			if !math.IsNaN(p.MemBytes) {
				mem = strconv.FormatInt(int64(math.Round(p.MemBytes/(1<<20))), 10)
			}
			fmt.Fprintf(bw, "%s,%d,%s,%s\n", short, p.T, duty, mem)
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return zw.Close()
}

// ReadCompact reads what Compact wrote.
func ReadCompact(r io.Reader) (*Trace, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, err
	}
	tr := &Trace{Series: map[string][]TracePoint{}}
	sc := bufio.NewScanner(zr)
	for line := 1; sc.Scan(); line++ {
		f := strings.Split(sc.Text(), ",")
		if len(f) != 4 {
			return nil, fmt.Errorf("line %d: %d fields, want 4", line, len(f))
		}
		t, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		p := TracePoint{T: t, Duty: math.NaN(), MemBytes: math.NaN()}
		if f[2] != "" {
			if p.Duty, err = strconv.ParseFloat(f[2], 64); err != nil {
				return nil, fmt.Errorf("line %d: %w", line, err)
			}
		}
		if f[3] != "" {
			mib, err := strconv.ParseFloat(f[3], 64)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", line, err)
			}
			p.MemBytes = mib * (1 << 20)
		}
		if _, ok := tr.Series[f[0]]; !ok {
			tr.Pods = append(tr.Pods, f[0])
		}
		tr.Series[f[0]] = append(tr.Series[f[0]], p)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	sort.Strings(tr.Pods)
	return tr, nil
}

//go:embed genai/trace.csv.gz
var genaiData []byte

var genai = sync.OnceValues(func() (*Trace, error) { return ReadCompact(bytes.NewReader(genaiData)) })

// GenAI is the embedded Alibaba GenAI trace (see genai/SOURCE.md).
func GenAI() (*Trace, error) { return genai() }

// At is a pod's sample in force at t seconds after the trace's start: the
// last one at or before t, each value held until the next sample that has
// one; the trace repeats past its end.
func (tr *Trace) At(pod string, t int64) (duty, memBytes float64) {
	s := tr.Series[pod]
	if len(s) == 0 {
		return math.NaN(), math.NaN()
	}
	span := s[len(s)-1].T + 60
	t = ((t % span) + span) % span
	i := sort.Search(len(s), func(i int) bool { return s[i].T > t }) - 1
	duty, memBytes = math.NaN(), math.NaN()
	for j := i; j >= 0 && (math.IsNaN(duty) || math.IsNaN(memBytes)); j-- {
		if math.IsNaN(duty) {
			duty = s[j].Duty
		}
		if math.IsNaN(memBytes) {
			memBytes = s[j].MemBytes
		}
	}
	return duty, memBytes
}

// The file names of Alibaba's GenAI trace.
const (
	DutyFile   = "pod_gpu_duty_cycle_anon.csv"
	MemoryFile = "pod_gpu_memory_used_bytes_anon.csv"
)

// ReadAlibabaDir reads the trace's two files from dir.
func ReadAlibabaDir(dir string) (*Trace, error) {
	duty, err := os.Open(filepath.Join(dir, DutyFile))
	if err != nil {
		return nil, err
	}
	defer duty.Close()
	mem, err := os.Open(filepath.Join(dir, MemoryFile))
	if err != nil {
		return nil, err
	}
	defer mem.Close()
	return ReadAlibaba(duty, duty.Name(), mem, mem.Name())
}
