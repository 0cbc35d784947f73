package e2e

import (
	"testing"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/fixtures"
)

// The recorded OpenAI traffic: package internal/fixtures reads it.
const (
	fixtureCINonStreaming = fixtures.CINonStreaming
	fixtureCIStreaming    = fixtures.CIStreaming
	fixtureFunctionTool   = fixtures.FunctionTool
)

// cassetteTurn is one recorded HTTP exchange.
type cassetteTurn = fixtures.Turn

func loadCassette(t testing.TB, name string) []cassetteTurn { return fixtures.Load(t, name) }

// shapes are the JSON shapes the scripted model replays, all taken from
// real OpenAI traffic.
type shapes struct {
	// envelope is a complete non-streamed Response object (the
	// response.completed payload of a function-tool turn).
	envelope string
	// functionCall is a real function_call output item.
	functionCall string
	// message is a real assistant message output item.
	message string
	// ciItem is OpenAI's own code_interpreter_call item: the shape our
	// output must match.
	ciItem gjson.Result
	// prompt and code are the reference conversation's prompt and the code
	// OpenAI's model ran for it.
	prompt, code string
	// ciEventTypes is the reference streamed event-type sequence with
	// consecutive repeats merged.
	ciEventTypes []string
	// passThrough is a real function-tool exchange (request body and SSE
	// answer) for the pass-through cases.
	passThrough cassetteTurn
}

func loadShapes(t testing.TB) shapes {
	t.Helper()
	ft := loadCassette(t, fixtureFunctionTool)
	completed := func(ct cassetteTurn) gjson.Result {
		for _, ev := range ct.Events {
			if ev.Get("type").Str == "response.completed" {
				return ev.Get("response")
			}
		}
		t.Fatalf("fixture %s: no response.completed event", fixtureFunctionTool)
		return gjson.Result{}
	}
	t1, t2 := completed(ft[0]), completed(ft[1])
	ci := loadCassette(t, fixtureCINonStreaming)[0]
	cis := loadCassette(t, fixtureCIStreaming)[0]
	var types []string
	for _, ev := range cis.Events {
		ty := ev.Get("type").Str
		if len(types) == 0 || types[len(types)-1] != ty {
			types = append(types, ty)
		}
	}
	s := shapes{
		envelope:     t1.Raw,
		functionCall: t1.Get("output.0").Raw,
		message:      t2.Get("output.0").Raw,
		ciItem:       gjson.Get(ci.Response, "output.0"),
		prompt:       gjson.Get(ci.Request, "input").Str,
		code:         gjson.Get(ci.Response, "output.0.code").Str,
		ciEventTypes: types,
		passThrough:  ft[0],
	}
	for name, v := range map[string]string{"envelope": s.envelope, "function_call": s.functionCall, "message": s.message, "prompt": s.prompt, "code": s.code} {
		if v == "" {
			t.Fatalf("fixture shape %s is empty: the fixtures changed", name)
		}
	}
	if gjson.Get(s.functionCall, "type").Str != "function_call" || gjson.Get(s.message, "type").Str != "message" || s.ciItem.Get("type").Str != "code_interpreter_call" {
		t.Fatal("fixture items are not the expected types: the fixtures changed")
	}
	return s
}
