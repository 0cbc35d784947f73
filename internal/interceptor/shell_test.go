package interceptor

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
)

// shellParams declares both hosted tools on one auto container.
func shellParams() responses.ResponseNewParams {
	p := ciParams(nil)
	p.Tools = append(p.Tools, responses.ToolUnionParam{OfShell: &responses.FunctionShellToolParam{
		Environment: responses.FunctionShellToolEnvironmentUnionParam{OfContainerAuto: &responses.ContainerAutoParam{}}}})
	p.ToolChoice = responses.ResponseNewParamsToolChoiceUnion{OfSpecificShellToolChoice: &responses.ToolChoiceShellParam{}}
	return p
}

// TestShellLoop: the hosted shell beside code_interpreter in one gVisor
// sandbox, through openai-go: the declaration becomes a strict function
// "shell" (tool_choice follows it), the model's call runs each command by
// bash, the model is told each exit code and output, and the client gets
// OpenAI's shell_call and shell_call_output items, decoded typed, with
// max_output_length applied; the shell sees the files Python wrote.
func TestShellLoop(t *testing.T) {
	p := sandboxtest.NewProvider(t, "gvisor")
	up := newScriptedUpstream(t,
		step{
			check: func(t *testing.T, req gjson.Result) {
				var fn gjson.Result
				req.Get("tools").ForEach(func(_, tl gjson.Result) bool {
					if tl.Get("name").Str == "shell" {
						fn = tl
					}
					return true
				})
				if fn.Get("type").Str != "function" || !fn.Get("strict").Bool() || fn.Get("parameters.required").Raw != `["commands","timeout_ms","max_output_length"]` {
					t.Errorf("the shell's function tool: %s", fn.Raw)
				}
				if req.Get("tool_choice").Raw != `{"type":"function","name":"shell"}` {
					t.Errorf("tool_choice: %s", req.Get("tool_choice").Raw)
				}
			},
			items: []string{fcItem("call_py", "open('/mnt/data/n.txt', 'w').write('from python')"),
				fcRaw("call_sh", "shell", `{"commands":["cat n.txt; echo; echo abcdefghij","echo oops >&2; exit 3"],"timeout_ms":5000,"max_output_length":15}`)},
		},
		step{
			check: func(t *testing.T, req gjson.Result) {
				out := outputOf(t, req, "call_sh")
				if !strings.Contains(out, "$ cat n.txt; echo; echo abcdefghij\nexit code: 0\nstdout:\nfrom python\nabc\n") ||
					!strings.Contains(out, "exit code: 3\nstderr:\noops\n") {
					t.Errorf("the model was told: %q", out)
				}
			},
			items: []string{msgItem("done")},
		},
	)
	ic := newLoopInterceptor(t, p, nil)
	_, client := gateway(t, ic, up)
	r, err := client.Responses.New(context.Background(), shellParams())
	if err != nil {
		t.Fatal(err)
	}
	var call responses.ResponseFunctionShellToolCall
	var out responses.ResponseFunctionShellToolCallOutput
	for _, it := range r.Output {
		switch it.Type {
		case "shell_call":
			call = it.AsShellCall()
		case "shell_call_output":
			out = it.AsShellCallOutput()
		}
	}
	if call.CallID != "call_sh" || !strings.HasPrefix(call.ID, "sh_") || len(call.Action.Commands) != 2 || call.Action.TimeoutMs != 5000 ||
		call.Environment.Type != "container_reference" || !strings.HasPrefix(call.Environment.ContainerID, "cntr_") {
		t.Errorf("shell_call: %s", call.RawJSON())
	}
	if out.CallID != "call_sh" || !strings.HasPrefix(out.ID, "sho_") || out.MaxOutputLength != 15 || len(out.Output) != 2 ||
		out.Output[0].Stdout != "from python\nabc" || out.Output[0].Outcome.ExitCode != 0 || out.Output[0].Outcome.Type != "exit" ||
		out.Output[1].Stderr != "oops\n" || out.Output[1].Outcome.ExitCode != 3 {
		t.Errorf("shell_call_output: %s", out.RawJSON())
	}
	if r.ToolChoice.Type != "shell" {
		t.Errorf("the echoed tool_choice: %s", r.ToolChoice.RawJSON())
	}
	_ = openai.String
}

// TestShellRefusedOnWasm: a provider with no shell refuses a hosted shell
// with OpenAI's 400 naming the tool, never passing it through.
func TestShellRefusedOnWasm(t *testing.T) {
	ic := newLoopInterceptor(t, sandboxtest.New(t), nil)
	_, err := ic.RewriteRequest([]byte(`{"model":"m","input":"hi","tools":[{"type":"function","name":"f","parameters":{}},{"type":"shell","environment":{"type":"container_auto"}}]}`))
	if err == nil || !strings.Contains(err.Error(), "no shell") {
		t.Fatalf("a hosted shell on WASM: %v", err)
	}
	var ae *apierror.Error
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Param != "tools[1]" {
		t.Fatalf("refusal: %+v", ae)
	}
	// A local shell stays the client's.
	x, err := ic.RewriteRequest([]byte(`{"model":"m","input":"hi","tools":[{"type":"shell","environment":{"type":"local"}}]}`))
	if err != nil || x.Intercepted() {
		t.Fatalf("a local shell: %v intercepted=%v", err, x != nil && x.Intercepted())
	}
}

// TestShellDeclarationGaps: a string code_interpreter container next to a
// shell container_reference naming another container is a 400 naming the
// later one, in both orders; the same container is fine. A hosted shell
// spelled with escapes ("container_a\u0075to", "sh\u0065ll") is found by
// the full parse, never passed through untouched.
func TestShellDeclarationGaps(t *testing.T) {
	p := sandboxtest.NewProvider(t, "gvisor")
	ic := newLoopInterceptor(t, p, nil)
	ic.containers = fakeContainers{p}
	ci := func(id string) string { return `{"type":"code_interpreter","container":"` + id + `"}` }
	sh := func(id string) string {
		return `{"type":"shell","environment":{"type":"container_reference","container_id":"` + id + `"}}`
	}
	for _, tc := range []struct {
		tools, param string
	}{
		{ci("cntr_aaaaaa") + "," + sh("cntr_bbbbbb"), "tools[1].environment.container_id"},
		{sh("cntr_bbbbbb") + "," + ci("cntr_aaaaaa"), "tools[1].container"},
		{ci("cntr_aaaaaa") + "," + sh("cntr_aaaaaa"), ""},
		{sh("cntr_aaaaaa") + "," + ci("cntr_aaaaaa"), ""},
	} {
		_, err := ic.RewriteRequest([]byte(`{"model":"m","input":"hi","tools":[` + tc.tools + `]}`))
		var ae *apierror.Error
		switch {
		case tc.param == "" && err != nil:
			t.Errorf("%s: %v", tc.tools, err)
		case tc.param != "" && (!errors.As(err, &ae) || ae.Status != 400 || ae.Param != tc.param || ae.Type != "invalid_request_error"):
			t.Errorf("%s: %v, want a 400 on %s", tc.tools, err, tc.param)
		}
	}
	for _, body := range []string{
		`{"model":"m","input":"hi","tools":[{"type":"shell","environment":{"type":"container_a\u0075to"}}]}`,
		`{"model":"m","input":"hi","tools":[{"type":"sh\u0065ll","environment":{"type":"container_auto"}}]}`,
		`{"model":"m","input":"hi","tools":[{"type":"shell","environment":{"type":"container_r\u0065ference","container_id":"cntr_aaaaaa"}}]}`,
	} {
		if ic.PassesThrough([]byte(body)) {
			t.Errorf("passes through: %s", body)
		}
		x, err := ic.RewriteRequest([]byte(body))
		if err != nil || !x.Intercepted() || !strings.Contains(string(x.UpstreamBody()), `"name":"shell"`) {
			t.Errorf("%s: intercepted %v, %v", body, x != nil && x.Intercepted(), err)
		}
	}
	// On WASM the escaped declaration is refused as the plain one is.
	wasm := newLoopInterceptor(t, sandboxtest.New(t), nil)
	if _, err := wasm.RewriteRequest([]byte(`{"model":"m","input":"hi","tools":[{"type":"shell","environment":{"type":"container_a\u0075to"}}]}`)); err == nil {
		t.Error("an escaped hosted shell passed WASM's refusal")
	}
}
