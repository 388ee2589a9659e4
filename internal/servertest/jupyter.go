package servertest

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/gantryhq/gantry/internal/waitfor"
)

// RunCell runs code in a Jupyter kernel over its channels websocket (the
// Jupyter messaging protocol, JSON) and returns what it printed.
func RunCell(t testing.TB, wsURL, token, code string) string {
	t.Helper()
	ws := DialKernel(t, wsURL, token)
	defer ws.Close()
	ws.SetDeadline(time.Now().Add(time.Minute))
	if err := SendCell(ws, "e2e-1", code); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for {
		var in struct {
			Channel string `json:"channel"`
			Header  struct {
				MsgType string `json:"msg_type"`
			} `json:"header"`
			ParentHeader struct {
				MsgID string `json:"msg_id"`
			} `json:"parent_header"`
			Content struct {
				Text           string `json:"text"`
				ExecutionState string `json:"execution_state"`
				EName          string `json:"ename"`
				EValue         string `json:"evalue"`
			} `json:"content"`
		}
		if err := websocket.JSON.Receive(ws, &in); err != nil {
			t.Fatalf("the kernel's messages: %v (printed so far %q)", err, out.String())
		}
		if in.ParentHeader.MsgID != "e2e-1" {
			continue
		}
		switch in.Header.MsgType {
		case "stream":
			out.WriteString(in.Content.Text)
		case "error":
			t.Fatalf("the cell failed: %s: %s", in.Content.EName, in.Content.EValue)
		case "status":
			if in.Content.ExecutionState == "idle" {
				return out.String()
			}
		}
	}
}

// DialKernel opens a kernel's channels websocket through Gantry with a
// bearer token, trying again for up to a minute.
func DialKernel(t testing.TB, wsURL, token string) *websocket.Conn {
	t.Helper()
	cfg, err := websocket.NewConfig(wsURL, "http://gantry.test")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Header = http.Header{"Authorization": {"Bearer " + token}}
	// Tried again for a while: a kernel just started can refuse its first
	// dial on a loaded machine (CI r171: "bad status" right after the
	// kernel's 201).
	var ws *websocket.Conn
	waitfor.Until(t, time.Minute, "the kernel's websocket through Gantry", func() error {
		ws, err = websocket.DialConfig(cfg)
		return err
	})
	return ws
}

// SendCell sends an execute_request for code, as message msgID (the
// replies name it as their parent).
func SendCell(ws *websocket.Conn, msgID, code string) error {
	return websocket.JSON.Send(ws, map[string]any{
		"header":        map[string]any{"msg_id": msgID, "username": "e2e", "session": "e2e", "msg_type": "execute_request", "version": "5.3"},
		"parent_header": map[string]any{}, "metadata": map[string]any{}, "channel": "shell", "buffers": []any{},
		"content": map[string]any{"code": code, "silent": false, "store_history": false, "user_expressions": map[string]any{}, "allow_stdin": false, "stop_on_error": true},
	})
}
