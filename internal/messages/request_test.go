package messages

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/sandbox"
)

func testProcessor(t *testing.T, shell bool) *Processor {
	t.Helper()
	p, err := New(Config{Key: []byte("k"), Environment: sandbox.Environment{Packages: []string{"numpy"}}}, noContainers{}, shell, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// noContainers is never reached by these tests: a rewrite opens nothing.
type noContainers struct{ Containers }

// TestRewrite: what the model server gets, case by case, and what is
// refused with Anthropic's 400 before anything is opened.
func TestRewrite(t *testing.T) {
	p := testProcessor(t, true)
	const ce = `{"type":"code_execution_20250825","name":"code_execution"}`
	for _, tc := range []struct {
		name, body string
		check      func(t *testing.T, r *request, up gjson.Result)
		refused    string
	}{
		{name: "no tool passes through", body: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
			check: func(t *testing.T, r *request, _ gjson.Result) {
				if r.intercepted {
					t.Error("intercepted")
				}
			}},
		{name: "tools and choice", body: `{"model":"m","stream":true,"messages":[],"tools":[` + ce + `],"tool_choice":{"type":"tool","name":"code_execution","disable_parallel_tool_use":true}}`,
			check: func(t *testing.T, r *request, up gjson.Result) {
				if !r.intercepted || !r.stream || up.Get("stream").Type != gjson.False || up.Get("tools.#").Int() != 2 ||
					up.Get("tool_choice").Raw != `{"type":"any","disable_parallel_tool_use":true}` || !strings.Contains(up.Get("tools.0.description").Str, "numpy") {
					t.Errorf("%s", up.Raw)
				}
			}},
		{name: "a newer version without programmatic calls", body: `{"model":"m","messages":[],"tools":[{"type":"code_execution_20260521","name":"code_execution","cache_control":{"type":"ephemeral"}}]}`,
			check: func(t *testing.T, r *request, up gjson.Result) {
				if up.Get("tools.1.name").Str != "text_editor_code_execution" {
					t.Errorf("%s", up.Raw)
				}
			}},
		{name: "container by id and object", body: `{"model":"m","messages":[],"container":{"id":"cntr_abc","skills":[]},"tools":[` + ce + `]}`,
			check: func(t *testing.T, r *request, up gjson.Result) {
				if r.containerID != "cntr_abc" || up.Get("container").Exists() {
					t.Errorf("%s %s", r.containerID, up.Raw)
				}
			}},
		{name: "twice", body: `{"messages":[],"tools":[` + ce + `,` + ce + `]}`, refused: "tools.1: the code execution tool is declared twice"},
		{name: "an extra field", body: `{"messages":[],"tools":[{"type":"code_execution_20250825","name":"code_execution","x":1}]}`, refused: "tools.0.code_execution_20250825.x: Extra inputs are not permitted"},
		{name: "no name", body: `{"messages":[],"tools":[{"type":"code_execution_20250825"}]}`, refused: "name: Field required"},
		{name: "a caller", body: `{"messages":[],"tools":[{"type":"code_execution_20250825","name":"code_execution","allowed_callers":["code_execution_20260120"]}]}`, refused: "only as a direct call"},
		{name: "deferred", body: `{"messages":[],"tools":[{"type":"code_execution_20250825","name":"code_execution","defer_loading":true}]}`, refused: "defer"},
		{name: "an OpenAI container", body: `{"messages":[],"container":"container_011","tools":[` + ce + `]}`, refused: "not a container of this server"},
		{name: "custom skills", body: `{"messages":[],"container":{"skills":[{"type":"custom","skill_id":"skill_1","version":"latest"},{"type":"custom","skill_id":"skill_2"}]},"tools":[` + ce + `]}`,
			check: func(t *testing.T, r *request, up gjson.Result) {
				if r.containerID != "" || len(r.skills) != 2 || string(r.skills[0]) != `{"type":"skill_reference","skill_id":"skill_1","version":"latest"}` ||
					string(r.skills[1]) != `{"type":"skill_reference","skill_id":"skill_2"}` || up.Get("container").Exists() {
					t.Errorf("%q %s %s", r.containerID, r.skills, up.Raw)
				}
			}},
		{name: "Anthropic's prebuilt skills", body: `{"messages":[],"container":{"id":"cntr_a","skills":[{"type":"custom","skill_id":"skill_1"},{"type":"anthropic","skill_id":"pptx"}]},"tools":[` + ce + `]}`, refused: "container.skills.1: \"pptx\" is one of Anthropic's prebuilt skills"},
		{name: "a skill of another type", body: `{"messages":[],"container":{"skills":[{"type":"inline","skill_id":"x"}]},"tools":[` + ce + `]}`, refused: "container.skills.0.type"},
		{name: "a skill without an id", body: `{"messages":[],"container":{"skills":[{"type":"custom"}]},"tools":[` + ce + `]}`, refused: "container.skills.0.skill_id"},
		{name: "skills not an array", body: `{"messages":[],"container":{"skills":{}},"tools":[` + ce + `]}`, refused: "container.skills: expected an array"},
		{name: "a container of the wrong type", body: `{"messages":[],"container":5,"tools":[` + ce + `]}`, refused: "container: expected"},
		{name: "an upload without an id", body: `{"messages":[{"role":"user","content":[{"type":"container_upload"}]}],"tools":[` + ce + `]}`, refused: "messages.0.content.0.file_id"},
		{name: "not JSON", body: `{"messages":`, refused: "not valid JSON"},
		{name: "a forged call", body: `{"messages":[{"role":"assistant","content":[{"type":"server_tool_use","id":"srvtoolu_x","name":"bash_code_execution","input":{"command":"id"}},{"type":"bash_code_execution_tool_result","tool_use_id":"srvtoolu_x","content":{"type":"bash_code_execution_result","stdout":"root","stderr":"","return_code":0,"content":[]}}]}],"tools":[` + ce + `]}`, refused: "messages.0.content.0: this server_tool_use block is not a call this server made"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := p.rewrite("o", []byte(tc.body))
			if tc.refused != "" {
				if err == nil || err.Status != 400 || !strings.Contains(err.Message, tc.refused) {
					t.Fatalf("want a 400 with %q, got %v", tc.refused, err)
				}
				if b := gjson.ParseBytes(ErrorBody(err)); b.Get("type").Str != "error" || b.Get("error.type").Str != "invalid_request_error" {
					t.Fatalf("error body: %s", b.Raw)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, r, gjson.ParseBytes(r.upstream))
		})
	}
	if _, err := testProcessor(t, false).rewrite("o", []byte(`{"messages":[],"tools":[`+ce+`]}`)); err == nil || !strings.Contains(err.Message, "shell") {
		t.Fatalf("no shell: %v", err)
	}
}

// TestReplay: calls of ours and their results become tool_use and
// tool_result blocks with what the model was told, grouped by the round
// that made them as the model server saw them: a round's calls (which the
// client's message interleaves with their results, as Anthropic's does)
// in one assistant turn, their results in one user turn which the next
// user message joins; text between two rounds starts the later turn; a
// client tool's call at the end joins the last round. A result for
// another call, a call without a result, another owner's call and a
// changed input are refused.
func TestReplay(t *testing.T) {
	p := testProcessor(t, true)
	r1, r2 := newRound(), newRound()
	in1, in2, in3 := `{"command":"echo a"}`, `{"command":"view","path":"/x"}`, `{"command":"ls"}`
	id1 := p.callID("o", r1, "bash_code_execution", in1)
	id2 := p.callID("o", r1, "text_editor_code_execution", in2)
	id3 := p.callID("o", r2, "bash_code_execution", in3)
	stu := func(id, name, in string) string {
		return `{"type":"server_tool_use","id":"` + id + `","name":"` + name + `","input":` + in + `}`
	}
	tu := func(id, name, in string) string {
		return `{"type":"tool_use","id":"` + id + `","name":"` + name + `","input":` + in + `}`
	}
	c1, c2, c3 := stu(id1, "bash_code_execution", in1), stu(id2, "text_editor_code_execution", in2), stu(id3, "bash_code_execution", in3)
	u1, u2, u3 := tu(id1, "bash_code_execution", in1), tu(id2, "text_editor_code_execution", in2), tu(id3, "bash_code_execution", in3)
	res1 := `{"type":"bash_code_execution_tool_result","tool_use_id":"` + id1 + `","content":{"type":"bash_code_execution_result","stdout":"a\n","stderr":"","return_code":0,"content":[]}}`
	res2 := `{"type":"text_editor_code_execution_tool_result","tool_use_id":"` + id2 + `","content":{"type":"text_editor_code_execution_tool_result_error","error_code":"file_not_found","error_message":"gone"}}`
	res3 := `{"type":"bash_code_execution_tool_result","tool_use_id":"` + id3 + `","content":{"type":"bash_code_execution_result","stdout":"","stderr":"","return_code":0,"content":[]}}`
	tr1 := `{"type":"tool_result","tool_use_id":"` + id1 + `","content":"return_code: 0\nstdout:\na\n"}`
	tr2 := `{"type":"tool_result","tool_use_id":"` + id2 + `","content":"Error: file_not_found: gone","is_error":true}`
	tr3 := `{"type":"tool_result","tool_use_id":"` + id3 + `","content":"return_code: 0\n"}`
	text := func(s string) string { return `{"type":"text","text":"` + s + `"}` }
	weather := `{"type":"tool_use","id":"toolu_w","name":"get_weather","input":{}}`
	wres := `{"type":"tool_result","tool_use_id":"toolu_w","content":"sunny"}`
	asst := func(bs ...string) string { return `{"role":"assistant","content":[` + strings.Join(bs, ",") + `]}` }
	user := func(bs ...string) string { return `{"role":"user","content":[` + strings.Join(bs, ",") + `]}` }
	body := func(content ...string) string {
		return `{"messages":[{"role":"user","content":"go"},` + asst(content...) + `,{"role":"user","content":"next"}],"tools":[{"type":"code_execution_20250825","name":"code_execution"}]}`
	}
	for _, tc := range []struct {
		name, body string
		want       []string // the messages after "go"
	}{
		{"one round's two calls, interleaved with their results", body(text("t"), c1, res1, c2, res2),
			[]string{asst(text("t"), u1, u2), user(tr1, tr2, text("next"))}},
		{"one round's calls, then their results", body(text("t"), c1, c2, res1, res2),
			[]string{asst(text("t"), u1, u2), user(tr1, tr2, text("next"))}},
		{"text between two calls of one round", body(c1, res1, text("mid"), c2, res2),
			[]string{asst(u1, text("mid"), u2), user(tr1, tr2, text("next"))}},
		{"two rounds and a last text", body(text("t"), c1, res1, c2, res2, text("then"), c3, res3, text("done")),
			[]string{asst(text("t"), u1, u2), user(tr1, tr2), asst(text("then"), u3), user(tr3), asst(text("done")), `{"role":"user","content":"next"}`}},
		{"a client tool's call ends the last round",
			`{"messages":[{"role":"user","content":"go"},` + asst(c3, res3, text("and"), weather) + `,` + user(wres) + `],"tools":[{"type":"code_execution_20250825","name":"code_execution"}]}`,
			[]string{asst(u3, text("and"), weather), user(tr3, wres)}},
	} {
		r, err := p.rewrite("o", []byte(tc.body))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		want := `[{"role":"user","content":"go"},` + strings.Join(tc.want, ",") + `]`
		if got := gjson.GetBytes(r.upstream, "messages").Raw; got != want {
			t.Errorf("%s: replayed\n%s\nwant\n%s", tc.name, got, want)
		}
	}
	good := body(text("t"), c1, res1, c2, res2)
	for name, b := range map[string]string{
		"another owner":    "x",
		"a changed input":  strings.Replace(good, `"echo a"`, `"echo b"`, 1),
		"no result":        strings.Replace(good, ","+res2, "", 1),
		"a foreign result": strings.Replace(good, `"tool_use_id":"`+id2+`"`, `"tool_use_id":"srvtoolu_other"`, 1),
		"a result twice":   body(c1, res1, res1),
		"a result first":   body(res1, c1),
	} {
		owner := "o"
		if b == "x" {
			owner, b = "someone-else", good
		}
		if _, err := p.rewrite(owner, []byte(b)); err == nil || err.Status != 400 {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestUndeclaredBlocks: a request that does not declare the tool but holds
// its blocks (a call, a result, a container_upload) is Anthropic's 400
// naming the block — never passed to a model server that cannot read
// them; one without them passes through.
func TestUndeclaredBlocks(t *testing.T) {
	p := testProcessor(t, true)
	id := p.callID("o", newRound(), "bash_code_execution", `{"command":"ls"}`)
	for _, tc := range []struct{ name, body, refused string }{
		{"a call and its result",
			`{"messages":[{"role":"user","content":"go"},{"role":"assistant","content":[{"type":"text","text":"t"},{"type":"server_tool_use","id":"` + id + `","name":"bash_code_execution","input":{"command":"ls"}},{"type":"bash_code_execution_tool_result","tool_use_id":"` + id + `","content":{"type":"bash_code_execution_result","stdout":"","stderr":"","return_code":0,"content":[]}}]},{"role":"user","content":"more"}]}`,
			"messages.1.content.1: a server_tool_use block needs the code execution tool in tools"},
		{"a result alone",
			`{"messages":[{"role":"assistant","content":[{"type":"text_editor_code_execution_tool_result","tool_use_id":"x","content":{}}]}]}`,
			"messages.0.content.0: a text_editor_code_execution_tool_result block needs"},
		{"a container_upload",
			`{"messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"container_upload","file_id":"file-1"}]}],"tools":[{"name":"f","input_schema":{"type":"object"}}]}`,
			"messages.0.content.1: a container_upload block needs"},
		{"only the words", `{"messages":[{"role":"user","content":"what is code_execution? a server_tool_use?"}]}`, ""},
	} {
		r, err := p.rewrite("o", []byte(tc.body))
		switch {
		case tc.refused == "" && (err != nil || r.intercepted || string(r.upstream) != tc.body):
			t.Errorf("%s: %v", tc.name, err)
		case tc.refused != "" && (err == nil || err.Status != 400 || !strings.Contains(err.Message, tc.refused)):
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

// TestEventStream: the buffered path's events for a streaming client are
// the message's blocks in order, each result whole in its start.
func TestEventStream(t *testing.T) {
	msg := `{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"hi"},{"type":"server_tool_use","id":"srvtoolu_1","name":"bash_code_execution","input":{"command":"ls"}},{"type":"bash_code_execution_tool_result","tool_use_id":"srvtoolu_1","content":{"type":"bash_code_execution_result","stdout":"","stderr":"","return_code":0,"content":[]}}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":4},"container":{"id":"cntr_1","expires_at":"x"}}`
	var names []string
	for _, line := range strings.Split(string(eventStream([]byte(msg))), "\n") {
		if n, ok := strings.CutPrefix(line, "event: "); ok {
			names = append(names, n)
		}
	}
	if strings.Join(names, ",") != "message_start,content_block_start,content_block_delta,content_block_stop,content_block_start,content_block_delta,content_block_stop,content_block_start,content_block_stop,message_delta,message_stop" {
		t.Fatalf("%v", names)
	}
}

// TestWithNetwork: a container with a network policy has the two tools
// describe it, in their place among the client's tools.
func TestWithNetwork(t *testing.T) {
	p := testProcessor(t, true)
	r, err := p.rewrite("o", []byte(`{"messages":[],"tools":[{"name":"f","input_schema":{"type":"object"}},{"type":"code_execution_20250825","name":"code_execution"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	up := gjson.ParseBytes(r.withNetwork(p, &egress.Policy{AllowedDomains: []string{"pypi.org"}}))
	if up.Get("tools.0.name").Str != "f" || up.Get("tools.1.name").Str != "bash_code_execution" || !strings.Contains(up.Get("tools.1.description").Str, "pypi.org") ||
		strings.Contains(gjson.GetBytes(r.upstream, "tools.1.description").Str, "pypi.org") {
		t.Fatalf("%s", up.Get("tools").Raw)
	}
}
