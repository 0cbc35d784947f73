package interceptor

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/fixtures"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
)

// These tests run the loop through the real sandbox (CPython-WASI worker
// processes) with a scripted model, and read the answers with openai-go.

// futureItem is an output item type no client library knows yet.
const futureItem = `{"id":"fi_1","type":"future_item","payload":{"a":[1,2.50,"\u00e9"]}}`

const prompt = "Use the python tool to calculate the sum of the squares of the integers from 1 through 10."

func newLoopInterceptor(t *testing.T, p sandbox.Provider, mod func(*Config)) *Interceptor {
	t.Helper()
	cfg := DefaultConfig()
	if mod != nil {
		mod(&cfg)
	}
	ic, err := New(cfg, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ic
}

// detailed sets interceptor.call_status: detailed, for the tests of which
// status each outcome gets.
func detailed(c *Config) { c.CallStatus = CallStatusDetailed }

func ciParams(extra func(*responses.ResponseNewParams)) responses.ResponseNewParams {
	p := responses.ResponseNewParams{
		Model: "gpt-5.6",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(prompt)},
		Tools: []responses.ToolUnionParam{responses.ToolParamOfCodeInterpreter(responses.ToolCodeInterpreterContainerCodeInterpreterContainerAutoParam{})},
		Store: openai.Bool(false),
	}
	if extra != nil {
		extra(&p)
	}
	return p
}

func withOutputs(p *responses.ResponseNewParams) {
	p.Include = []responses.ResponseIncludable{responses.ResponseIncludableCodeInterpreterCallOutputs}
}

// outputOf returns the function_call_output for callID in a follow-up.
func outputOf(t *testing.T, req gjson.Result, callID string) string {
	t.Helper()
	var out *gjson.Result
	req.Get("input").ForEach(func(_, it gjson.Result) bool {
		if it.Get("type").Str == "function_call_output" && it.Get("call_id").Str == callID {
			out = &it
			return false
		}
		return true
	})
	if out == nil {
		t.Fatalf("follow-up has no function_call_output for %s: %s", callID, req.Get("input").Raw)
	}
	return out.Get("output").Str
}

func codeCalls(t *testing.T, r *responses.Response) []responses.ResponseCodeInterpreterToolCall {
	t.Helper()
	var out []responses.ResponseCodeInterpreterToolCall
	for _, it := range r.Output {
		switch it.Type {
		case "code_interpreter_call":
			out = append(out, it.AsCodeInterpreterCall())
		case "function_call":
			if it.AsFunctionCall().Name == "code_interpreter" {
				t.Errorf("our function_call leaked to the client: %s", it.RawJSON())
			}
		case "function_call_output":
			t.Errorf("function_call_output leaked to the client: %s", it.RawJSON())
		}
	}
	return out
}

func checkCodeCall(t *testing.T, c responses.ResponseCodeInterpreterToolCall, status, code, logs string) {
	t.Helper()
	if !strings.HasPrefix(c.ID, "ci_") || !strings.HasPrefix(c.ContainerID, "cntr_") || c.Code != code || string(c.Status) != status {
		t.Errorf("code_interpreter_call: id %q container %q status %q code %q; want status %q code %q", c.ID, c.ContainerID, c.Status, c.Code, status, code)
	}
	if logs == "-" { // outputs not requested: null
		if c.Outputs != nil || !strings.Contains(c.RawJSON(), `"outputs":null`) {
			t.Errorf("outputs should be null: %s", c.RawJSON())
		}
		return
	}
	var got strings.Builder
	for _, o := range c.Outputs {
		if o.Type != "logs" {
			t.Errorf("output type %q", o.Type)
		}
		got.WriteString(o.Logs)
	}
	if !strings.Contains(got.String(), logs) {
		t.Errorf("logs %q do not contain %q", got.String(), logs)
	}
}

// TestLoopMultiRoundKeepsState: two rounds, the second using a variable the
// first defined, replayed follow-ups, summed usage, the client's echo fields.
func TestLoopMultiRoundKeepsState(t *testing.T) {
	p := sandboxtest.New(t)
	up := newScriptedUpstream(t,
		step{
			check: func(t *testing.T, req gjson.Result) {
				if req.Get("input").Str != prompt || req.Get("include").Raw != "[]" {
					t.Errorf("first request: input %s include %s", req.Get("input").Raw, req.Get("include").Raw)
				}
			},
			items: []string{reasoningItem("Compute it."), fcItem("call_1", "x = sum(i*i for i in range(1, 11))\nprint(x)"), futureItem},
		},
		step{
			check: func(t *testing.T, req gjson.Result) {
				in := req.Get("input").Array()
				// replay: the prompt, the turn's items, then the output
				if len(in) != 5 || in[0].Get("role").Str != "user" || in[0].Get("content").Str != prompt ||
					in[1].Get("type").Str != "reasoning" || in[2].Get("call_id").Str != "call_1" || in[3].Raw != futureItem || in[4].Get("type").Str != "function_call_output" {
					t.Fatalf("replayed input: %s", req.Get("input").Raw)
				}
				out := outputOf(t, req, "call_1")
				if !strings.HasPrefix(out, "status: completed\n") || !strings.Contains(out, "stdout:\n385\n") || !strings.Contains(out, "stderr: (empty)") {
					t.Errorf("model-facing output: %q", out)
				}
				if req.Get("previous_response_id").Exists() || req.Get("tool_choice").Str != "auto" {
					t.Errorf("follow-up: previous_response_id %s tool_choice %s", req.Get("previous_response_id").Raw, req.Get("tool_choice").Raw)
				}
			},
			items: []string{fcItem("call_2", "print(x + 1)")},
		},
		step{
			check: func(t *testing.T, req gjson.Result) {
				if len(req.Get("input").Array()) != 7 {
					t.Errorf("second follow-up input: %s", req.Get("input").Raw)
				}
				if out := outputOf(t, req, "call_2"); !strings.Contains(out, "386") {
					t.Errorf("state was not kept between calls: %q", out)
				}
			},
			items: []string{msgItem("CODE_INTERPRETER_OK=385")},
		},
	)
	ic := newLoopInterceptor(t, p, nil)
	_, client := gateway(t, ic, up)

	r, err := client.Responses.New(context.Background(), ciParams(func(p *responses.ResponseNewParams) {
		withOutputs(p)
		p.ToolChoice = responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: openai.Opt(responses.ToolChoiceOptionsRequired)}
	}))
	if err != nil {
		t.Fatal(err)
	}
	calls := codeCalls(t, r)
	if len(r.Output) != 5 || len(calls) != 2 || r.Output[0].Type != "reasoning" || r.Output[4].Type != "message" {
		t.Fatalf("output: %s", r.RawJSON())
	}
	if got := gjson.Get(r.RawJSON(), "output.2").Raw; got != futureItem {
		t.Errorf("unknown item type not kept byte for value: %s", got)
	}
	checkCodeCall(t, calls[0], "completed", "x = sum(i*i for i in range(1, 11))\nprint(x)", "385\n")
	checkCodeCall(t, calls[1], "completed", "print(x + 1)", "386\n")
	if calls[0].ContainerID != calls[1].ContainerID || calls[0].ID == calls[1].ID {
		t.Errorf("container %s/%s ids %s/%s", calls[0].ContainerID, calls[1].ContainerID, calls[0].ID, calls[1].ID)
	}
	if r.OutputText() != "CODE_INTERPRETER_OK=385" || r.Status != "completed" {
		t.Errorf("answer %q status %q", r.OutputText(), r.Status)
	}
	u := r.Usage
	if u.InputTokens != 300 || u.OutputTokens != 21 || u.TotalTokens != 321 || u.InputTokensDetails.CachedTokens != 60 || u.OutputTokensDetails.ReasoningTokens != 9 ||
		gjson.Get(r.RawJSON(), "usage.input_tokens_details.cache_write_tokens").Int() != 30 {
		t.Errorf("usage not summed over 3 rounds: %s", gjson.Get(r.RawJSON(), "usage").Raw)
	}
	if len(r.Tools) != 1 || r.Tools[0].Type != "code_interpreter" || gjson.Get(r.RawJSON(), "tools").Raw != `[{"container":{"type":"auto"},"type":"code_interpreter"}]` {
		t.Errorf("tools not as the client sent them: %s", gjson.Get(r.RawJSON(), "tools").Raw)
	}
	if gjson.Get(r.RawJSON(), "tool_choice").Raw != `"required"` {
		t.Errorf("tool_choice: %s", gjson.Get(r.RawJSON(), "tool_choice").Raw)
	}
	ids := up.requests()
	if len(ids) != 3 {
		t.Fatalf("upstream got %d requests", len(ids))
	}
	// Fields we do not own come from the upstream's last response, intact.
	if gjson.Get(r.RawJSON(), "tool_usage.web_search.num_requests").Raw != "0" || gjson.Get(r.RawJSON(), "billing.payer").Str != "developer" {
		t.Errorf("upstream fields lost: %s", r.RawJSON())
	}

	// A stateless client's next turn replays the items: the upstream sees
	// them as calls with outputs, with ids derived from the ci_ ids.
	next := newScriptedUpstream(t, step{
		check: func(t *testing.T, req gjson.Result) {
			var fcs, outs int
			req.Get("input").ForEach(func(_, it gjson.Result) bool {
				switch it.Get("type").Str {
				case "function_call":
					fcs++
					if !strings.Contains(it.Get("arguments").Str, "print(x + 1)") && !strings.Contains(it.Get("arguments").Str, "range(1, 11)") {
						t.Errorf("replayed call: %s", it.Raw)
					}
				case "function_call_output":
					outs++
				}
				return true
			})
			if fcs != 2 || outs != 2 {
				t.Errorf("replayed history: %s", req.Get("input").Raw)
			}
			if !strings.Contains(req.Get("input").Raw, "386") {
				t.Errorf("replayed outputs lost: %s", req.Get("input").Raw)
			}
		},
		items: []string{msgItem("It was 385.")},
	})
	_, client2 := gateway(t, newLoopInterceptor(t, p, nil), next)
	var history []responses.ResponseInputItemUnionParam
	history = append(history, responses.ResponseInputItemParamOfMessage(prompt, responses.EasyInputMessageRoleUser))
	for _, it := range r.Output {
		switch it.Type {
		case "reasoning":
			v := it.AsReasoning().ToParam()
			history = append(history, responses.ResponseInputItemUnionParam{OfReasoning: &v})
		case "code_interpreter_call":
			v := it.AsCodeInterpreterCall().ToParam()
			history = append(history, responses.ResponseInputItemUnionParam{OfCodeInterpreterCall: &v})
		case "message":
			v := it.AsMessage().ToParam()
			history = append(history, responses.ResponseInputItemUnionParam{OfOutputMessage: &v})
		case "future_item":
			// openai-go cannot type it; a client would drop or pass it raw.
		default:
			t.Fatalf("unexpected item %s", it.RawJSON())
		}
	}
	history = append(history, responses.ResponseInputItemParamOfMessage("What was it?", responses.EasyInputMessageRoleUser))
	r2, err := client2.Responses.New(context.Background(), ciParams(func(p *responses.ResponseNewParams) {
		p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: history}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if r2.OutputText() != "It was 385." {
		t.Errorf("second turn: %s", r2.RawJSON())
	}
}

// TestLoopParallelCallsStream: one turn with several calls, one of them
// failing, one over the per-turn cap; the client streams.
func TestLoopParallelCallsStream(t *testing.T) {
	p := sandboxtest.New(t)
	up := newScriptedUpstream(t,
		step{items: []string{
			fcItem("call_a", "import math\nr = math.sqrt(16)\nprint(r)"),
			fcItem("call_b", "print(undefined_name)"),
			fcItem("call_c", "print('third')"),
		}},
		step{
			check: func(t *testing.T, req gjson.Result) {
				a, b, c := outputOf(t, req, "call_a"), outputOf(t, req, "call_b"), outputOf(t, req, "call_c")
				if !strings.HasPrefix(a, "status: completed") || !strings.Contains(a, "4.0") {
					t.Errorf("call_a: %q", a)
				}
				if !strings.HasPrefix(b, "status: failed") || !strings.Contains(b, "NameError") || !strings.Contains(b, "stderr:\n") {
					t.Errorf("call_b: %q", b)
				}
				if !strings.HasPrefix(c, "status: incomplete: not run") || !strings.Contains(c, "at most 2") {
					t.Errorf("call_c: %q", c)
				}
				// outputs follow their calls, in order
				var order []string
				req.Get("input").ForEach(func(_, it gjson.Result) bool {
					if it.Get("type").Str == "function_call_output" {
						order = append(order, it.Get("call_id").Str)
					}
					return true
				})
				if strings.Join(order, ",") != "call_a,call_b,call_c" {
					t.Errorf("output order %v", order)
				}
			},
			items: []string{msgItem("r is 4.0")},
		},
	)
	ic := newLoopInterceptor(t, p, func(c *Config) { c.MaxParallelCalls = 2 })
	_, client := gateway(t, ic, up)

	stream := client.Responses.NewStreaming(context.Background(), ciParams(func(p *responses.ResponseNewParams) {
		withOutputs(p)
		p.Tools = []responses.ToolUnionParam{responses.ToolParamOfCodeInterpreter(responses.ToolCodeInterpreterContainerCodeInterpreterContainerAutoParam{MemoryLimit: "1g"})}
	}))
	var events []responses.ResponseStreamEventUnion
	for stream.Next() {
		events = append(events, stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	var names []string
	var final responses.Response
	var code strings.Builder
	for i, e := range events {
		if e.SequenceNumber != int64(i) {
			t.Fatalf("event %d has sequence %d", i, e.SequenceNumber)
		}
		if len(names) == 0 || names[len(names)-1] != e.Type {
			names = append(names, e.Type)
		}
		switch v := e.AsAny().(type) {
		case responses.ResponseCompletedEvent:
			final = v.Response
		case responses.ResponseCodeInterpreterCallCodeDeltaEvent:
			if v.OutputIndex == 1 {
				code.WriteString(v.Delta)
			}
		}
	}
	if names[0] != "response.created" || names[1] != "response.in_progress" || names[len(names)-1] != "response.completed" {
		t.Fatalf("lifecycle: %v", names)
	}
	if code.String() != "print(undefined_name)" {
		t.Errorf("code deltas of output 1: %q", code.String())
	}
	calls := codeCalls(t, &final)
	if len(calls) != 3 {
		t.Fatalf("final output: %s", final.RawJSON())
	}
	checkCodeCall(t, calls[0], "completed", "import math\nr = math.sqrt(16)\nprint(r)", "4.0")
	// interceptor.call_status: openai (the default): every call that ended
	// is "completed" for the client, the reason in its logs; the model
	// above was told "failed" and "incomplete".
	checkCodeCall(t, calls[1], "completed", "print(undefined_name)", "NameError")
	checkCodeCall(t, calls[2], "completed", "print('third')", "[not run: at most 2")
	if final.OutputText() != "r is 4.0" {
		t.Errorf("answer: %q", final.OutputText())
	}
}

// TestLoopTimeoutThenFreshInterpreter: a run that hits the time limit is
// incomplete; the next call of the response runs in a fresh interpreter and
// the model is told its state is gone.
func TestLoopTimeoutThenFreshInterpreter(t *testing.T) {
	p := sandboxtest.New(t, func(c *pool.Config) { c.Limits.RunTimeout = 2 * time.Second })
	up := newScriptedUpstream(t,
		step{items: []string{fcItem("call_1", "keep = 1\nwhile True:\n    pass")}},
		step{
			check: func(t *testing.T, req gjson.Result) {
				if out := outputOf(t, req, "call_1"); !strings.HasPrefix(out, "status: incomplete: the run hit the time limit") {
					t.Errorf("timeout output: %q", out)
				}
			},
			items: []string{fcItem("call_2", "print('keep' in globals())")},
		},
		step{
			check: func(t *testing.T, req gjson.Result) {
				out := outputOf(t, req, "call_2")
				if !strings.Contains(out, "False") || !strings.Contains(out, "fresh interpreter") {
					t.Errorf("after timeout: %q", out)
				}
			},
			items: []string{msgItem("The loop timed out.")},
		},
	)
	_, client := gateway(t, newLoopInterceptor(t, p, detailed), up)
	r, err := client.Responses.New(context.Background(), ciParams(nil))
	if err != nil {
		t.Fatal(err)
	}
	calls := codeCalls(t, r)
	if len(calls) != 2 {
		t.Fatalf("output: %s", r.RawJSON())
	}
	checkCodeCall(t, calls[0], "incomplete", "keep = 1\nwhile True:\n    pass", "-")
	checkCodeCall(t, calls[1], "completed", "print('keep' in globals())", "-")
}

// TestLoopLimits: max_tool_calls and max_rounds end the loop; the last
// permitted follow-up asks the model to answer; the client cannot raise
// either limit.
func TestLoopLimits(t *testing.T) {
	p := sandboxtest.New(t)
	callAgain := func(id string) step {
		return step{items: []string{fcItem(id, "print('"+id+"')")}}
	}
	toolChoice := func(want string) func(*testing.T, gjson.Result) {
		return func(t *testing.T, req gjson.Result) {
			if got := req.Get("tool_choice").Raw; got != want {
				t.Errorf("tool_choice %s, want %s", got, want)
			}
		}
	}
	cases := []struct {
		name   string
		cfg    func(*Config)
		params func(*responses.ResponseNewParams)
		steps  []step
		status []string
	}{
		{
			name:   "request max_tool_calls",
			params: func(p *responses.ResponseNewParams) { p.MaxToolCalls = openai.Int(1) },
			steps: []step{
				callAgain("c1"),
				{check: toolChoice(`"none"`), items: []string{fcItem("c2", "print('disobeyed')")}},
			},
			status: []string{"completed", "incomplete"},
		},
		{
			name:   "client cannot raise the operator's max_tool_calls",
			cfg:    func(c *Config) { c.MaxToolCalls = 1 },
			params: func(p *responses.ResponseNewParams) { p.MaxToolCalls = openai.Int(50) },
			steps: []step{
				callAgain("c1"),
				{check: toolChoice(`"none"`), items: []string{msgItem("done")}},
			},
			status: []string{"completed"},
		},
		{
			name: "max_rounds",
			cfg:  func(c *Config) { c.MaxRounds = 2 },
			steps: []step{
				callAgain("c1"),
				{check: toolChoice(""), items: []string{fcItem("c2", "print(2)")}}, // the client sent no tool_choice, none is added
				{check: toolChoice(`"none"`), items: []string{fcItem("c3", "print(3)")}},
			},
			status: []string{"completed", "completed", "incomplete"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			up := newScriptedUpstream(t, tc.steps...)
			cfg := func(c *Config) {
				detailed(c)
				if tc.cfg != nil {
					tc.cfg(c)
				}
			}
			_, client := gateway(t, newLoopInterceptor(t, p, cfg), up)
			r, err := client.Responses.New(context.Background(), ciParams(tc.params))
			if err != nil {
				t.Fatal(err)
			}
			calls := codeCalls(t, r)
			var got []string
			for _, c := range calls {
				got = append(got, string(c.Status))
			}
			if strings.Join(got, ",") != strings.Join(tc.status, ",") {
				t.Fatalf("statuses %v, want %v: %s", got, tc.status, r.RawJSON())
			}
			if n := len(up.requests()); n != len(tc.steps) {
				t.Fatalf("upstream got %d requests, want %d", n, len(tc.steps))
			}
			// The client sent no tool_choice: it sees the default the first
			// turn ran with, not the "none" of the last follow-up.
			if got := gjson.Get(r.RawJSON(), "tool_choice").Raw; got != `"auto"` {
				t.Errorf("tool_choice shown %s", got)
			}
		})
	}
}

// TestLoopUpstreamErrorMidLoop: a follow-up answered with an error reaches
// the client as that error (JSON) or as one error event (stream).
func TestLoopUpstreamErrorMidLoop(t *testing.T) {
	p := sandboxtest.New(t)
	const errBody = `{"error":{"message":"Rate limit reached for gpt-5.6","type":"requests","param":null,"code":"rate_limit_exceeded"}}`
	script := func() []step {
		return []step{
			{items: []string{fcItem("c1", "print(1)")}},
			{status: 429, body: errBody},
		}
	}
	t.Run("json", func(t *testing.T) {
		_, client := gateway(t, newLoopInterceptor(t, p, nil), newScriptedUpstream(t, script()...))
		_, err := client.Responses.New(context.Background(), ciParams(nil))
		var ae *openai.Error
		if !errors.As(err, &ae) {
			t.Fatalf("want an API error, got %v", err)
		}
		if ae.StatusCode != 429 || ae.Code != "rate_limit_exceeded" || ae.Message != "Rate limit reached for gpt-5.6" {
			t.Fatalf("error: %d %q %q", ae.StatusCode, ae.Code, ae.Message)
		}
	})
	t.Run("stream", func(t *testing.T) {
		_, client := gateway(t, newLoopInterceptor(t, p, nil), newScriptedUpstream(t, script()...))
		stream := client.Responses.NewStreaming(context.Background(), ciParams(nil))
		var events []responses.ResponseStreamEventUnion
		for stream.Next() {
			events = append(events, stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if len(events) != 1 {
			t.Fatalf("want one error event, got %d", len(events))
		}
		e := events[0].AsError()
		if events[0].Type != "error" || e.Code != "rate_limit_exceeded" || e.Message != "Rate limit reached for gpt-5.6" || e.SequenceNumber != 0 {
			t.Fatalf("error event: %+v", e)
		}
	})
	t.Run("transport failure", func(t *testing.T) {
		up := newScriptedUpstream(t, step{items: []string{fcItem("c1", "print(1)")}}, step{err: errors.New("connection refused")})
		_, client := gateway(t, newLoopInterceptor(t, p, nil), up)
		_, err := client.Responses.New(context.Background(), ciParams(nil))
		var ae *openai.Error
		if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadGateway || ae.Code != "upstream_unavailable" || ae.Type != "server_error" {
			t.Fatalf("want a 502 upstream_unavailable, got %v", err)
		}
	})
	t.Run("first answer not 2xx passes through", func(t *testing.T) {
		up := newScriptedUpstream(t, step{status: 400, body: `{"error":{"message":"model not found","type":"invalid_request_error","param":"model","code":"model_not_found"}}`})
		_, client := gateway(t, newLoopInterceptor(t, p, nil), up)
		_, err := client.Responses.New(context.Background(), ciParams(nil))
		var ae *openai.Error
		if !errors.As(err, &ae) || ae.StatusCode != 400 || ae.Param != "model" || ae.Code != "model_not_found" {
			t.Fatalf("want the upstream's 400, got %v", err)
		}
	})
	t.Run("unusable 2xx body", func(t *testing.T) {
		up := newScriptedUpstream(t, step{status: 200, body: `{"object":"list","data":[]}`})
		_, client := gateway(t, newLoopInterceptor(t, p, nil), up)
		_, err := client.Responses.New(context.Background(), ciParams(nil))
		var ae *openai.Error
		if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadGateway || ae.Code != "bad_upstream_response" {
			t.Fatalf("want a 502 bad_upstream_response, got %v", err)
		}
	})
}

// TestLoopFollowUpModes: previous_response_id when the upstream stored the
// response (auto), replay otherwise or when configured.
func TestLoopFollowUpModes(t *testing.T) {
	p := sandboxtest.New(t)
	cases := []struct {
		name     string
		mode     FollowUpMode
		store    bool
		wantPrev bool
	}{
		{"auto, stored", FollowUpAuto, true, true},
		{"auto, not stored", FollowUpAuto, false, false},
		{"replay, stored", FollowUpReplay, true, false},
		{"previous_response_id", FollowUpPreviousResponseID, false, true},
		{"conversation", FollowUpAuto, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var up *scriptedUpstream
			up = newScriptedUpstream(t,
				step{store: tc.store, items: []string{msgItem("Let me compute."), fcItem("c1", "print(7*6)")}},
				step{store: tc.store, check: func(t *testing.T, req gjson.Result) {
					first := up.ids[0]
					in := req.Get("input").Array()
					if tc.name == "conversation" {
						// The stored conversation holds the turn: only the outputs go.
						if req.Get("previous_response_id").Exists() || len(in) != 1 || in[0].Get("type").Str != "function_call_output" || req.Get("conversation").Str != "conv_1" {
							t.Errorf("conversation follow-up: %s", req.Raw)
						}
					} else if tc.wantPrev {
						if req.Get("previous_response_id").Str != first || len(in) != 1 || in[0].Get("type").Str != "function_call_output" {
							t.Errorf("previous_response_id follow-up: prev %s input %s", req.Get("previous_response_id").Raw, req.Get("input").Raw)
						}
					} else if req.Get("previous_response_id").Exists() || len(in) != 4 {
						t.Errorf("replay follow-up: prev %s input %s", req.Get("previous_response_id").Raw, req.Get("input").Raw)
					}
					if !strings.Contains(outputOf(t, req, "c1"), "42") {
						t.Errorf("output lost")
					}
				}, items: []string{msgItem("42")}},
			)
			_, client := gateway(t, newLoopInterceptor(t, p, func(c *Config) { c.FollowUp = tc.mode }), up)
			var opts []option.RequestOption
			if tc.name == "conversation" {
				opts = append(opts, option.WithJSONSet("conversation", "conv_1"))
			}
			r, err := client.Responses.New(context.Background(), ciParams(func(p *responses.ResponseNewParams) { p.Store = openai.Bool(tc.store) }), opts...)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Output) != 3 || r.Output[0].Type != "message" || r.Output[1].Type != "code_interpreter_call" || r.OutputText() != "Let me compute.42" {
				t.Fatalf("output: %s", r.RawJSON())
			}
			// The client never sees our intermediate response ids.
			if prev := gjson.Get(r.RawJSON(), "previous_response_id"); prev.Type != gjson.Null {
				t.Errorf("previous_response_id leaked: %s", prev.Raw)
			}
			if r.ID != up.ids[1] {
				t.Errorf("response id %s, want the last upstream id %s", r.ID, up.ids[1])
			}
		})
	}
}

// TestLoopArgumentsAndClientCalls: bad arguments are reported to the model
// without running; a turn that also calls a client function goes back to
// the client at once, our call already run.
func TestLoopArgumentsAndClientCalls(t *testing.T) {
	p := sandboxtest.New(t)
	t.Run("bad arguments", func(t *testing.T) {
		up := newScriptedUpstream(t,
			step{items: []string{
				fcRaw("c1", "code_interpreter", "print('not json')"),
				fcRaw("c2", "code_interpreter", `{"source":"print(1)"}`),
			}},
			step{check: func(t *testing.T, req gjson.Result) {
				for _, id := range []string{"c1", "c2"} {
					out := outputOf(t, req, id)
					if !strings.HasPrefix(out, "status: failed: invalid arguments") || !strings.Contains(out, "nothing was run") {
						t.Errorf("%s: %q", id, out)
					}
				}
			}, items: []string{msgItem("sorry")}},
		)
		_, client := gateway(t, newLoopInterceptor(t, p, detailed), up)
		r, err := client.Responses.New(context.Background(), ciParams(withOutputs))
		if err != nil {
			t.Fatal(err)
		}
		calls := codeCalls(t, r)
		if len(calls) != 2 {
			t.Fatalf("output %s", r.RawJSON())
		}
		checkCodeCall(t, calls[0], "failed", "print('not json')", "")
		if len(calls[0].Outputs) != 0 || len(calls[1].Outputs) != 0 {
			t.Errorf("calls that did not run have outputs: %s", r.RawJSON())
		}
	})
	t.Run("client function in the same turn", func(t *testing.T) {
		up := newScriptedUpstream(t, step{items: []string{
			fcItem("c1", "print('ran')"),
			fcRaw("w1", "get_weather", `{"city":"Paris"}`),
		}})
		_, client := gateway(t, newLoopInterceptor(t, p, nil), up)
		r, err := client.Responses.New(context.Background(), ciParams(func(p *responses.ResponseNewParams) {
			withOutputs(p)
			p.Tools = append(p.Tools, responses.ToolParamOfFunction("get_weather", map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}, false))
		}))
		if err != nil {
			t.Fatal(err)
		}
		calls := codeCalls(t, r)
		if len(calls) != 1 || len(r.Output) != 2 || r.Output[1].AsFunctionCall().Name != "get_weather" {
			t.Fatalf("output %s", r.RawJSON())
		}
		checkCodeCall(t, calls[0], "completed", "print('ran')", "ran\n")
		if len(r.Tools) != 2 || r.Tools[0].Type != "code_interpreter" {
			t.Errorf("tools: %s", gjson.Get(r.RawJSON(), "tools").Raw)
		}
	})
	t.Run("no call: the answer passes with the client's tools", func(t *testing.T) {
		up := newScriptedUpstream(t, step{items: []string{msgItem("no code needed")}})
		_, client := gateway(t, newLoopInterceptor(t, p, nil), up)
		r, err := client.Responses.New(context.Background(), ciParams(nil), option.WithJSONSet("x_future_param", map[string]any{"k": 1}))
		if err != nil {
			t.Fatal(err)
		}
		if r.OutputText() != "no code needed" || r.Tools[0].Type != "code_interpreter" {
			t.Fatalf("%s", r.RawJSON())
		}
		if got := up.requests()[0].Get("x_future_param").Raw; got != `{"k":1}` {
			t.Errorf("unknown request field not forwarded: %s", got)
		}
	})
}

// TestLoopCancelled: the client going away ends the loop with the context's
// error, during a follow-up or during a run, and the session is released.
func TestLoopCancelled(t *testing.T) {
	p := sandboxtest.New(t)
	ic := newLoopInterceptor(t, p, nil)
	first := func(t *testing.T, code string) (*Exchange, []byte) {
		x, err := ic.RewriteRequest([]byte(`{"model":"m","input":"go","tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`))
		if err != nil {
			t.Fatal(err)
		}
		up := newScriptedUpstream(t, step{items: []string{fcItem("c1", code)}})
		_, _, body, _ := up.CreateResponse(context.Background(), x.UpstreamBody())
		return x, body
	}
	t.Run("during a follow-up", func(t *testing.T) {
		x, body := first(t, "print(1)")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		up := UpstreamFunc(func(ctx context.Context, _ []byte) (int, http.Header, []byte, error) {
			cancel() // the client disconnects while the model thinks
			return 0, nil, nil, ctx.Err()
		})
		res, err := x.CompleteResponse(ctx, up, 200, jsonHeader(), body)
		if !errors.Is(err, context.Canceled) || res != nil {
			t.Fatalf("got %v, %v; want context.Canceled", res, err)
		}
		waitReleased(t, p)
	})
	t.Run("during a run", func(t *testing.T) {
		x, body := first(t, "while True:\n    pass")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// A trigger, not a timed assertion: the run never ends by itself
		// before the test's 20 s run timeout.
		stop := time.AfterFunc(300*time.Millisecond, cancel)
		defer stop.Stop()
		up := UpstreamFunc(func(context.Context, []byte) (int, http.Header, []byte, error) {
			t.Error("a follow-up was sent after cancellation")
			return 500, nil, nil, nil
		})
		res, err := x.CompleteResponse(ctx, up, 200, jsonHeader(), body)
		if !errors.Is(err, context.Canceled) || res != nil {
			t.Fatalf("got %v, %v; want context.Canceled", res, err)
		}
		waitReleased(t, p)
	})
}

// TestLoopBodyShapeMatchesOpenAI: the JSON the client gets has OpenAI's
// fields, and our code_interpreter_call item exactly the recorded item's
// field set and order: against the recorded shapes, and the recordings
// themselves when CODEINTERP_FIXTURES is set.
func TestLoopBodyShapeMatchesOpenAI(t *testing.T) {
	p := sandboxtest.New(t)
	streams := fixtures.Sources(t, fixtureStreaming)
	for i, src := range fixtures.Sources(t, fixtureNonStreaming) {
		t.Run(src.Name, func(t *testing.T) {
			ref := gjson.Parse(src.Turns[0].Response)
			refStream := parseSSE(t, streams[i].Turns[0].SSE)
			refCI := gjson.Get(fixtures.FinalResponse(t, refStream), "output.0")
			up := newScriptedUpstream(t,
				step{items: []string{fcItem("c1", `print(f"CODE_INTERPRETER_OK={sum(i*i for i in range(1, 11))}")`)}},
				step{items: []string{msgItem("CODE_INTERPRETER_OK=385")}},
			)
			ic := newLoopInterceptor(t, p, nil)
			x, err := ic.RewriteRequest([]byte(src.Turns[0].Request))
			if err != nil {
				t.Fatal(err)
			}
			st, hdr, body, _ := up.CreateResponse(context.Background(), x.UpstreamBody())
			res, err := x.CompleteResponse(context.Background(), up, st, hdr, body)
			if err != nil || res.Status != 200 || res.ContentType != "application/json" || res.Rounds != 1 || res.ToolCalls != 1 {
				t.Fatalf("result %+v, %v", res, err)
			}
			got := gjson.ParseBytes(res.Body)
			if strings.Join(keys(got), ",") != strings.Join(keys(ref), ",") {
				t.Errorf("top-level fields\n got %v\nwant %v", keys(got), keys(ref))
			}
			ci := got.Get("output.0")
			var order, refOrder []string
			ci.ForEach(func(k, _ gjson.Result) bool { order = append(order, k.Str); return true })
			refCI.ForEach(func(k, _ gjson.Result) bool { refOrder = append(refOrder, k.Str); return true })
			if strings.Join(order, ",") != strings.Join(refOrder, ",") || ci.Get("outputs").Raw != "null" {
				t.Errorf("code_interpreter_call %s\nOpenAI's %s", ci.Raw, refCI.Raw)
			}
			if strings.Join(keys(got.Get("output.1")), ",") != strings.Join(keys(ref.Get("output.1")), ",") {
				t.Errorf("message fields %s", got.Get("output.1").Raw)
			}
			var r responses.Response
			if err := r.UnmarshalJSON(res.Body); err != nil {
				t.Fatal(err)
			}
			if r.OutputText() != "CODE_INTERPRETER_OK=385" || r.Output[0].AsCodeInterpreterCall().Status != "completed" {
				t.Errorf("decoded: %s", r.RawJSON())
			}
		})
	}
}

// waitReleased waits until every session's capacity is back. Session.Close
// returns at once and the pool releases the slot once the worker is reaped,
// so "released" is eventual; the bound only keeps a leak from hanging.
func waitReleased(t *testing.T, p sandbox.Provider) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for p.Capacity().InUse != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions still open", p.Capacity().InUse)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
