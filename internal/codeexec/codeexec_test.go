package codeexec_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/codeexec"
	"github.com/codeinterp/codeinterp/internal/containerapi"
	"github.com/codeinterp/codeinterp/internal/containers"
	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/memory"
)

// gvisorContainer is a container of a real containers manager on the
// gVisor provider (the test fails, naming what is missing, without runsc).
func gvisorContainer(t *testing.T) containerapi.Container {
	t.Helper()
	m := containers.New(containers.Config{}, memory.New(store.Limits{}, time.Now), sandboxtest.NewProvider(t, "gvisor"), nil)
	t.Cleanup(func() { _ = m.Close() })
	c, err := m.Open(context.Background(), containerapi.Spec{Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// do runs one tool call as the Messages processor does and returns its
// result block's content.
func do(t *testing.T, c containerapi.Container, name, input string) gjson.Result {
	t.Helper()
	call := codeexec.Decode(name, gjson.Parse(input))
	if call.Why != "" {
		t.Fatalf("%s %s: invalid: %s", name, input, call.Why)
	}
	rr, err := c.Shell(context.Background(), call.Request(10*time.Second, 1<<20))
	r := call.Outcome(rr, err)
	return gjson.Parse(r.Content)
}

// TestBashSession: Anthropic's bash is a session — the working directory,
// exported variables and functions of one command are there in the next,
// however it ended (exit, a failure); plain shell variables are not, as
// they are not in a new login shell; a command killed at its timeout is
// execution_time_exceeded and leaves the state before it; files the
// command writes under /mnt/data come back as bash_code_execution_output.
func TestBashSession(t *testing.T) {
	c := gvisorContainer(t)
	steps := []struct {
		cmd, stdout, stderr string
		rc                  int64
		files               int
	}{
		{cmd: "mkdir -p work/sub && cd work/sub && export GREETING='hello world' && f() { echo \"f:$1\"; } && LOCAL=x && pwd", stdout: "/mnt/data/work/sub\n"},
		{cmd: `pwd; echo "$GREETING"; f 1; echo "local=[$LOCAL]"`, stdout: "/mnt/data/work/sub\nhello world\nf:1\nlocal=[]\n"},
		{cmd: "cd .. && export N=2; exit 7", rc: 7},
		{cmd: `pwd; echo $N; echo out > result.txt; echo err >&2; false`, stdout: "/mnt/data/work\n2\n", stderr: "err\n", rc: 1, files: 1},
		{cmd: "echo 'quote'\"'\"'s'; unset N; echo ${N:-unset}", stdout: "quote's\nunset\n"},
		{cmd: "echo ${N:-gone}", stdout: "gone\n"},
	}
	for _, s := range steps {
		r := do(t, c, codeexec.BashName, `{"command":`+jsonQuote(s.cmd)+`}`)
		if r.Get("type").Str != "bash_code_execution_result" || r.Get("stdout").Str != s.stdout || r.Get("stderr").Str != s.stderr ||
			r.Get("return_code").Int() != s.rc || len(r.Get("content").Array()) != s.files {
			t.Fatalf("%q: %s", s.cmd, r.Raw)
		}
		for _, f := range r.Get("content").Array() {
			if f.Get("type").Str != "bash_code_execution_output" || !strings.HasPrefix(f.Get("file_id").Str, "cfile_") {
				t.Fatalf("%q: output file %s", s.cmd, f.Raw)
			}
		}
	}
	call := codeexec.Decode(codeexec.BashName, gjson.Parse(`{"command":"cd / && export T=1 && sleep 30"}`))
	rr, err := c.Shell(context.Background(), call.Request(time.Second, 1<<20))
	if r := gjson.Parse(call.Outcome(rr, err).Content); r.Get("type").Str != "bash_code_execution_tool_result_error" || r.Get("error_code").Str != "execution_time_exceeded" {
		t.Fatalf("a command past its timeout: %s (%v)", r.Raw, err)
	}
	if r := do(t, c, codeexec.BashName, `{"command":"pwd; echo ${T:-none}"}`); r.Get("stdout").Str != "/mnt/data/work\nnone\n" {
		t.Fatalf("the state after a timeout: %s", r.Raw)
	}
}

// TestEditor: view with Anthropic's numbers (start_line, num_lines,
// total_lines; the model is told each line with its number), create and
// is_file_update, str_replace with exactly one match (the diff's lines),
// and each error as the result Anthropic gives: no match, several,
// a missing file, a bad view_range; relative paths follow the bash
// session's working directory.
func TestEditor(t *testing.T) {
	c := gvisorContainer(t)
	r := do(t, c, codeexec.EditorName, `{"command":"create","path":"/mnt/data/app.py","file_text":"def f():\n    return 1\n\nprint(f())\n"}`)
	if r.Raw != `{"type":"text_editor_code_execution_create_result","is_file_update":false}` {
		t.Fatalf("create: %s", r.Raw)
	}
	r = do(t, c, codeexec.EditorName, `{"command":"view","path":"/mnt/data/app.py"}`)
	// Anthropic's view result field by field (the SDKs' TextEditorCodeExecutionViewResultBlock:
	// content the file's text as it is, not numbered; the three counts).
	if r.Raw != `{"type":"text_editor_code_execution_view_result","file_type":"text","content":"def f():\n    return 1\n\nprint(f())\n","num_lines":4,"start_line":1,"total_lines":4}` {
		t.Fatalf("view: %s", r.Raw)
	}
	if got := codeexec.ModelText(codeexec.EditorName, gjson.Parse(`{"command":"view","path":"/mnt/data/app.py"}`), r); got != "1: def f():\n2:     return 1\n3: \n4: print(f())\n" {
		t.Fatalf("the model is told: %q", got)
	}
	r = do(t, c, codeexec.EditorName, `{"command":"view","path":"/mnt/data/app.py","view_range":[2,-1]}`)
	if r.Get("content").Str != "    return 1\n\nprint(f())\n" || r.Get("num_lines").Int() != 3 || r.Get("start_line").Int() != 2 || r.Get("total_lines").Int() != 4 {
		t.Fatalf("view_range: %s", r.Raw)
	}
	r = do(t, c, codeexec.EditorName, `{"command":"str_replace","path":"/mnt/data/app.py","old_str":"return 1","new_str":"x = 2\n    return x"}`)
	if r.Raw != `{"type":"text_editor_code_execution_str_replace_result","old_start":2,"old_lines":1,"new_start":2,"new_lines":2,"lines":["-    return 1","+    x = 2","+    return x"]}` {
		t.Fatalf("str_replace: %s", r.Raw)
	}
	if r := do(t, c, codeexec.BashName, `{"command":"python3 app.py && cd /tmp"}`); r.Get("stdout").Str != "2\n" {
		t.Fatalf("the edited file: %s", r.Raw)
	}
	// The session is now in /tmp: a relative path is there.
	if r := do(t, c, codeexec.EditorName, `{"command":"create","path":"notes.txt","file_text":"a\n"}`); r.Get("is_file_update").Type != gjson.False {
		t.Fatalf("create relative: %s", r.Raw)
	}
	if r := do(t, c, codeexec.BashName, `{"command":"cat /tmp/notes.txt"}`); r.Get("stdout").Str != "a\n" {
		t.Fatalf("the relative file: %s", r.Raw)
	}
	if r := do(t, c, codeexec.EditorName, `{"command":"create","path":"/mnt/data/app.py","file_text":"x = x\nx = x\n"}`); r.Get("is_file_update").Type != gjson.True {
		t.Fatalf("create over a file: %s", r.Raw)
	}
	for _, e := range []struct{ input, code, msg string }{
		{`{"command":"str_replace","path":"/mnt/data/app.py","old_str":"x = x","new_str":"y"}`, "invalid_tool_input", "Multiple occurrences of old_str `x = x` in lines [1, 2]"},
		{`{"command":"str_replace","path":"/mnt/data/app.py","old_str":"nowhere","new_str":"y"}`, "invalid_tool_input", "did not appear verbatim"},
		{`{"command":"view","path":"/mnt/data/missing.txt"}`, "file_not_found", "does not exist"},
		{`{"command":"str_replace","path":"/mnt/data/missing.txt","old_str":"a","new_str":"b"}`, "file_not_found", "does not exist"},
		{`{"command":"view","path":"/mnt/data/app.py","view_range":[5,9]}`, "invalid_tool_input", "Invalid view_range"},
	} {
		r := do(t, c, codeexec.EditorName, e.input)
		if r.Get("type").Str != "text_editor_code_execution_tool_result_error" || r.Get("error_code").Str != e.code || !strings.Contains(r.Get("error_message").Str, e.msg) {
			t.Errorf("%s: %s", e.input, r.Raw)
		}
	}
}

// TestDecode: inputs the tools cannot take are invalid_tool_input before
// anything runs.
func TestDecode(t *testing.T) {
	for _, tc := range []struct{ name, input, why string }{
		{codeexec.BashName, `{}`, "command"},
		{codeexec.BashName, `{"command":5}`, "string"},
		{codeexec.BashName, `[1]`, "object"},
		{codeexec.EditorName, `{"command":"delete","path":"a"}`, "view, create or str_replace"},
		{codeexec.EditorName, `{"command":"view"}`, "path"},
		{codeexec.EditorName, `{"command":"create","path":"a"}`, "file_text"},
		{codeexec.EditorName, `{"command":"str_replace","path":"a","new_str":"b"}`, "old_str"},
		{codeexec.EditorName, `{"command":"view","path":"a","view_range":[1]}`, "view_range"},
		{codeexec.EditorName, `{"command":"view","path":"a","view_range":[1.5,2]}`, "view_range"},
	} {
		c := codeexec.Decode(tc.name, gjson.Parse(tc.input))
		if !strings.Contains(c.Why, tc.why) {
			t.Errorf("%s %s: %q", tc.name, tc.input, c.Why)
		}
		if r := codeexec.ErrorResult(tc.name, codeexec.ErrInvalidInput, c.Why); !r.IsError || gjson.Get(r.Content, "error_code").Str != "invalid_tool_input" {
			t.Errorf("%s", r.Content)
		}
	}
}

func jsonQuote(s string) string {
	b := strings.Builder{}
	b.WriteString(`"`)
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteString(`"`)
	return b.String()
}

// TestHostile: what a model (or a prompt injection steering it) may send.
// Each is refused or contained with Anthropic's result, and the session
// goes on: NUL bytes, a file_text past the sandbox's source bound, a flood
// of output (cut, said so), binary output, a FIFO or the sandbox's control
// FIFO through a link (never opened by the editor), a command that kills
// its own shell (no state saved, the earlier state kept), one that removes
// the EXIT trap, a path outside /mnt/data (the sandbox's own view only).
func TestHostile(t *testing.T) {
	c := gvisorContainer(t)
	if r := do(t, c, codeexec.BashName, `{"command":"cd /tmp && export KEEP=1"}`); r.Get("return_code").Int() != 0 {
		t.Fatal(r.Raw)
	}
	for _, tc := range []struct{ name, input string }{
		{codeexec.BashName, `{"command":"echo a\u0000b"}`},
		{codeexec.EditorName, `{"command":"view","path":"/mnt/data/a\u0000b"}`},
	} {
		if call := codeexec.Decode(tc.name, gjson.Parse(tc.input)); !strings.Contains(call.Why, "NUL") {
			t.Errorf("%s: %q", tc.input, call.Why)
		}
	}
	big := strings.Repeat("x", 300<<10)
	call := codeexec.Decode(codeexec.EditorName, gjson.Parse(`{"command":"create","path":"/mnt/data/big","file_text":"`+big+`"}`))
	rr, err := c.Shell(context.Background(), call.Request(10*time.Second, 1<<20))
	if r := gjson.Parse(call.Outcome(rr, err).Content); r.Get("error_code").Str != "invalid_tool_input" {
		t.Errorf("a file_text past the bound: %s (%v)", r.Raw, err)
	}
	r := do(t, c, codeexec.BashName, `{"command":"yes | head -c 5000000"}`)
	if len(r.Get("stdout").Str) > 1<<20 || !strings.Contains(r.Get("stderr").Str, "output truncated") {
		t.Errorf("a flood: %d bytes, stderr %q", len(r.Get("stdout").Str), r.Get("stderr").Str)
	}
	if r := do(t, c, codeexec.BashName, `{"command":"printf '\\xff\\xfeok'"}`); r.Get("stdout").Str != "\ufffdok" {
		t.Errorf("binary output: %s", r.Raw)
	}
	if r := do(t, c, codeexec.BashName, `{"command":"mkfifo /tmp/f; ln -sf /run/ci/in /tmp/ctl; echo ok"}`); r.Get("stdout").Str != "ok\n" {
		t.Fatalf("setup: %s", r.Raw)
	}
	for _, p := range []string{"/tmp/f", "/tmp/ctl", "/dev/zero"} {
		r := do(t, c, codeexec.EditorName, `{"command":"view","path":"`+p+`"}`)
		if r.Get("error_code").Str != "invalid_tool_input" || !strings.Contains(r.Get("error_message").Str, "not a regular file") {
			t.Errorf("view %s: %s", p, r.Raw)
		}
	}
	if r := do(t, c, codeexec.EditorName, `{"command":"create","path":"/tmp/ctl","file_text":"x"}`); r.Get("error_code").Str != "invalid_tool_input" {
		t.Errorf("create over the control FIFO's link: %s", r.Raw)
	}
	if r := do(t, c, codeexec.BashName, `{"command":"cd / && export KEEP=2 && kill -9 $$"}`); r.Get("return_code").Int() != 137 {
		t.Errorf("a shell that kills itself: %s", r.Raw)
	}
	if r := do(t, c, codeexec.BashName, `{"command":"pwd; echo $KEEP"}`); r.Get("stdout").Str != "/tmp\n1\n" {
		t.Errorf("the state after a killed shell: %s", r.Raw)
	}
	if r := do(t, c, codeexec.BashName, `{"command":"trap - EXIT; cd /; export KEEP=3"}`); r.Get("return_code").Int() != 0 {
		t.Errorf("%s", r.Raw)
	}
	if r := do(t, c, codeexec.BashName, `{"command":"pwd; echo $KEEP; id -u; cat /etc/hostname 2>&1 | head -1"}`); !strings.HasPrefix(r.Get("stdout").Str, "/tmp\n1\n65534\n") {
		t.Errorf("after a removed trap: %s", r.Raw)
	}
	if r := do(t, c, codeexec.EditorName, `{"command":"view","path":"/etc/passwd"}`); strings.Contains(r.Get("content").Str, "root:x:0:0:root:/root") && !strings.Contains(r.Get("content").Str, "65534") {
		t.Errorf("the host's /etc/passwd: %s", r.Raw)
	}
}
