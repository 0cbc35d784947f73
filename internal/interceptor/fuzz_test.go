package interceptor

import (
	"errors"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/fixtures"
)

// Seeds: the requests and responses in OpenAI's shapes (the project's,
// and the recordings' when CODEINTERP_FIXTURES is set), plus the corpus
// committed in testdata/fuzz. Run longer with:
// go test -run '^$' -fuzz FuzzRewriteRequest ./interceptor/

// seedTurns is every turn of the recordings fx, in each source.
func seedTurns(f *testing.F, fx ...string) []fixtures.Turn {
	var out []fixtures.Turn
	for _, name := range fx {
		for _, src := range fixtures.Sources(f, name) {
			out = append(out, src.Turns...)
		}
	}
	return out
}

func FuzzRewriteRequest(f *testing.F) {
	for _, tu := range seedTurns(f, fixtureNonStreaming, fixtureStreaming, fixtureFunctionTool) {
		f.Add([]byte(tu.Request))
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
