package e2e

import (
	"testing"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/fixtures"
)

// The OpenAI traffic the scripted model and the checks are taken from:
// package internal/fixtures builds the project's turns from the
// recordings' shapes (testdata/openai) and reads the recordings
// themselves when CODEINTERP_FIXTURES is set.
const (
	fixtureCINonStreaming = fixtures.CINonStreaming
	fixtureCIStreaming    = fixtures.CIStreaming
	fixtureFunctionTool   = fixtures.FunctionTool
)

// cassetteTurn is one HTTP exchange in OpenAI's shape.
type cassetteTurn = fixtures.Turn

// shapes are the JSON the scripted model replays, the project's own in
// the shapes of real OpenAI traffic, and the references our output is
// checked against.
type shapes struct {
	// envelope is a complete non-streamed Response object (the
	// response.completed payload of a function-tool turn).
	envelope string
	// functionCall is a function_call output item.
	functionCall string
	// message is an assistant message output item.
	message string
	// prompt and code are the reference conversation's prompt and the code
	// the model runs for it.
	prompt, code string
	// passThrough is a function-tool exchange (request body and SSE
	// answer) for the pass-through benchmark.
	passThrough cassetteTurn
	// refs are what our output must match: OpenAI's code_interpreter_call
	// item and streamed event types in the recorded shapes, and in the
	// recordings themselves when CODEINTERP_FIXTURES is set.
	refs []reference
}

// reference is one source's code-interpreter conversation, as OpenAI
// answers it.
type reference struct {
	source string
	// ciItem is OpenAI's own code_interpreter_call item: the shape our
	// output must match.
	ciItem gjson.Result
	// ciEventTypes is the streamed event-type sequence with consecutive
	// repeats merged.
	ciEventTypes []string
}

// completedResponse is the response a stream's response.completed event
// carries.
func completedResponse(t testing.TB, name string, ct cassetteTurn) gjson.Result {
	t.Helper()
	for _, ev := range ct.Events {
		if ev.Get("type").Str == "response.completed" {
			return ev.Get("response")
		}
	}
	t.Fatalf("fixture %s: no response.completed event", name)
	return gjson.Result{}
}

func loadShapes(t testing.TB) shapes {
	t.Helper()
	ft := fixtures.Built(t, fixtureFunctionTool)
	t1, t2 := completedResponse(t, fixtureFunctionTool, ft[0]), completedResponse(t, fixtureFunctionTool, ft[1])
	ci := fixtures.Built(t, fixtureCINonStreaming)[0]
	s := shapes{
		envelope:     t1.Raw,
		functionCall: t1.Get("output.0").Raw,
		message:      t2.Get("output.0").Raw,
		prompt:       gjson.Get(ci.Request, "input").Str,
		code:         gjson.Get(ci.Response, "output.0.code").Str,
		passThrough:  ft[0],
	}
	for name, v := range map[string]string{"envelope": s.envelope, "function_call": s.functionCall, "message": s.message, "prompt": s.prompt, "code": s.code} {
		if v == "" {
			t.Fatalf("fixture shape %s is empty: the fixtures changed", name)
		}
	}
	if gjson.Get(s.functionCall, "type").Str != "function_call" || gjson.Get(s.message, "type").Str != "message" {
		t.Fatal("fixture items are not the expected types: the fixtures changed")
	}
	streams := fixtures.Sources(t, fixtureCIStreaming)
	for i, src := range fixtures.Sources(t, fixtureCINonStreaming) {
		var types []string
		for _, ev := range streams[i].Turns[0].Events {
			ty := ev.Get("type").Str
			if len(types) == 0 || types[len(types)-1] != ty {
				types = append(types, ty)
			}
		}
		r := reference{source: src.Name, ciItem: gjson.Get(src.Turns[0].Response, "output.0"), ciEventTypes: types}
		if r.ciItem.Get("type").Str != "code_interpreter_call" || len(types) == 0 {
			t.Fatalf("%s: no code_interpreter_call item or no events: the fixtures changed", src.Name)
		}
		s.refs = append(s.refs, r)
	}
	return s
}
