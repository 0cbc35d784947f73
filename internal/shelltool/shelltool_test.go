package shelltool

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/sandbox"
)

func args(s string) gjson.Result { return gjson.Parse(quote(s)) }

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestDecode: a call's arguments as models write them, good and bad.
func TestDecode(t *testing.T) {
	many := `{"commands":[` + strings.Repeat(`"true",`, MaxCommands) + `"true"]}`
	for _, tc := range []struct {
		name, args string
		want       Action
		err        string
	}{
		{"commands only", `{"commands":["ls -l","pwd"]}`, Action{Commands: []string{"ls -l", "pwd"}}, ""},
		{"nulls", `{"commands":["ls"],"timeout_ms":null,"max_output_length":null}`, Action{Commands: []string{"ls"}}, ""},
		{"limits", `{"commands":["ls"],"timeout_ms":5000,"max_output_length":20}`, Action{Commands: []string{"ls"}, TimeoutMS: 5000, MaxOutputLength: 20}, ""},
		{"unicode and newlines kept", `{"commands":["printf 'é\\n'\necho ok"]}`, Action{Commands: []string{"printf 'é\\n'\necho ok"}}, ""},
		{"not JSON", `ls -l`, Action{}, "the arguments are not a JSON object"},
		{"an array", `["ls"]`, Action{}, "the arguments are not a JSON object"},
		{"a string commands", `{"commands":"ls"}`, Action{}, `the arguments have no array "commands"`},
		{"no commands", `{"command":["ls"]}`, Action{}, `the arguments have no array "commands"`},
		{"a number among commands", `{"commands":["ls",3]}`, Action{}, `"commands" must hold strings`},
		{"empty", `{"commands":[]}`, Action{}, `"commands" is empty`},
		{"too many", many, Action{}, "at most 32 commands run in one call"},
		{"negative timeout", `{"commands":["ls"],"timeout_ms":-1}`, Action{}, `"timeout_ms" must be a positive integer or null`},
		{"fractional timeout", `{"commands":["ls"],"timeout_ms":1.5}`, Action{}, `"timeout_ms" must be a positive integer or null`},
		{"string max_output_length", `{"commands":["ls"],"max_output_length":"10"}`, Action{}, `"max_output_length" must be a positive integer or null`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := Decode(args(tc.args))
			if err != tc.err || !slices.Equal(a.Commands, tc.want.Commands) || a.TimeoutMS != tc.want.TimeoutMS || a.MaxOutputLength != tc.want.MaxOutputLength {
				t.Errorf("Decode(%s) = %+v, %q; want %+v, %q", tc.args, a, err, tc.want, tc.err)
			}
			// The tool's Decode says the same through hostedtool.Action.
			act := Tool{}.Decode(args(tc.args))
			if act.Invalid() != tc.err || act.Text() != tc.args {
				t.Errorf("Tool.Decode: invalid %q, text %q", act.Invalid(), act.Text())
			}
		})
	}
	if _, err := Decode(gjson.Parse(`{"commands":["ls"]}`)); err == "" {
		t.Error("arguments that are an object, not a string, decoded")
	}
}

func TestTimeout(t *testing.T) {
	for _, tc := range []struct {
		ms        int64
		def, max  time.Duration
		want      time.Duration
		situation string
	}{
		{0, 2 * time.Minute, 10 * time.Minute, 2 * time.Minute, "null: the default"},
		{0, 2 * time.Minute, time.Minute, time.Minute, "null: the default within the maximum"},
		{1500, 2 * time.Minute, 10 * time.Minute, 1500 * time.Millisecond, "asked for"},
		{3_600_000, 2 * time.Minute, 10 * time.Minute, 10 * time.Minute, "asked for more than the maximum"},
	} {
		if got := (Action{TimeoutMS: tc.ms}).Timeout(tc.def, tc.max); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.situation, got, tc.want)
		}
	}
}

// TestHostedAndCheck: which declarations are this server's, and what is
// refused with which param and code.
func TestHostedAndCheck(t *testing.T) {
	for _, tc := range []struct {
		decl        string
		hosted      bool
		ref         string
		container   string // Decl.Container's raw JSON
		skills      int    // len(Decl.Skills): handed on to the new container
		param, code string
	}{
		{decl: `{"type":"shell","environment":{"type":"container_auto"}}`, hosted: true, container: `{"type":"auto"}`},
		{decl: `{"type":"shell","environment":{"type":"container_auto","file_ids":["file_1"],"memory_limit":"4g","skills":[]}}`, hosted: true,
			container: `{"type":"auto","file_ids":["file_1"],"memory_limit":"4g"}`},
		{decl: `{"type":"shell","environment":{"type":"container_reference","container_id":"cntr_1"}}`, hosted: true, ref: "cntr_1"},
		{decl: `{"type":"shell","environment":{"type":"container_auto"},"allowed_callers":["direct"]}`, hosted: true, container: `{"type":"auto"}`},
		{decl: `{"type":"shell","environment":{"type":"local"}}`},
		{decl: `{"type":"shell"}`},
		{decl: `{"type":"code_interpreter","container":{"type":"auto"}}`},
		{decl: `{"type":"shell","environment":{"type":"container_reference"}}`, hosted: true,
			param: "tools[1].environment.container_id", code: "missing_required_parameter"},
		{decl: `{"type":"shell","environment":{"type":"container_reference","container_id":7}}`, hosted: true,
			param: "tools[1].environment.container_id", code: "invalid_type"},
		{decl: `{"type":"shell","environment":{"type":"container_reference","container_id":"cntr_1","file_ids":[]}}`, hosted: true,
			param: "tools[1].environment.file_ids", code: "unknown_parameter"},
		{decl: `{"type":"shell","environment":{"type":"container_auto","skills":[{"type":"skill_reference","skill_id":"s"}]}}`, hosted: true,
			container: `{"type":"auto"}`, skills: 1},
		{decl: `{"type":"shell","environment":{"type":"container_auto","skills":{"type":"skill_reference"}}}`, hosted: true,
			param: "tools[1].environment.skills", code: "invalid_type"},
		{decl: `{"type":"shell","environment":{"type":"container_auto"},"allowed_callers":["program"]}`, hosted: true,
			param: "tools[1].allowed_callers", code: "unsupported_parameter"},
		{decl: `{"type":"shell","environment":{"type":"container_auto"},"name":"sh"}`, hosted: true,
			param: "tools[1].name", code: "unknown_parameter"},
		{decl: `{"type":"shell","environment":{"type":"container_auto","type":"container_auto"}}`, hosted: true,
			param: "tools[1].environment.type", code: "duplicate_parameter"},
	} {
		t.Run(tc.decl, func(t *testing.T) {
			decl := gjson.Parse(tc.decl)
			if Hosted(decl) != tc.hosted {
				t.Fatalf("Hosted = %v, want %v", !tc.hosted, tc.hosted)
			}
			if !tc.hosted {
				return
			}
			d, err := Check("tools[1]", decl)
			switch {
			case tc.param != "":
				if err == nil || err.Param != tc.param || err.Code != tc.code || err.Status != 400 {
					t.Errorf("Check = %+v, want a 400 on %s (%s)", err, tc.param, tc.code)
				}
			case err != nil:
				t.Errorf("Check: %v", err)
			case d.Reference != tc.ref:
				t.Errorf("Reference %q, want %q", d.Reference, tc.ref)
			case tc.container != "" && !jsonEqual(d.Container.Raw, tc.container):
				t.Errorf("Container %s, want %s", d.Container.Raw, tc.container)
			case len(d.Skills) != tc.skills:
				t.Errorf("%d skills handed on, want %d", len(d.Skills), tc.skills)
			}
		})
	}
}

func jsonEqual(a, b string) bool {
	var x, y any
	return json.Unmarshal([]byte(a), &x) == nil && json.Unmarshal([]byte(b), &y) == nil && mustJSON(x) == mustJSON(y)
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestFunction: the strict function the model server is given.
func TestFunction(t *testing.T) {
	for _, net := range []string{"", "Network access: example.com. "} {
		fn := gjson.Parse(Tool{}.Function(sandbox.Environment{}, nil))
		if net != "" {
			fn = gjson.Parse(Function(Description(net)))
		}
		if fn.Get("type").Str != "function" || fn.Get("name").Str != "shell" || !fn.Get("strict").Bool() ||
			fn.Get("parameters.properties.commands.items.type").Str != "string" ||
			fn.Get("parameters.required").Raw != `["commands","timeout_ms","max_output_length"]` ||
			fn.Get("parameters.additionalProperties").Type != gjson.False {
			t.Errorf("function: %s", fn.Raw)
		}
		desc := fn.Get("description").Str
		if net == "" && !strings.HasSuffix(desc, "There is no network access.") || net != "" && !strings.HasSuffix(desc, net) {
			t.Errorf("description %q", desc)
		}
	}
}

// TestItems: the items the client gets decode with openai-go, field by
// field, and replay into the function call and output the model saw.
func TestItems(t *testing.T) {
	a := Action{Commands: []string{"echo hi", "sleep 9"}, TimeoutMS: 1000, MaxOutputLength: 4}
	results := []sandbox.CommandResult{{Stdout: "hi there\n", Stderr: "warn\n", ExitCode: 0}, {TimedOut: true, ExitCode: -1}}
	callItem := CallItem("sh_1", "call_1", a, "completed", "cntr_9")
	outItem := OutputItem("sho_1", "call_1", "completed", a, Cut(results, a.MaxOutputLength))

	var call responses.ResponseFunctionShellToolCall
	var out responses.ResponseFunctionShellToolCallOutput
	if err := json.Unmarshal([]byte(callItem), &call); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(outItem), &out); err != nil {
		t.Fatal(err)
	}
	if call.ID != "sh_1" || call.Type != "shell_call" || call.CallID != "call_1" || !slices.Equal(call.Action.Commands, a.Commands) ||
		call.Action.TimeoutMs != 1000 || call.Action.MaxOutputLength != 4 || call.Status != "completed" ||
		call.Environment.Type != "container_reference" || call.Environment.ContainerID != "cntr_9" {
		t.Errorf("shell_call %s", callItem)
	}
	if out.ID != "sho_1" || out.Type != "shell_call_output" || out.CallID != "call_1" || out.MaxOutputLength != 4 || len(out.Output) != 2 ||
		out.Output[0].Stdout != "hi t" || out.Output[0].Stderr != "" || out.Output[0].Outcome.Type != "exit" || out.Output[0].Outcome.ExitCode != 0 ||
		out.Output[1].Outcome.Type != "timeout" {
		t.Errorf("shell_call_output %s", outItem)
	}
	if n := gjson.Get(CallItem("sh_2", "c", Action{Commands: []string{"ls"}}, "completed", "cntr_9"), "action"); n.Get("timeout_ms").Type != gjson.Null ||
		n.Get("max_output_length").Type != gjson.Null {
		t.Errorf("null limits: %s", n.Raw)
	}

	// Replay: the same function call whatever the replay, its output the
	// model's text of the same results.
	fc, ok := Replay(gjson.Parse(callItem))
	if !ok {
		t.Fatal("the shell_call was not replayed")
	}
	f := gjson.Parse(fc)
	got, _ := Decode(f.Get("arguments"))
	if f.Get("type").Str != "function_call" || f.Get("name").Str != FunctionName || !slices.Equal(got.Commands, a.Commands) ||
		got.TimeoutMS != 1000 || got.MaxOutputLength != 4 {
		t.Errorf("replayed call %s", fc)
	}
	again, _ := Replay(gjson.Parse(callItem))
	other, _ := Replay(gjson.Parse(CallItem("sh_2", "call_1", a, "completed", "cntr_9")))
	if again != fc || gjson.Get(other, "call_id").Str == f.Get("call_id").Str {
		t.Errorf("call ids: not stable or not distinct: %s %s", again, other)
	}
	fo, ok := ReplayOutput(gjson.Parse(outItem), map[string]gjson.Result{"call_1": gjson.Parse(callItem)})
	if !ok || gjson.Get(fo, "call_id").Str != f.Get("call_id").Str || gjson.Get(fo, "type").Str != "function_call_output" {
		t.Fatalf("replayed output %s", fo)
	}
	want := ModelOutput(Action{Commands: a.Commands}, sandbox.Result{Outcome: sandbox.OutcomeCompleted, Commands: Cut(results, 4)}, "", "")
	if gjson.Get(fo, "output").Str != want {
		t.Errorf("replayed output text %q, want %q", gjson.Get(fo, "output").Str, want)
	}
	for _, it := range []string{
		`{"type":"shell_call","call_id":"c","action":{"commands":["ls"]},"environment":{"type":"local"}}`,
		`{"type":"shell_call","call_id":"c","action":{"commands":["ls"]}}`,
		`{"type":"function_call","call_id":"c"}`,
	} {
		if _, ok := Replay(gjson.Parse(it)); ok {
			t.Errorf("%s was replayed as the hosted shell's", it)
		}
	}
	if _, ok := ReplayOutput(gjson.Parse(outItem), map[string]gjson.Result{}); ok {
		t.Error("an output whose call was not replayed was replayed")
	}
}

// TestCut: max_output_length counts characters, stdout first, then stderr.
func TestCut(t *testing.T) {
	for _, tc := range []struct {
		out, errOut string
		max         int64
		wantOut     string
		wantErr     string
	}{
		{"hello", "oops", 0, "hello", "oops"},
		{"hello", "oops", 7, "hello", "oo"},
		{"hello", "oops", 3, "hel", ""},
		{"héllo", "", 2, "hé", ""},
		{"日本語", "ü", 4, "日本語", "ü"},
	} {
		got := Cut([]sandbox.CommandResult{{Stdout: tc.out, Stderr: tc.errOut}}, tc.max)[0]
		if got.Stdout != tc.wantOut || got.Stderr != tc.wantErr {
			t.Errorf("Cut(%q, %q, %d) = %q, %q; want %q, %q", tc.out, tc.errOut, tc.max, got.Stdout, got.Stderr, tc.wantOut, tc.wantErr)
		}
	}
}

// TestModelOutput: what the model is told, per fate.
func TestModelOutput(t *testing.T) {
	a := Action{Commands: []string{"ls", "sleep 9", "late"}}
	ok := sandbox.Result{Outcome: sandbox.OutcomeCompleted, Commands: []sandbox.CommandResult{
		{Stdout: "a.txt", ExitCode: 0}, {TimedOut: true}, {NotRun: true}}}
	for _, tc := range []struct {
		name   string
		r      sandbox.Result
		argErr string
		notRun string
		want   string
		status string
	}{
		{name: "ran", r: ok, want: "$ ls\nexit code: 0\nstdout:\na.txt\n$ sleep 9\noutcome: timeout (killed)\n$ late\nnot run\n", status: "completed"},
		{name: "truncated output", r: sandbox.Result{Outcome: sandbox.OutcomeOutputTruncated, Commands: []sandbox.CommandResult{{Stdout: "x", StdoutTruncated: true, ExitCode: 1, Stderr: "e"}}},
			want: "$ ls\nexit code: 1\nstdout:\nx\n[stdout truncated]\nstderr:\ne\n", status: "completed"},
		{name: "crashed", r: sandbox.Result{Outcome: sandbox.OutcomeCrashed, Detail: "the sandbox exited"},
			want: "status: crashed (the sandbox exited)\n", status: "incomplete"},
		{name: "bad arguments", argErr: `"commands" is empty`,
			want: "status: failed: invalid arguments (\"commands\" is empty); nothing was run. Call the tool with a JSON object like {\"commands\": [\"ls -l\"], \"timeout_ms\": null, \"max_output_length\": null}.\n", status: "incomplete"},
		{name: "not run", notRun: "the response's tool-call limit was reached", want: "status: incomplete: not run because the response's tool-call limit was reached.\n", status: "incomplete"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ModelOutput(a, tc.r, tc.argErr, tc.notRun); got != tc.want {
				t.Errorf("ModelOutput:\n%s\nwant:\n%s", got, tc.want)
			}
			if got := Status(tc.r, tc.argErr, tc.notRun); got != tc.status {
				t.Errorf("Status %q, want %q", got, tc.status)
			}
		})
	}
}
