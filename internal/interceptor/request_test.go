package interceptor

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/fixtures"
	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/memory"
)

// untouchedProvider is a sandbox.Provider for tests that must never reach the
// sandbox (request rewriting, pass-through): any use fails the test.
type untouchedProvider struct{ t testing.TB }

func (p untouchedProvider) Open(context.Context, sandbox.SessionOptions) (sandbox.Session, error) {
	p.t.Errorf("the sandbox was opened by code that must not run anything")
	return nil, sandbox.ErrClosed
}
func (p untouchedProvider) Ready(context.Context) error { return nil }
func (p untouchedProvider) Capacity() sandbox.Capacity  { return sandbox.Capacity{} }
func (p untouchedProvider) Close() error                { return nil }
func (p untouchedProvider) Environment() sandbox.Environment {
	return sandbox.Environment{Provider: "wasm", PythonVersion: "3.13"}
}

func newRewriter(t testing.TB, mod func(*Config)) *Interceptor {
	t.Helper()
	cfg := DefaultConfig()
	if mod != nil {
		mod(&cfg)
	}
	ic, err := New(cfg, untouchedProvider{t}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ic
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	bad := []struct {
		field string
		mod   func(*Config)
	}{
		{"function_name", func(c *Config) { c.FunctionName = "has space" }},
		{"max_rounds", func(c *Config) { c.MaxRounds = -1 }},
		{"max_parallel_calls", func(c *Config) { c.MaxParallelCalls = -2 }},
		{"max_tool_calls", func(c *Config) { c.MaxToolCalls = -1 }},
		{"max_memory_limit", func(c *Config) { c.MaxMemoryBytes = -1 }},
		{"follow_up", func(c *Config) { c.FollowUp = "sometimes" }},
		{"max_body_bytes", func(c *Config) { c.MaxBodyBytes = -1 }},
	}
	for _, b := range bad {
		c := DefaultConfig()
		b.mod(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), b.field) {
			t.Errorf("%s: Validate() = %v, want an error naming it", b.field, err)
		}
		if _, err := New(c, untouchedProvider{t}, nil); err == nil {
			t.Errorf("%s: New accepted an invalid config", b.field)
		}
	}
	if _, err := New(DefaultConfig(), nil, nil); err == nil {
		t.Error("New accepted a nil provider")
	}
	if got := (Config{}).WithDefaults(); got != DefaultConfig() {
		t.Errorf("zero config with defaults = %+v", got)
	}
}

// TestPassThrough: requests without our tool (or replayed calls) are left
// alone, byte for byte.
func TestPassThrough(t *testing.T) {
	ic := newRewriter(t, nil)
	cases := map[string]string{
		"no tools":                `{"model":"m","input":"hi"}`,
		"function tool only":      `{"model":"m","tools":[{"type":"function","name":"f","parameters":{}}],"stream":true}`,
		"mentioned in text only":  `{"model":"m","input":"do you have a code_interpreter tool?","tools":[{"type":"web_search"}]}`,
		"invalid JSON, no tool":   `{"model":"m","input":"code_interpreter"`,
		"not an object":           `["code_interpreter"]`,
		"code_interpreter string": `{"model":"m","input":[{"role":"user","content":"code_interpreter_call"}]}`,
		"empty":                   ``,
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			x, err := ic.RewriteRequest([]byte(body))
			if err != nil {
				t.Fatalf("pass-through request refused: %v", err)
			}
			if x.Intercepted() || x.Modified() || x.ClientStream() {
				t.Fatalf("intercepted=%v modified=%v stream=%v", x.Intercepted(), x.Modified(), x.ClientStream())
			}
			if string(x.UpstreamBody()) != body {
				t.Fatalf("body changed: %s", x.UpstreamBody())
			}
		})
	}
}

// TestToolMarkers is the pass-through detection's contract: every
// spelling of the tool or of a replayed call — plain, or with any of its
// letters written as a JSON escape, after text dense with backslashes or
// zeros (which move the escape search off its fast path) — is found;
// bodies that only mention the tool, or hold other escapes, are not
// parsed.
func TestToolMarkers(t *testing.T) {
	zeros := strings.Repeat(`{"n":[0,100,2000,0.05]},`, 400)      // past the anchored search's budget
	slashes := strings.Repeat(`"a \"quoted\" \\path\\ \n",`, 400) // a backslash every few bytes
	found := map[string]string{
		"tool":                 `{"tools":[{"type":"code_interpreter"}]}`,
		"tool with spaces":     `{"tools":[{ "type" : "code_interpreter" }]}`,
		"replayed call":        `{"input":[{"type":"code_interpreter_call"}]}`,
		"escaped underscore":   `{"tools":[{"type":"code\u005finterpreter"}]}`,
		"escaped upper hex":    `{"tools":[{"type":"code\u005Finterpreter"}]}`,
		"escaped first letter": `{"tools":[{"type":"\u0063ode_interpreter"}]}`,
		"escaped last letter":  `{"tools":[{"type":"code_interprete\u0072"}]}`,
		"escaped call suffix":  `{"input":[{"type":"code_interpreter\u005fcall"}]}`,
		"escape after zeros":   `{"x":[` + zeros + `0],"tools":[{"type":"code_int\u0065rpreter"}]}`,
		"escape after slashes": `{"x":[` + slashes + `""],"tools":[{"type":"code_int\u0065rpreter"}]}`,
		"escape at the end":    zeros + `\u0074`,
		"escape at the start":  `\u0074` + zeros,
	}
	for name, body := range found {
		if !escapesToolLetter([]byte(body)) && !namesTool([]byte(body)) {
			t.Errorf("%s: not found, so a request with the tool would pass through", name)
		}
	}
	passed := map[string]string{
		"mention":            `{"instructions":"You have no code_interpreter tool.","input":"hi"}`,
		"escaped mention":    `{"input":"the \"code_interpreter\" tool"}`,
		"latin-1 escapes":    `{"input":"caf\u00e9 na\u00efve \u00c0"}`,
		"html-safe escapes":  `{"input":"\u003cb\u003e \u0026 \u0022"}`,
		"digit, capital":     `{"input":"\u0030\u0041"}`,
		"zeros and slashes":  `{"x":[` + zeros + slashes + `0]}`,
		"truncated escape":   `{"input":"\u00`,
		"digit run at start": `00000`,
	}
	for name, body := range passed {
		if escapesToolLetter([]byte(body)) || namesTool([]byte(body)) {
			t.Errorf("%s: flagged, so a request without the tool is parsed", name)
		}
	}
}

// TestPassesThrough: PassesThrough, which lets the filter skip identifying
// the caller, never says so of a request NewExchange would touch — with
// and without kept responses and conversations — and does say so of the
// common requests that are not ours.
func TestPassesThrough(t *testing.T) {
	ctx := context.Background()
	stored, err := New(DefaultConfig(), untouchedProvider{t}, nil,
		WithResponses(memory.NewResponses(store.DefaultResponseLimits(), nil)),
		WithConversations(memory.NewConversations(store.DefaultConversationLimits(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	ci := `{"type":"code_interpreter","container":{"type":"auto"}}`
	bodies := map[string]struct {
		body        string
		passes      bool // PassesThrough must say so (with or without stores)
		historyOnly bool // ours only when responses or conversations are kept
	}{
		"plain":             {`{"model":"m","input":"hi"}`, true, false},
		"function tool":     {`{"model":"m","tools":[{"type":"function","name":"f","parameters":{}}]}`, true, false},
		"mention":           {`{"model":"m","instructions":"You have no code_interpreter tool.","input":"hi"}`, true, false},
		"latin-1 escapes":   {`{"model":"m","input":"caf\u00e9"}`, true, false},
		"tool":              {`{"model":"m","tools":[` + ci + `]}`, false, false},
		"escaped tool":      {`{"model":"m","tools":[{"type":"code\u005finterpreter","container":{"type":"auto"}}]}`, false, false},
		"replayed call":     {`{"model":"m","input":[{"type":"code_interpreter_call","id":"ci_1","code":"print(1)","container_id":"cntr_1","status":"completed","outputs":[{"type":"logs","logs":"1"}]}]}`, false, false},
		"previous response": {`{"model":"m","previous_response_id":"resp_x","input":"hi"}`, false, true},
		"item reference":    {`{"model":"m","input":[{"type":"item_reference","id":"ci_x"}]}`, false, true},
		"conversation":      {`{"model":"m","conversation":"conv_x","input":"hi"}`, false, true},
	}
	for name, tc := range bodies {
		for _, ic := range []*Interceptor{newRewriter(t, nil), stored} {
			kept := ic == stored
			passes := ic.PassesThrough([]byte(tc.body))
			if want := tc.passes || (tc.historyOnly && !kept); passes != want {
				t.Errorf("%s (stores %v): PassesThrough %v, want %v", name, kept, passes, want)
			}
			if !passes {
				continue
			}
			x, err := ic.NewExchange(ctx, Caller{Owner: "alice"}, []byte(tc.body))
			if err != nil || x.Intercepted() || x.Modified() {
				t.Errorf("%s (stores %v): PassesThrough but NewExchange intercepted=%v modified=%v err=%v", name, kept, x != nil && x.Intercepted(), x != nil && x.Modified(), err)
			}
		}
	}
}

// TestRewriteFixtureRequests rewrites OpenAI's code-interpreter requests:
// ours in the recorded shape, and the recorded ones when they are there.
func TestRewriteFixtureRequests(t *testing.T) {
	ic := newRewriter(t, nil)
	for _, fx := range []string{fixtureNonStreaming, fixtureStreaming} {
		for _, src := range fixtures.Sources(t, fx) {
			t.Run(fx+"/"+src.Name, func(t *testing.T) {
				body := src.Turns[0].Request
				x, err := ic.RewriteRequest([]byte(body))
				if err != nil {
					t.Fatal(err)
				}
				if !x.Intercepted() || !x.Modified() {
					t.Fatal("fixture request not intercepted")
				}
				wantStream := gjson.Get(body, "stream").Bool()
				if x.ClientStream() != wantStream {
					t.Fatalf("ClientStream = %v, fixture stream = %v", x.ClientStream(), wantStream)
				}
				up := gjson.ParseBytes(x.UpstreamBody())
				checkFunctionTool(t, up.Get("tools.0"), "code_interpreter")
				if up.Get("tools.#").Int() != 1 {
					t.Fatalf("tools: %s", up.Get("tools").Raw)
				}
				if up.Get("stream").Type != gjson.False {
					t.Fatalf("upstream stream = %s", up.Get("stream").Raw)
				}
				// Everything else is unchanged, byte for byte.
				orig := gjson.Parse(body)
				orig.ForEach(func(k, v gjson.Result) bool {
					if k.Str == "tools" || k.Str == "stream" {
						return true
					}
					if got := up.Get(k.Str).Raw; got != v.Raw {
						t.Errorf("%s changed: %s → %s", k.Str, v.Raw, got)
					}
					return true
				})
				if up.Get("tool_choice").Str != "required" {
					t.Errorf("tool_choice required should stay: %s", up.Get("tool_choice").Raw)
				}
			})
		}
	}
}

// checkFunctionTool asserts the strict function tool the model gets.
func checkFunctionTool(t *testing.T, tool gjson.Result, name string) {
	t.Helper()
	var ft struct {
		Type        string `json:"type"`
		Name        string `json:"name"`
		Description string `json:"description"`
		Strict      bool   `json:"strict"`
		Parameters  struct {
			Type       string                       `json:"type"`
			Properties map[string]map[string]string `json:"properties"`
			Required   []string                     `json:"required"`
			Additional *bool                        `json:"additionalProperties"`
		} `json:"parameters"`
	}
	if err := json.Unmarshal([]byte(tool.Raw), &ft); err != nil {
		t.Fatalf("function tool %s: %v", tool.Raw, err)
	}
	p := ft.Parameters
	if ft.Type != "function" || ft.Name != name || !ft.Strict || p.Type != "object" ||
		len(p.Properties) != 1 || p.Properties["code"]["type"] != "string" ||
		len(p.Required) != 1 || p.Required[0] != "code" || p.Additional == nil || *p.Additional {
		t.Fatalf("function tool: %s", tool.Raw)
	}
	for _, must := range []string{"Python 3.13", "standard library", "network", "persist", "/mnt/data", "rint"} {
		if !strings.Contains(ft.Description, must) {
			t.Errorf("tool description lacks %q: %s", must, ft.Description)
		}
	}
}

// TestRewrite covers each rewrite with a check on the upstream body.
func TestRewrite(t *testing.T) {
	const ci = `{"type":"code_interpreter","container":{"type":"auto"}}`
	fnChoice := `{"type":"function","name":"code_interpreter"}`
	cases := []struct {
		name  string
		cfg   func(*Config)
		body  string
		check func(t *testing.T, x *Exchange, up gjson.Result)
	}{
		{
			name: "tool among others keeps position and neighbours",
			body: `{"model":"m","tools":[{"type":"function","name":"f","parameters":{"type":"object"},"x_future":[1,2]},` + ci + `,{"type":"web_search","filters":null}]}`,
			check: func(t *testing.T, x *Exchange, up gjson.Result) {
				if up.Get("tools.0").Raw != `{"type":"function","name":"f","parameters":{"type":"object"},"x_future":[1,2]}` ||
					up.Get("tools.2").Raw != `{"type":"web_search","filters":null}` {
					t.Fatalf("neighbours changed: %s", up.Get("tools").Raw)
				}
				checkFunctionTool(t, up.Get("tools.1"), "code_interpreter")
			},
		},
		{
			name: "type names written with JSON escapes are still ours",
			body: `{"model":"m","tools":[{"type":"code\u005finterpreter","container":{"type":"auto"}}],` +
				`"input":[{"type":"code_interpreter\u005fcall","id":"ci_1","code":"print(1)","container_id":"cntr_1","status":"completed","outputs":null}]}`,
			check: func(t *testing.T, x *Exchange, up gjson.Result) {
				if !x.Intercepted() {
					t.Fatal("escaped tool type not intercepted")
				}
				checkFunctionTool(t, up.Get("tools.0"), "code_interpreter")
				if typ := up.Get("input.0.type").Str; typ != "function_call" {
					t.Fatalf("escaped replayed item not rewritten: %s", up.Get("input").Raw)
				}
			},
		},
		{
			name: "configured function name",
			cfg:  func(c *Config) { c.FunctionName = "python" },
			body: `{"model":"m","tools":[` + ci + `],"tool_choice":{"type":"code_interpreter"}}`,
			check: func(t *testing.T, x *Exchange, up gjson.Result) {
				checkFunctionTool(t, up.Get("tools.0"), "python")
				if up.Get("tool_choice").Raw != `{"type":"function","name":"python"}` {
					t.Fatalf("tool_choice: %s", up.Get("tool_choice").Raw)
				}
			},
		},
		{
			name: "tool_choice forcing the tool",
			body: `{"model":"m","tools":[` + ci + `],"tool_choice":{"type":"code_interpreter"}}`,
			check: func(t *testing.T, x *Exchange, up gjson.Result) {
				if up.Get("tool_choice").Raw != fnChoice {
					t.Fatalf("tool_choice: %s", up.Get("tool_choice").Raw)
				}
			},
		},
		{
			name: "tool_choice allowed_tools list",
			body: `{"model":"m","tools":[` + ci + `,{"type":"function","name":"f"}],"tool_choice":{"type":"allowed_tools","mode":"required","tools":[{"type":"code_interpreter"},{"type":"function","name":"f"}]}}`,
			check: func(t *testing.T, x *Exchange, up gjson.Result) {
				want := `{"type":"allowed_tools","mode":"required","tools":[` + fnChoice + `,{"type":"function","name":"f"}]}`
				if up.Get("tool_choice").Raw != want {
					t.Fatalf("tool_choice: %s", up.Get("tool_choice").Raw)
				}
			},
		},
		{
			name: "tool_choice strings and other functions unchanged",
			body: `{"model":"m","tools":[` + ci + `],"tool_choice":"auto"}`,
			check: func(t *testing.T, x *Exchange, up gjson.Result) {
				if up.Get("tool_choice").Raw != `"auto"` {
					t.Fatalf("tool_choice: %s", up.Get("tool_choice").Raw)
				}
			},
		},
		{
			name: "stream true becomes false, stream_options dropped",
			body: `{"model":"m","tools":[` + ci + `],"stream":true,"stream_options":{"include_obfuscation":false}}`,
			check: func(t *testing.T, x *Exchange, up gjson.Result) {
				if !x.ClientStream() || up.Get("stream").Type != gjson.False || up.Get("stream_options").Exists() || x.req.obfuscate {
					t.Fatalf("stream=%v upstream=%s obfuscate=%v", x.ClientStream(), up.Raw, x.req.obfuscate)
				}
			},
		},
		{
			name: "include outputs is ours, other includes pass",
			body: `{"model":"m","tools":[` + ci + `],"include":["reasoning.encrypted_content","code_interpreter_call.outputs"]}`,
			check: func(t *testing.T, x *Exchange, up gjson.Result) {
				if up.Get("include").Raw != `["reasoning.encrypted_content"]` || !x.req.includeOutputs {
					t.Fatalf("include: %s (outputs=%v)", up.Get("include").Raw, x.req.includeOutputs)
				}
			},
		},
		{
			name: "memory_limit within the maximum",
			cfg:  func(c *Config) { c.MaxMemoryBytes = 4 << 30 },
			body: `{"model":"m","tools":[{"type":"code_interpreter","container":{"type":"auto","memory_limit":"4g","file_ids":[],"network_policy":{"type":"disabled"}}}]}`,
			check: func(t *testing.T, x *Exchange, up gjson.Result) {
				if x.req.memoryBytes != 4<<30 {
					t.Fatalf("memory %d", x.req.memoryBytes)
				}
			},
		},
		{
			name: "max_tool_calls lowers the cap, cannot raise it",
			cfg:  func(c *Config) { c.MaxToolCalls = 5 },
			body: `{"model":"m","tools":[` + ci + `],"max_tool_calls":100}`,
			check: func(t *testing.T, x *Exchange, up gjson.Result) {
				if x.req.maxCalls != 5 || up.Get("max_tool_calls").Raw != "100" {
					t.Fatalf("maxCalls %d, upstream %s", x.req.maxCalls, up.Get("max_tool_calls").Raw)
				}
			},
		},
		{
			name: "max_tool_calls lower than the cap",
			body: `{"model":"m","tools":[` + ci + `],"max_tool_calls":2}`,
			check: func(t *testing.T, x *Exchange, up gjson.Result) {
				if x.req.maxCalls != 2 {
					t.Fatalf("maxCalls %d", x.req.maxCalls)
				}
			},
		},
		{
			name: "unknown fields and items survive byte for value",
			body: "{\"model\":\"m\",\"x_new\":{\"a\":[1.50, \"\\u00e9\"]},\"tools\":[" + ci + "],\"input\":[{\"type\":\"future_item\",\"blob\":{\"k\":1e3}},{\"role\":\"user\",\"content\":\"hi\"}]}",
			check: func(t *testing.T, x *Exchange, up gjson.Result) {
				if up.Get("x_new").Raw != `{"a":[1.50, "\u00e9"]}` || up.Get("input").Raw != `[{"type":"future_item","blob":{"k":1e3}},{"role":"user","content":"hi"}]` {
					t.Fatalf("upstream: %s", up.Raw)
				}
			},
		},
		{
			name: "replayed code_interpreter_call becomes a call and its output",
			body: `{"model":"m","tools":[` + ci + `],"input":[{"role":"user","content":"q"},` +
				`{"id":"ci_abc","type":"code_interpreter_call","status":"completed","code":"print(1)","container_id":"cntr_x","outputs":[{"type":"logs","logs":"1\n"}]},` +
				`{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"output_text","text":"1"}]}]}`,
			check: func(t *testing.T, x *Exchange, up gjson.Result) {
				in := up.Get("input").Array()
				if len(in) != 4 {
					t.Fatalf("input: %s", up.Get("input").Raw)
				}
				fc, fo := in[1], in[2]
				if fc.Get("type").Str != "function_call" || fc.Get("name").Str != "code_interpreter" ||
					gjson.Get(fc.Get("arguments").Str, "code").Str != "print(1)" || !strings.HasPrefix(fc.Get("call_id").Str, "call_") {
					t.Fatalf("function_call: %s", fc.Raw)
				}
				if fo.Get("type").Str != "function_call_output" || fo.Get("call_id").Str != fc.Get("call_id").Str ||
					!strings.Contains(fo.Get("output").Str, "status: completed") || !strings.Contains(fo.Get("output").Str, "1\n") {
					t.Fatalf("function_call_output: %s", fo.Raw)
				}
				if in[3].Get("id").Str != "msg_1" {
					t.Fatalf("neighbour item: %s", in[3].Raw)
				}
			},
		},
		{
			// Images are told as text (TestReplayedImagesBecomeText); an
			// output kind we do not know cannot be.
			name: "native call with an unknown output kind passes intact",
			body: `{"model":"m","tools":[` + ci + `],"input":[{"id":"ci_img","type":"code_interpreter_call","status":"completed","code":"plot()","container_id":"cntr_y","outputs":[{"type":"image","url":"https://img"},{"type":"future_output","x":1}]}]}`,
			check: func(t *testing.T, x *Exchange, up gjson.Result) {
				if up.Get("input").Raw != `[{"id":"ci_img","type":"code_interpreter_call","status":"completed","code":"plot()","container_id":"cntr_y","outputs":[{"type":"image","url":"https://img"},{"type":"future_output","x":1}]}]` {
					t.Fatalf("input: %s", up.Get("input").Raw)
				}
			},
		},
		{
			name: "history only, no tool: rewritten, not intercepted",
			body: `{"model":"m","stream":true,"input":[{"id":"ci_abc","type":"code_interpreter_call","status":"failed","code":"1/0","container_id":"cntr_x","outputs":null}]}`,
			check: func(t *testing.T, x *Exchange, up gjson.Result) {
				if x.Intercepted() || !x.Modified() || up.Get("stream").Type != gjson.True {
					t.Fatalf("intercepted=%v modified=%v: %s", x.Intercepted(), x.Modified(), up.Raw)
				}
				if up.Get("input.0.type").Str != "function_call" || !strings.Contains(up.Get("input.1.output").Str, "status: failed") {
					t.Fatalf("input: %s", up.Get("input").Raw)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ic := newRewriter(t, tc.cfg)
			x, err := ic.RewriteRequest([]byte(tc.body))
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !gjson.ValidBytes(x.UpstreamBody()) {
				t.Fatalf("upstream body is not JSON: %s", x.UpstreamBody())
			}
			tc.check(t, x, gjson.ParseBytes(x.UpstreamBody()))
		})
	}
}

// TestReplayCallIDsAreStable: the same replayed item always yields the same
// call id, and different items different ones.
func TestReplayCallIDsAreStable(t *testing.T) {
	ic := newRewriter(t, nil)
	body := func(id string) []byte {
		return []byte(`{"model":"m","tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"input":[{"id":"` + id + `","type":"code_interpreter_call","status":"completed","code":"x=1","container_id":"c","outputs":null}]}`)
	}
	get := func(id string) string {
		x, err := ic.RewriteRequest(body(id))
		if err != nil {
			t.Fatal(err)
		}
		return gjson.GetBytes(x.UpstreamBody(), "input.0.call_id").Str
	}
	a1, a2, b := get("ci_a"), get("ci_a"), get("ci_b")
	if a1 == "" || a1 != a2 || a1 == b {
		t.Fatalf("call ids: %q %q %q", a1, a2, b)
	}
}

// TestRejections: every refused request gets an OpenAI-shaped 4xx naming
// the field.
func TestRejections(t *testing.T) {
	const ci = `{"type":"code_interpreter","container":{"type":"auto"}}`
	cases := []struct {
		name        string
		cfg         func(*Config)
		body        string
		status      int
		param, code string
	}{
		{"file_ids", nil, `{"tools":[{"type":"function","name":"f"},{"type":"code_interpreter","container":{"type":"auto","file_ids":["file-1"]}}]}`, 400, "tools[1].container.file_ids", "unsupported_parameter"},
		{"memory above max", nil, `{"tools":[{"type":"code_interpreter","container":{"type":"auto","memory_limit":"4g"}}]}`, 400, "tools[0].container.memory_limit", "invalid_value"},
		{"memory malformed", nil, `{"tools":[{"type":"code_interpreter","container":{"type":"auto","memory_limit":"lots"}}]}`, 400, "tools[0].container.memory_limit", "invalid_value"},
		{"memory not a string", nil, `{"tools":[{"type":"code_interpreter","container":{"type":"auto","memory_limit":1}}]}`, 400, "tools[0].container.memory_limit", "invalid_value"},
		{"container id", nil, `{"tools":[{"type":"code_interpreter","container":"cntr_abc"}]}`, 400, "tools[0].container", "container_not_found"},
		{"container type", nil, `{"tools":[{"type":"code_interpreter","container":{"type":"dedicated"}}]}`, 400, "tools[0].container.type", "invalid_value"},
		{"container without type", nil, `{"tools":[{"type":"code_interpreter","container":{}}]}`, 400, "tools[0].container.type", "missing_required_parameter"},
		{"container wrong type", nil, `{"tools":[{"type":"code_interpreter","container":7}]}`, 400, "tools[0].container", "invalid_type"},
		{"missing container", nil, `{"tools":[{"type":"code_interpreter"}]}`, 400, "tools[0].container", "missing_required_parameter"},
		{"unknown tool field", nil, `{"tools":[{"type":"code_interpreter","container":{"type":"auto"},"speed":"fast"}]}`, 400, "tools[0].speed", "unknown_parameter"},
		{"unknown container field", nil, `{"tools":[{"type":"code_interpreter","container":{"type":"auto","gpu":true}}]}`, 400, "tools[0].container.gpu", "unknown_parameter"},
		{"network allowlist", nil, `{"tools":[{"type":"code_interpreter","container":{"type":"auto","network_policy":{"type":"allowlist","allowed_domains":["x"]}}}]}`, 400, "tools[0].container.network_policy", "unsupported_parameter"},
		{"function with our name", nil, `{"tools":[` + ci + `,{"type":"function","name":"code_interpreter","parameters":{}}]}`, 400, "tools[1].name", "tool_name_conflict"},
		{"custom tool with our name", func(c *Config) { c.FunctionName = "py" }, `{"tools":[{"type":"custom","name":"py"},` + ci + `]}`, 400, "tools[0].name", "tool_name_conflict"},
		{"two native tools", nil, `{"tools":[` + ci + `,` + ci + `]}`, 400, "tools[1]", "duplicate_tool"},
		{"duplicate top-level key", nil, `{"tools":[` + ci + `],"tools":[]}`, 400, "tools", "duplicate_parameter"},
		{"duplicate tool key", nil, `{"tools":[{"type":"function","name":"a","name":"code_interpreter"},` + ci + `]}`, 400, "tools[0].name", "duplicate_parameter"},
		{"background", nil, `{"background":true,"tools":[` + ci + `]}`, 400, "background", "unsupported_parameter"},
		{"max_tool_calls negative", nil, `{"max_tool_calls":-1,"tools":[` + ci + `]}`, 400, "max_tool_calls", "invalid_value"},
		{"max_tool_calls fraction", nil, `{"max_tool_calls":1.5,"tools":[` + ci + `]}`, 400, "max_tool_calls", "invalid_value"},
		{"max_tool_calls string", nil, `{"max_tool_calls":"3","tools":[` + ci + `]}`, 400, "max_tool_calls", "invalid_value"},
		{"stream not boolean", nil, `{"stream":"yes","tools":[` + ci + `]}`, 400, "stream", "invalid_type"},
		{"include not array", nil, `{"include":"code_interpreter_call.outputs","tools":[` + ci + `]}`, 400, "include", "invalid_type"},
		{"input wrong type", nil, `{"input":5,"tools":[` + ci + `]}`, 400, "input", "invalid_type"},
		{"invalid JSON with our tool", nil, `{"tools":[` + ci + `],}`, 400, "", "invalid_json"},
		{"too large", func(c *Config) { c.MaxBodyBytes = 64 }, `{"tools":[` + ci + `],"input":"` + strings.Repeat("a", 100) + `"}`, 413, "", "request_too_large"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ic := newRewriter(t, tc.cfg)
			x, err := ic.RewriteRequest([]byte(tc.body))
			if err == nil {
				t.Fatalf("accepted: upstream %s", x.UpstreamBody())
			}
			var ae *apierror.Error
			if !errors.As(err, &ae) {
				t.Fatalf("error %T is not *apierror.Error: %v", err, err)
			}
			if ae.Status != tc.status || ae.Param != tc.param || ae.Code != tc.code || ae.Type != "invalid_request_error" || ae.Message == "" {
				t.Fatalf("got %+v, want status %d param %q code %q", ae, tc.status, tc.param, tc.code)
			}
			checkErrorBody(t, ae.Body(), ae)
		})
	}
}

// checkErrorBody decodes an error body the way OpenAI's clients do.
func checkErrorBody(t *testing.T, body []byte, want *apierror.Error) {
	t.Helper()
	env, err := apierror.ParseBody(body)
	if err != nil {
		t.Fatalf("error body %s: %v", body, err)
	}
	e := env.Error
	if e.Message != want.Message || e.Type != want.Type {
		t.Fatalf("error body %s", body)
	}
	if (want.Param == "") != (e.Param == nil) || (e.Param != nil && *e.Param != want.Param) {
		t.Fatalf("param in %s, want %q", body, want.Param)
	}
	if (want.Code == "") != (e.Code == nil) || (e.Code != nil && *e.Code != want.Code) {
		t.Fatalf("code in %s, want %q", body, want.Code)
	}
	if !gjson.GetBytes(body, "error.param").Exists() || !gjson.GetBytes(body, "error.code").Exists() {
		t.Fatalf("error body lacks param/code keys: %s", body)
	}
}

func TestParseMemory(t *testing.T) {
	good := map[string]int64{"1g": 1 << 30, "4G": 4 << 30, "512m": 512 << 20, "1GiB": 1 << 30, "2048": 2048, "64k": 64 << 10}
	for s, want := range good {
		if got, ok := parseMemory(gjson.Parse(jsonx.Quote(s))); !ok || got != want {
			t.Errorf("parseMemory(%q) = %d, %v; want %d", s, got, ok, want)
		}
	}
	for _, s := range []string{"", "g", "-1g", "0", "1.5g", "1x", "99999999999999999999g", "1 g b"} {
		if got, ok := parseMemory(gjson.Parse(jsonx.Quote(s))); ok {
			t.Errorf("parseMemory(%q) = %d, accepted", s, got)
		}
	}
}
