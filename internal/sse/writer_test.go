package sse

import (
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/fixtures"
)

// mergeRuns collapses consecutive repeats of an event name, so a stream
// with a different number of deltas still compares equal in lifecycle.
func mergeRuns(evs []sseEvent) []string {
	var out []string
	for _, e := range evs {
		if len(out) > 0 && out[len(out)-1] == e.Name {
			continue
		}
		out = append(out, e.Name)
	}
	return out
}

func keys(v gjson.Result) []string {
	var ks []string
	v.ForEach(func(k, _ gjson.Result) bool {
		ks = append(ks, k.Str)
		return true
	})
	sort.Strings(ks)
	return ks
}

// shape is an event's field set plus the field sets of the objects it
// carries (item, part, response), which is what a client's decoder sees.
func shape(e sseEvent) string {
	s := e.Name + " " + strings.Join(keys(e.Data), ",")
	for _, k := range []string{"item", "part", "response"} {
		if v := e.Data.Get(k); v.IsObject() {
			s += " " + k + "{" + strings.Join(keys(v), ",") + "}"
		}
	}
	return s
}

// TestSSEMatchesOpenAIStreams replays the final response of each OpenAI
// stream through our synthesiser and compares the lifecycle (event order,
// with delta runs merged) and the field sets of every event type: the
// streams in the recorded shapes, and the recordings themselves when
// CODEINTERP_FIXTURES is set.
func TestSSEMatchesOpenAIStreams(t *testing.T) {
	cases := []struct {
		fixture string
		turn    int
	}{
		{fixtures.CIStreaming, 0},    // code_interpreter_call + message
		{fixtures.FunctionTool, 0},   // function_call
		{fixtures.FunctionTool, 1},   // message without phase
		{fixtures.ImageStreaming, 0}, // reasoning + code_interpreter_call with an image + message with citations
	}
	for _, tc := range cases {
		for _, src := range fixtures.Sources(t, tc.fixture) {
			t.Run(tc.fixture+"/"+string(rune('1'+tc.turn))+"/"+src.Name, func(t *testing.T) {
				testSSEMatchesStream(t, parseSSE(t, src.Turns[tc.turn].SSE))
			})
		}
	}
}

// testSSEMatchesStream checks our synthesis of ref's final response
// against ref.
func testSSEMatchesStream(t *testing.T, ref []sseEvent) {
	ours := parseSSE(t, string(EventStream([]byte(fixtures.FinalResponse(t, ref)), true)))

	if got, want := mergeRuns(ours), mergeRuns(ref); !slices.Equal(got, want) {
		t.Fatalf("event lifecycle differs\n got: %v\nwant: %v", got, want)
	}
	refShapes := map[string]bool{}
	for _, e := range ref {
		refShapes[shape(e)] = true
	}
	for _, e := range ours {
		if !refShapes[shape(e)] {
			t.Errorf("event shape not in the OpenAI stream: %s", shape(e))
		}
	}
	fixtures.CheckStreamInvariants(t, ours)
	fixtures.CheckStreamInvariants(t, ref) // the checker itself agrees with OpenAI

	// A code_interpreter_call is added exactly as OpenAI adds it
	// (outputs null, or [] when the request included them).
	added := func(evs []sseEvent) []string {
		var out []string
		for _, e := range evs {
			if e.Name == "response.output_item.added" && e.Data.Get("item.type").Str == "code_interpreter_call" {
				out = append(out, e.Data.Get("item").Raw)
			}
		}
		return out
	}
	if got, want := added(ours), added(ref); !slices.Equal(got, want) {
		t.Errorf("code_interpreter_call added\n got %v\nwant %v", got, want)
	}

	// The deltas rebuild the texts exactly.
	var code, text, args strings.Builder
	for _, e := range ours {
		switch e.Name {
		case "response.code_interpreter_call_code.delta":
			code.WriteString(e.Data.Get("delta").Str)
		case "response.output_text.delta":
			text.WriteString(e.Data.Get("delta").Str)
		case "response.function_call_arguments.delta":
			args.WriteString(e.Data.Get("delta").Str)
		}
	}
	final := gjson.Parse(fixtures.FinalResponse(t, ref))
	var wantCode, wantText, wantArgs string
	for _, it := range final.Get("output").Array() {
		switch it.Get("type").Str {
		case "code_interpreter_call":
			wantCode += it.Get("code").Str
		case "message":
			wantText += it.Get("content.0.text").Str
		case "function_call":
			wantArgs += it.Get("arguments").Str
		}
	}
	if code.String() != wantCode || text.String() != wantText || args.String() != wantArgs {
		t.Fatalf("deltas do not rebuild the items: code %q/%q text %q/%q args %q/%q",
			code.String(), wantCode, text.String(), wantText, args.String(), wantArgs)
	}
	// The terminal event carries the response unchanged.
	if got := fixtures.FinalResponse(t, ours); got != final.Raw {
		t.Fatalf("terminal response changed:\n got %s\nwant %s", got, final.Raw)
	}
	// The opening events show the response in progress, empty.
	created := ours[0].Data.Get("response")
	if created.Get("status").Str != "in_progress" || created.Get("output").Raw != "[]" || created.Get("usage").Type != gjson.Null {
		t.Fatalf("response.created: %s", created.Raw)
	}
}

// decodeStream reads a stream with openai-go's own SSE decoder and event
// union, as a client would.
func decodeStream(t *testing.T, body []byte) []responses.ResponseStreamEventUnion {
	t.Helper()
	res := &http.Response{Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: io.NopCloser(strings.NewReader(string(body)))}
	stream := ssestream.NewStream[responses.ResponseStreamEventUnion](ssestream.NewDecoder(res), nil)
	var out []responses.ResponseStreamEventUnion
	for stream.Next() {
		out = append(out, stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("openai-go stream decoder: %v", err)
	}
	return out
}

// TestSSEDecodesWithOpenAIGo decodes a synthesised stream of every item kind
// with openai-go and checks the typed values.
func TestSSEDecodesWithOpenAIGo(t *testing.T) {
	final := `{"id":"resp_1","object":"response","created_at":1,"status":"completed","model":"m","output":[` +
		`{"id":"rs_1","type":"reasoning","summary":[{"type":"summary_text","text":"Thinking about squares."}],"content":[{"type":"reasoning_text","text":"1+4+9"}]},` +
		`{"id":"ci_1","type":"code_interpreter_call","status":"failed","code":"1/0\n","container_id":"cntr_1","outputs":[{"type":"logs","logs":"ZeroDivisionError"}]},` +
		`{"id":"fc_1","type":"function_call","status":"completed","arguments":"{\"a\":1}","call_id":"call_1","name":"lookup"},` +
		`{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","annotations":[{"type":"url_citation","url":"https://x","title":"x","start_index":0,"end_index":1}],"logprobs":[],"text":"Déjà vu — 385 ✓"},{"type":"refusal","refusal":"no"}]},` +
		`{"id":"ws_1","type":"web_search_call","status":"completed","action":{"type":"search","query":"q"}},` +
		`{"id":"x_1","type":"future_item_kind","payload":{"n":1}}` +
		`],"usage":{"input_tokens":3,"output_tokens":4,"total_tokens":7,"input_tokens_details":{"cached_tokens":0},"output_tokens_details":{"reasoning_tokens":1}}}`
	body := EventStream([]byte(final), true)
	evs := parseSSE(t, string(body))
	fixtures.CheckStreamInvariants(t, evs)

	events := decodeStream(t, body)
	if len(events) != len(evs) {
		t.Fatalf("openai-go decoded %d events, the stream has %d", len(events), len(evs))
	}
	var summary, reasoning, code, args, text, refusal strings.Builder
	var annotations int
	for i, ev := range events {
		if ev.SequenceNumber != int64(i) {
			t.Fatalf("event %d: sequence %d", i, ev.SequenceNumber)
		}
		switch v := ev.AsAny().(type) {
		case responses.ResponseReasoningSummaryTextDeltaEvent:
			summary.WriteString(v.Delta)
		case responses.ResponseReasoningTextDeltaEvent:
			reasoning.WriteString(v.Delta)
		case responses.ResponseCodeInterpreterCallCodeDeltaEvent:
			code.WriteString(v.Delta)
		case responses.ResponseCodeInterpreterCallCodeDoneEvent:
			if v.Code != "1/0\n" || v.ItemID != "ci_1" || v.OutputIndex != 1 {
				t.Errorf("code done: %+v", v)
			}
		case responses.ResponseFunctionCallArgumentsDeltaEvent:
			args.WriteString(v.Delta)
		case responses.ResponseFunctionCallArgumentsDoneEvent:
			if v.Arguments != `{"a":1}` || v.ItemID != "fc_1" {
				t.Errorf("arguments done: %+v", v)
			}
		case responses.ResponseTextDeltaEvent:
			text.WriteString(v.Delta)
		case responses.ResponseOutputTextAnnotationAddedEvent:
			annotations++
		case responses.ResponseRefusalDeltaEvent:
			refusal.WriteString(v.Delta)
		case responses.ResponseOutputItemAddedEvent:
			if v.Item.Type == "code_interpreter_call" {
				ci := v.Item.AsCodeInterpreterCall()
				if ci.Status != "in_progress" || ci.Code != "" || ci.ContainerID != "cntr_1" {
					t.Errorf("code_interpreter_call added: %+v", ci)
				}
			}
		case responses.ResponseCompletedEvent:
			out := v.Response.Output
			if len(out) != 6 {
				t.Fatalf("completed response has %d items", len(out))
			}
			ci := out[1].AsCodeInterpreterCall()
			if ci.Status != responses.ResponseCodeInterpreterToolCallStatusFailed || len(ci.Outputs) != 1 || ci.Outputs[0].Logs != "ZeroDivisionError" {
				t.Errorf("completed code_interpreter_call: %+v", ci)
			}
			if out[5].Type != "future_item_kind" || !strings.Contains(out[5].RawJSON(), `"payload":{"n":1}`) {
				t.Errorf("unknown item lost: %s", out[5].RawJSON())
			}
			if v.Response.Usage.OutputTokensDetails.ReasoningTokens != 1 {
				t.Errorf("usage: %+v", v.Response.Usage)
			}
		}
	}
	checks := []struct{ name, got, want string }{
		{"summary", summary.String(), "Thinking about squares."},
		{"reasoning", reasoning.String(), "1+4+9"},
		{"code", code.String(), "1/0\n"},
		{"arguments", args.String(), `{"a":1}`},
		{"text", text.String(), "Déjà vu — 385 ✓"},
		{"refusal", refusal.String(), "no"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s rebuilt from deltas = %q, want %q", c.name, c.got, c.want)
		}
	}
	if annotations != 1 {
		t.Errorf("annotation events: %d, want 1", annotations)
	}
	if last := evs[len(evs)-1].Name; last != "response.completed" {
		t.Fatalf("terminal event %s", last)
	}
}

func TestSSETerminalEventFollowsStatus(t *testing.T) {
	for status, want := range map[string]string{
		"completed":  "response.completed",
		"incomplete": "response.incomplete",
		"failed":     "response.failed",
	} {
		body := EventStream([]byte(`{"id":"r","object":"response","status":"`+status+`","output":[]}`), false)
		evs := parseSSE(t, string(body))
		if got := evs[len(evs)-1].Name; got != want {
			t.Errorf("status %s: terminal event %s, want %s", status, got, want)
		}
		decodeStream(t, body)
	}
}

func TestSSEObfuscationCanBeTurnedOff(t *testing.T) {
	final := []byte(`{"id":"r","object":"response","status":"completed","output":[{"id":"m","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","annotations":[],"text":"hello there"}]}]}`)
	for _, on := range []bool{true, false} {
		n := 0
		for _, e := range parseSSE(t, string(EventStream(final, on))) {
			if e.Name == "response.output_text.delta" {
				n++
				ob := e.Data.Get("obfuscation")
				if ob.Exists() != on {
					t.Fatalf("obfuscate=%v: delta %s", on, e.Data.Raw)
				}
				if on && (len(e.Data.Get("delta").Str)+len(ob.Str))%16 != 0 {
					t.Fatalf("obfuscation does not pad to 16: %s", e.Data.Raw)
				}
			}
		}
		if n < 2 {
			t.Fatalf("expected the text split into several deltas, got %d", n)
		}
	}
}

func TestErrorEventDecodes(t *testing.T) {
	body := ErrorEvent("rate_limit_exceeded", "Slow down", "")
	evs := parseSSE(t, string(body))
	if len(evs) != 1 || evs[0].Name != "error" || evs[0].Data.Get("param").Type != gjson.Null {
		t.Fatalf("error stream: %s", body)
	}
	events := decodeStream(t, body)
	e := events[0].AsError()
	if len(events) != 1 || e.Code != "rate_limit_exceeded" || e.Message != "Slow down" || e.SequenceNumber != 0 {
		t.Fatalf("decoded error event: %+v", e)
	}
}

func TestChunksRebuildText(t *testing.T) {
	for _, s := range []string{"", "a", "hello world, this is a test.\n\nNext line", strings.Repeat("x", 100), "日本語のテキストです。", "  leading", "trailing  ", "\xff\xfe bad utf8"} {
		parts := Chunks(s)
		if strings.Join(parts, "") != s {
			t.Errorf("chunks(%q) = %q", s, parts)
		}
		for _, p := range parts {
			if p == "" || len(p) > 16 {
				t.Errorf("chunks(%q): bad chunk %q", s, p)
			}
		}
	}
}
