package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/filter"
	"github.com/codeinterp/codeinterp/internal/fixtures"
	"github.com/codeinterp/codeinterp/internal/interceptor"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
)

// ciParams is a Responses request declaring OpenAI's native tool, as a
// client of OpenAI's hosted code interpreter sends it.
func ciParams(prompt string, include bool) responses.ResponseNewParams {
	p := responses.ResponseNewParams{
		Model: "gpt-5.6",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(prompt)},
		Store: openai.Bool(false),
		Tools: []responses.ToolUnionParam{responses.ToolParamOfCodeInterpreter(
			responses.ToolCodeInterpreterContainerCodeInterpreterContainerAutoParam{})},
	}
	if include {
		p.Include = []responses.ResponseIncludable{responses.ResponseIncludableCodeInterpreterCallOutputs}
	}
	return p
}

// ask sends p non-streamed or streamed through the official client and
// returns the final response (and the events when streamed).
func ask(ctx context.Context, t *testing.T, s *stack, p responses.ResponseNewParams, stream bool) (*responses.Response, []responses.ResponseStreamEventUnion, error) {
	t.Helper()
	if !stream {
		r, err := s.client.Responses.New(ctx, p)
		return r, nil, err
	}
	return readStream(s.client.Responses.NewStreaming(ctx, p), nil)
}

// readStream reads a stream to its end, calling onEvent (when set) with
// each event as it arrives; a stream without response.completed is an
// error.
func readStream(st *ssestream.Stream[responses.ResponseStreamEventUnion], onEvent func(responses.ResponseStreamEventUnion)) (*responses.Response, []responses.ResponseStreamEventUnion, error) {
	defer st.Close()
	var evs []responses.ResponseStreamEventUnion
	var final *responses.Response
	for st.Next() {
		ev := st.Current()
		if onEvent != nil {
			onEvent(ev)
		}
		evs = append(evs, ev)
		if ev.Type == "response.completed" {
			r := ev.Response
			final = &r
		}
	}
	if err := st.Err(); err != nil {
		return nil, evs, err
	}
	if final == nil {
		return nil, evs, fmt.Errorf("stream of %d events had no response.completed", len(evs))
	}
	return final, evs, nil
}

func ciCalls(r *responses.Response) []responses.ResponseCodeInterpreterToolCall {
	var out []responses.ResponseCodeInterpreterToolCall
	for _, it := range r.Output {
		if it.Type == "code_interpreter_call" {
			out = append(out, it.AsCodeInterpreterCall())
		}
	}
	return out
}

func outputTypes(r *responses.Response) []string {
	var out []string
	for _, it := range r.Output {
		out = append(out, it.Type)
	}
	return out
}

func jsonKeys(raw string) []string {
	var keys []string
	gjson.Parse(raw).ForEach(func(k, _ gjson.Result) bool { keys = append(keys, k.Str); return true })
	sort.Strings(keys)
	return keys
}

// checkStream checks a synthetic stream against the reference: sequence
// numbers from 0 without gaps and the same event-type sequence
// (consecutive repeats merged) as OpenAI's own code-interpreter stream (in
// its recorded shape, and as recorded when CODEINTERP_FIXTURES is set).
func checkStream(t *testing.T, sh shapes, evs []responses.ResponseStreamEventUnion, wantReferenceShape bool) {
	t.Helper()
	var types []string
	for i, ev := range evs {
		if ev.SequenceNumber != int64(i) {
			t.Errorf("event %d (%s) has sequence_number %d", i, ev.Type, ev.SequenceNumber)
		}
		if len(types) == 0 || types[len(types)-1] != ev.Type {
			types = append(types, ev.Type)
		}
	}
	for _, ref := range sh.refs {
		if wantReferenceShape && !slices.Equal(types, ref.ciEventTypes) {
			t.Errorf("event types\n got %v\nwant %v (OpenAI's, %s)", types, ref.ciEventTypes, ref.source)
		}
	}
}

// oneCallScript is the reference conversation: the model runs the
// reference code, then answers with what it printed.
func oneCallScript(m **model, sh shapes) script {
	return func(t testing.TB, c *convo) reply {
		if len(c.outputs()) == 0 {
			return reply{items: []string{(*m).call(sh.code)}}
		}
		out := lastOutputs(c)[0].Get("output").Str
		if !strings.Contains(out, "CODE_INTERPRETER_OK=385") {
			t.Errorf("follow-up output %q lacks the program's output", out)
		}
		return reply{items: []string{(*m).message("CODE_INTERPRETER_OK=385")}}
	}
}

func TestOneCall(t *testing.T) {
	sh := loadShapes(t)
	for _, stream := range []bool{false, true} {
		for _, include := range []bool{false, true} {
			t.Run(fmt.Sprintf("stream=%v/include=%v", stream, include), func(t *testing.T) {
				var m *model
				s := newStack(t, sh, oneCallScript(&m, sh), stackOptions{})
				m = s.model
				r, evs, err := ask(context.Background(), t, s, ciParams(sh.prompt, include), stream)
				if err != nil {
					t.Fatal(err)
				}
				if got := outputTypes(r); !slices.Equal(got, []string{"code_interpreter_call", "message"}) {
					t.Fatalf("output types %v", got)
				}
				ci := ciCalls(r)[0]
				if ci.Code != sh.code || ci.Status != responses.ResponseCodeInterpreterToolCallStatusCompleted ||
					!strings.HasPrefix(ci.ID, "ci_") || !strings.HasPrefix(ci.ContainerID, "cntr_") {
					t.Errorf("code_interpreter_call %+v", ci)
				}
				for _, ref := range sh.refs {
					if keys, want := jsonKeys(r.Output[0].RawJSON()), jsonKeys(ref.ciItem.Raw); !slices.Equal(keys, want) {
						t.Errorf("code_interpreter_call fields %v, OpenAI's have %v (%s)", keys, want, ref.source)
					}
				}
				if include {
					if len(ci.Outputs) != 1 || ci.Outputs[0].Type != "logs" || ci.Outputs[0].Logs != "CODE_INTERPRETER_OK=385\n" {
						t.Errorf("outputs %+v, want the program's logs", ci.Outputs)
					}
				} else if gjson.Get(r.Output[0].RawJSON(), "outputs").Type != gjson.Null {
					t.Errorf("outputs %s without include, want null as OpenAI", gjson.Get(r.Output[0].RawJSON(), "outputs").Raw)
				}
				if r.OutputText() != "CODE_INTERPRETER_OK=385" {
					t.Errorf("output text %q", r.OutputText())
				}
				if tools := gjson.Get(r.RawJSON(), "tools"); tools.Get("0.type").Str != "code_interpreter" || tools.Get("#").Int() != 1 {
					t.Errorf("tools shown as %s, want the client's own declaration", tools.Raw)
				}
				if stream {
					checkStream(t, sh, evs, true)
				}
				if n := len(m.all()); n != 2 {
					t.Errorf("model requests %d, want 2", n)
				}
				s.drained(t)
				if s.outcome(filter.OutcomeCompleted) != 1 || s.codeRuns("completed") != 1 {
					t.Errorf("metrics: completed=%v runs=%v", s.outcome(filter.OutcomeCompleted), s.codeRuns("completed"))
				}
			})
		}
	}
}

// TestPassThrough: without the code_interpreter tool nothing is touched:
// the model gets the client's bytes, the client gets the model's bytes (a
// function-tool exchange in OpenAI's recorded shape, and the recorded one
// when CODEINTERP_FIXTURES is set).
func TestPassThrough(t *testing.T) {
	sh := loadShapes(t)
	for _, src := range fixtures.Sources(t, fixtureFunctionTool) {
		t.Run(src.Name, func(t *testing.T) { testPassThrough(t, sh, src.Turns[0]) })
	}
}

func testPassThrough(t *testing.T, sh shapes, pt cassetteTurn) {
	streamBody := pt.SSE
	jsonBody := ""
	for _, ev := range pt.Events {
		if ev.Get("type").Str == "response.completed" {
			jsonBody = ev.Get("response").Raw
		}
	}
	reqStream := pt.Request
	reqJSON := strings.Replace(pt.Request, `"stream":true`, `"stream":false`, 1)
	if reqJSON == reqStream {
		t.Fatal("fixture request has no stream:true")
	}
	// A pass-through server for this test: it must see exactly the bytes
	// sent and answers with the recorded bytes, flushed event by event.
	var mu sync.Mutex
	var got [][]byte
	var hdrs []http.Header
	up := newRawUpstream(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		mu.Lock()
		got, hdrs = append(got, body), append(hdrs, r.Header.Clone())
		mu.Unlock()
		if gjson.GetBytes(body, "stream").Bool() {
			w.Header().Set("Content-Type", pt.RespHeaders["content-type"])
			for _, chunk := range strings.SplitAfter(streamBody, "\n\n") {
				_, _ = w.Write([]byte(chunk))
				w.(http.Flusher).Flush()
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(jsonBody))
	})
	s := newStackWithUpstream(t, sh, up, stackOptions{})

	for _, tc := range []struct {
		name, req, want, ct string
	}{
		{"stream", reqStream, streamBody, pt.RespHeaders["content-type"]},
		{"json", reqJSON, jsonBody, "application/json"},
	} {
		t.Run("raw/"+tc.name, func(t *testing.T) {
			mu.Lock()
			got, hdrs = nil, nil
			mu.Unlock()
			resp, body := rawPost(t, s.proxyURL, tc.req, map[string]string{"Authorization": "Bearer " + apiKey, "Content-Type": "application/json"})
			if resp.StatusCode != 200 || string(body) != tc.want || resp.Header.Get("Content-Type") != tc.ct {
				t.Fatalf("client got %d %q (%d bytes), want the recorded %d bytes", resp.StatusCode, resp.Header.Get("Content-Type"), len(body), len(tc.want))
			}
			mu.Lock()
			defer mu.Unlock()
			if len(got) != 1 || string(got[0]) != tc.req || hdrs[0].Get("Authorization") != "Bearer "+apiKey {
				t.Fatalf("model got %d requests; first differs from the client's bytes", len(got))
			}
		})
	}
	t.Run("openai-go/stream", func(t *testing.T) {
		p := responses.ResponseNewParams{
			Model: "gpt-4o",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(gjson.Get(reqStream, "input").Str)},
			Store: openai.Bool(true),
			Tools: []responses.ToolUnionParam{responses.ToolParamOfFunction("agentic_plain_echo",
				map[string]any{"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}, "required": []string{"text"}, "additionalProperties": false}, true)},
		}
		r, evs, err := ask(context.Background(), t, s, p, true)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != len(pt.Events) || r.Output[0].Type != "function_call" || r.Output[0].AsFunctionCall().Arguments != `{"text":"plain fixture"}` {
			t.Fatalf("decoded %d events (recorded %d), output %v", len(evs), len(pt.Events), outputTypes(r))
		}
	})
	s.drained(t)
	if n := s.outcome(filter.OutcomePassThrough); n != 3 {
		t.Errorf("pass_through outcomes %v, want 3", n)
	}
}

// TestSeveralRounds: three model turns; the second call uses a variable the
// first one set, in the same container.
func TestSeveralRounds(t *testing.T) {
	sh := loadShapes(t)
	for _, followUp := range []struct {
		name  string
		store bool
	}{{"replay", false}, {"previous_response_id", true}} {
		t.Run(followUp.name, func(t *testing.T) {
			var m *model
			s := newStack(t, sh, func(t testing.TB, c *convo) reply {
				switch len(c.outputs()) {
				case 0:
					return reply{items: []string{m.call("a = 6\nprint('a is set')")}}
				case 1:
					if o := lastOutputs(c)[0].Get("output").Str; !strings.Contains(o, "a is set") {
						t.Errorf("round 1 output %q", o)
					}
					return reply{items: []string{m.call("print(a * 7)")}}
				default:
					if o := lastOutputs(c)[0].Get("output").Str; !strings.Contains(o, "42") {
						t.Errorf("round 2 output %q: the variable was lost", o)
					}
					return reply{items: []string{m.message("42")}}
				}
			}, stackOptions{})
			m = s.model
			p := ciParams("Set a to 6, then print a*7.", true)
			p.Store = openai.Bool(followUp.store)
			r, _, err := ask(context.Background(), t, s, p, false)
			if err != nil {
				t.Fatal(err)
			}
			calls := ciCalls(r)
			if got := outputTypes(r); !slices.Equal(got, []string{"code_interpreter_call", "code_interpreter_call", "message"}) {
				t.Fatalf("output types %v", got)
			}
			if calls[0].ContainerID != calls[1].ContainerID {
				t.Errorf("container ids differ: %s, %s", calls[0].ContainerID, calls[1].ContainerID)
			}
			if calls[1].Outputs[0].Logs != "42\n" {
				t.Errorf("second call logs %q", calls[1].Outputs[0].Logs)
			}
			reqs := m.all()
			if len(reqs) != 3 {
				t.Fatalf("model requests %d, want 3", len(reqs))
			}
			usedPrev := gjson.GetBytes(reqs[1].body, "previous_response_id").Str != ""
			if usedPrev != followUp.store {
				t.Errorf("follow-up used previous_response_id=%v with store=%v", usedPrev, followUp.store)
			}
			if u := gjson.Get(r.RawJSON(), "usage.total_tokens").Int(); u != 3*gjson.Get(sh.envelope, "usage.total_tokens").Int() {
				t.Errorf("usage.total_tokens %d, want the sum over 3 rounds", u)
			}
		})
	}
}

// TestParallelCalls: one model turn with several calls; later calls see
// what earlier ones set, and every call gets its own output.
func TestParallelCalls(t *testing.T) {
	sh := loadShapes(t)
	var m *model
	s := newStack(t, sh, func(t testing.TB, c *convo) reply {
		if len(c.outputs()) == 0 {
			return reply{items: []string{m.call("x = 20\nprint('one')"), m.call("print('two', x + 1)"), m.call("print('three')")}}
		}
		outs := lastOutputs(c)
		if len(outs) != 3 {
			t.Errorf("follow-up answers %d calls, want 3", len(outs))
			return reply{items: []string{m.message("bad")}}
		}
		for i, want := range []string{"one", "two 21", "three"} {
			if o := outs[i].Get("output").Str; !strings.Contains(o, want) {
				t.Errorf("output %d = %q, want %q", i, o, want)
			}
		}
		return reply{items: []string{m.message("done")}}
	}, stackOptions{})
	m = s.model
	r, evs, err := ask(context.Background(), t, s, ciParams("three things", true), true)
	if err != nil {
		t.Fatal(err)
	}
	checkStream(t, sh, evs, false)
	calls := ciCalls(r)
	if len(calls) != 3 {
		t.Fatalf("%d calls", len(calls))
	}
	for i, want := range []string{"one\n", "two 21\n", "three\n"} {
		if calls[i].Outputs[0].Logs != want || calls[i].ContainerID != calls[0].ContainerID {
			t.Errorf("call %d: logs %q container %s", i, calls[i].Outputs[0].Logs, calls[i].ContainerID)
		}
	}
}

// TestPythonError: the model sees the exception's traceback and answers;
// the client gets the call "completed" with the traceback in its logs, as
// OpenAI's hosted tool reports it (interceptor.call_status: openai, the
// default), or "failed" with call_status: detailed.
func TestPythonError(t *testing.T) {
	sh := loadShapes(t)
	var m *model
	s := newStack(t, sh, func(t testing.TB, c *convo) reply {
		if len(c.outputs()) == 0 {
			return reply{items: []string{m.call("print('before')\n1/0")}}
		}
		o := lastOutputs(c)[0].Get("output").Str
		if !strings.Contains(o, "ZeroDivisionError") || !strings.Contains(o, "before") {
			t.Errorf("the model was not shown the error: %q", o)
		}
		return reply{items: []string{m.message("division by zero")}}
	}, stackOptions{})
	m = s.model
	for _, stream := range []bool{false, true} {
		r, _, err := ask(context.Background(), t, s, ciParams("divide", true), stream)
		if err != nil {
			t.Fatal(err)
		}
		ci := ciCalls(r)[0]
		if ci.Status != responses.ResponseCodeInterpreterToolCallStatusCompleted || !strings.Contains(ci.Outputs[0].Logs, "ZeroDivisionError") {
			t.Errorf("stream=%v: call %+v", stream, ci)
		}
	}
	var dm *model
	d := newStack(t, sh, func(t testing.TB, c *convo) reply {
		if len(c.outputs()) == 0 {
			return reply{items: []string{dm.call("1/0")}}
		}
		return reply{items: []string{dm.message("division by zero")}}
	}, stackOptions{interceptor: interceptor.Config{CallStatus: interceptor.CallStatusDetailed}})
	dm = d.model
	r, _, err := ask(context.Background(), t, d, ciParams("divide", true), false)
	if err != nil {
		t.Fatal(err)
	}
	if ci := ciCalls(r)[0]; ci.Status != responses.ResponseCodeInterpreterToolCallStatusFailed {
		t.Errorf("call_status: detailed: %+v", ci)
	}
	s.drained(t)
	if s.codeRuns("error") != 2 {
		t.Errorf("code_runs_total{error} = %v", s.codeRuns("error"))
	}
}

// TestTimeout: a run over the wall-time limit is stopped; the model hears
// why, and so does the client in the call's logs (a "completed" call, as
// OpenAI's clients expect).
func TestTimeout(t *testing.T) {
	sh := loadShapes(t)
	var m *model
	s := newStack(t, sh, func(t testing.TB, c *convo) reply {
		if len(c.outputs()) == 0 {
			return reply{items: []string{m.call("print('spinning', flush=True)\nwhile True:\n    pass")}}
		}
		if o := strings.ToLower(lastOutputs(c)[0].Get("output").Str); !strings.Contains(o, "time") {
			t.Errorf("the model was not told about the timeout: %q", o)
		}
		return reply{items: []string{m.message("it timed out")}}
	}, stackOptions{pool: []func(*pool.Config){func(c *pool.Config) { c.Limits.RunTimeout = 2 * time.Second }}})
	m = s.model
	r, _, err := ask(context.Background(), t, s, ciParams("spin", true), false)
	if err != nil {
		t.Fatal(err)
	}
	if ci := ciCalls(r)[0]; ci.Status != responses.ResponseCodeInterpreterToolCallStatusCompleted ||
		!strings.Contains(ci.Outputs[0].Logs, "spinning") || !strings.Contains(ci.Outputs[0].Logs, "[incomplete: the run hit the time limit") {
		t.Errorf("call %+v, want completed with the output so far and the reason in its logs", ci)
	}
	s.drained(t)
	if s.codeRuns("timeout") != 1 {
		t.Errorf("code_runs_total{timeout} = %v", s.codeRuns("timeout"))
	}
}

// TestRejectedDeclarations: declarations this server cannot honour get
// OpenAI-shaped 400s naming the field, and reach no model.
func TestRejectedDeclarations(t *testing.T) {
	sh := loadShapes(t)
	s := newStack(t, sh, func(t testing.TB, c *convo) reply {
		t.Error("a rejected request reached the model")
		return reply{status: 500, body: "{}"}
	}, stackOptions{})
	auto := func(c responses.ToolCodeInterpreterContainerCodeInterpreterContainerAutoParam) responses.ToolUnionParam {
		return responses.ToolParamOfCodeInterpreter(c)
	}
	cases := []struct {
		name      string
		tools     []responses.ToolUnionParam
		wantParam string
	}{
		{"file_ids", []responses.ToolUnionParam{auto(responses.ToolCodeInterpreterContainerCodeInterpreterContainerAutoParam{FileIDs: []string{"file-abc"}})}, "tools[0].container.file_ids"},
		{"memory_limit above the maximum", []responses.ToolUnionParam{auto(responses.ToolCodeInterpreterContainerCodeInterpreterContainerAutoParam{MemoryLimit: "64g"})}, "tools[0].container.memory_limit"},
		{"unknown container id", []responses.ToolUnionParam{responses.ToolParamOfCodeInterpreter("cntr_does_not_exist")}, "tools[0].container"},
		{"client function with our name", []responses.ToolUnionParam{
			responses.ToolParamOfFunction("code_interpreter", map[string]any{"type": "object", "properties": map[string]any{}}, false),
			auto(responses.ToolCodeInterpreterContainerCodeInterpreterContainerAutoParam{}),
		}, "tools[0].name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := ciParams("x", false)
			p.Tools = tc.tools
			_, _, err := ask(context.Background(), t, s, p, false)
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("error %v, want an API error", err)
			}
			if apiErr.StatusCode != 400 || apiErr.Type != "invalid_request_error" || apiErr.Param != tc.wantParam || apiErr.Message == "" {
				t.Fatalf("got %d type=%q param=%q message=%q, want 400 invalid_request_error param=%q",
					apiErr.StatusCode, apiErr.Type, apiErr.Param, apiErr.Message, tc.wantParam)
			}
		})
	}
	s.drained(t)
	if n := len(s.model.all()); n != 0 {
		t.Errorf("model got %d requests", n)
	}
	if got := s.outcome(filter.OutcomeRejected); got != float64(len(cases)) {
		t.Errorf("rejected outcomes %v", got)
	}
}

// TestUpstream500MidLoop: the follow-up fails; the client gets the
// upstream's status and error (JSON), or an error event (stream).
func TestUpstream500MidLoop(t *testing.T) {
	sh := loadShapes(t)
	const upstreamErr = `{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}`
	var m *model
	s := newStack(t, sh, func(t testing.TB, c *convo) reply {
		if len(c.outputs()) == 0 {
			return reply{items: []string{m.call("print(25)")}}
		}
		return reply{status: 500, body: upstreamErr}
	}, stackOptions{})
	m = s.model
	t.Run("json", func(t *testing.T) {
		_, _, err := ask(context.Background(), t, s, ciParams("x", false), false)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 500 || apiErr.Type != "server_error" || !strings.Contains(apiErr.Message, "Sorry about that") {
			t.Fatalf("error %v, want the upstream's 500", err)
		}
	})
	t.Run("stream", func(t *testing.T) {
		_, evs, err := ask(context.Background(), t, s, ciParams("x", false), true)
		if err == nil {
			t.Fatal("stream ended without an error")
		}
		// Live, the stream carries OpenAI's error event with the
		// upstream's message, then response.failed (what a hosted tool's
		// failure looks like); the decoder reports no response.completed.
		var last responses.ResponseStreamEventUnion
		if len(evs) > 0 {
			last = evs[len(evs)-1]
		}
		sawError := false
		for _, ev := range evs {
			sawError = sawError || ev.Type == "error" && strings.Contains(ev.Message, "Sorry about that")
		}
		if !sawError || last.Type != "response.failed" {
			t.Fatalf("stream error %v, last event %s: want an error event with the upstream's message, then response.failed", err, last.Type)
		}
	})
	s.drained(t)
	if got := s.outcome(filter.OutcomeUpstreamError) + s.outcome(filter.OutcomeCompleted); got != 2 {
		t.Errorf("outcomes %v", got)
	}
}

// TestClientDisconnectCancelsRun: the client goes away while code runs;
// the run is cancelled at once and no follow-up is made, buffered as live.
func TestClientDisconnectCancelsRun(t *testing.T) {
	sh := loadShapes(t)
	for _, stream := range []bool{false, true} {
		t.Run("stream="+strconv.FormatBool(stream), func(t *testing.T) {
			var m *model
			s := newStack(t, sh, func(t testing.TB, c *convo) reply {
				if len(c.outputs()) == 0 {
					return reply{items: []string{m.call("import time\ntime.sleep(600)")}}
				}
				t.Error("a follow-up was sent after the client left")
				return reply{items: []string{m.message("late")}}
			}, stackOptions{})
			m = s.model
			ended := s.runs.nextEnd()
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() {
				_, _, err := ask(ctx, t, s, ciParams("sleep", false), stream)
				errc <- err
			}()
			select {
			case code := <-s.runs.started:
				if !strings.Contains(code, "sleep(600)") {
					t.Fatalf("unexpected run %q", code)
				}
			case <-time.After(2 * time.Minute):
				t.Fatal("the run never started")
			}
			cancel()
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Errorf("client error %v", err)
			}
			select {
			case res := <-ended:
				if res.Outcome != sandbox.OutcomeCancelled {
					t.Fatalf("run outcome %s, want cancelled", res.Outcome)
				}
			case <-time.After(2 * time.Minute):
				t.Fatal("the run was not cancelled")
			}
			s.drained(t)
			if s.outcome(filter.OutcomeCancelled) != 1 || s.codeRuns(string(sandbox.OutcomeCancelled)) != 1 {
				t.Errorf("metrics: cancelled=%v runs=%v", s.outcome(filter.OutcomeCancelled), s.codeRuns("cancelled"))
			}
			if n := len(m.all()); n != 1 {
				t.Errorf("model requests %d, want 1", n)
			}
		})
	}
}

// TestConcurrentRequests: 50 clients at once, each with its own
// computation; every one gets its own answer and nothing is lost.
func TestConcurrentRequests(t *testing.T) {
	const n = 50
	sh := loadShapes(t)
	var m *model
	s := newStack(t, sh, func(t testing.TB, c *convo) reply {
		var k int
		if _, err := fmt.Sscanf(c.userText(), "square %d", &k); err != nil {
			t.Errorf("prompt %q", c.userText())
		}
		if len(c.outputs()) == 0 {
			return reply{items: []string{m.call(fmt.Sprintf("v = %d\nprint(v * v)", k))}}
		}
		return reply{items: []string{m.message(firstStdoutLine(lastOutputs(c)[0].Get("output").Str))}}
	}, stackOptions{quiet: true, pool: []func(*pool.Config){func(c *pool.Config) {
		c.QueueWait = 5 * time.Minute // this test is about losing nothing, not about speed
	}}})
	m = s.model
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stream := i%2 == 1
			r, _, err := ask(context.Background(), t, s, ciParams(fmt.Sprintf("square %d", i+100), true), stream)
			if err != nil {
				errs[i] = err
				return
			}
			want := fmt.Sprint((i + 100) * (i + 100))
			calls := ciCalls(r)
			if len(calls) != 1 || len(calls[0].Outputs) != 1 || calls[0].Outputs[0].Logs != want+"\n" || r.OutputText() != want {
				errs[i] = fmt.Errorf("output %s, want one call printing %s and that answer", gjson.Get(r.RawJSON(), "output").Raw, want)
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("request %d: %v", i, err)
		}
	}
	s.drained(t)
	if got := s.outcome(filter.OutcomeCompleted); got != n {
		t.Errorf("completed outcomes %v, want %d", got, n)
	}
	if got := len(m.all()); got != 2*n {
		t.Errorf("model requests %d, want %d", got, 2*n)
	}
}
