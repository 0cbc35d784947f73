package interceptor

import (
	"errors"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/pretty"

	"github.com/codeinterp/codeinterp/apierror"
)

// Seeds: the recorded requests and responses, plus the corpus committed in
// testdata/fuzz. Run longer with: go test -run '^$' -fuzz FuzzRewriteRequest ./interceptor/

func FuzzRewriteRequest(f *testing.F) {
	for _, fx := range []string{fixtureNonStreaming, fixtureStreaming, fixtureFunctionTool} {
		for _, tu := range loadCassette(f, fx) {
			f.Add([]byte(tu.Request))
		}
	}
	f.Add([]byte(`{"tools":[{"type":"code_interpreter","container":{"type":"auto","memory_limit":"1g"}}],"tool_choice":{"type":"allowed_tools","mode":"auto","tools":[{"type":"code_interpreter"}]},"stream":true,"include":["code_interpreter_call.outputs"],"input":[{"id":"ci_1","type":"code_interpreter_call","code":"x","outputs":[{"type":"logs","logs":"1"}]}]}`))
	f.Add([]byte(`{"input":[{"type":"code_interpreter_call","id":"ci_2","outputs":null}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		ic := newRewriter(t, func(c *Config) { c.MaxBodyBytes = 1 << 20 })
		x, err := ic.RewriteRequest(body)
		if err != nil {
			var ae *apierror.Error
			if !errors.As(err, &ae) {
				t.Fatalf("error %T is not an *apierror.Error: %v", err, err)
			}
			if ae.Status != 400 && ae.Status != 413 || ae.Message == "" {
				t.Fatalf("rejection %+v", ae)
			}
			if !gjson.ValidBytes(ae.Body()) || gjson.GetBytes(ae.Body(), "error.type").Str != ae.Type {
				t.Fatalf("error body %s", ae.Body())
			}
			return
		}
		up := x.UpstreamBody()
		if !x.Modified() {
			if string(up) != string(body) || x.Intercepted() {
				t.Fatalf("pass-through changed the body or intercepted")
			}
			return
		}
		if !gjson.ValidBytes(up) {
			t.Fatalf("rewritten body is not JSON: %s", up)
		}
		// The rewrite is complete: a second pass finds nothing to do.
		again, err := ic.RewriteRequest(up)
		if err != nil || again.Intercepted() {
			t.Fatalf("second pass over the rewritten body: intercepted=%v err=%v\n%s", again != nil && again.Intercepted(), err, up)
		}
		if !x.Intercepted() {
			return
		}
		root := gjson.ParseBytes(up)
		if root.Get("stream").Type == gjson.True {
			t.Fatalf("upstream asked to stream: %s", up)
		}
		fns := 0
		root.Get("tools").ForEach(func(_, tool gjson.Result) bool {
			if tool.Get("type").Str == "function" && tool.Get("name").Str == ic.cfg.FunctionName {
				fns++
			}
			return true
		})
		if fns != 1 {
			t.Fatalf("%d function tools named %s: %s", fns, ic.cfg.FunctionName, up)
		}
		if strings.Contains(root.Get("include").Raw, includeOutputs) {
			t.Fatalf("include still asks for outputs: %s", up)
		}
	})
}

func FuzzSynthesizeSSE(f *testing.F) {
	tu := loadCassette(f, fixtureNonStreaming)[0]
	f.Add([]byte(tu.Response))
	for _, fx := range []string{fixtureStreaming, fixtureFunctionTool} {
		for _, tu := range loadCassette(f, fx) {
			evs := strings.Split(tu.SSE, "\n\n")
			last := evs[len(evs)-2]
			f.Add([]byte(gjson.Get(last[strings.Index(last, "data: ")+6:], "response").Raw))
		}
	}
	f.Add([]byte("{\n  \"id\": \"r\",\n  \"status\": \"failed\",\n  \"output\": [\n    {\"type\": \"message\", \"content\": [{\"type\": \"output_text\", \"text\": \"a\\nb\"}, 7]},\n    \"x\", 3, null\n  ]\n}"))
	f.Add([]byte(`{"id":"r","output":[{"type":"reasoning","summary":[{"type":"summary_text","text":"\u2028"}],"content":[{"type":"reasoning_text","text":"\ud83d\ude00"}]},{"type":"custom_tool_call","input":"x"}]}`))
	f.Fuzz(func(t *testing.T, final []byte) {
		if !gjson.ValidBytes(final) || !gjson.ParseBytes(final).IsObject() {
			return // the splice only ever hands over a response object
		}
		for _, obfuscate := range []bool{true, false} {
			out := synthesizeSSE(final, obfuscate)
			evs := parseSSE(t, string(out))
			if len(evs) < 3 || evs[0].Name != "response.created" || evs[1].Name != "response.in_progress" {
				t.Fatalf("stream opening: %s", out)
			}
			for i, e := range evs {
				if e.Data.Get("sequence_number").Int() != int64(i) {
					t.Fatalf("event %d: %s", i, e.Data.Raw)
				}
			}
			if got, want := evs[len(evs)-1].Data.Get("response").Raw, string(pretty.Ugly(final)); got != want {
				t.Fatalf("terminal response differs:\n got %s\nwant %s", got, want)
			}
		}
	})
}

// FuzzTopFields: the fast top-level walk agrees with gjson on every valid
// JSON object.
func FuzzTopFields(f *testing.F) {
	f.Add(`{"a":"x\\\"y","b":[1,{"c":"]}"}],"d":-1.5e3,"e":true,"f":null,"g":{"h":"\\\\"}}`)
	f.Add(` { "k" : "v" , "k" : [ ] } `)
	f.Add(`{"s":"\u00e9\ud83d\ude00","n":0}`)
	f.Add(string(requestOfSize(2<<10, true)))
	f.Fuzz(func(t *testing.T, raw string) {
		if !gjson.Valid(raw) || !gjson.Parse(raw).IsObject() {
			topFields(raw) // must not panic on anything
			return
		}
		fast, slow := topFields(raw), fields(raw)
		if len(fast) != len(slow) {
			t.Fatalf("%d fields, gjson finds %d", len(fast), len(slow))
		}
		for i := range fast {
			a, b := fast[i], slow[i]
			if a.key != b.key || a.start != b.start || a.end != b.end || a.value.Raw != b.value.Raw ||
				a.value.Type != b.value.Type || a.value.Str != b.value.Str || a.value.Index != b.value.Index {
				t.Fatalf("field %d: fast %+v, gjson %+v", i, a, b)
			}
		}
	})
}
