package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/modelstream"
)

// apiKey is what the client sends; the model server checks every request
// (first calls and follow-ups) carries it.
const apiKey = "sk-e2e-test-key"

// convo is what the scripted model sees of one request: the request and
// the whole conversation (stored history resolved through
// previous_response_id, then the request's input).
type convo struct {
	req   gjson.Result
	items []gjson.Result
}

// outputs are the function_call_output items, in order.
func (c *convo) outputs() []gjson.Result {
	var out []gjson.Result
	for _, it := range c.items {
		if it.Get("type").Str == "function_call_output" {
			out = append(out, it)
		}
	}
	return out
}

// userText is the text of the first user message.
func (c *convo) userText() string {
	for _, it := range c.items {
		if it.Get("role").Str == "user" || it.Get("type").Str == "message" && it.Get("role").Str == "" {
			if ct := it.Get("content"); ct.Type == gjson.String {
				return ct.Str
			}
			return it.Get("content.0.text").Str
		}
	}
	return ""
}

// reply is a scripted answer: output items, or an HTTP error.
type reply struct {
	items  []string
	status int    // non-2xx: answer with errBody
	body   string // error body
	// breakAfter > 0 drops a streamed answer's connection after that many
	// events (a model server dying mid-stream).
	breakAfter int
}

// script decides the model's answer to one request.
type script func(t testing.TB, c *convo) reply

// model is the scripted upstream: it replays fixture shapes and checks
// every request the gateway sends it.
type model struct {
	t      testing.TB
	sh     shapes
	srv    *httptest.Server
	script script

	// live accepts "stream": true (the gateway streams live) and answers
	// it with the event stream, one event at a time, eventDelay apart.
	live       bool
	eventDelay time.Duration
	// gate, when set, is called before each streamed event with the
	// request's index and the event's type; a test blocks in it until the
	// client has seen what a live gateway forwards by then.
	gate func(request int, event string)
	// sent records, per request, when each streamed event left (benchmarks).
	sent map[int][]sentEvent
	// stateless makes a model server that keeps nothing (Ollama, a vLLM
	// without a store): it refuses previous_response_id with OpenAI's 400
	// and its responses say "store": false.
	stateless bool

	mu       sync.Mutex
	stored   map[string][]gjson.Result // response id → conversation incl. its output
	issued   map[string]gjson.Result   // id → every output item the model produced
	requests []modelRequest
	busy     time.Duration // total time spent answering, for benchmarks
}

type sentEvent struct {
	typ string
	at  time.Time
}

type modelRequest struct {
	header http.Header
	body   []byte
	convo  *convo
}

func newModel(t testing.TB, sh shapes, s script) *model {
	m := &model{t: t, sh: sh, script: s, stored: map[string][]gjson.Result{}, issued: map[string]gjson.Result{}}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	t.Cleanup(m.srv.Close)
	return m
}

func (m *model) URL() string { return m.srv.URL }

func (m *model) all() []modelRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]modelRequest(nil), m.requests...)
}

func (m *model) busyTime() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.busy
}

func (m *model) serve(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	defer func() {
		m.mu.Lock()
		m.busy += time.Since(start)
		m.mu.Unlock()
	}()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	c, problem := m.check(r, body)
	m.mu.Lock()
	index := len(m.requests)
	m.requests = append(m.requests, modelRequest{r.Header.Clone(), body, c})
	m.mu.Unlock()
	if prev := gjson.GetBytes(body, "previous_response_id").Str; m.stateless && prev != "" {
		// What OpenAI answers for an id it does not have.
		b, _ := json.Marshal(map[string]any{"error": map[string]any{
			"message": "Previous response with id '" + prev + "' not found.", "type": "invalid_request_error",
			"param": "previous_response_id", "code": "previous_response_not_found"}})
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write(b)
		return
	}
	if problem != "" {
		m.t.Errorf("model server: bad request from the gateway: %s\nbody: %s", problem, body)
		writeError(w, 400, "invalid_request_error", problem)
		return
	}
	rep := m.script(m.t, c)
	if rep.status != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rep.status)
		_, _ = io.WriteString(w, rep.body)
		return
	}
	resp := m.response(c, rep.items)
	m.mu.Lock()
	gjson.Get(resp, "output").ForEach(func(_, it gjson.Result) bool { m.issued[it.Get("id").Str] = it; return true })
	m.mu.Unlock()
	if c.req.Get("store").Type != gjson.False && !m.stateless {
		conv := append([]gjson.Result(nil), c.items...)
		gjson.Get(resp, "output").ForEach(func(_, it gjson.Result) bool { conv = append(conv, it); return true })
		m.mu.Lock()
		m.stored[gjson.Get(resp, "id").Str] = conv
		m.mu.Unlock()
	}
	if c.req.Get("stream").Type == gjson.True {
		m.stream(w, r, resp, index, rep.breakAfter)
		return
	}
	if m.eventDelay > 0 {
		m.produce(r, resp, index)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(resp)))
	_, _ = io.WriteString(w, resp)
}

// produce takes as long to answer with JSON as the stream of resp would
// take (a model generates the same tokens either way), and records when
// each of its events would have been produced.
func (m *model) produce(r *http.Request, resp string, index int) {
	start := time.Now()
	evs := modelstream.Events([]byte(resp))
	for k, ev := range evs {
		if m.sent != nil {
			m.mu.Lock()
			m.sent[index] = append(m.sent[index], sentEvent{modelstream.Type(ev), start.Add(time.Duration(k+1) * m.eventDelay)})
			m.mu.Unlock()
		}
	}
	select {
	case <-r.Context().Done():
	case <-time.After(time.Until(start.Add(time.Duration(len(evs)) * m.eventDelay))):
	}
}

// stream answers with the event stream OpenAI sends for resp, flushing
// each event and pausing eventDelay before each, as a model that produces
// tokens does.
func (m *model) stream(w http.ResponseWriter, r *http.Request, resp string, index, breakAfter int) {
	modelstream.Write(w, r, []byte(resp), m.eventDelay, func(k int, typ string) bool {
		if breakAfter > 0 && k == breakAfter {
			panic(http.ErrAbortHandler) // the connection drops mid-stream
		}
		if m.gate != nil {
			m.gate(index, typ)
		}
		return true
	}, func(typ string, at time.Time) {
		if m.sent != nil {
			m.mu.Lock()
			m.sent[index] = append(m.sent[index], sentEvent{typ, at})
			m.mu.Unlock()
		}
	})
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// check is what a real Responses server (plus this test's expectations of
// the gateway) demands of a request. It returns the conversation and a
// description of the first problem.
func (m *model) check(r *http.Request, body []byte) (*convo, string) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/responses" {
		return nil, fmt.Sprintf("%s %s", r.Method, r.URL.Path)
	}
	if got := r.Header.Get("Authorization"); got != "Bearer "+apiKey {
		return nil, fmt.Sprintf("authorization %q, want the client's key", got)
	}
	for k := range r.Header {
		if strings.HasPrefix(strings.ToLower(k), "x-codeinterp-") {
			return nil, "internal header " + k + " reached the model"
		}
	}
	if !gjson.ValidBytes(body) {
		return nil, "body is not JSON"
	}
	req := gjson.ParseBytes(body)
	if req.Get("stream").Type == gjson.True && !m.live {
		return nil, "stream:true reached the model (with synthetic streams the gateway must ask for JSON)"
	}
	hasFn := false
	for _, tool := range req.Get("tools").Array() {
		if tool.Get("type").Str == "code_interpreter" {
			return nil, "the native code_interpreter tool reached the model"
		}
		if tool.Get("type").Str == "shell" && tool.Get("environment.type").Str != "local" && tool.Get("environment").Exists() {
			return nil, "the hosted shell tool reached the model"
		}
		if tool.Get("type").Str == "function" && tool.Get("name").Str == "code_interpreter" {
			hasFn = true
			if tool.Get("parameters.properties.code.type").Str != "string" || tool.Get("parameters.required.0").Str != "code" {
				return nil, "the code_interpreter function has no required string parameter code"
			}
		}
		// The hosted shell's function: an array of strings "commands".
		if tool.Get("type").Str == "function" && tool.Get("name").Str == "shell" {
			hasFn = true
			if tool.Get("parameters.properties.commands.type").Str != "array" || tool.Get("parameters.properties.commands.items.type").Str != "string" ||
				tool.Get("parameters.required.0").Str != "commands" {
				return nil, "the shell function has no required array of strings commands"
			}
		}
	}
	// A request that declares no tool at all (a turn continuing one of
	// the gateway's conversations without the code_interpreter) has none.
	if !hasFn && len(req.Get("tools").Array()) > 0 {
		return nil, "no code_interpreter function tool"
	}
	c := &convo{req: req}
	if prev := req.Get("previous_response_id").Str; prev != "" {
		m.mu.Lock()
		hist, ok := m.stored[prev]
		m.mu.Unlock()
		if !ok {
			return c, "previous_response_id " + prev + " is not a stored response"
		}
		c.items = append(c.items, hist...)
	}
	switch in := req.Get("input"); {
	case in.Type == gjson.String:
		c.items = append(c.items, gjson.Parse(`{"type":"message","role":"user","content":`+in.Raw+`}`))
	case in.IsArray():
		c.items = append(c.items, in.Array()...)
	default:
		return c, "input is neither a string nor a list"
	}
	// Every output answers a call of ours made earlier, exactly once, and
	// every call of ours before the last item is answered.
	calls := map[string]bool{}
	answered := map[string]bool{}
	for _, it := range c.items {
		switch it.Get("type").Str {
		case "function_call":
			if n := it.Get("name").Str; n == "code_interpreter" || n == "shell" {
				calls[it.Get("call_id").Str] = true
			}
		case "function_call_output":
			id := it.Get("call_id").Str
			if !calls[id] {
				return c, "function_call_output for unknown call " + id
			}
			if answered[id] {
				return c, "call " + id + " answered twice"
			}
			answered[id] = true
		case "code_interpreter_call", "shell_call", "shell_call_output":
			return c, "a " + it.Get("type").Str + " item reached the model (replayed history must become function calls)"
		}
	}
	for id := range calls {
		if !answered[id] {
			return c, "call " + id + " has no function_call_output"
		}
	}
	return c, ""
}

// response fills the fixture envelope with items, echoing what a real
// server echoes from the request.
func (m *model) response(c *convo, items []string) string {
	doc := m.sh.envelope
	set := func(path string, v any) {
		var err error
		if doc, err = sjson.Set(doc, path, v); err != nil {
			m.t.Errorf("model: set %s: %v", path, err)
		}
	}
	setRaw := func(path, raw string) {
		var err error
		if doc, err = sjson.SetRaw(doc, path, raw); err != nil {
			m.t.Errorf("model: set %s: %v", path, err)
		}
	}
	now := time.Now().Unix()
	set("id", idgen.New("resp_"))
	set("created_at", now)
	set("completed_at", now)
	set("store", c.req.Get("store").Type != gjson.False && !m.stateless)
	if p := c.req.Get("previous_response_id"); p.Exists() {
		setRaw("previous_response_id", p.Raw)
	} else {
		setRaw("previous_response_id", "null")
	}
	tools := c.req.Get("tools").Raw
	if tools == "" {
		tools = "[]" // as OpenAI echoes a request without tools
	}
	setRaw("tools", tools)
	if tc := c.req.Get("tool_choice"); tc.Exists() {
		setRaw("tool_choice", tc.Raw)
	}
	setRaw("output", "["+strings.Join(items, ",")+"]")
	return doc
}

// call is a function_call item of the code_interpreter function, in the
// fixture's real shape.
func (m *model) call(code string) string {
	args, _ := json.Marshal(map[string]string{"code": code})
	it := m.sh.functionCall
	it, _ = sjson.Set(it, "id", idgen.New("fc_"))
	it, _ = sjson.Set(it, "call_id", idgen.New("call_")[:29])
	it, _ = sjson.Set(it, "name", "code_interpreter")
	it, _ = sjson.Set(it, "arguments", string(args))
	return it
}

// shellCall is a function_call item of the hosted shell's function, its
// arguments an array of commands as a model writes them.
func (m *model) shellCall(commands ...string) string {
	args, _ := json.Marshal(map[string]any{"commands": commands, "timeout_ms": nil, "max_output_length": nil})
	it := m.call("")
	it, _ = sjson.Set(it, "name", "shell")
	it, _ = sjson.Set(it, "arguments", string(args))
	return it
}

// message is an assistant message item in the fixture's real shape.
func (m *model) message(text string) string {
	it := m.sh.message
	it, _ = sjson.Set(it, "id", idgen.New("msg_"))
	it, _ = sjson.Set(it, "content.0.text", text)
	return it
}

// lastOutputs returns the outputs answering the calls of the previous turn.
func lastOutputs(c *convo) []gjson.Result {
	outs := c.outputs()
	// The outputs of the newest turn follow its calls at the end of the
	// conversation.
	n := 0
	for i := len(c.items) - 1; i >= 0 && c.items[i].Get("type").Str == "function_call_output"; i-- {
		n++
	}
	return outs[len(outs)-n:]
}

// firstStdoutLine reads the tool output the way a model would: the first
// line printed (the gateway's output has a status line, then "stdout:").
func firstStdoutLine(output string) string {
	_, rest, ok := strings.Cut(output, "stdout:\n")
	if !ok {
		return ""
	}
	line, _, _ := strings.Cut(rest, "\n")
	return line
}
