package interactive

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/waitfor"
)

// frame is one websocket frame: opcode, FIN, masked (as a client sends) or
// not (as a server sends).
func frame(opcode byte, fin, masked bool, payload []byte) []byte {
	b0 := opcode
	if fin {
		b0 |= 0x80
	}
	var b []byte
	var m byte
	if masked {
		m = 0x80
	}
	switch n := len(payload); {
	case n < 126:
		b = []byte{b0, m | byte(n)}
	case n < 1<<16:
		b = []byte{b0, m | 126, 0, 0}
		binary.BigEndian.PutUint16(b[2:], uint16(n))
	default:
		b = []byte{b0, m | 127, 0, 0, 0, 0, 0, 0, 0, 0}
		binary.BigEndian.PutUint64(b[2:], uint64(n))
	}
	if !masked {
		return append(b, payload...)
	}
	key := [4]byte{0x12, 0x34, 0x56, 0x78}
	b = append(b, key[:]...)
	for i, c := range payload {
		b = append(b, c^key[i%4])
	}
	return b
}

const (
	busy = `{"header": {"msg_type": "status", "msg_id": "1", "session": "k1"}, "parent_header": {}, "metadata": {}, "content": {"execution_state": "busy"}, "channel": "iopub"}`
	idle = `{"header": {"msg_type": "status", "msg_id": "2", "session": "k1"}, "parent_header": {}, "metadata": {}, "content": {"execution_state": "idle"}, "channel": "iopub"}`
	// A kernel_info on the control channel, answered while a cell runs.
	ctlBusy = `{"header": {"msg_type": "status", "msg_id": "3", "session": "k1"}, "parent_header": {"msg_id": "ctl-1"}, "content": {"execution_state": "busy"}, "channel": "iopub"}`
	ctlIdle = `{"header": {"msg_type": "status", "msg_id": "4", "session": "k1"}, "parent_header": {"msg_id": "ctl-1"}, "content": {"execution_state": "idle"}, "channel": "iopub"}`
)

// TestFrames: data frames count and control frames do not, whatever the
// lengths' encodings and however the stream is cut into reads; small whole
// text frames are handed over unmasked, others not at all.
func TestFrames(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 70000)
	for _, tc := range []struct {
		name   string
		stream []byte
		data   int
		texts  []string
		failed bool
	}{
		{"a client's masked text", frame(0x1, true, true, []byte(busy)), 1, []string{busy}, false},
		{"a server's text", frame(0x1, true, false, []byte(idle)), 1, []string{idle}, false},
		{"pings, pongs and a close", bytes.Join([][]byte{frame(0x9, true, false, []byte("p")), frame(0xa, true, true, nil), frame(0x8, true, false, []byte{3, 232})}, nil), 0, nil, false},
		{"binary", frame(0x2, true, false, []byte{0, 1, 2}), 1, []string{"\x00\x01\x02"}, false},
		{"16-bit length", frame(0x1, true, true, bytes.Repeat([]byte("y"), 300)), 1, []string{strings.Repeat("y", 300)}, false},
		{"64-bit length, too big to keep", frame(0x1, true, false, big), 1, nil, false},
		{"fragmented text", append(frame(0x1, false, true, []byte("half")), frame(0x0, true, true, []byte("rest"))...), 2, nil, false},
		{"empty text", frame(0x1, true, false, nil), 1, []string{""}, false},
		{"ping between data", bytes.Join([][]byte{frame(0x1, true, false, []byte("a")), frame(0x9, true, false, nil), frame(0x2, true, false, []byte("b"))}, nil), 2, []string{"a", "b"}, false},
		{"a reserved opcode stops the parser", append(frame(0x3, true, false, []byte("?")), frame(0x1, true, false, []byte("unseen"))...), 0, nil, true},
	} {
		for _, chunk := range []int{1, 2, 3, 7, 1 << 20} {
			data := 0
			var texts []string
			f := frames{data: func() { data++ }, text: func(b []byte) { texts = append(texts, string(b)) }}
			for p := tc.stream; len(p) > 0; {
				n := min(chunk, len(p))
				f.feed(p[:n])
				p = p[n:]
			}
			if data != tc.data || strings.Join(texts, "|") != strings.Join(tc.texts, "|") || f.failed != tc.failed {
				t.Errorf("%s, read %d bytes at a time: %d data frames, texts %q, failed %v; want %d, %q, %v",
					tc.name, chunk, data, texts, f.failed, tc.data, tc.texts, tc.failed)
			}
		}
	}
}

// v1 is a message of Jupyter's v1 kernel websocket protocol, as
// jupyter_server 2 serializes it.
func v1(channel, header, content string) []byte { return v1Of(channel, header, "{}", content) }

// v1Of is a v1 message with a parent header.
func v1Of(channel, header, parent, content string) []byte {
	parts := []string{channel, header, parent, "{}", content}
	n := len(parts) + 1
	b := binary.LittleEndian.AppendUint64(nil, uint64(n))
	at := uint64(8 * (n + 1))
	offsets := []uint64{at}
	for _, p := range parts {
		at += uint64(len(p))
		offsets = append(offsets, at)
	}
	for _, o := range offsets {
		b = binary.LittleEndian.AppendUint64(b, o)
	}
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func TestKernelStatus(t *testing.T) {
	broken := v1("iopub", `{"msg_type": "status"}`, `{"execution_state": "busy"}`)
	binary.LittleEndian.PutUint64(broken[8*3:], 1<<40) // an offset past the end
	for _, tc := range []struct {
		name string
		body []byte
		want kernelState
	}{
		{"a v1 status", v1("iopub", `{"msg_type": "status", "msg_id": "x", "session": "k1"}`, `{"execution_state": "busy"}`), kernelState{"busy", "", "k1"}},
		{"a v1 stream", v1("iopub", `{"msg_type": "stream"}`, `{"text": "execution_state"}`), kernelState{}},
		{"a v1 status with a parent", v1Of("iopub", `{"msg_type": "status", "msg_id": "x"}`, `{"msg_id": "run-1"}`, `{"execution_state": "idle"}`), kernelState{"idle", "run-1", ""}},
		{"a v1 status with a parent unreadable", v1Of("iopub", `{"msg_type": "status", "msg_id": "x"}`, `[7]`, `{"execution_state": "idle"}`), kernelState{"idle", "", ""}},
		{"a v1 message with a bad offset", broken, kernelState{}},
		{"busy", []byte(busy), kernelState{"busy", "", "k1"}},
		{"idle", []byte(idle), kernelState{"idle", "", "k1"}},
		{"a control request's busy", []byte(ctlBusy), kernelState{"busy", "ctl-1", "k1"}},
		{"starting, old style", []byte(`{"msg_type": "status", "content": {"execution_state": "starting"}}`), kernelState{"starting", "", ""}},
		{"a stream", []byte(`{"header": {"msg_type": "stream"}, "content": {"text": "execution_state busy"}}`), kernelState{}},
		{"a state not a string", []byte(`{"header": {"msg_type": "status"}, "content": {"execution_state": ["busy"]}}`), kernelState{}},
		{"a parent unreadable", []byte(`{"header": {"msg_type": "status"}, "parent_header": 7, "content": {"execution_state": "busy"}}`), kernelState{"busy", "", ""}},
		{"not JSON", []byte(`not json, execution_state`), kernelState{}},
		{"a request", []byte(`{"header": {"msg_type": "execute_request"}, "content": {"code": "print(1)"}}`), kernelState{}},
	} {
		if got := kernelStatus(tc.body); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// status is a status message of a kernel session about a request.
func status(session, parent, state string) []byte {
	return []byte(fmt.Sprintf(`{"header": {"msg_type": "status", "session": %q}, "parent_header": {"msg_id": %q}, "content": {"execution_state": %q}, "channel": "iopub"}`, session, parent, state))
}

// TestKernelBusy: a kernel is busy while a request it said busy on has not
// said idle — another request's idle (a control request answered while a
// cell runs) does not end it; a restart does, said or seen as a new
// session.
func TestKernelBusy(t *testing.T) {
	many := func(state string) [][]byte {
		var out [][]byte
		for i := range 2 * maxBusy {
			out = append(out, status("k1", fmt.Sprint("r", i), state))
		}
		return out
	}
	for _, tc := range []struct {
		name string
		msgs [][]byte
		busy bool
	}{
		{"a cell runs", [][]byte{status("k1", "cell", "busy")}, true},
		{"a cell ran", [][]byte{status("k1", "cell", "busy"), status("k1", "cell", "idle")}, false},
		{"a control request answered while a cell runs", [][]byte{status("k1", "cell", "busy"), status("k1", "ctl", "busy"), status("k1", "ctl", "idle")}, true},
		{"the cell ends after the control request", [][]byte{status("k1", "cell", "busy"), status("k1", "ctl", "busy"), status("k1", "ctl", "idle"), status("k1", "cell", "idle")}, false},
		{"restarting", [][]byte{status("k1", "cell", "busy"), status("", "", "restarting")}, false},
		{"dead", [][]byte{status("k1", "cell", "busy"), status("k1", "", "dead")}, false},
		{"restarted by hand: a new session, its starting missed", [][]byte{status("k1", "cell", "busy"), status("k2", "info", "busy"), status("k2", "info", "idle")}, false},
		{"a new session's cell", [][]byte{status("k1", "cell", "busy"), status("k2", "cell2", "busy")}, true},
		{"more requests than followed, all ended", append(many("busy"), many("idle")...), false},
		{"more requests than followed", many("busy"), true},
		{"a stream between", [][]byte{status("k1", "cell", "busy"), []byte(`{"header": {"msg_type": "stream", "session": "k9"}, "content": {"text": "execution_state"}}`)}, true},
	} {
		c := watch(nopCloser{strings.NewReader("")}, func() {}, time.Hour)
		for _, m := range tc.msgs {
			c.status(m)
		}
		c.mu.Lock()
		got := len(c.busy) > 0
		c.mu.Unlock()
		c.Close()
		c.ticking.Wait()
		if got != tc.busy {
			t.Errorf("%s: busy %v, want %v", tc.name, got, tc.busy)
		}
	}
}

// TestPersonal: a page opened, any change, and a non-browser client's
// request are a person's use; a browser's background reads are not.
func TestPersonal(t *testing.T) {
	for _, tc := range []struct {
		method, mode string
		want         bool
	}{
		{"GET", "navigate", true},
		{"GET", "", true}, // curl, a script
		{"GET", "cors", false},
		{"GET", "same-origin", false},
		{"HEAD", "no-cors", false},
		{"POST", "cors", true},
		{"PUT", "same-origin", true},
		{"PATCH", "cors", true},
		{"DELETE", "cors", true},
	} {
		r, _ := http.NewRequest(tc.method, "http://gantry.test/w/abcd1234/api/sessions", nil)
		if tc.mode != "" {
			r.Header.Set("Sec-Fetch-Mode", tc.mode)
		}
		if got := personal(r); got != tc.want {
			t.Errorf("%s with Sec-Fetch-Mode %q: %v, want %v", tc.method, tc.mode, got, tc.want)
		}
	}
}

// FuzzFrames: any bytes, cut anywhere, leave the parser whole and count
// the same data frames as read at once.
func FuzzFrames(f *testing.F) {
	f.Add(frame(0x1, true, true, []byte(busy)), 3)
	f.Add(append(frame(0x1, false, false, []byte("a")), frame(0x0, true, false, []byte("b"))...), 1)
	f.Add([]byte{0x81, 0xff, 0, 0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4}, 5)
	f.Fuzz(func(t *testing.T, stream []byte, cut int) {
		count := func(parts ...[]byte) (int, *frames) {
			n := 0
			fr := &frames{data: func() { n++ }, text: func(b []byte) {
				if len(b) > maxStatus {
					t.Fatalf("kept %d bytes of a frame", len(b))
				}
				kernelStatus(b)
			}}
			for _, p := range parts {
				fr.feed(p)
			}
			return n, fr
		}
		whole, _ := count(stream)
		cut = int(uint(cut) % uint(len(stream)+1))
		split, _ := count(stream[:cut], stream[cut:])
		if whole != split {
			t.Fatalf("%d data frames read whole, %d cut at %d", whole, split, cut)
		}
	})
}

// pipe is an upgraded connection's far ends: what the app sends is read
// from in, what is written goes to out.
type pipe struct {
	in  *io.PipeReader
	out bytes.Buffer
}

func (p *pipe) Read(b []byte) (int, error)  { return p.in.Read(b) }
func (p *pipe) Write(b []byte) (int, error) { return p.out.Write(b) }
func (p *pipe) Close() error                { return p.in.Close() }

// TestWatchBusyKernel: every data frame either way is use; a kernel's
// "busy" counts as use every tick until its "idle" (or the socket's close)
// ends the ticking; pings never count.
func TestWatchBusyKernel(t *testing.T) {
	r, w := io.Pipe()
	p := &pipe{in: r}
	var used atomic.Int64
	c := watch(p, func() { used.Add(1) }, time.Millisecond)
	go io.Copy(io.Discard, c) // the proxy's copy from the app to the client

	if _, err := c.Write(frame(0x9, true, true, nil)); err != nil { // a client's ping
		t.Fatal(err)
	}
	if _, err := c.Write(frame(0x1, true, true, []byte(`{"header": {"msg_type": "execute_request"}}`))); err != nil {
		t.Fatal(err)
	}
	if n := used.Load(); n != 1 {
		t.Fatalf("a ping and a message: %d uses, want 1", n)
	}
	w.Write(frame(0x1, true, false, []byte(busy)))
	waitfor.Until(t, 10*time.Second, "a busy kernel counted as use on its ticks", func() error {
		if n := used.Load(); n < 5 {
			return errors.New("not yet")
		}
		return nil
	})
	// A request on the control channel, answered while the cell runs: its
	// idle is its own, and the cell still counts.
	w.Write(frame(0x1, true, false, []byte(ctlBusy)))
	w.Write(frame(0x1, true, false, []byte(ctlIdle)))
	waitfor.Until(t, 10*time.Second, "the control request's idle read", func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		if _, ok := c.busy["ctl-1"]; ok || len(c.busy) != 1 {
			return fmt.Errorf("busy on %v", c.busy)
		}
		return nil
	})
	from := used.Load()
	waitfor.Until(t, 10*time.Second, "the cell still counted after a control request's idle", func() error {
		if n := used.Load(); n < from+5 {
			return errors.New("not yet")
		}
		return nil
	})
	w.Write(frame(0x1, true, false, []byte(idle)))
	done := make(chan struct{})
	go func() { c.ticking.Wait(); close(done) }()
	waitfor.Until(t, 10*time.Second, "the ticking ended on idle", func() error {
		select {
		case <-done:
			return nil
		default:
			return errors.New("still ticking")
		}
	})
	n := used.Load()
	w.Write(frame(0xa, true, false, nil)) // the app's pong
	if used.Load() != n {
		t.Fatal("a pong counted as use")
	}
	// Busy again, then the socket closes: the ticking ends with it.
	w.Write(frame(0x1, true, false, []byte(busy)))
	waitfor.Until(t, 10*time.Second, "busy again", func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		if len(c.busy) == 0 {
			return errors.New("not busy")
		}
		return nil
	})
	c.Close()
	w.Close()
	c.ticking.Wait()
}

// nopCloser is a stream read through a websocket connection's Read.
type nopCloser struct{ io.Reader }

func (nopCloser) Write(p []byte) (int, error) { return len(p), nil }
func (nopCloser) Close() error                { return nil }

// BenchmarkFrames measures what the proxy pays to watch a notebook's
// websocket against its baseline, the same bytes copied through a plain
// connection (what the proxy did before). The stream is what an app sends
// while a kernel works: per cell, a status busy, a stream output, an
// execute result of 2 KiB, a status idle — and every tenth cell a 256 KiB
// binary frame (a plot, a dataframe's buffers). MB/s counts the stream's
// bytes.
func BenchmarkFrames(b *testing.B) {
	var stream []byte
	for cell := range 100 {
		stream = append(stream, frame(0x1, true, false, []byte(busy))...)
		stream = append(stream, frame(0x1, true, false, []byte(`{"header": {"msg_type": "stream"}, "content": {"name": "stdout", "text": "step 100 loss 0.25\n"}}`))...)
		stream = append(stream, frame(0x1, true, false, bytes.Repeat([]byte("x"), 2048))...)
		stream = append(stream, frame(0x1, true, false, []byte(idle))...)
		if cell%10 == 0 {
			stream = append(stream, frame(0x2, true, false, bytes.Repeat([]byte{7}, 256<<10))...)
		}
	}
	buf := make([]byte, 32<<10) // io.Copy's buffer
	for _, tc := range []struct {
		name  string
		watch bool
	}{{"plain", false}, {"watched", true}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(stream)))
			for b.Loop() {
				var conn io.ReadWriteCloser = nopCloser{bytes.NewReader(stream)}
				if tc.watch {
					w := watch(conn, func() {}, time.Hour)
					conn = w
					defer w.Close()
				}
				if _, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{conn}, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
