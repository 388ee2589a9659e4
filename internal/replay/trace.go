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
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Trace is per-pod GPU series: duty cycle (percent: the share of time a
// kernel ran) and memory used (bytes), one sample a minute.
type Trace struct {
	Pods []string // sorted
	// Series holds each pod's samples in time order.
	Series map[string][]TracePoint
	// Start is the earliest timestamp of the source (Unix seconds, as the
	// publisher shifted them); T counts from it.
	Start int64
}

// TracePoint is one sample; NaN where the trace has no value.
type TracePoint struct {
	T        int64 // seconds since the trace's start: a whole number of minutes
	Duty     float64
	MemBytes float64
}

// ReadAlibaba reads Alibaba's cluster-trace-v2026-GenAI format:
// pod_gpu_duty_cycle_anon.csv (value, timestamp_anon, container_ip) and
// pod_gpu_memory_used_bytes_anon.csv (timestamp_anon, value, container_ip),
// columns found by their header; a bad row is an error naming the file and
// line. The trace has one sample a minute, but the publisher's anonymised
// timestamps advance by a fixed step that is not 60 s (57 s in this
// release): the k-th step after the earliest timestamp becomes minute k.
func ReadAlibaba(duty io.Reader, dutyName string, mem io.Reader, memName string) (*Trace, error) {
	return readAlibaba(duty, dutyName, mem, memName, false)
}

// ReadAlibabaRaw reads the trace as ReadAlibaba does but keeps the
// publisher's timestamps: T is seconds since the earliest one (advice's
// replay and its scorer measure timeouts and pod-time on them).
func ReadAlibabaRaw(duty io.Reader, dutyName string, mem io.Reader, memName string) (*Trace, error) {
	return readAlibaba(duty, dutyName, mem, memName, true)
}

func readAlibaba(duty io.Reader, dutyName string, mem io.Reader, memName string, raw bool) (*Trace, error) {
	type key struct {
		pod string
		ts  float64
	}
	points := map[key]*TracePoint{}
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
			k := key{pod, ts}
			p := points[k]
			if p == nil {
				p = &TracePoint{Duty: math.NaN(), MemBytes: math.NaN()}
				points[k] = p
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
	// The sampling step: the most common gap between consecutive
	// timestamps of the whole trace.
	stamps := map[float64]bool{}
	for k := range points {
		stamps[k.ts] = true
	}
	ts := make([]float64, 0, len(stamps))
	for t := range stamps {
		ts = append(ts, t)
	}
	sort.Float64s(ts)
	tr := &Trace{Series: map[string][]TracePoint{}}
	if len(ts) == 0 {
		return tr, nil
	}
	tr.Start = int64(ts[0])
	gaps := map[float64]int{}
	step := 60.0
	for i := 1; i < len(ts); i++ {
		gaps[ts[i]-ts[i-1]]++
	}
	best := 0
	for g, n := range gaps {
		if n > best || n == best && g < step {
			step, best = g, n
		}
	}
	for k, p := range points {
		if raw {
			q := *p
			q.T = int64(math.Round(k.ts - ts[0]))
			tr.Series[k.pod] = append(tr.Series[k.pod], q)
			continue
		}
		steps := (k.ts - ts[0]) / step
		if math.Abs(steps-math.Round(steps)) > 0.1 {
			return nil, fmt.Errorf("pod %s: timestamp %.0f is not a whole number of %.0f s steps after the first (%.0f)", k.pod, k.ts, step, ts[0])
		}
		q := *p
		q.T = 60 * int64(math.Round(steps))
		tr.Series[k.pod] = append(tr.Series[k.pod], q)
	}
	for pod, s := range tr.Series {
		sort.Slice(s, func(i, j int) bool { return s[i].T < s[j].T })
		tr.Pods = append(tr.Pods, pod)
	}
	sort.Strings(tr.Pods)
	return tr, nil
}

// idLen is how much of a pod id the compact file keeps.
const idLen = 12

// compactHeader is the first line of the compact file.
const compactHeader = "pod,start_minute,duty_percent,memory_mib"

// Compact writes the trace as the embedded file is kept: gzipped CSV, one
// row per pod "pod,start_minute,duty_percent,memory_mib" where the last two
// are space-separated series, one value a minute from the pod's first
// sample to its last (an empty value where the trace has none). Pod ids are
// cut to 12 hex digits (the cut must keep them unique), duty cycle rounded
// to a whole percent, memory to a whole MiB; pods without a duty-cycle
// sample are left out (there is nothing to play).
func (tr *Trace) Compact(w io.Writer) error {
	zw, _ := gzip.NewWriterLevel(w, gzip.BestCompression)
	bw := bufio.NewWriter(zw)
	fmt.Fprintln(bw, compactHeader)
	seen := map[string]string{}
	for _, pod := range tr.Pods {
		s := tr.Series[pod]
		if !slices.ContainsFunc(s, func(p TracePoint) bool { return !math.IsNaN(p.Duty) }) {
			continue
		}
		short := pod[:min(len(pod), idLen)]
		if strings.ContainsAny(short, ", \n") {
			return fmt.Errorf("pod id %q: a comma, space or newline", pod)
		}
		if o, dup := seen[short]; dup {
			return fmt.Errorf("pods %s and %s share the id prefix %s", o, pod, short)
		}
		seen[short] = pod
		if s[0].T%60 != 0 {
			return fmt.Errorf("pod %s: sample at %d s is not on a minute", pod, s[0].T)
		}
		first, last := s[0].T/60, s[len(s)-1].T/60
		duty := make([]string, last-first+1)
		mem := make([]string, last-first+1)
		for _, p := range s {
			if p.T%60 != 0 {
				return fmt.Errorf("pod %s: sample at %d s is not on a minute", pod, p.T)
			}
			i := p.T/60 - first
			if !math.IsNaN(p.Duty) {
				duty[i] = strconv.FormatInt(int64(math.Round(p.Duty)), 10)
			}
			if !math.IsNaN(p.MemBytes) {
				mem[i] = strconv.FormatInt(int64(math.Round(p.MemBytes/(1<<20))), 10)
			}
		}
		fmt.Fprintf(bw, "%s,%d,%s,%s\n", short, first, strings.Join(duty, " "), strings.Join(mem, " "))
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return zw.Close()
}

// ReadCompact reads what Compact wrote; minutes without any value are left
// out of the series.
func ReadCompact(r io.Reader) (*Trace, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("compact trace: %w", err)
	}
	tr := &Trace{Series: map[string][]TracePoint{}}
	sc := bufio.NewScanner(zr)
	sc.Buffer(nil, 1<<20)
	if !sc.Scan() || sc.Text() != compactHeader {
		return nil, fmt.Errorf("compact trace: line 1 is not %q", compactHeader)
	}
	num := func(s string, line int, what string) (float64, error) {
		if s == "" {
			return math.NaN(), nil
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			return 0, fmt.Errorf("compact trace line %d: %s %q is not a whole number", line, what, s)
		}
		return float64(v), nil
	}
	for line := 2; sc.Scan(); line++ {
		f := strings.Split(sc.Text(), ",")
		if len(f) != 4 {
			return nil, fmt.Errorf("compact trace line %d: %d fields, want 4", line, len(f))
		}
		pod := f[0]
		if _, dup := tr.Series[pod]; dup || pod == "" {
			return nil, fmt.Errorf("compact trace line %d: pod %q empty or seen before", line, pod)
		}
		first, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || first < 0 {
			return nil, fmt.Errorf("compact trace line %d: start minute %q", line, f[1])
		}
		duty, mem := strings.Split(f[2], " "), strings.Split(f[3], " ")
		if len(duty) != len(mem) {
			return nil, fmt.Errorf("compact trace line %d: %d duty values but %d memory values", line, len(duty), len(mem))
		}
		s := make([]TracePoint, 0, len(duty))
		for i := range duty {
			p := TracePoint{T: 60 * (first + int64(i))}
			if p.Duty, err = num(duty[i], line, "duty"); err != nil {
				return nil, err
			}
			mib, err := num(mem[i], line, "memory")
			if err != nil {
				return nil, err
			}
			p.MemBytes = mib * (1 << 20)
			if math.IsNaN(p.Duty) && math.IsNaN(p.MemBytes) {
				continue
			}
			s = append(s, p)
		}
		tr.Series[pod] = s
		tr.Pods = append(tr.Pods, pod)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("compact trace: %w", err)
	}
	sort.Strings(tr.Pods)
	return tr, nil
}

//go:embed genai/trace.csv.gz
var genaiData []byte

var genai = sync.OnceValues(func() (*Trace, error) { return ReadCompact(bytes.NewReader(genaiData)) })

// GenAI is the embedded Alibaba GenAI trace (see genai/SOURCE.md).
func GenAI() (*Trace, error) { return genai() }

// Span is how long a pod's series lasts: from its first sample to a minute
// after its last.
func (tr *Trace) Span(pod string) int64 {
	s := tr.Series[pod]
	if len(s) == 0 {
		return 0
	}
	return s[len(s)-1].T - s[0].T + 60
}

// At is a pod's sample in force at t seconds after its first sample: the
// last one at or before, each value held until the next sample that has
// one (a value missing from the first samples is the first one given); the
// series repeats past its end.
func (tr *Trace) At(pod string, t int64) (duty, memBytes float64) {
	s := tr.Series[pod]
	if len(s) == 0 {
		return math.NaN(), math.NaN()
	}
	span := tr.Span(pod)
	t = s[0].T + ((t%span)+span)%span
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
	for j := i + 1; j < len(s) && (math.IsNaN(duty) || math.IsNaN(memBytes)); j++ {
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
		return nil, fmt.Errorf("the GenAI trace: %w", err)
	}
	defer duty.Close()
	mem, err := os.Open(filepath.Join(dir, MemoryFile))
	if err != nil {
		return nil, fmt.Errorf("the GenAI trace: %w", err)
	}
	defer mem.Close()
	return ReadAlibaba(duty, duty.Name(), mem, mem.Name())
}
