package interceptor

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/fixtures"
	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/jsonx"
)

// This file is the test stand-in for what cannot run here: the model. The
// scripted upstream answers with response objects built on OpenAI's
// response in its recorded shape (every field OpenAI sends, the project's
// values: internal/fixtures), echoes the request fields a
// real Responses API echoes, and checks every request it gets. The gateway
// puts the interceptor behind HTTP the way the filter does, so the real
// openai-go client talks to it.

// step is one scripted upstream answer.
type step struct {
	// check inspects the request the upstream got (always JSON, checked
	// for the common invariants first).
	check func(t *testing.T, req gjson.Result)
	// items is the output the model produces, as raw JSON items.
	items []string
	// status/body override the answer (an error); err is a transport failure.
	status int
	body   string
	err    error
	// store makes the upstream say it stored the response.
	store bool
	// noTool: the request declares no tool (a turn continuing a
	// conversation of ours without the code_interpreter).
	noTool bool
}

type scriptedUpstream struct {
	t        *testing.T
	fn       string
	template string // a response body in OpenAI's recorded shape

	mu    sync.Mutex
	steps []step
	got   []gjson.Result
	ids   []string // response ids handed out
}

func newScriptedUpstream(t *testing.T, steps ...step) *scriptedUpstream {
	t.Helper()
	tpl := fixtures.Built(t, fixtureNonStreaming)[0].Response
	if !gjson.Get(tpl, "output").IsArray() {
		t.Fatalf("fixture response has no output: %s", tpl)
	}
	u := &scriptedUpstream{t: t, fn: "code_interpreter", template: tpl, steps: steps}
	t.Cleanup(func() {
		u.mu.Lock()
		defer u.mu.Unlock()
		if len(u.steps) != 0 && !t.Failed() {
			t.Errorf("scripted upstream: %d answers never requested", len(u.steps))
		}
	})
	return u
}

func (u *scriptedUpstream) CreateResponse(ctx context.Context, body []byte) (int, http.Header, []byte, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	t := u.t
	n := len(u.got)
	if !gjson.ValidBytes(body) {
		t.Errorf("upstream request %d is not JSON: %s", n, body)
		return 400, jsonHeader(), []byte(`{"error":{"message":"bad json","type":"invalid_request_error","param":null,"code":null}}`), nil
	}
	req := gjson.ParseBytes(body)
	u.got = append(u.got, req)
	if len(u.steps) == 0 || !u.steps[0].noTool {
		u.checkCommon(n, req)
	}
	if len(u.steps) == 0 {
		t.Errorf("upstream request %d beyond the script: %s", n, body)
		return 500, jsonHeader(), []byte(`{"error":{"message":"script exhausted","type":"server_error","param":null,"code":null}}`), nil
	}
	s := u.steps[0]
	u.steps = u.steps[1:]
	if s.check != nil {
		s.check(t, req)
	}
	if s.err != nil {
		return 0, nil, nil, s.err
	}
	if s.status != 0 {
		return s.status, jsonHeader(), []byte(s.body), nil
	}
	id := "resp_" + strings.Repeat(strconv.Itoa(n), 4) + idgen.Random("", 20)
	u.ids = append(u.ids, id)
	return 200, jsonHeader(), u.respond(id, req, s), nil
}

// checkCommon asserts what every request the upstream gets must satisfy:
// no stream, our function tool and never the native one, no include value
// the upstream cannot know.
func (u *scriptedUpstream) checkCommon(n int, req gjson.Result) {
	t := u.t
	if req.Get("stream").Type == gjson.True {
		t.Errorf("upstream request %d asks for a stream", n)
	}
	if req.Get("stream_options").Exists() {
		t.Errorf("upstream request %d has stream_options", n)
	}
	found := false
	req.Get("tools").ForEach(func(_, tool gjson.Result) bool {
		switch tool.Get("type").Str {
		case "code_interpreter":
			t.Errorf("upstream request %d still has the native tool: %s", n, tool.Raw)
		case "function":
			if tool.Get("name").Str == u.fn {
				found = true
				if !tool.Get("strict").Bool() || tool.Get("parameters.required.0").Str != "code" {
					t.Errorf("upstream request %d: function tool %s", n, tool.Raw)
				}
			}
		}
		return true
	})
	if !found {
		t.Errorf("upstream request %d lacks the %s function tool: %s", n, u.fn, req.Get("tools").Raw)
	}
	req.Get("include").ForEach(func(_, v gjson.Result) bool {
		if v.Str == includeOutputs {
			t.Errorf("upstream request %d includes %s", n, v.Str)
		}
		return true
	})
	req.Get("input").ForEach(func(_, it gjson.Result) bool {
		if it.Get("type").Str == "code_interpreter_call" && replayable(it.Get("outputs")) {
			t.Errorf("upstream request %d replays a code_interpreter_call unrewritten: %s", n, it.Raw)
		}
		return true
	})
}

// respond builds a response object the way OpenAI does: the recorded body
// with this turn's id, output and usage, echoing the request's settings.
func (u *scriptedUpstream) respond(id string, req gjson.Result, s step) []byte {
	tools := req.Get("tools").Raw
	if tools == "" {
		tools = "[]"
	}
	edits := []jsonx.Edit{
		jsonx.Set("id", jsonx.Quote(id)),
		jsonx.Set("output", string(jsonx.AppendArray(nil, s.items))),
		jsonx.Set("store", strconv.FormatBool(s.store)),
		jsonx.Set("tools", tools),
		jsonx.Set("usage", `{"input_tokens":100,"input_tokens_details":{"cache_write_tokens":10,"cached_tokens":20},"output_tokens":7,"output_tokens_details":{"reasoning_tokens":3},"total_tokens":107}`),
	}
	for _, k := range []string{"tool_choice", "previous_response_id", "max_tool_calls", "parallel_tool_calls"} {
		if v := req.Get(k); v.Exists() {
			edits = append(edits, jsonx.Set(k, v.Raw))
		} else if k == "tool_choice" {
			edits = append(edits, jsonx.Set(k, `"auto"`))
		} else {
			edits = append(edits, jsonx.Set(k, "null"))
		}
	}
	return jsonx.EditObject(u.template, edits...)
}

func (u *scriptedUpstream) requests() []gjson.Result {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]gjson.Result(nil), u.got...)
}

func jsonHeader() http.Header { return http.Header{"Content-Type": {"application/json"}} }

// Items shaped like the recorded OpenAI ones.

func fcItem(callID, code string) string {
	args := string(jsonx.AppendEditedObject(nil, `{}`, jsonx.Set("code", jsonx.Quote(code))))
	return fcRaw(callID, "code_interpreter", args)
}

func fcRaw(callID, name, args string) string {
	return `{"id":"fc_` + idgen.Random("", 40) + `","type":"function_call","status":"completed","arguments":` + jsonx.Quote(args) +
		`,"call_id":` + jsonx.Quote(callID) + `,"name":` + jsonx.Quote(name) + `}`
}

func msgItem(text string) string {
	return `{"id":"msg_` + idgen.Random("", 40) + `","type":"message","status":"completed","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":` +
		jsonx.Quote(text) + `}],"phase":"final_answer","role":"assistant"}`
}

func reasoningItem(summary string) string {
	return `{"id":"rs_` + idgen.Random("", 40) + `","type":"reasoning","summary":[{"type":"summary_text","text":` + jsonx.Quote(summary) + `}]}`
}

// gateway serves the interceptor over HTTP as the filter does: rewrite,
// first inference, loop, answer.
func gateway(t *testing.T, ic *Interceptor, up Upstream) (*httptest.Server, *openai.Client) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("gateway: %v", err)
			return
		}
		x, err := ic.RewriteRequest(body)
		if err != nil {
			var ae *apierror.Error
			if !errors.As(err, &ae) {
				t.Errorf("RewriteRequest error %T: %v", err, err)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(ae.Status)
			_, _ = w.Write(ae.Body())
			return
		}
		st, hdr, b, err := up.CreateResponse(r.Context(), x.UpstreamBody())
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		if !x.Intercepted() {
			w.Header().Set("Content-Type", hdr.Get("Content-Type"))
			w.WriteHeader(st)
			_, _ = w.Write(b)
			return
		}
		res, err := x.CompleteResponse(r.Context(), up, st, hdr, b)
		if err != nil {
			t.Errorf("CompleteResponse: %v", err)
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", res.ContentType)
		w.WriteHeader(res.Status)
		_, _ = w.Write(res.Body)
	}))
	t.Cleanup(srv.Close)
	c := openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("test-key"), option.WithMaxRetries(0))
	return srv, &c
}
