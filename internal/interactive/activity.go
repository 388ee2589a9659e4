package interactive

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"
)

// What counts as a person using an interactive workload, for the idle
// culler (the proxy tells the Opener's Used):
//   - a page opened (a navigation: Sec-Fetch-Mode "navigate") or any request
//     that is not a read (a save, a kernel started, a cell run over REST), and
//     every request from a client that is not a browser (no Sec-Fetch-Mode: a
//     script calling the app is using it);
//   - a message on one of its websockets, either way (a cell run, a
//     completion asked for, a kernel's output) — not the sockets' own pings;
//   - a kernel executing: while a request a Jupyter kernel reported "busy"
//     on over a socket the proxy carries has not been reported "idle", Used
//     is told every BusyEvery, so a long cell that prints nothing keeps its
//     notebook. Each status names the request it is about (its parent):
//     a kernel answers requests on its control channel (a kernel_info, an
//     interrupt — Notebook sends kernel_info on both channels whenever a
//     tab connects) while a cell runs, and that request's "idle" says
//     nothing of the cell.
//
// A browser tab left open is not use: its background reads (a file list
// refreshed, a kernel's state polled) and its sockets' pings pass without
// counting.

// BusyEvery is how often a kernel that stays busy counts as use (a third
// of the workload service's 30 s between writes of use, so that a kernel
// busy for longer than any idle timeout is never seen as quiet for more
// than 40 s, or 50 s when a write failed and was tried again on the next
// tick).
const BusyEvery = 10 * time.Second

// personal says whether a plain request is a person's use of the app.
func personal(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		mode := r.Header.Get("Sec-Fetch-Mode")
		return mode == "" || mode == "navigate"
	}
	return true
}

// frames reads a websocket's frames as they pass in one direction and says
// when a data frame (text, binary or a continuation) begins; control frames
// (close, ping, pong) are skipped. It keeps no more of a frame than its
// header and, for text frames up to maxStatus bytes, its payload (unmasked),
// which it hands to text when the frame is whole.
type frames struct {
	data func()            // a data frame began
	text func(body []byte) // a small text frame, whole and unmasked

	hdr       [14]byte
	hdrN      int    // header bytes read so far
	inPayload bool   // the header is whole: payload bytes pass
	left      uint64 // payload bytes of the current frame still to pass
	masked    bool
	mask      [4]byte
	off       uint64 // payload bytes of the current frame passed so far
	keep      bool   // the payload is kept (a small, single-frame text)
	payload   []byte
	failed    bool // not a websocket stream after all: stop looking
}

// maxStatus is the largest text frame kept to look for a kernel's status
// (a Jupyter status message is a few hundred bytes).
const maxStatus = 8 << 10

// feed passes bytes of the stream through the parser.
func (f *frames) feed(p []byte) {
	for len(p) > 0 && !f.failed {
		if f.inPayload {
			n := min(uint64(len(p)), f.left)
			if f.keep {
				start := len(f.payload)
				f.payload = append(f.payload, p[:n]...)
				if f.masked {
					for i := range f.payload[start:] {
						f.payload[start+i] ^= f.mask[(f.off+uint64(i))%4]
					}
				}
			}
			f.off += n
			f.left -= n
			p = p[n:]
			if f.left == 0 {
				f.end()
			}
			continue
		}
		n := copy(f.hdr[f.hdrN:f.headerLen()], p)
		f.hdrN += n
		p = p[n:]
		if f.hdrN >= 2 && f.hdrN == f.headerLen() {
			f.begin()
		}
	}
}

// headerLen is the current frame's header length, from its first two bytes.
func (f *frames) headerLen() int {
	if f.hdrN < 2 {
		return 2
	}
	n := 2
	switch f.hdr[1] & 0x7f {
	case 126:
		n += 2
	case 127:
		n += 8
	}
	if f.hdr[1]&0x80 != 0 {
		n += 4
	}
	return n
}

// begin starts a frame whose header is whole.
func (f *frames) begin() {
	fin, opcode := f.hdr[0]&0x80 != 0, f.hdr[0]&0x0f
	f.masked = f.hdr[1]&0x80 != 0
	i := 2
	switch l := f.hdr[1] & 0x7f; l {
	case 126:
		f.left = uint64(binary.BigEndian.Uint16(f.hdr[2:4]))
		i = 4
	case 127:
		f.left = binary.BigEndian.Uint64(f.hdr[2:10])
		i = 10
	default:
		f.left = uint64(l)
	}
	if f.masked {
		copy(f.mask[:], f.hdr[i:i+4])
	}
	f.off = 0
	f.payload = f.payload[:0]
	f.keep = false
	f.inPayload = true
	switch {
	case opcode >= 0x8 && opcode <= 0xa: // close, ping, pong
	case opcode <= 0x2: // continuation, text, binary
		f.data()
		// A compressed frame (RSV1) is not read; the proxy asks for none.
		// Binary frames carry Jupyter's v1 kernel protocol.
		f.keep = (opcode == 0x1 || opcode == 0x2) && fin && f.hdr[0]&0x40 == 0 && f.left <= maxStatus && f.text != nil
	default:
		f.failed = true // reserved opcodes: not a stream this parser knows
		return
	}
	if f.left == 0 {
		f.end()
	}
}

// end finishes a frame whose payload has passed: the next bytes are a
// header.
func (f *frames) end() {
	if f.keep {
		f.text(f.payload)
	}
	f.keep, f.inPayload, f.hdrN = false, false, 0
}

// kernelState is what a Jupyter status message says: the kernel's
// execution state ("busy", "idle", "starting", …), the request it is about
// (its parent header's msg_id; "" for none or an unreadable one), and the
// kernel's session (its header's session: a kernel started anew, a restart
// included, has a new one).
type kernelState struct {
	State, Parent, Session string
}

// kernelStatus reads a status message, or returns a zero kernelState: a
// JSON message (Jupyter's original kernel websocket protocol, Notebook 6)
// or a binary one of the v1.kernel.websocket.jupyter.org protocol
// (jupyter_server 2, JupyterLab 4): a little-endian count of offsets, the
// offsets of the parts from the message's start, then the parts — channel,
// header, parent header, metadata, content, buffers.
func kernelStatus(body []byte) kernelState {
	if !bytes.Contains(body, []byte(`execution_state`)) {
		return kernelState{}
	}
	if len(body) > 0 && body[0] != '{' {
		return v1Status(body)
	}
	var m struct {
		Header       statusHeader `json:"header"`
		MsgType      string       `json:"msg_type"`
		ParentHeader struct {
			MsgID string `json:"msg_id"`
		} `json:"parent_header"`
		Content struct {
			ExecutionState string `json:"execution_state"`
		} `json:"content"`
	}
	// One pass: a value of the wrong type (a parent header that is not an
	// object) leaves its field empty and the rest decoded.
	var wrongType *json.UnmarshalTypeError
	if err := json.Unmarshal(body, &m); err != nil && !errors.As(err, &wrongType) {
		return kernelState{}
	}
	if m.Content.ExecutionState == "" || (m.Header.MsgType != "status" && m.MsgType != "status") {
		return kernelState{}
	}
	return kernelState{m.Content.ExecutionState, m.ParentHeader.MsgID, m.Header.Session}
}

// statusHeader is the part of a message's header a status is read for.
type statusHeader struct {
	MsgType string `json:"msg_type"`
	Session string `json:"session"`
}

// parentOf is a parent header's msg_id; "" for none or one unreadable (the
// state still counts, as a request of its own).
func parentOf(raw []byte) string {
	var ph struct {
		MsgID string `json:"msg_id"`
	}
	if json.Unmarshal(raw, &ph) != nil {
		return ""
	}
	return ph.MsgID
}

// v1Status reads a v1-protocol status message, or returns a zero
// kernelState.
func v1Status(b []byte) kernelState {
	if len(b) < 8 {
		return kernelState{}
	}
	n := binary.LittleEndian.Uint64(b)
	if n < 6 || n > 64 || uint64(len(b)) < 8*(n+1) {
		return kernelState{}
	}
	off := make([]uint64, n)
	for i := range off {
		off[i] = binary.LittleEndian.Uint64(b[8*(i+1):])
		if off[i] > uint64(len(b)) || i > 0 && off[i] < off[i-1] {
			return kernelState{}
		}
	}
	var header statusHeader
	var content struct {
		ExecutionState string `json:"execution_state"`
	}
	if json.Unmarshal(b[off[1]:off[2]], &header) != nil || header.MsgType != "status" || json.Unmarshal(b[off[4]:off[5]], &content) != nil {
		return kernelState{}
	}
	return kernelState{content.ExecutionState, parentOf(b[off[2]:off[3]]), header.Session}
}

// watchedConn is an upgraded connection to an app whose websocket frames
// count as use: what the app sends (Read) and what the client sends
// (Write) pass through a frame parser each.
type watchedConn struct {
	io.ReadWriteCloser
	in, out frames
	used    func()
	mu      sync.Mutex
	busy    map[string]struct{} // the requests the kernel is busy on, by parent id
	session string              // the kernel's session they were sent in
	running bool                // whileBusy runs (at most one)
	ticking sync.WaitGroup      // whileBusy running
	stop    chan struct{}
	closed  sync.Once
	every   time.Duration
}

// watch wraps an upgraded connection; used is told of each data frame (at
// most one call per frame run: the service writes at most every 30 s)
// and every `every` while a kernel behind the socket is busy.
func watch(rwc io.ReadWriteCloser, used func(), every time.Duration) *watchedConn {
	c := &watchedConn{ReadWriteCloser: rwc, used: used, stop: make(chan struct{}), every: every}
	c.in = frames{data: used, text: c.status}
	c.out = frames{data: used}
	return c
}

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.ReadWriteCloser.Read(p)
	c.in.feed(p[:n])
	return n, err
}

func (c *watchedConn) Write(p []byte) (int, error) {
	n, err := c.ReadWriteCloser.Write(p)
	c.out.feed(p[:n])
	return n, err
}

func (c *watchedConn) Close() error {
	c.closed.Do(func() { close(c.stop) })
	return c.ReadWriteCloser.Close()
}

// maxBusy bounds the requests a socket's kernel is followed as busy on: a
// kernel that reports busy on more at once is busy in any case.
const maxBusy = 64

// status follows a kernel's execution state, request by request: busy on
// one starts a ticker that counts as use until every request it was busy
// on is idle again, the kernel starts anew (a status of a new session, or
// "starting", "restarting", "dead": a restart by hand says none of the
// last three, and its "starting" may come before the socket listens), or
// the socket closes.
func (c *watchedConn) status(body []byte) {
	k := kernelStatus(body)
	if k.State == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if k.Session != c.session {
		clear(c.busy) // another kernel process: what the last one ran is gone
		c.session = k.Session
	}
	switch k.State {
	case "busy":
		if c.busy == nil {
			c.busy = map[string]struct{}{}
		}
		if len(c.busy) < maxBusy {
			c.busy[k.Parent] = struct{}{}
		}
	case "idle":
		delete(c.busy, k.Parent)
		return
	default: // starting, restarting, dead: no request runs any more
		clear(c.busy)
		return
	}
	if !c.running {
		c.running = true
		c.ticking.Add(1)
		go c.whileBusy()
	}
}

func (c *watchedConn) whileBusy() {
	defer c.ticking.Done()
	t := time.NewTicker(c.every)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			c.mu.Lock()
			c.running = false
			c.mu.Unlock()
			return
		case <-t.C:
			c.mu.Lock()
			busy := len(c.busy) > 0
			if !busy {
				c.running = false
			}
			c.mu.Unlock()
			if !busy {
				return
			}
			c.used()
		}
	}
}
