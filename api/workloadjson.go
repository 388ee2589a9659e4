package api

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gantryhq/gantry/api/model"
)

// The workload answers — a page of them and one by id, the most read of the
// API — are encoded here without reflection, byte for byte as encoding/json
// would (TestWorkloadJSON compares the two on every field, and a fuzzer on
// odd strings and numbers): encoding/json's reflection was over a quarter of
// the CPU a page of 100 cost once its rows came from the store's cache
// (Seams 9).

// workloadPage answers a page of workloads.
type workloadPage model.WorkloadList

func (p workloadPage) VisitListWorkloadsResponse(w http.ResponseWriter) error {
	return writeJSON(w, func(j *jsonw) {
		j.begin()
		j.key("items")
		if p.Items == nil {
			j.null()
		} else {
			j.b = append(j.b, '[')
			for i := range p.Items {
				if i > 0 {
					j.b = append(j.b, ',')
				}
				j.workload(&p.Items[i])
			}
			j.b = append(j.b, ']')
		}
		if p.NextCursor != nil {
			j.key("nextCursor")
			j.str(*p.NextCursor)
		}
		j.end()
	})
}

// workloadOne answers one workload.
type workloadOne model.Workload

func (o workloadOne) VisitGetWorkloadResponse(w http.ResponseWriter) error {
	return writeJSON(w, func(j *jsonw) { j.workload((*model.Workload)(&o)) })
}

// writeJSON answers 200 with the JSON document write appends, ended by a
// newline as json.Encoder ends one; nothing is written when it fails.
func writeJSON(w http.ResponseWriter, write func(*jsonw)) error {
	j := jsonWriters.Get().(*jsonw)
	j.b, j.first, j.err = j.b[:0], false, nil
	defer func() {
		if cap(j.b) <= 1<<20 { // a larger buffer is left to the garbage collector
			jsonWriters.Put(j)
		}
	}()
	write(j)
	if j.err != nil {
		return j.err
	}
	j.b = append(j.b, '\n')
	w.Header().Set("Content-Type", "application/json")
	// Its length, so that a page goes out whole rather than in chunks
	// (one write to the socket fewer, and no chunk framing).
	w.Header().Set("Content-Length", strconv.Itoa(len(j.b)))
	w.WriteHeader(http.StatusOK)
	_, err := w.Write(j.b)
	return err
}

var jsonWriters = sync.Pool{New: func() any { return &jsonw{b: make([]byte, 0, 16<<10)} }}

// jsonw appends a JSON document as encoding/json writes it.
type jsonw struct {
	b     []byte
	first bool  // no member yet in the object being written
	err   error // the first value JSON cannot hold
}

func (j *jsonw) begin() { j.b, j.first = append(j.b, '{'), true }
func (j *jsonw) end()   { j.b, j.first = append(j.b, '}'), false }
func (j *jsonw) null()  { j.b = append(j.b, "null"...) }

// key starts a member; k needs no escaping.
func (j *jsonw) key(k string) {
	if !j.first {
		j.b = append(j.b, ',')
	}
	j.first = false
	j.b = append(j.b, '"')
	j.b = append(j.b, k...)
	j.b = append(j.b, '"', ':')
}

// str appends s as encoding/json does: HTML-safe, invalid UTF-8 replaced.
// Printable ASCII that needs no escape is copied; anything else is left to
// encoding/json.
func (j *jsonw) str(s string) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			enc, _ := json.Marshal(s) // a string always encodes
			j.b = append(j.b, enc...)
			return
		}
	}
	j.b = append(j.b, '"')
	j.b = append(j.b, s...)
	j.b = append(j.b, '"')
}

func (j *jsonw) int(n int) { j.b = strconv.AppendInt(j.b, int64(n), 10) }

func (j *jsonw) bool(v bool) { j.b = strconv.AppendBool(j.b, v) }

// num appends f in encoding/json's format: the shortest decimal that reads
// back as f, in exponent form below 1e-6 and from 1e21.
func (j *jsonw) num(f float64) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		j.fail(fmt.Errorf("json: unsupported value: %s", strconv.FormatFloat(f, 'g', -1, 64)))
		j.b = append(j.b, '0')
		return
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	j.b = strconv.AppendFloat(j.b, f, format, -1, 64)
	if n := len(j.b); format == 'e' && n >= 4 && j.b[n-4] == 'e' && j.b[n-3] == '-' && j.b[n-2] == '0' {
		j.b[n-2] = j.b[n-1] // e-09 is written e-9
		j.b = j.b[:n-1]
	}
}

// time appends t as time.Time's MarshalJSON does (RFC 3339 with the
// nanoseconds it has); a time not in UTC is left to it.
func (j *jsonw) time(t time.Time) {
	if y := t.Year(); t.Location() != time.UTC || y < 0 || y > 9999 {
		enc, err := t.MarshalJSON()
		if err != nil {
			j.fail(err)
		}
		j.b = append(j.b, enc...)
		return
	}
	j.b = append(j.b, '"')
	j.b = t.AppendFormat(j.b, time.RFC3339Nano)
	j.b = append(j.b, '"')
}

// strList appends ss, a JSON array of strings (null when nil).
func strList[S ~string](j *jsonw, ss []S) {
	if ss == nil {
		j.null()
		return
	}
	j.b = append(j.b, '[')
	for i, s := range ss {
		if i > 0 {
			j.b = append(j.b, ',')
		}
		j.str(string(s))
	}
	j.b = append(j.b, ']')
}

// strMap appends m with its keys in order, as encoding/json does.
func (j *jsonw) strMap(m map[string]string) {
	if m == nil {
		j.null()
		return
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	j.b = append(j.b, '{')
	for i, k := range keys {
		if i > 0 {
			j.b = append(j.b, ',')
		}
		j.str(k)
		j.b = append(j.b, ':')
		j.str(m[k])
	}
	j.b = append(j.b, '}')
}

// strF, intF, numF, timeF and boolF append a member.
func (j *jsonw) strF(k, v string)            { j.key(k); j.str(v) }
func (j *jsonw) intF(k string, n int)        { j.key(k); j.int(n) }
func (j *jsonw) numF(k string, f float64)    { j.key(k); j.num(f) }
func (j *jsonw) timeF(k string, t time.Time) { j.key(k); j.time(t) }
func (j *jsonw) boolF(k string, v bool)      { j.key(k); j.bool(v) }

func (j *jsonw) fail(err error) {
	if j.err == nil {
		j.err = fmt.Errorf("encode a workload: %w", err)
	}
}

// workload appends w with its members in model.Workload's order, leaving
// out the empty ones its omitempty tags leave out.
func (j *jsonw) workload(w *model.Workload) {
	j.begin()
	if w.Actions != nil {
		j.key("actions")
		strList(j, *w.Actions)
	}
	j.boolF("applied", w.Applied)
	if a := w.Approval; a != nil {
		j.key("approval")
		j.begin()
		j.key("approvers")
		strList(j, a.Approvers)
		if a.DecidedAt != nil {
			j.timeF("decidedAt", *a.DecidedAt)
		}
		optStr(j, "decidedBy", a.DecidedBy)
		optStr(j, "decision", a.Decision)
		j.timeF("expiresAt", a.ExpiresAt)
		optStr(j, "note", a.Note)
		if a.Restart != nil {
			j.boolF("restart", *a.Restart)
		}
		j.strF("why", a.Why)
		j.end()
	}
	j.intF("attempts", w.Attempts)
	optStr(j, "cluster", w.Cluster)
	j.numF("costSoFar", w.CostSoFar)
	j.timeF("createdAt", w.CreatedAt)
	if w.Deferral != nil {
		// Rare (a flexible job held for cleaner power) and nested:
		// encoding/json itself.
		b, err := json.Marshal(w.Deferral)
		if err != nil {
			j.fail(err)
		}
		j.key("deferral")
		j.b = append(j.b, b...)
	}
	optTime(j, "endedAt", w.EndedAt)
	optStr(j, "endpoint", w.Endpoint)
	if w.ExitCode != nil {
		j.intF("exitCode", *w.ExitCode)
	}
	j.key("gpu")
	j.begin()
	j.strF("class", w.Gpu.Class)
	j.intF("count", w.Gpu.Count)
	optStr(j, "migProfile", w.Gpu.MigProfile)
	j.end()
	if w.Held != nil {
		j.boolF("held", *w.Held)
	}
	j.strF("id", w.Id)
	optStr(j, "image", w.Image)
	j.strF("kind", string(w.Kind))
	if w.Moves != nil {
		// Rare (a workload moved off a quarantined node) and nested:
		// encoding/json itself.
		b, err := json.Marshal(*w.Moves)
		if err != nil {
			j.fail(err)
		}
		j.key("moves")
		j.b = append(j.b, b...)
	}
	j.strF("name", w.Name)
	optStr(j, "nodeGroup", w.NodeGroup)
	j.strF("objectsHash", w.ObjectsHash)
	j.strF("owner", w.Owner)
	optStr(j, "ownerName", w.OwnerName)
	j.key("parameters")
	j.strMap(w.Parameters)
	j.numF("pricePerHour", w.PricePerHour)
	if w.Progress != nil {
		// Rare (a Job that reports) and nested: encoding/json itself.
		b, err := json.Marshal(w.Progress)
		if err != nil {
			j.fail(err)
		}
		j.key("progress")
		j.b = append(j.b, b...)
	}
	j.numF("ranSeconds", w.RanSeconds)
	optStr(j, "reason", w.Reason)
	if w.SpotEvictions != nil {
		j.intF("spotEvictions", *w.SpotEvictions)
	}
	optTime(j, "startedAt", w.StartedAt)
	j.strF("status", string(w.Status))
	j.strF("team", w.Team)
	optStr(j, "tee", w.Tee)
	j.strF("template", w.Template)
	optStr(j, "templateStatus", w.TemplateStatus)
	optStr(j, "templateStatusReason", w.TemplateStatusReason)
	j.intF("templateVersion", w.TemplateVersion)
	optStr(j, "trial", w.Trial)
	j.timeF("updatedAt", w.UpdatedAt)
	optStr(j, "url", w.Url)
	if w.Warnings != nil {
		j.key("warnings")
		strList(j, *w.Warnings)
	}
	j.end()
}

// optStr appends member k when v is set (an omitempty pointer).
func optStr[S ~string](j *jsonw, k string, v *S) {
	if v != nil {
		j.key(k)
		j.str(string(*v))
	}
}

func optTime(j *jsonw, k string, t *time.Time) {
	if t != nil {
		j.key(k)
		j.time(*t)
	}
}
