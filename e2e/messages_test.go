package e2e

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// This file is Anthropic's Messages API with the code_execution tool
// through the whole path (client → devproxy → ext_proc gRPC → filter →
// messages processor → gVisor container), with a scripted Messages model
// server behind that replays Anthropic's shapes: a tool_use for the two
// client tools, text, usage, and checks what it is sent.

// anthStep is one answer of the scripted Messages model: check sees the
// request, blocks are the answer's content.
type anthStep struct {
	check  func(t *testing.T, req gjson.Result)
	blocks []string
	stop   string // stop_reason; "" is tool_use when a block calls a tool, else end_turn
	// gated: a streamed answer holds after its first text delta until the
	// model's gate opens (the client saw that delta: a live stream), or
	// fails the test.
	gated bool
}

// anthModel is a scripted Messages model server: each POST /v1/messages
// takes the next step.
type anthModel struct {
	t     *testing.T
	mu    sync.Mutex
	steps []anthStep
	n     int
	reqs  []gjson.Result
	// streamed counts the requests that asked for a stream.
	streamed int
	gate     chan struct{}
	gateOnce sync.Once
	url      string
}

// openGate lets a gated answer go on (GET /gate does it for a client in
// another process).
func (m *anthModel) openGate() { m.gateOnce.Do(func() { close(m.gate) }) }

func newAnthModel(t *testing.T, steps ...anthStep) (*anthModel, string) {
	m := &anthModel{t: t, steps: steps, gate: make(chan struct{})}
	url := newRawUpstream(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		if r.URL.Path == "/gate" {
			m.openGate()
			return
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		// The client's credential (x-api-key, or a Bearer token as the
		// SDK sends it) and version reach the model server, follow-ups too.
		if r.URL.Path != "/v1/messages" || (r.Header.Get("x-api-key") == "" && r.Header.Get("authorization") == "") || r.Header.Get("anthropic-version") == "" {
			m.t.Errorf("the model server got %s %s x-api-key=%q authorization=%q anthropic-version=%q", r.Method, r.URL.Path, r.Header.Get("x-api-key"), r.Header.Get("authorization"), r.Header.Get("anthropic-version"))
		}
		req := gjson.ParseBytes(body)
		m.reqs = append(m.reqs, req)
		if m.n >= len(m.steps) {
			m.t.Errorf("the model server got request %d of a %d-step script: %s", m.n+1, len(m.steps), body)
			w.WriteHeader(500)
			_, _ = w.Write([]byte(`{"type":"error","error":{"type":"api_error","message":"script over"}}`))
			return
		}
		s := m.steps[m.n]
		m.n++
		if s.check != nil {
			s.check(m.t, req)
		}
		stop := s.stop
		if stop == "" {
			stop = "end_turn"
			for _, b := range s.blocks {
				if gjson.Get(b, "type").Str == "tool_use" {
					stop = "tool_use"
				}
			}
		}
		head := `{"id":"msg_up_` + itoa(m.n) + `","type":"message","role":"assistant","model":` + req.Get("model").Raw
		if req.Get("stream").Type == gjson.True {
			m.streamed++
			m.stream(w, head, s, stop)
			return
		}
		_, _ = io.WriteString(w, head+`,"content":[`+strings.Join(s.blocks, ",")+`],"stop_reason":"`+stop+`","stop_sequence":null,"usage":{"input_tokens":`+itoa(100*m.n)+`,"output_tokens":`+itoa(10*m.n)+`}}`)
	})
	m.url = url
	return m, url
}

// stream answers with Anthropic's events as its API streams a message:
// message_start, a ping, each block's start, its text or input in
// several deltas, its stop, message_delta with the stop and the output
// tokens, message_stop — each flushed as written.
func (m *anthModel) stream(w http.ResponseWriter, head string, s anthStep, stop string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(typ, data string) {
		_, _ = io.WriteString(w, "event: "+typ+"\ndata: "+data+"\n\n")
		_ = rc.Flush()
	}
	send("message_start", `{"type":"message_start","message":`+head+`,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":`+itoa(100*m.n)+`,"output_tokens":1}}}`)
	send("ping", `{"type":"ping"}`)
	held := !s.gated
	for k, b := range s.blocks {
		i := itoa(k)
		blk := gjson.Parse(b)
		var pieces []string
		var kind, field string
		switch blk.Get("type").Str {
		case "text":
			send("content_block_start", `{"type":"content_block_start","index":`+i+`,"content_block":{"type":"text","text":""}}`)
			pieces, kind, field = thirds(blk.Get("text").Str), "text_delta", "text"
		case "tool_use":
			send("content_block_start", `{"type":"content_block_start","index":`+i+`,"content_block":{"type":"tool_use","id":`+blk.Get("id").Raw+`,"name":`+blk.Get("name").Raw+`,"input":{}}}`)
			pieces, kind, field = thirds(blk.Get("input").Raw), "input_json_delta", "partial_json"
		}
		for _, p := range pieces {
			send("content_block_delta", `{"type":"content_block_delta","index":`+i+`,"delta":{"type":"`+kind+`","`+field+`":`+jsonString(p)+`}}`)
			if !held && kind == "text_delta" {
				held = true
				select {
				case <-m.gate:
				case <-time.After(time.Minute): // a deadlock's bound, not a speed
					m.t.Errorf("the client did not get the model's first text delta while the model was still writing (the gate never opened)")
				}
			}
		}
		send("content_block_stop", `{"type":"content_block_stop","index":`+i+`}`)
	}
	send("message_delta", `{"type":"message_delta","delta":{"stop_reason":"`+stop+`","stop_sequence":null},"usage":{"output_tokens":`+itoa(10*m.n)+`}}`)
	send("message_stop", `{"type":"message_stop"}`)
}

// thirds is s in three pieces (the deltas of a streamed block).
func thirds(s string) []string {
	r := []rune(s)
	n := len(r) / 3
	if n == 0 {
		return []string{s}
	}
	return []string{string(r[:n]), string(r[n : 2*n]), string(r[2*n:])}
}

func jsonString(s string) string { b, _ := json.Marshal(s); return string(b) }

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func toolUse(id, name, input string) string {
	return `{"type":"tool_use","id":"` + id + `","name":"` + name + `","input":` + input + `}`
}

func textBlock(s string) string {
	b, _ := json.Marshal(s)
	return `{"type":"text","text":` + string(b) + `}`
}

// conversationShape is messages with each call id replaced by its order
// of appearance (the model server's toolu_… ids and the client's
// srvtoolu_… ids name the same calls), one line a message.
func conversationShape(msgs gjson.Result) string {
	ids := map[string]string{}
	var b strings.Builder
	msgs.ForEach(func(_, m gjson.Result) bool {
		b.WriteString(m.Get("role").Str + ":")
		c := m.Get("content")
		if c.Type == gjson.String {
			b.WriteString(" " + c.Raw + "\n")
			return true
		}
		c.ForEach(func(_, blk gjson.Result) bool {
			for _, f := range []string{"id", "tool_use_id"} {
				if id := blk.Get(f).Str; id != "" {
					if ids[id] == "" {
						ids[id] = "call" + itoa(len(ids)+1)
					}
					blk = gjson.Parse(strings.ReplaceAll(blk.Raw, jsonString(id), jsonString(ids[id])))
				}
			}
			b.WriteString(" " + blk.Raw)
			return true
		})
		b.WriteString("\n")
		return true
	})
	return b.String()
}

// lastResults are the tool_result blocks of a request's last message.
func lastResults(req gjson.Result) map[string]gjson.Result {
	msgs := req.Get("messages").Array()
	out := map[string]gjson.Result{}
	if len(msgs) == 0 {
		return out
	}
	msgs[len(msgs)-1].Get("content").ForEach(func(_, b gjson.Result) bool {
		if b.Get("type").Str == "tool_result" {
			out[b.Get("tool_use_id").Str] = b
		}
		return true
	})
	return out
}

func messagesStack(t *testing.T, steps ...anthStep) (*stack, *anthModel) {
	m, url := newAnthModel(t, steps...)
	s := newStackWithUpstream(t, shapes{}, url, stackOptions{provider: "gvisor", containers: true, messages: true})
	return s, m
}

// postMessages posts body to /v1/messages as an Anthropic client does.
func postMessages(t *testing.T, s *stack, key, body string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.proxyURL+"/v1/messages", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("anthropic-version", "2023-06-01")
	if key != "" {
		req.Header.Set("x-api-key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

const codeExecTool = `{"type":"code_execution_20250825","name":"code_execution"}`

// TestMessagesCodeExecution: the buffered path field by field. The
// declaration becomes the two client tools beside the client's own,
// tool_choice follows it, the model's calls run as one bash session (cwd
// and exported variables kept) and the editor in the same container, the
// model is told each result, and the client gets Anthropic's message:
// server_tool_use / result blocks in order with matching ids, the output
// file's id (downloadable), usage summed with code_execution_requests,
// the container, the last stop_reason. A next request naming the
// container and sending the history back continues the session; a forged
// call id, a changed input and another credential are refused.
func TestMessagesCodeExecution(t *testing.T) {
	var m *anthModel
	s, m := messagesStack(t,
		anthStep{
			check: func(t *testing.T, req gjson.Result) {
				var names []string
				req.Get("tools").ForEach(func(_, tl gjson.Result) bool { names = append(names, tl.Get("name").Str); return true })
				if strings.Join(names, ",") != "bash_code_execution,text_editor_code_execution,get_weather" {
					t.Errorf("tools: %s", req.Get("tools").Raw)
				}
				if req.Get("tools.0.input_schema.required").Raw != `["command"]` || req.Get("tools.1.input_schema.properties.command.enum").Raw != `["view","create","str_replace"]` {
					t.Errorf("the tools' schemas: %s", req.Get("tools").Raw)
				}
				if req.Get("tool_choice").Raw != `{"type":"tool","name":"bash_code_execution"}` || req.Get("container").Exists() {
					t.Errorf("tool_choice %s container %s", req.Get("tool_choice").Raw, req.Get("container").Raw)
				}
			},
			blocks: []string{textBlock("Let me look."), toolUse("toolu_1", "bash_code_execution", `{"command":"mkdir -p w && cd w && export X=7 && echo hi > out.txt && pwd"}`)},
		},
		anthStep{
			check: func(t *testing.T, req gjson.Result) {
				msgs := req.Get("messages").Array()
				if len(msgs) != 3 || msgs[1].Get("role").Str != "assistant" || msgs[1].Get("content.1.id").Str != "toolu_1" {
					t.Errorf("the follow-up's messages: %s", req.Get("messages").Raw)
				}
				r := lastResults(req)["toolu_1"]
				if r.Get("content").Str != "return_code: 0\nstdout:\n/mnt/data/w\n(1 file(s) written were saved for the user)\n" || r.Get("is_error").Exists() {
					t.Errorf("the model was told: %s", r.Raw)
				}
			},
			blocks: []string{toolUse("toolu_2", "bash_code_execution", `{"command":"echo $X; pwd; cat out.txt"}`),
				toolUse("toolu_3", "text_editor_code_execution", `{"command":"create","path":"notes.md","file_text":"a\nb\n"}`)},
		},
		anthStep{
			check: func(t *testing.T, req gjson.Result) {
				rs := lastResults(req)
				if rs["toolu_2"].Get("content").Str != "return_code: 0\nstdout:\n7\n/mnt/data/w\nhi\n" || rs["toolu_3"].Get("content").Str != "File notes.md created." {
					t.Errorf("the model was told: %v", rs)
				}
			},
			blocks: []string{toolUse("toolu_4", "text_editor_code_execution", `{"command":"str_replace","path":"/mnt/data/w/notes.md","old_str":"zzz","new_str":"c"}`)},
		},
		anthStep{
			check: func(t *testing.T, req gjson.Result) {
				if r := lastResults(req)["toolu_4"]; !strings.HasPrefix(r.Get("content").Str, "Error: invalid_tool_input: No replacement was performed") || !r.Get("is_error").Bool() {
					t.Errorf("the model was told: %s", r.Raw)
				}
			},
			blocks: []string{textBlock("Done: X is 7.")},
		},
		// The second request: the history as the model saw it in the
		// first request's last round (the parallel calls toolu_2 and
		// toolu_3 in one assistant turn, their results in one user turn),
		// then its answer and the new user message.
		anthStep{
			check: func(t *testing.T, req gjson.Result) {
				// The last user message ends with the container's files.
				msgs := req.Get("messages").Array()
				last := msgs[len(msgs)-1].Get("content")
				note := last.Get("1.text").Str
				if last.Get("0.text").Str != "Again?" || len(last.Array()) != 2 || !strings.HasPrefix(note, "[Files in /mnt/data of the code execution container (cntr_") ||
					!strings.Contains(note, "\n- /mnt/data/w/out.txt (3 bytes)\n") || !strings.Contains(note, "\n- /mnt/data/w/notes.md (4 bytes)\n") {
					t.Errorf("the last user message: %s", last.Raw)
				}
				saw := m.reqs[3].Get("messages").Raw
				saw = saw[:len(saw)-1] + `,{"role":"assistant","content":[{"type":"text","text":"Done: X is 7."}]},{"role":"user","content":[{"type":"text","text":"Again?"},{"type":"text","text":` + jsonString(note) + `}]}]`
				if got, want := conversationShape(req.Get("messages")), conversationShape(gjson.Parse(saw)); got != want {
					t.Errorf("the replayed history:\n%s\nthe model saw:\n%s", got, want)
				}
			},
			blocks: []string{toolUse("toolu_5", "bash_code_execution", `{"command":"pwd; echo $X"}`)},
		},
		anthStep{
			check: func(t *testing.T, req gjson.Result) {
				if c := lastResults(req)["toolu_5"].Get("content").Str; c != "return_code: 0\nstdout:\n/mnt/data/w\n7\n" {
					t.Errorf("the session in the next request: %q", c)
				}
			},
			blocks: []string{textBlock("Still 7.")},
		},
	)
	body := `{"model":"claude-like","max_tokens":1024,"messages":[{"role":"user","content":"Make a file."}],` +
		`"tools":[` + codeExecTool + `,{"name":"get_weather","description":"w","input_schema":{"type":"object","properties":{}}}],` +
		`"tool_choice":{"type":"tool","name":"code_execution"}}`
	st, hdr, b := postMessages(t, s, "sk-ant-1", body)
	if st != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
		t.Fatalf("status %d %s: %s", st, hdr.Get("Content-Type"), b)
	}
	msg := gjson.ParseBytes(b)
	var kinds []string
	msg.Get("content").ForEach(func(_, c gjson.Result) bool { kinds = append(kinds, c.Get("type").Str); return true })
	if strings.Join(kinds, ",") != "text,server_tool_use,bash_code_execution_tool_result,server_tool_use,bash_code_execution_tool_result,server_tool_use,text_editor_code_execution_tool_result,server_tool_use,text_editor_code_execution_tool_result,text" {
		t.Fatalf("blocks: %v\n%s", kinds, b)
	}
	c := msg.Get("content").Array()
	for _, k := range []int{1, 3, 5, 7} {
		if !strings.HasPrefix(c[k].Get("id").Str, "srvtoolu_") || c[k+1].Get("tool_use_id").Str != c[k].Get("id").Str || c[k].Get("caller.type").Str != "direct" {
			t.Errorf("call %d: %s / %s", k, c[k].Raw, c[k+1].Raw)
		}
	}
	if c[1].Get("name").Str != "bash_code_execution" || c[1].Get("input.command").Str != "mkdir -p w && cd w && export X=7 && echo hi > out.txt && pwd" {
		t.Errorf("server_tool_use: %s", c[1].Raw)
	}
	r := c[2].Get("content")
	if r.Get("type").Str != "bash_code_execution_result" || r.Get("stdout").Str != "/mnt/data/w\n" || r.Get("stderr").Str != "" || r.Get("return_code").Int() != 0 ||
		len(r.Get("content").Array()) != 1 || r.Get("content.0.type").Str != "bash_code_execution_output" {
		t.Errorf("bash result: %s", c[2].Raw)
	}
	if c[4].Get("content.stdout").Str != "7\n/mnt/data/w\nhi\n" {
		t.Errorf("the session's second command: %s", c[4].Raw)
	}
	if c[6].Get("content").Raw != `{"type":"text_editor_code_execution_create_result","is_file_update":false}` {
		t.Errorf("create: %s", c[6].Raw)
	}
	if c[8].Get("content.type").Str != "text_editor_code_execution_tool_result_error" || c[8].Get("content.error_code").Str != "invalid_tool_input" {
		t.Errorf("str_replace without a match: %s", c[8].Raw)
	}
	if msg.Get("stop_reason").Str != "end_turn" || msg.Get("model").Str != "claude-like" || msg.Get("role").Str != "assistant" || msg.Get("type").Str != "message" ||
		msg.Get("id").Str != "msg_up_1" || msg.Get("stop_sequence").Type != gjson.Null {
		t.Errorf("the message: %s", b)
	}
	if u := msg.Get("usage"); u.Get("input_tokens").Int() != 100+200+300+400 || u.Get("output_tokens").Int() != 10+20+30+40 || u.Get("server_tool_use.code_execution_requests").Int() != 4 {
		t.Errorf("usage: %s", u.Raw)
	}
	ctr := msg.Get("container.id").Str
	exp, err := time.Parse(time.RFC3339Nano, msg.Get("container.expires_at").Str)
	if !strings.HasPrefix(ctr, "cntr_") || err != nil || time.Until(exp) < 15*time.Minute {
		t.Errorf("container: %s (%v)", msg.Get("container").Raw, err)
	}
	// The output file, by its file_id, through the Containers API (the
	// same container, the same credential as a Bearer token).
	fid := r.Get("content.0.file_id").Str
	dl, err := http.NewRequest(http.MethodGet, s.proxyURL+"/v1/containers/"+ctr+"/files/"+fid+"/content", nil)
	if err != nil {
		t.Fatal(err)
	}
	dl.Header.Set("Authorization", "Bearer sk-ant-1")
	resp, err := http.DefaultClient.Do(dl)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(got) != "hi\n" {
		t.Errorf("downloading %s: %d %q", fid, resp.StatusCode, got)
	}

	// The next turn: the history as the SDKs send it back, the container
	// by id.
	history := `{"role":"user","content":"Make a file."},{"role":"assistant","content":` + msg.Get("content").Raw + `},{"role":"user","content":"Again?"}`
	next := `{"model":"claude-like","max_tokens":1024,"container":"` + ctr + `","messages":[` + history + `],"tools":[` + codeExecTool + `]}`
	st, _, b = postMessages(t, s, "sk-ant-1", next)
	if st != 200 || gjson.GetBytes(b, "content.1.content.stdout").Str != "/mnt/data/w\n7\n" || gjson.GetBytes(b, "container.id").Str != ctr {
		t.Fatalf("the next turn: %d %s", st, b)
	}

	// Refusals, each Anthropic's error shape, none reaching the model.
	before := len(m.reqs)
	forged := strings.Replace(next, c[1].Get("id").Str, "srvtoolu_0000000000000000ffffffffffffffffffffffffffffffff", 2)
	changed := strings.Replace(next, `out.txt \u0026\u0026 pwd`, `out.txt \u0026\u0026 id`, 1)
	if changed == next {
		changed = strings.Replace(next, `out.txt && pwd`, `out.txt && id`, 1)
	}
	for _, tc := range []struct {
		name, key, body string
		status          int
		typ, msg        string
	}{
		{"forged call id", "sk-ant-1", forged, 400, "invalid_request_error", "not a call this server made"},
		{"changed input", "sk-ant-1", changed, 400, "invalid_request_error", "not a call this server made"},
		{"another credential's history", "sk-ant-2", strings.Replace(next, `"container":"`+ctr+`",`, "", 1), 400, "invalid_request_error", "not a call this server made"},
		{"another credential's container", "sk-ant-2", `{"model":"m","max_tokens":9,"container":"` + ctr + `","messages":[{"role":"user","content":"hi"}],"tools":[` + codeExecTool + `]}`, 404, "not_found_error", "not found"},
		{"no credential", "", `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"hi"}],"tools":[` + codeExecTool + `]}`, 401, "authentication_error", "x-api-key"},
		{"an unknown version", "sk-ant-1", `{"model":"m","max_tokens":9,"messages":[],"tools":[{"type":"code_execution_20991231","name":"code_execution"}]}`, 400, "invalid_request_error", "tools.0"},
		{"programmatic calling", "sk-ant-1", `{"model":"m","max_tokens":9,"messages":[],"tools":[{"type":"code_execution_20260120","name":"code_execution"},{"name":"f","input_schema":{"type":"object"},"allowed_callers":["code_execution_20260120"]}]}`, 400, "invalid_request_error", "tools.1.allowed_callers"},
		{"a wrong name", "sk-ant-1", `{"model":"m","max_tokens":9,"messages":[],"tools":[{"type":"code_execution_20250825","name":"run"}]}`, 400, "invalid_request_error", "tools.0.code_execution_20250825.name"},
		{"history without the tool", "sk-ant-1", strings.Replace(next, `,"tools":[`+codeExecTool+`]`, "", 1), 400, "invalid_request_error", "messages.1.content.1: a server_tool_use block needs the code execution tool in tools"},
		{"a client tool named like ours", "sk-ant-1", `{"model":"m","max_tokens":9,"messages":[],"tools":[` + codeExecTool + `,{"name":"bash_code_execution","input_schema":{"type":"object"}}]}`, 400, "invalid_request_error", "tools.1.name"},
	} {
		st, hdr, b := postMessages(t, s, tc.key, tc.body)
		e := gjson.ParseBytes(b)
		if st != tc.status || e.Get("type").Str != "error" || e.Get("error.type").Str != tc.typ || !strings.Contains(e.Get("error.message").Str, tc.msg) ||
			!strings.HasPrefix(hdr.Get("Content-Type"), "application/json") || len(e.Map()) != 2 || len(e.Get("error").Map()) != 2 {
			t.Errorf("%s: %d %s", tc.name, st, b)
		}
	}
	if len(m.reqs) != before {
		t.Errorf("a refused request reached the model server (%d requests, %d before)", len(m.reqs), before)
	}
}

// sseEvent is one server-sent event.
type sseEvent struct {
	name string
	data gjson.Result
	at   time.Duration
}

// readEventsSeeing reads the events, telling seen each as it arrives.
func readEventsSeeing(t *testing.T, r io.Reader, start time.Time, seen func(sseEvent)) []sseEvent {
	t.Helper()
	var evs []sseEvent
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var name string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			d := gjson.Parse(strings.TrimPrefix(line, "data: "))
			if d.Get("type").Str != name {
				t.Errorf("event %q carries type %q", name, d.Get("type").Str)
			}
			e := sseEvent{name: name, data: d, at: time.Since(start)}
			evs = append(evs, e)
			if seen != nil {
				seen(e)
			}
		}
	}
	return evs
}

// TestMessagesStream: Anthropic's events, live from the model server's
// own stream (asked with stream true, every round): message_start, the
// model's text as it writes it (its first delta reaches the client while
// the model holds the rest of its answer), the call announced as
// server_tool_use with its input in one input_json_delta once the model
// wrote it, pings while the command runs, the result whole in its
// content_block_start, the next round's text, indexes in order across
// rounds, message_delta with the stop, container and summed usage,
// message_stop.
func TestMessagesStream(t *testing.T) {
	s, m := messagesStack(t,
		anthStep{gated: true, blocks: []string{textBlock("Running the command now."), toolUse("toolu_1", "bash_code_execution", `{"command":"sleep 2; echo slept"}`)}},
		anthStep{blocks: []string{textBlock("It slept, and said so.")}},
	)
	body := `{"model":"m","max_tokens":99,"stream":true,"messages":[{"role":"user","content":"sleep"}],"tools":[` + codeExecTool + `]}`
	req, _ := http.NewRequest(http.MethodPost, s.proxyURL+"/v1/messages", strings.NewReader(body))
	req.Header.Set("x-api-key", "sk-ant-s")
	req.Header.Set("anthropic-version", "2023-06-01")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	evs := readEventsSeeing(t, resp.Body, start, func(e sseEvent) {
		if e.name == "content_block_delta" && e.data.Get("delta.type").Str == "text_delta" {
			m.openGate() // the model writes the rest of its round only now
		}
	})
	if m.streamed != 2 {
		t.Errorf("the model server was asked to stream %d of its 2 rounds", m.streamed)
	}
	var names []string
	for _, e := range evs {
		if n := len(names); n == 0 || (e.name != "ping" && e.name != "content_block_delta") || names[n-1] != e.name {
			names = append(names, e.name)
		}
	}
	want := "message_start,ping,content_block_start,content_block_delta,content_block_stop," + // text, delta by delta
		"content_block_start,content_block_delta,content_block_stop,ping," + // server_tool_use, then the run
		"content_block_start,content_block_stop," + // the result
		"ping,content_block_start,content_block_delta,content_block_stop,message_delta,message_stop" // the next round
	if strings.Join(names, ",") != want {
		t.Fatalf("events:\n%s\nwant\n%s", strings.Join(names, ","), want)
	}
	var starts []gjson.Result
	texts := map[int64]string{}
	deltas := map[int64]int{}
	var pingAt, resultAt, toolAt time.Duration
	for _, e := range evs {
		switch e.name {
		case "content_block_start":
			if int(e.data.Get("index").Int()) != len(starts) {
				t.Errorf("index %d for block %d", e.data.Get("index").Int(), len(starts))
			}
			starts = append(starts, e.data.Get("content_block"))
			if e.data.Get("content_block.type").Str == "bash_code_execution_tool_result" {
				resultAt = e.at
			}
			if e.data.Get("content_block.type").Str == "server_tool_use" {
				toolAt = e.at
			}
		case "content_block_delta":
			i := e.data.Get("index").Int()
			if i != int64(len(starts)-1) {
				t.Errorf("a delta of block %d inside block %d", i, len(starts)-1)
			}
			deltas[i]++
			texts[i] += e.data.Get("delta.text").Str
		case "ping":
			if pingAt == 0 && toolAt != 0 {
				pingAt = e.at
			}
		}
	}
	if !(toolAt < pingAt && pingAt < resultAt) {
		t.Errorf("server_tool_use at %v, the first ping after it at %v, the result at %v", toolAt, pingAt, resultAt)
	}
	if texts[0] != "Running the command now." || deltas[0] != 3 || texts[3] != "It slept, and said so." || deltas[3] != 3 {
		t.Errorf("the text blocks' deltas: %v %v", texts, deltas)
	}
	if starts[1].Get("type").Str != "server_tool_use" || starts[1].Get("input").Raw != "{}" || !strings.HasPrefix(starts[1].Get("id").Str, "srvtoolu_") || deltas[1] != 1 {
		t.Errorf("server_tool_use start: %s (%d deltas)", starts[1].Raw, deltas[1])
	}
	for _, e := range evs {
		if e.name == "content_block_delta" && e.data.Get("index").Int() == 1 {
			if d := e.data.Get("delta"); d.Get("type").Str != "input_json_delta" || d.Get("partial_json").Str != `{"command":"sleep 2; echo slept"}` {
				t.Errorf("input delta: %s", e.data.Raw)
			}
		}
	}
	if res := starts[2]; res.Get("tool_use_id").Str != starts[1].Get("id").Str || res.Get("content.stdout").Str != "slept\n" || res.Get("content.return_code").Int() != 0 {
		t.Errorf("the result block: %s", res.Raw)
	}
	md := evs[len(evs)-2].data
	if md.Get("delta.stop_reason").Str != "end_turn" || !strings.HasPrefix(md.Get("delta.container.id").Str, "cntr_") ||
		md.Get("usage.input_tokens").Int() != 300 || md.Get("usage.output_tokens").Int() != 30 || md.Get("usage.server_tool_use.code_execution_requests").Int() != 1 {
		t.Errorf("message_delta: %s", md.Raw)
	}
	if ms := evs[0].data.Get("message"); ms.Get("id").Str != "msg_up_1" || ms.Get("content").Raw != "[]" || ms.Get("stop_reason").Type != gjson.Null {
		t.Errorf("message_start: %s", evs[0].data.Raw)
	}
	// The follow-up's history: the round as the model streamed it, whole.
	if c := m.reqs[1].Get("messages.1.content"); c.Get("0.text").Str != "Running the command now." || c.Get("1.input.command").Str != "sleep 2; echo slept" || c.Get("1.id").Str != "toolu_1" {
		t.Errorf("the follow-up's assistant turn: %s", c.Raw)
	}
}

// TestMessagesRefusedOnWasm: a sandbox with no shell refuses the tool
// with Anthropic's 400, before the model server is asked; a request
// without the tool passes through untouched.
func TestMessagesRefusedOnWasm(t *testing.T) {
	m, url := newAnthModel(t, anthStep{blocks: []string{textBlock("plain")}})
	s := newStackWithUpstream(t, shapes{}, url, stackOptions{containers: true, messages: true})
	st, _, b := postMessages(t, s, "k", `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"hi"}],"tools":[`+codeExecTool+`]}`)
	e := gjson.ParseBytes(b)
	if st != 400 || e.Get("type").Str != "error" || e.Get("error.type").Str != "invalid_request_error" || !strings.Contains(e.Get("error.message").Str, "tools.0: code execution needs a sandbox with a shell") {
		t.Fatalf("%d %s", st, b)
	}
	st, _, b = postMessages(t, s, "k", `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"hi"}]}`)
	if st != 200 || gjson.GetBytes(b, "content.0.text").Str != "plain" || len(m.reqs) != 1 {
		t.Fatalf("a request without the tool: %d %s", st, b)
	}
}

// TestNodeAnthropicSDK: the official @anthropic-ai/sdk decodes what this
// server answers — messages.create's typed blocks, then messages.stream
// (its accumulator builds the server_tool_use input from input_json_delta
// and takes each result whole from content_block_start) continuing in the
// same container with the history the SDK holds sent back as it is.
func TestNodeAnthropicSDK(t *testing.T) {
	node := nodeReady(t)
	s, am := messagesStack(t,
		anthStep{blocks: []string{toolUse("toolu_1", "text_editor_code_execution", `{"command":"create","path":"/mnt/data/hello.py","file_text":"print('hello', 6 * 7)\n"}`)}},
		// Two calls in one round: the SDK's history sends them back
		// interleaved with their results; the model gets them as one turn.
		anthStep{blocks: []string{toolUse("toolu_v", "text_editor_code_execution", `{"command":"view","path":"/mnt/data/hello.py"}`),
			toolUse("toolu_2", "bash_code_execution", `{"command":"cd /mnt/data && python3 hello.py | tee out.txt"}`)}},
		anthStep{blocks: []string{textBlock("It printed hello 42.")}},
		anthStep{
			check: func(t *testing.T, req gjson.Result) {
				if n := len(req.Get("messages").Array()); n != 7 || req.Get("messages.3.content.#").Int() != 2 || req.Get("messages.4.content.#").Int() != 2 {
					t.Errorf("the SDK's history became %d messages: %s", n, req.Get("messages").Raw)
				}
			},
			// The SDK's first text event opens the gate: the model writes
			// the rest of the round only then.
			gated:  true,
			blocks: []string{textBlock("Again, the same: "), toolUse("toolu_3", "bash_code_execution", `{"command":"python3 hello.py; pwd"}`)},
		},
		anthStep{blocks: []string{textBlock("Same.")}},
	)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(nodeDir, "anthropic.mjs"))
	cmd.Env = append(os.Environ(), "ANTHROPIC_BASE_URL="+s.proxyURL, "ANTHROPIC_API_KEY=sk-ant-node", "GATE_URL="+am.url+"/gate")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("anthropic.mjs: %v\n%s\n%s", err, stderr.String(), stdout.String())
	}
	t.Logf("what the SDK decoded:\n%s", stdout.String())
	rep := gjson.Parse(stdout.String())
	c := rep.Get("create")
	var kinds []string
	c.Get("blocks").ForEach(func(_, b gjson.Result) bool { kinds = append(kinds, b.Get("type").Str); return true })
	if strings.Join(kinds, ",") != "server_tool_use,text_editor_code_execution_tool_result,server_tool_use,text_editor_code_execution_tool_result,server_tool_use,bash_code_execution_tool_result,text" {
		t.Fatalf("create's blocks: %v", kinds)
	}
	b := c.Get("blocks").Array()
	if b[0].Get("input.path").Str != "/mnt/data/hello.py" || b[1].Get("content.type").Str != "text_editor_code_execution_create_result" ||
		b[5].Get("stdout").Str != "hello 42\n" || b[5].Get("return_code").Int() != 0 || len(b[5].Get("files").Array()) != 1 ||
		b[5].Get("tool_use_id").Str != b[4].Get("id").Str {
		t.Errorf("create's blocks: %s", c.Get("blocks").Raw)
	}
	// The view result as the SDK decoded it, field by field.
	if v := b[3].Get("content").Raw; v != `{"type":"text_editor_code_execution_view_result","file_type":"text","content":"print('hello', 6 * 7)\n","num_lines":1,"start_line":1,"total_lines":1}` {
		t.Errorf("view: %s", v)
	}
	if c.Get("stop_reason").Str != "end_turn" || c.Get("usage.server_tool_use.code_execution_requests").Int() != 3 || !strings.HasPrefix(c.Get("container.id").Str, "cntr_") {
		t.Errorf("create: %s", c.Raw)
	}
	m := rep.Get("stream.message")
	kinds = nil
	m.Get("blocks").ForEach(func(_, b gjson.Result) bool { kinds = append(kinds, b.Get("type").Str); return true })
	if strings.Join(kinds, ",") != "text,server_tool_use,bash_code_execution_tool_result,text" {
		t.Fatalf("the stream's blocks: %v", kinds)
	}
	sb := m.Get("blocks").Array()
	if sb[1].Get("input.command").Str != "python3 hello.py; pwd" || sb[2].Get("stdout").Str != "hello 42\n/mnt/data\n" || sb[0].Get("text").Str != "Again, the same: " {
		t.Errorf("the stream's blocks: %s", m.Get("blocks").Raw)
	}
	if m.Get("container.id").Str != c.Get("container.id").Str || m.Get("stop_reason").Str != "end_turn" || m.Get("usage.server_tool_use.code_execution_requests").Int() != 1 {
		t.Errorf("the stream's message: %s", m.Raw)
	}
	// The model streamed the text in three deltas: the SDK saw the first
	// while the model held the rest (the gate), each as a text event.
	if tx := rep.Get("stream.texts").Raw; !strings.HasPrefix(tx, `["Again",", the"," same: ",`) || am.streamed != 2 {
		t.Errorf("the SDK's text events: %s (the model streamed %d rounds)", tx, am.streamed)
	}
	if ev := rep.Get("stream.events").Raw; !strings.Contains(ev, `"content_block_start:server_tool_use","content_block_delta","content_block_stop","content_block_start:bash_code_execution_tool_result","content_block_stop"`) ||
		!strings.HasSuffix(ev, `"message_delta","message_stop"]`) {
		t.Errorf("the stream's events: %s", ev)
	}
}

// TestMessagesFiles: Anthropic's Files API shapes on the same store — an
// upload (multipart, anthropic-version) is Anthropic's file object, listed
// and fetched as one; a container_upload block puts it in the container
// the code runs in; the file the code writes is a bash_code_execution_output
// whose file_id Anthropic's Files API serves (downloadable), while an
// upload is not downloadable; another credential sees none of them; errors
// are Anthropic's.
func TestMessagesFiles(t *testing.T) {
	s, _ := messagesStack(t,
		anthStep{
			check: func(t *testing.T, req gjson.Result) {
				// The upload's note, then the container's files (the upload).
				if c := req.Get("messages.0.content"); c.Get("#").Int() != 3 || c.Get("1.type").Str != "text" || !strings.Contains(c.Get("1.text").Str, "uploaded into the code execution container as /mnt/data/file-") ||
					!strings.Contains(c.Get("2.text").Str, "-sales.csv (12 bytes)\n") {
					t.Errorf("the container_upload block became: %s", c.Raw)
				}
			},
			blocks: []string{toolUse("toolu_1", "bash_code_execution", `{"command":"ls /mnt/data; wc -l < /mnt/data/file-*-sales.csv > /mnt/data/count.txt; echo scratch > /tmp/scratch.txt"}`)},
		},
		anthStep{blocks: []string{textBlock("3 lines.")}},
	)
	do := func(method, path, key string, body io.Reader, ctype string) (int, []byte) {
		req, _ := http.NewRequest(method, s.proxyURL+path, body)
		req.Header.Set("anthropic-version", "2023-06-01")
		if key != "" {
			req.Header.Set("x-api-key", key)
		}
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	fw, _ := mw.CreateFormFile("file", "sales.csv")
	_, _ = io.WriteString(fw, "a,1\nb,2\nc,3\n")
	_ = mw.Close()
	st, b := do(http.MethodPost, "/v1/files", "sk-f", &mp, mw.FormDataContentType())
	f := gjson.ParseBytes(b)
	if st != 200 || !strings.HasPrefix(f.Get("id").Str, "file-") || f.Get("type").Str != "file" || f.Get("filename").Str != "sales.csv" ||
		f.Get("mime_type").Str != "text/csv" || f.Get("size_bytes").Int() != 12 || f.Get("downloadable").Type != gjson.False || len(f.Map()) != 7 {
		t.Fatalf("upload: %d %s", st, b)
	}
	if _, err := time.Parse(time.RFC3339, f.Get("created_at").Str); err != nil {
		t.Errorf("created_at: %v", err)
	}
	fid := f.Get("id").Str
	if st, b := do(http.MethodGet, "/v1/files", "sk-f", nil, ""); st != 200 || gjson.GetBytes(b, "data.0.id").Str != fid || gjson.GetBytes(b, "first_id").Str != fid || gjson.GetBytes(b, "has_more").Bool() {
		t.Errorf("list: %d %s", st, b)
	}
	if st, b := do(http.MethodGet, "/v1/files/"+fid+"/content", "sk-f", nil, ""); st != 400 || gjson.GetBytes(b, "error.type").Str != "invalid_request_error" {
		t.Errorf("an upload's content: %d %s", st, b)
	}
	if st, b := do(http.MethodGet, "/v1/files/"+fid, "sk-other", nil, ""); st != 404 || gjson.GetBytes(b, "error.type").Str != "not_found_error" || gjson.GetBytes(b, "type").Str != "error" {
		t.Errorf("another credential: %d %s", st, b)
	}
	if st, b := do(http.MethodGet, "/v1/files", "", nil, ""); st != 401 || gjson.GetBytes(b, "error.type").Str != "authentication_error" {
		t.Errorf("no credential: %d %s", st, b)
	}

	body := `{"model":"m","max_tokens":99,"messages":[{"role":"user","content":[{"type":"text","text":"count"},{"type":"container_upload","file_id":"` + fid + `"}]}],"tools":[` + codeExecTool + `]}`
	st, _, b = postMessages(t, s, "sk-f", body)
	r := gjson.GetBytes(b, "content.1.content")
	// One output file: count.txt, not the upload (there before) nor
	// /tmp/scratch.txt (outside /mnt/data: scratch space).
	if st != 200 || !strings.Contains(r.Get("stdout").Str, "sales.csv") || len(r.Get("content").Array()) != 1 {
		t.Fatalf("the upload in the container: %d %s", st, b)
	}
	out := r.Get("content.0.file_id").Str
	if st, b := do(http.MethodGet, "/v1/files/"+out, "sk-f", nil, ""); st != 200 || gjson.GetBytes(b, "filename").Str != "count.txt" || !gjson.GetBytes(b, "downloadable").Bool() {
		t.Errorf("the output file's metadata: %d %s", st, b)
	}
	if st, b := do(http.MethodGet, "/v1/files/"+out+"/content", "sk-f", nil, ""); st != 200 || string(b) != "3\n" {
		t.Errorf("the output file's content: %d %q", st, b)
	}
	if st, _ := do(http.MethodGet, "/v1/files/"+out+"/content", "sk-other", nil, ""); st != 404 {
		t.Errorf("another credential downloads the output: %d", st)
	}
	st, _, b = postMessages(t, s, "sk-other", strings.Replace(body, "count", "steal", 1))
	if st != 404 || gjson.GetBytes(b, "error.type").Str != "not_found_error" {
		t.Errorf("another credential's container_upload: %d %s", st, b)
	}
}

// TestMessagesSkills: Anthropic's container {skills: [{type: custom,
// skill_id}]} mounts a skill of /v1/skills in a new container — the model
// is told its name, description and path, bash reads its SKILL.md there,
// the message's container lists it as Anthropic's {type, skill_id,
// version}; naming the container again with the skill reuses it, with
// another skill it is Anthropic's 400; Anthropic's prebuilt skills and
// another credential's skill are refused before the model is asked.
func TestMessagesSkills(t *testing.T) {
	s, m := messagesStack(t,
		anthStep{
			check: func(t *testing.T, req gjson.Result) {
				note := req.Get("messages.0.content.1.text").Str
				if req.Get("messages.0.content.0.text").Str != "report" || !strings.Contains(note, "csv-report") || !strings.Contains(note, "Make CSV reports.") || !strings.Contains(note, "/tmp/skills/csv-report") {
					t.Errorf("the model was told: %s", req.Get("messages.0.content").Raw)
				}
			},
			blocks: []string{toolUse("toolu_1", "bash_code_execution", `{"command":"cat /tmp/skills/csv-report/SKILL.md | tail -1"}`)},
		},
		anthStep{blocks: []string{textBlock("Read it.")}},
		anthStep{blocks: []string{textBlock("Again.")}},
	)
	var zb bytes.Buffer
	zw := zip.NewWriter(&zb)
	w, _ := zw.Create("csv-report/SKILL.md")
	_, _ = io.WriteString(w, "---\nname: csv-report\ndescription: Make CSV reports.\n---\nRun scripts/go.sh.\n")
	_ = zw.Close()
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	fw, _ := mw.CreateFormFile("files", "csv-report.zip")
	_, _ = fw.Write(zb.Bytes())
	_ = mw.Close()
	req, _ := http.NewRequest(http.MethodPost, s.proxyURL+"/v1/skills", &mp)
	req.Header.Set("Authorization", "Bearer sk-skill")
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	skill := gjson.GetBytes(b, "id").Str
	if resp.StatusCode != 200 || skill == "" {
		t.Fatalf("the skill's upload: %d %s", resp.StatusCode, b)
	}

	body := func(container string) string {
		return `{"model":"m","max_tokens":99,"container":` + container + `,"messages":[{"role":"user","content":"report"}],"tools":[` + codeExecTool + `]}`
	}
	st, _, b := postMessages(t, s, "sk-skill", body(`{"skills":[{"type":"custom","skill_id":"`+skill+`","version":"latest"}]}`))
	msg := gjson.ParseBytes(b)
	if st != 200 || msg.Get("content.1.content.stdout").Str != "Run scripts/go.sh.\n" {
		t.Fatalf("the skill in the container: %d %s", st, b)
	}
	ctr := msg.Get("container")
	if ctr.Get("skills.#").Int() != 1 || ctr.Get("skills.0.type").Str != "custom" || ctr.Get("skills.0.skill_id").Str != skill || ctr.Get("skills.0.version").Type != gjson.String {
		t.Errorf("the message's container: %s", ctr.Raw)
	}
	id := ctr.Get("id").Str
	if st, _, b := postMessages(t, s, "sk-skill", body(`{"id":"`+id+`","skills":[{"type":"custom","skill_id":"`+skill+`"}]}`)); st != 200 || gjson.GetBytes(b, "container.id").Str != id {
		t.Errorf("the container again with its skill: %d %s", st, b)
	}
	before := len(m.reqs)
	for _, tc := range []struct {
		name, key, container string
		status               int
		msg                  string
	}{
		{"the container with another skill", "sk-skill", `{"id":"` + id + `","skills":[{"type":"custom","skill_id":"skill_0000"}]}`, 400, "does not mount the skill skill_0000"},
		{"Anthropic's prebuilt skill", "sk-skill", `{"skills":[{"type":"anthropic","skill_id":"xlsx"}]}`, 400, "container.skills.0: \"xlsx\" is one of Anthropic's prebuilt skills"},
		{"another credential's skill", "sk-other", `{"skills":[{"type":"custom","skill_id":"` + skill + `"}]}`, 404, "No skill found with id"},
	} {
		st, _, b := postMessages(t, s, tc.key, body(tc.container))
		e := gjson.ParseBytes(b)
		if st != tc.status || e.Get("type").Str != "error" || !strings.Contains(e.Get("error.message").Str, tc.msg) {
			t.Errorf("%s: %d %s", tc.name, st, b)
		}
	}
	if len(m.reqs) != before {
		t.Errorf("a refused request reached the model server")
	}
}
