package interceptor

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/fixtures"
	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
)

func shellLiveRequest(extra string) []byte {
	return []byte(`{"model":"gpt-5.6","input":"count","tools":[{"type":"code_interpreter","container":{"type":"auto"}},` +
		`{"type":"shell","environment":{"type":"container_auto"}}],"store":false,"stream":true` + extra + `}`)
}

// TestShellLive: with stream:true a hosted shell call streams live on
// gVisor, as OpenAI's events: the shell_call added, its commands as the
// model writes them (shell_call_command.added/delta/done, no item_id, the
// arguments cut into single characters), the shell_call done when it runs,
// the shell_call_output added, its output as content deltas and a .done
// per command with the command's whole output once the call ended (its
// exit code is known only then; max_output_length applied to both),
// the output item done, then the model's answer. Every event decodes
// typed with openai-go, and its accumulator rebuilds the response.
func TestShellLive(t *testing.T) {
	p := sandboxtest.NewProvider(t, "gvisor")
	ic := newLoopInterceptor(t, p, nil)
	su := newScriptedUpstream(t,
		step{items: []string{fcRaw("call_sh", "shell", `{"commands":["printf 'h\u00e9llo\\n'; echo oops >&2","exit 3","seq 1 100"],"timeout_ms":null,"max_output_length":20}`)}},
		step{items: []string{msgItem("done")}},
	)
	w := newRecWriter()
	u := newLiveUpstream(t, su, w)
	u.runeCut = true
	if err := liveRun(context.Background(), t, ic, u, shellLiveRequest("")); err != nil {
		t.Fatal(err)
	}
	evs := parseSSE(t, string(w.body()))
	fixtures.CheckStreamInvariants(t, evs)
	acc := accumulate(t, evs)
	var steps []string
	cmds := map[int64]*strings.Builder{}
	outs := map[int64]*strings.Builder{}
	var shID, shoID string
	for _, e := range evs {
		var ev responses.ResponseStreamEventUnion
		if err := ev.UnmarshalJSON([]byte(e.Data.Raw)); err != nil {
			t.Fatalf("openai-go: %s: %v", e.Name, err)
		}
		d := e.Data
		switch v := ev.AsAny().(type) {
		case responses.ResponseOutputItemAddedEvent:
			steps = append(steps, "added:"+v.Item.Type+":"+v.Item.Status)
			if v.Item.Type == "shell_call" {
				shID = v.Item.ID
			}
			if v.Item.Type == "shell_call_output" {
				shoID = v.Item.ID
			}
		case responses.ResponseOutputItemDoneEvent:
			steps = append(steps, "done:"+v.Item.Type)
		case responses.ResponseShellCallCommandAddedEvent:
			if d.Get("item_id").Exists() || v.OutputIndex != 0 {
				t.Errorf("command.added: %s", d.Raw)
			}
			cmds[v.CommandIndex] = &strings.Builder{}
			steps = append(steps, "command.added")
		case responses.ResponseShellCallCommandDeltaEvent:
			cmds[v.CommandIndex].WriteString(v.Delta)
		case responses.ResponseShellCallCommandDoneEvent:
			if got := cmds[v.CommandIndex].String(); got != v.Command {
				t.Errorf("command %d: deltas %q, done %q", v.CommandIndex, got, v.Command)
			}
			steps = append(steps, "command.done")
		case responses.ResponseShellCallOutputContentDeltaEvent:
			if v.ItemID != shoID || v.OutputIndex != 1 {
				t.Errorf("output delta: %s", d.Raw)
			}
			if outs[v.CommandIndex] == nil {
				outs[v.CommandIndex] = &strings.Builder{}
				steps = append(steps, "output.delta")
			}
			outs[v.CommandIndex].WriteString(v.Delta.Stdout + v.Delta.Stderr)
		case responses.ResponseShellCallOutputContentDoneEvent:
			if v.ItemID != shoID || len(v.Output) != 1 {
				t.Errorf("output done: %s", d.Raw)
			}
			steps = append(steps, "output.done")
		}
	}
	want := "added:shell_call:in_progress command.added command.done command.added command.done command.added command.done done:shell_call " +
		"added:shell_call_output:in_progress output.delta output.delta output.done output.done output.done done:shell_call_output added:message:in_progress done:message"
	if got := strings.Join(steps, " "); got != want {
		t.Errorf("events:\n got %s\nwant %s", got, want)
	}
	if cmds[0].String() != `printf 'héllo\n'; echo oops >&2` || cmds[2].String() != "seq 1 100" {
		t.Errorf("commands: %q %q", cmds[0].String(), cmds[2].String())
	}
	if got := outs[0].String(); got != "héllo\noops\n" {
		t.Errorf("command 0's output deltas: %q", got)
	}
	if got := outs[2].String(); got != "1\n2\n3\n4\n5\n6\n7\n8\n9\n10" { // max_output_length 20
		t.Errorf("command 2's output deltas: %q (max_output_length 20)", got)
	}
	var out responses.ResponseFunctionShellToolCallOutput
	for _, it := range acc.Output {
		if it.Type == "shell_call_output" {
			out = it.AsShellCallOutput()
		}
	}
	if out.ID != shoID || len(out.Output) != 3 || out.Output[1].Outcome.ExitCode != 3 || out.Output[2].Stdout != "1\n2\n3\n4\n5\n6\n7\n8\n9\n10" || acc.Output[0].ID != shID {
		t.Errorf("the accumulated response: %s", acc.RawJSON())
	}
	// The model was told every command's output.
	if out := outputOf(t, su.requests()[1], "call_sh"); !strings.Contains(out, "exit code: 3") {
		t.Errorf("the model was told %q", out)
	}
}

// TestShellLiveWhileRunning: a command's output reaches the client while
// the command runs. The command prints, then waits for a file that never
// comes (the session runs one action at a time, so nothing else can write
// it): the client sees the output delta, and no end of the command, before
// it leaves; the run is then cancelled.
func TestShellLiveWhileRunning(t *testing.T) {
	p := sandboxtest.NewProvider(t, "gvisor", func(c *pool.Config) { c.Limits.RunTimeout = 10 * time.Minute })
	ic := newLoopInterceptor(t, p, nil)
	su := newScriptedUpstream(t, step{items: []string{fcRaw("call_sh", "shell",
		`{"commands":["echo ready; while [ ! -e /mnt/data/never ]; do sleep 0.1; done; echo after"],"timeout_ms":600000,"max_output_length":null}`)}})
	w := newRecWriter()
	u := newLiveUpstream(t, su, w)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	seen := make(chan bool, 1)
	go func() {
		seen <- w.waitFor(func(e sseEvent) bool {
			return e.Name == "response.shell_call_output_content.delta" && e.Data.Get("delta.stdout").Str == "ready\n"
		}, 2*time.Minute)
		cancel()
	}()
	err := liveRun(ctx, t, ic, u, shellLiveRequest(""))
	if !<-seen {
		t.Fatalf("the command's output never reached the client while it ran: %s", w.body())
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("StreamResponse: %v, want context.Canceled", err)
	}
	for _, e := range parseSSE(t, string(w.body())) {
		if e.Name == "response.shell_call_output_content.done" || e.Name == "response.shell_call_output_content.delta" && strings.Contains(e.Data.Raw, "after") {
			t.Fatalf("the command ended before the client left: %s", e.Data.Raw)
		}
	}
}

// TestShellSSEBuffered: the spliced response's events (a client whose
// stream is not live) carry the same shell events, typed.
func TestShellSSEBuffered(t *testing.T) {
	p := sandboxtest.NewProvider(t, "gvisor")
	ic := newLoopInterceptor(t, p, nil)
	su := newScriptedUpstream(t,
		step{items: []string{fcRaw("call_sh", "shell", `{"commands":["echo one","echo two >&2"],"timeout_ms":null,"max_output_length":null}`)}},
		step{items: []string{msgItem("done")}},
	)
	res := bufferedResult(t, ic, su, jsonx.EditObject(string(shellLiveRequest("")), jsonx.Set("stream", "false")))
	final := gjson.ParseBytes(res.Body)
	if final.Get("output.0.type").Str != "shell_call" || final.Get("output.1.output.1.stderr").Str != "two\n" {
		t.Fatalf("buffered: %s", res.Body)
	}
}
