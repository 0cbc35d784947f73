package interceptor

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/fixtures"
	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
)

const liveTool = `[{"type":"code_interpreter","container":{"type":"auto"}}]`

func liveRequest(extra string) []byte {
	return []byte(`{"model":"gpt-5.6","input":` + jsonx.Quote(prompt) + `,"tools":` + liveTool + `,"store":false,"stream":true` + extra + `}`)
}

// escapedCode is a call whose arguments spell its code with every escape a
// model's JSON can hold: \n, \", \\, \u00e9 and a surrogate pair.
const escapedArgs = `{"code":"s = \"caf\u00e9 \ud83d\ude00\\\\\"\nprint(len(s), s)\n"}`
const escapedCode = "s = \"café 😀\\\\\"\nprint(len(s), s)\n"

// accumulate feeds a stream's events to openai-go's ResponseAccumulator
// and returns its reconstruction of the final response.
func accumulate(t *testing.T, evs []sseEvent) *responses.Response {
	t.Helper()
	var acc responses.ResponseAccumulator
	for _, e := range evs {
		var ev responses.ResponsesServerEventUnion
		if err := ev.UnmarshalJSON([]byte(e.Data.Raw)); err != nil {
			t.Fatalf("openai-go cannot decode %s: %v", e.Name, err)
		}
		if err := acc.AddEvent(ev); err != nil {
			t.Fatalf("ResponseAccumulator rejects %s: %v", e.Data.Raw, err)
		}
	}
	r, err := acc.ReconstructedResponse()
	if err != nil {
		t.Fatalf("ResponseAccumulator: %v", err)
	}
	return r
}

// checkLive checks a live stream as a client reads it: framing, sequence
// numbers and indices, openai-go's decoder and accumulator, no event of our
// function, every code_interpreter_call's lifecycle in OpenAI's order with
// deltas that rebuild its code; it returns the events.
func checkLive(t *testing.T, body []byte) []sseEvent {
	t.Helper()
	evs := parseSSE(t, string(body))
	fixtures.CheckStreamInvariants(t, evs)
	if n := len(decodeStream(t, body)); n != len(evs) {
		t.Fatalf("openai-go decoded %d of %d events", n, len(evs))
	}
	final := gjson.Parse(fixtures.FinalResponse(t, evs))
	acc := accumulate(t, evs)
	if id := evs[0].Data.Get("response.id").Str; final.Get("id").Str != id {
		t.Errorf("terminal response id %s, response.created announced %s", final.Get("id").Str, id)
	}
	if acc.ID != final.Get("id").Str || len(acc.Output) != len(final.Get("output").Array()) {
		t.Errorf("accumulated response %s differs from the terminal one", acc.RawJSON())
	}
	if evs[0].Name != "response.created" || evs[1].Name != "response.in_progress" {
		t.Fatalf("stream starts with %s, %s", evs[0].Name, evs[1].Name)
	}
	if got := evs[0].Data.Get("response.tools").Raw; got != liveTool && !strings.Contains(got, `"code_interpreter"`) {
		t.Errorf("response.created shows tools %s, not the client's", got)
	}
	type life struct {
		steps []string
		code  strings.Builder
	}
	lives := map[string]*life{}
	var order []string
	for _, e := range evs {
		if it := e.Data.Get("item"); it.Get("type").Str == "function_call" && it.Get("name").Str == "code_interpreter" {
			t.Fatalf("our function call reached the client: %s", e.Data.Raw)
		}
		id := e.Data.Get("item_id").Str
		if e.Data.Get("item.type").Str == "code_interpreter_call" {
			id = e.Data.Get("item.id").Str
		}
		if !strings.HasPrefix(id, "ci_") {
			continue
		}
		lf := lives[id]
		if lf == nil {
			lf = &life{}
			lives[id] = lf
			order = append(order, id)
		}
		step := strings.TrimPrefix(e.Name, "response.")
		if n := len(lf.steps); n == 0 || lf.steps[n-1] != step {
			lf.steps = append(lf.steps, step)
		}
		if e.Name == "response.code_interpreter_call_code.delta" {
			lf.code.WriteString(e.Data.Get("delta").Str)
		}
		if e.Name == "response.code_interpreter_call_code.done" && e.Data.Get("code").Str != lf.code.String() {
			t.Errorf("%s: deltas %q, code.done %q", id, lf.code.String(), e.Data.Get("code").Str)
		}
	}
	want := "output_item.added code_interpreter_call.in_progress code_interpreter_call_code.delta code_interpreter_call_code.done code_interpreter_call.interpreting code_interpreter_call.completed output_item.done"
	for _, id := range order {
		if got := strings.Join(lives[id].steps, " "); got != want {
			t.Errorf("%s lifecycle:\n got %s\nwant %s", id, got, want)
		}
	}
	return evs
}

// TestLiveMatchesBuffered streams scenarios live and buffered: the live
// stream is live (gates), valid for openai-go, and its final response is
// the buffered response field for field.
func TestLiveMatchesBuffered(t *testing.T) {
	p := sandboxtest.New(t)
	type scenario struct {
		name    string
		extra   string
		cfg     func(*Config)
		steps   func() []step
		runeCut bool
		gates   []gate
		check   func(t *testing.T, evs []sseEvent)
		files   bool // in a container: file citations
	}
	textGate := gate{before: "response.output_text.delta", nth: 1, what: "the final answer's first text delta",
		want: isEvent("response.output_text.delta")}
	cases := []scenario{
		{
			name:    "several rounds, escapes split everywhere",
			extra:   `,"include":["code_interpreter_call.outputs"],"tool_choice":"required"`,
			runeCut: true,
			steps: func() []step {
				return []step{
					{items: []string{reasoningItem("Compute it."), fcRaw("call_1", "code_interpreter", escapedArgs)}},
					{items: []string{msgItem("Now the second part."), fcItem("call_2", "x = sum(i*i for i in range(1, 11))\nprint(x)")}},
					{items: []string{msgItem("CODE_INTERPRETER_OK=385, and café 😀 has 6 characters.")}},
				}
			},
			gates: []gate{
				{round: 0, before: "response.completed", what: "response.created", want: isEvent("response.created")},
				{round: 0, before: "response.function_call_arguments.done", what: "a code delta",
					want: isEvent("response.code_interpreter_call_code.delta")},
				func() gate { g := textGate; g.round = 2; return g }(),
			},
			check: func(t *testing.T, evs []sseEvent) {
				var code strings.Builder
				for _, e := range evs {
					if e.Name == "response.code_interpreter_call_code.delta" && e.Data.Get("output_index").Int() == 1 {
						code.WriteString(e.Data.Get("delta").Str)
					}
				}
				if code.String() != escapedCode {
					t.Errorf("escaped code rebuilt as %q, want %q", code.String(), escapedCode)
				}
			},
		},
		{
			name:  "several calls in one turn, one failing, one over the cap",
			extra: `,"include":["code_interpreter_call.outputs"]`,
			cfg:   func(c *Config) { c.MaxParallelCalls = 2 },
			steps: func() []step {
				return []step{
					{items: []string{fcItem("a", "import math\nprint(math.sqrt(16))"), fcItem("b", "print(undefined_name)"), fcItem("c", "print('third')")}},
					{items: []string{msgItem("r is 4.0")}},
				}
			},
			gates: []gate{func() gate { g := textGate; g.round = 1; return g }()},
		},
		{
			name:  "a client function passes through",
			extra: `,"tools":[{"type":"code_interpreter","container":{"type":"auto"}},{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}},"strict":false}]`,
			steps: func() []step {
				return []step{{items: []string{fcItem("c1", "print('ran')"), fcRaw("w1", "get_weather", `{"city":"Paris"}`)}}}
			},
			check: func(t *testing.T, evs []sseEvent) {
				var args strings.Builder
				for _, e := range evs {
					if e.Name == "response.function_call_arguments.delta" {
						args.WriteString(e.Data.Get("delta").Str)
					}
				}
				if args.String() != `{"city":"Paris"}` {
					t.Errorf("client function arguments %q", args.String())
				}
			},
		},
		{
			name:  "file citations in a container",
			files: true,
			steps: func() []step {
				return []step{
					{items: []string{msgItem("Writing it."), fcItem("c1", "open('/mnt/data/out.csv', 'w').write('a,b\\n1,2\\n')")}},
					{items: []string{msgItem("Saved: [out.csv](sandbox:/mnt/data/out.csv) — done.")}},
				}
			},
			gates: []gate{func() gate { g := textGate; g.round = 1; return g }()},
			check: func(t *testing.T, evs []sseEvent) {
				var names []string
				for _, e := range evs {
					if e.Data.Get("output_index").Int() == 2 && strings.HasPrefix(e.Name, "response.output_text.") && e.Name != "response.output_text.delta" {
						names = append(names, e.Name)
					}
					if e.Name == "response.content_part.done" && e.Data.Get("output_index").Int() == 2 &&
						e.Data.Get("part.annotations.0.file_id").Str != "cfile_1" {
						t.Errorf("content_part.done without the citation: %s", e.Data.Raw)
					}
				}
				if strings.Join(names, ",") != "response.output_text.annotation.added,response.output_text.done" {
					t.Errorf("citation events %v", names)
				}
			},
		},
		{
			name:  "max_tool_calls stops the loop",
			extra: `,"max_tool_calls":1`,
			steps: func() []step {
				return []step{
					{items: []string{fcItem("c1", "print(1)")}},
					{items: []string{fcItem("c2", "print('disobeyed')")}},
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := liveRequest("")
			if tc.extra != "" {
				body = []byte(jsonx.EditObject(string(body), editsOf(tc.extra)...))
			}
			ic := newLoopInterceptor(t, p, tc.cfg)
			if tc.files {
				ic.containers = fakeContainers{p}
			}
			steps := tc.steps()
			want := bufferedRun(t, ic, newScriptedUpstream(t, steps...), body)

			w := newRecWriter()
			u := newLiveUpstream(t, newScriptedUpstream(t, steps...), w)
			u.runeCut, u.gates = tc.runeCut, tc.gates
			if err := liveRun(context.Background(), t, ic, u, body); err != nil {
				t.Fatal(err)
			}
			evs := checkLive(t, w.body())
			if got := fixtures.FinalResponse(t, evs); !reflect.DeepEqual(normalized(t, got), normalized(t, string(want))) {
				t.Errorf("live final response differs from the buffered one\n live %s\n buffered %s", got, want)
			}
			u.running.Wait()
			u.mu.Lock()
			firstRoundDone := u.finished[0]
			u.mu.Unlock()
			w.mu.Lock()
			firstEvent := w.events[0].at
			w.mu.Unlock()
			if firstRoundDone.Before(firstEvent) {
				t.Error("the client's first event came after the upstream's first round")
			}
			if w.flushes == 0 {
				t.Error("the writer was never flushed")
			}
			if tc.check != nil {
				tc.check(t, evs)
			}
		})
	}
}

// editsOf turns `,"k":v,...` into edits.
func editsOf(extra string) []jsonx.Edit {
	var out []jsonx.Edit
	gjson.Parse("{" + strings.TrimPrefix(extra, ",") + "}").ForEach(func(k, v gjson.Result) bool {
		out = append(out, jsonx.Set(k.Str, v.Raw))
		return true
	})
	return out
}

// TestLiveFailures: an upstream error answer, error event or dead stream
// after the stream began ends it with an error event and response.failed;
// a non-2xx first answer passes through.
func TestLiveFailures(t *testing.T) {
	p := sandboxtest.New(t)
	ic := newLoopInterceptor(t, p, nil)
	const rateLimited = `{"error":{"message":"Rate limit reached for gpt-5.6","type":"requests","param":null,"code":"rate_limit_exceeded"}}`
	cases := []struct {
		name     string
		steps    []step
		dieAt    map[int]int
		errAt    map[int]int
		code     string
		finished int // items the failed response holds
	}{
		{"follow-up answered 429", []step{{items: []string{fcItem("c1", "print(1)")}}, {status: 429, body: rateLimited}}, nil, nil, "rate_limit_exceeded", 1},
		{"follow-up transport failure", []step{{items: []string{fcItem("c1", "print(1)")}}, {err: errors.New("connection refused")}}, nil, nil, "upstream_unavailable", 1},
		{"dead upstream mid-stream", []step{{items: []string{fcItem("c1", "print(1)")}}, {items: []string{msgItem("the answer is long")}}}, map[int]int{1: 5}, nil, "upstream_unavailable", 1},
		{"upstream error event mid-stream", []step{{items: []string{msgItem("thinking"), fcItem("c1", "print(1)")}}}, nil, map[int]int{0: 9}, "server_error", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newRecWriter()
			u := newLiveUpstream(t, newScriptedUpstream(t, tc.steps...), w)
			u.dieAt, u.errAt = map[int]int{}, map[int]int{}
			for k, v := range tc.dieAt {
				u.dieAt[k] = v
			}
			for k, v := range tc.errAt {
				u.errAt[k] = v
			}
			if err := liveRun(context.Background(), t, ic, u, liveRequest("")); err != nil {
				t.Fatalf("StreamResponse: %v", err)
			}
			evs := parseSSE(t, string(w.body()))
			decodeStream(t, w.body())
			n := len(evs)
			if n < 3 || evs[n-2].Name != "error" || evs[n-1].Name != "response.failed" {
				t.Fatalf("stream does not end with error + response.failed: %s", w.body())
			}
			if got := evs[n-2].Data.Get("code").Str; got != tc.code {
				t.Errorf("error code %q, want %q", got, tc.code)
			}
			failed := evs[n-1].Data.Get("response")
			if failed.Get("status").Str != "failed" || failed.Get("error.code").Str != tc.code || len(failed.Get("output").Array()) != tc.finished {
				t.Errorf("response.failed: %s", failed.Raw)
			}
			for i, e := range evs {
				if e.Data.Get("sequence_number").Int() != int64(i) {
					t.Fatalf("event %d numbered %d", i, e.Data.Get("sequence_number").Int())
				}
			}
			waitReleased(t, p)
		})
	}
	t.Run("first answer not 2xx passes through", func(t *testing.T) {
		x, err := ic.RewriteRequest(liveRequest(""))
		if err != nil || !x.StreamLive() {
			t.Fatal(err)
		}
		const body = `{"error":{"message":"model not found","type":"invalid_request_error","param":"model","code":"model_not_found"}}`
		st, h := x.StreamHead(404, jsonHeader())
		w := newRecWriter()
		if err := x.StreamResponse(context.Background(), nil, 404, jsonHeader(), strings.NewReader(body), w); err != nil {
			t.Fatal(err)
		}
		if st != 404 || h.Get("Content-Type") != "application/json" || string(w.body()) != body {
			t.Fatalf("passed through as %d %v %q", st, h, w.body())
		}
	})
}

// TestLiveCancelled: the client going away mid-run cancels the run (the
// sandbox reports it cancelled) and StreamResponse returns at once with the
// context's error; a client whose writes fail ends it too.
func TestLiveCancelled(t *testing.T) {
	base := sandboxtest.New(t, func(c *pool.Config) { c.Limits.RunTimeout = 60 * time.Second })
	var mu sync.Mutex
	var ran []sandbox.Outcome
	started := make(chan struct{}, 1)
	p := &sandboxtest.Observed{Provider: base,
		Started: func() {
			select {
			case started <- struct{}{}:
			default:
			}
		},
		Ended: func(r sandbox.Result) { mu.Lock(); ran = append(ran, r.Outcome); mu.Unlock() },
	}
	ic := newLoopInterceptor(t, p, nil)
	t.Run("during a run", func(t *testing.T) {
		w := newRecWriter()
		u := newLiveUpstream(t, newScriptedUpstream(t, step{items: []string{fcItem("c1", "while True:\n    pass")}}), w)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			// The run started (the sandbox says so, and the client saw
			// interpreting): the client disconnects.
			<-started
			if w.waitFor(isEvent("response.code_interpreter_call.interpreting"), 10*time.Second) {
				cancel()
			}
		}()
		done := make(chan error, 1)
		go func() { done <- liveRun(ctx, t, ic, u, liveRequest("")) }()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("StreamResponse returned %v, want context.Canceled", err)
			}
		case <-time.After(30 * time.Second): // a hang guard, far below the 60 s run timeout
			t.Fatal("StreamResponse did not return after the client left")
		}
		mu.Lock()
		outcomes := append([]sandbox.Outcome(nil), ran...)
		mu.Unlock()
		if len(outcomes) != 1 || outcomes[0] != sandbox.OutcomeCancelled {
			t.Errorf("run outcomes %v, want [cancelled]", outcomes)
		}
		waitReleased(t, p)
	})
	t.Run("client writes fail", func(t *testing.T) {
		w := newRecWriter()
		w.failAt = 3
		u := newLiveUpstream(t, newScriptedUpstream(t, step{items: []string{msgItem("a long answer that streams in many pieces")}}), w)
		if err := liveRun(context.Background(), t, ic, u, liveRequest("")); err == nil {
			t.Fatal("StreamResponse ignored a failing writer")
		}
	})
}
