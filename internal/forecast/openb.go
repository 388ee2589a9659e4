package forecast

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// ReadOpenB reads a pod list of Alibaba's 2023 GPU cluster trace (openb:
// name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, qos,
// pod_phase, creation_time, deletion_time, scheduled_time; times in seconds
// from the trace's start, taken here as the Unix epoch). A pod wants
// num_gpu × gpu_milli/1000 GPUs from its creation (waiting or running)
// until its deletion; pods with no GPU are left out. With class set, only
// the pods whose gpu_spec names it (a list split by "|") are kept: a pod
// with no gpu_spec could run on any class, so it counts for none. name says
// where the data came from in errors ("file:line: column: …").
func ReadOpenB(r io.Reader, name, class string) ([]Record, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("%s:1: reading the header: %w", name, err)
	}
	col := map[string]int{}
	for i, h := range header {
		col[strings.TrimSpace(h)] = i
	}
	for _, c := range []string{"num_gpu", "gpu_milli", "creation_time", "deletion_time"} {
		if _, ok := col[c]; !ok {
			return nil, fmt.Errorf("%s:1: no %q column (openb's pod list has name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, qos, pod_phase, creation_time, deletion_time, scheduled_time)", name, c)
		}
	}
	spec, hasSpec := col["gpu_spec"]
	var out []Record
	for {
		row, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if pe := (*csv.ParseError)(nil); errors.As(err, &pe) {
			return nil, fmt.Errorf("%s:%d: %w", name, pe.StartLine, err)
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		line, _ := cr.FieldPos(0)
		num := func(c string) (int64, error) {
			s := strings.TrimSpace(row[col[c]])
			if s == "" {
				return 0, nil
			}
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil || v < 0 {
				line, _ := cr.FieldPos(col[c])
				return 0, fmt.Errorf("%s:%d: %s: %q is not a count (a whole number, 0 or more)", name, line, c, s)
			}
			return v, nil
		}
		var v [4]int64
		for i, c := range []string{"num_gpu", "gpu_milli", "creation_time", "deletion_time"} {
			if v[i], err = num(c); err != nil {
				return nil, err
			}
		}
		gpus, created, deleted := float64(v[0])*float64(v[1])/1000, v[2], v[3]
		if gpus <= 0 {
			continue
		}
		if v[0] > 1024 || v[1] > 1000 {
			return nil, fmt.Errorf("%s:%d: num_gpu %d, gpu_milli %d: at most 1024 GPUs and 1000 milli", name, line, v[0], v[1])
		}
		if deleted != 0 && deleted < created {
			return nil, fmt.Errorf("%s:%d: deletion_time %d is before creation_time %d", name, line, deleted, created)
		}
		if class != "" {
			if !hasSpec || !specNames(row[spec], class) {
				continue
			}
		}
		rec := Record{Created: time.Unix(created, 0).UTC(), GPUs: gpus, Class: class, Kind: kindOf(row, col)}
		if deleted != 0 {
			rec.Ended = time.Unix(deleted, 0).UTC()
		}
		out = append(out, rec)
	}
}

func specNames(spec, class string) bool {
	for s := range strings.SplitSeq(spec, "|") {
		if strings.TrimSpace(s) == class {
			return true
		}
	}
	return false
}

// kindOf is a pod's shape — its GPUs, CPU, memory and QoS — which stands
// for its kind: launches of one template and size look alike.
func kindOf(row []string, col map[string]int) string {
	var parts []string
	for _, c := range []string{"num_gpu", "gpu_milli", "cpu_milli", "memory_mib", "qos"} {
		if i, ok := col[c]; ok {
			parts = append(parts, strings.TrimSpace(row[i]))
		}
	}
	return strings.Join(parts, "/")
}
