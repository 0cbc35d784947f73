package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/conversations"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"
)

// The hosted shell end to end (issue 39): a real `extproc dev` with the
// gVisor provider, the scripted model calling the shell function with an
// array of commands, openai-go decoding every item and event typed.

// shellDevConfig is `extproc dev` on gVisor with a small pool.
const shellDevConfig = "sandbox:\n  provider: gvisor\n  max_sessions: 6\n  warm_workers: 1\n  isolation:\n    cgroup_parent: /codeinterp-e2e-shell\nlogging:\n  level: info\n  format: json\n"

// The shell conversation: a shell command writes a file, Python reads it
// in the next turn (one container for both tools), a last shell command
// reads it again. The model decides by the turn's user message.
var shellPrompts = [3]string{
	"Write 41 to n.txt with the shell.",
	"Add one to it in Python.",
	"Show the file and the directory with the shell.",
}

var shellCommands = [3][]string{
	{"echo 41 > n.txt", "cat n.txt"},
	{"print(int(open('n.txt').read()) + 1)"}, // a Python cell
	{"cat n.txt; ls", "echo oops >&2; exit 3"},
}

// shellScript: turn k's call, then a message quoting what the model was
// told; in turn 3 the model checks it was shown turn 1's shell call and
// output and turn 2's cell (replay).
func shellScript(m **model) script {
	return func(t testing.TB, c *convo) reply {
		turn, since := nodeTurnOf(c, shellPrompts[:])
		answered := slices.ContainsFunc(since, func(it gjson.Result) bool { return it.Get("type").Str == "function_call_output" })
		switch {
		case turn < 0:
			if strings.HasPrefix(c.userTextLast(), "RUN:") {
				if !answered {
					return reply{items: []string{(*m).shellCall(strings.Split(strings.TrimPrefix(c.userTextLast(), "RUN:"), "\n")...)}}
				}
				return reply{items: []string{(*m).message("told: " + lastOutputs(c)[0].Get("output").Str)}}
			}
			t.Errorf("model: unexpected request %q", c.userTextLast())
			return reply{items: []string{(*m).message("?")}}
		case answered:
			return reply{items: []string{(*m).message("told: " + lastOutputs(c)[0].Get("output").Str)}}
		case turn == 1:
			return reply{items: []string{(*m).call(shellCommands[1][0])}}
		case turn == 2 && !shownShell(c, shellCommands[0], "41"):
			return reply{items: []string{(*m).message("I was not shown the first shell call.")}}
		}
		return reply{items: []string{(*m).shellCall(shellCommands[turn]...)}}
	}
}

// userTextLast is the text of the last user message.
func (c *convo) userTextLast() string {
	for i := len(c.items) - 1; i >= 0; i-- {
		it := c.items[i]
		if it.Get("role").Str == "user" {
			if ct := it.Get("content"); ct.Type == gjson.String {
				return ct.Str
			}
			return it.Get("content.0.text").Str
		}
	}
	return ""
}

// nodeTurnOf finds the turn of a request among prompts by its last user
// message (-1: none), and the items after that message.
func nodeTurnOf(c *convo, prompts []string) (int, []gjson.Result) {
	for i := len(c.items) - 1; i >= 0; i-- {
		if c.items[i].Get("role").Str == "user" {
			return slices.Index(prompts, c.userTextLast()), c.items[i+1:]
		}
	}
	return -1, nil
}

// shownShell reports whether the model was shown a shell function call of
// commands and an output holding want (a replayed turn).
func shownShell(c *convo, commands []string, want string) bool {
	ids := map[string]bool{}
	for _, it := range c.items {
		switch it.Get("type").Str {
		case "function_call":
			var got []string
			gjson.Get(it.Get("arguments").Str, "commands").ForEach(func(_, v gjson.Result) bool { got = append(got, v.Str); return true })
			if it.Get("name").Str == "shell" && slices.Equal(got, commands) {
				ids[it.Get("call_id").Str] = true
			}
		case "function_call_output":
			if ids[it.Get("call_id").Str] && strings.Contains(it.Get("output").Str, want) {
				return true
			}
		}
	}
	return false
}

// shellTools declares both hosted tools on one auto container.
func shellTools() []responses.ToolUnionParam {
	return []responses.ToolUnionParam{
		responses.ToolParamOfCodeInterpreter(responses.ToolCodeInterpreterContainerCodeInterpreterContainerAutoParam{}),
		{OfShell: &responses.FunctionShellToolParam{Environment: responses.FunctionShellToolEnvironmentUnionParam{
			OfContainerAuto: &responses.ContainerAutoParam{}}}},
	}
}

func shellItems(r *responses.Response) ([]responses.ResponseFunctionShellToolCall, []responses.ResponseFunctionShellToolCallOutput) {
	var calls []responses.ResponseFunctionShellToolCall
	var outs []responses.ResponseFunctionShellToolCallOutput
	for _, it := range r.Output {
		switch it.Type {
		case "shell_call":
			calls = append(calls, it.AsShellCall())
		case "shell_call_output":
			outs = append(outs, it.AsShellCallOutput())
		}
	}
	return calls, outs
}

// TestShellThroughDev: the hosted shell through `extproc dev` on gVisor.
//   - A three-turn conversation (shell, Python, shell) carried on by
//     previous_response_id, a conversation and item_reference, streamed
//     and not: each turn's items decoded typed, one container for both
//     tools in every turn, the model shown the earlier shell call and its
//     output as the function call it made.
//   - container_reference: files uploaded by the Containers/Files API are
//     read by a command; a file a command writes is listed and downloaded.
//   - background with stream: a stream dropped early and resumed by
//     starting_after carries the shell events, typed, with the rest.
func TestShellThroughDev(t *testing.T) {
	sh := loadShapes(t)
	bin := buildExtproc(t)
	var m *model
	m = newModel(t, sh, shellScript(&m))
	m.live = true
	base := startDev(t, bin, m.URL(), shellDevConfig)
	c := openai.NewClient(option.WithBaseURL(base+"/"), option.WithAPIKey(apiKey), option.WithMaxRetries(0))
	ctx := context.Background()

	for _, tc := range []struct {
		mode   string
		stream bool
	}{
		{"previous_response_id", false}, {"previous_response_id", true},
		{"conversation", false}, {"conversation", true},
		{"item_reference", true},
	} {
		name := tc.mode
		if tc.stream {
			name += "+stream"
		}
		t.Run(name, func(t *testing.T) {
			var conv *conversations.Conversation
			if tc.mode == "conversation" {
				var err error
				if conv, err = c.Conversations.New(ctx, conversations.ConversationNewParams{}); err != nil {
					t.Fatal(err)
				}
			}
			var history []responses.ResponseInputItemUnionParam
			var prev, container string
			for k, prompt := range shellPrompts {
				p := responses.ResponseNewParams{Model: "gpt-5.6", Tools: shellTools(),
					Include: []responses.ResponseIncludable{responses.ResponseIncludableCodeInterpreterCallOutputs}}
				switch tc.mode {
				case "previous_response_id":
					if prev != "" {
						p.PreviousResponseID = openai.String(prev)
					}
					p.Input = responses.ResponseNewParamsInputUnion{OfString: openai.String(prompt)}
				case "conversation":
					p.Conversation = responses.ResponseNewParamsConversationUnion{OfString: openai.String(conv.ID)}
					p.Input = responses.ResponseNewParamsInputUnion{OfString: openai.String(prompt)}
				default:
					history = append(history, responses.ResponseInputItemUnionParam{OfMessage: &responses.EasyInputMessageParam{
						Role: responses.EasyInputMessageRoleUser, Content: responses.EasyInputMessageContentUnionParam{OfString: openai.String(prompt)}}})
					p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: history}
				}
				var r *responses.Response
				if tc.stream {
					var evs []responses.ResponseStreamEventUnion
					var err error
					r, evs, err = readStream(c.Responses.NewStreaming(ctx, p), nil)
					if err != nil {
						t.Fatal(err)
					}
					if k != 1 {
						checkShellEvents(t, evs, shellCommands[k])
					}
				} else {
					var err error
					if r, err = c.Responses.New(ctx, p); err != nil {
						t.Fatal(err)
					}
				}
				prev = r.ID
				if tc.mode == "item_reference" {
					for _, it := range r.Output {
						history = append(history, responses.ResponseInputItemUnionParam{OfItemReference: &responses.ResponseInputItemItemReferenceParam{ID: it.ID}})
					}
				}
				calls, outs := shellItems(r)
				if k == 1 {
					ci := ciCalls(r)
					if len(ci) != 1 || ci[0].ContainerID != container || len(ci[0].Outputs) == 0 || ci[0].Outputs[0].Logs != "42\n" {
						t.Fatalf("turn 2: %+v; want the cell in container %s printing 42 (the shell's file)", ci, container)
					}
					continue
				}
				if len(calls) != 1 || len(outs) != 1 {
					t.Fatalf("turn %d: %d shell calls, %d outputs: %s", k+1, len(calls), len(outs), r.RawJSON())
				}
				call, out := calls[0], outs[0]
				if !slices.Equal(call.Action.Commands, shellCommands[k]) || call.Status != "completed" || call.Environment.Type != "container_reference" ||
					!strings.HasPrefix(call.Environment.ContainerID, "cntr_") || out.CallID != call.CallID || out.Status != "completed" {
					t.Fatalf("turn %d: call %s, output %s", k+1, call.RawJSON(), out.RawJSON())
				}
				if k == 0 {
					container = call.Environment.ContainerID
				} else if call.Environment.ContainerID != container {
					t.Errorf("turn 3 ran in %s, turn 1 in %s", call.Environment.ContainerID, container)
				}
				o := out.Output
				switch {
				case len(o) != 2 || o[0].Outcome.Type != "exit" || o[0].Outcome.ExitCode != 0:
					t.Errorf("turn %d: output %s", k+1, out.RawJSON())
				case k == 0 && (o[0].Stdout != "" || o[1].Stdout != "41\n"):
					t.Errorf("turn 1: output %s", out.RawJSON())
				case k == 2 && (o[0].Stdout != "41\nn.txt\n" || o[1].Stderr != "oops\n" || o[1].Outcome.ExitCode != 3):
					t.Errorf("turn 3: output %s", out.RawJSON())
				}
				if k == 2 && !strings.HasPrefix(r.OutputText(), "told: ") {
					t.Errorf("turn 3: the model answered %q (not shown turn 1's shell call?)", r.OutputText())
				}
			}
		})
	}

	t.Run("container_reference+files", func(t *testing.T) {
		ctr, err := c.Containers.New(ctx, openai.ContainerNewParams{Name: "shell"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Containers.Files.New(ctx, ctr.ID, openai.ContainerFileNewParams{
			File: openai.File(strings.NewReader("b,2\na,1\nc,3\n"), "in.csv", "text/csv")}); err != nil {
			t.Fatal(err)
		}
		p := responses.ResponseNewParams{Model: "gpt-5.6",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("RUN:wc -l < in.csv\nsort in.csv > out.txt && echo sorted")},
			Tools: []responses.ToolUnionParam{{OfShell: &responses.FunctionShellToolParam{Environment: responses.FunctionShellToolEnvironmentUnionParam{
				OfContainerReference: &responses.ContainerReferenceParam{ContainerID: ctr.ID}}}}}}
		r, err := c.Responses.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		calls, outs := shellItems(r)
		if len(calls) != 1 || calls[0].Environment.ContainerID != ctr.ID || len(outs) != 1 || len(outs[0].Output) != 2 ||
			outs[0].Output[0].Stdout != "3\n" || outs[0].Output[1].Stdout != "sorted\n" {
			t.Fatalf("the commands on the uploaded file: %s", r.RawJSON())
		}
		var fileID string
		deadline := time.Now().Add(time.Minute)
		for fileID == "" && time.Now().Before(deadline) {
			list, err := c.Containers.Files.List(ctx, ctr.ID, openai.ContainerFileListParams{})
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range list.Data {
				if strings.HasSuffix(f.Path, "/out.txt") {
					fileID = f.ID
				}
			}
			if fileID == "" {
				time.Sleep(200 * time.Millisecond)
			}
		}
		if fileID == "" {
			t.Fatal("the file the command wrote is not among the container's files")
		}
		resp, err := c.Containers.Files.Content.Get(ctx, ctr.ID, fileID)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "a,1\nb,2\nc,3\n" {
			t.Errorf("out.txt downloaded as %q", b)
		}
	})

	t.Run("background+resume", func(t *testing.T) {
		cmds := []string{"echo one", "sleep 1; echo two"}
		p := responses.ResponseNewParams{Model: "gpt-5.6", Store: openai.Bool(true), Background: openai.Bool(true),
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("RUN:" + strings.Join(cmds, "\n"))},
			Tools: shellTools()}
		st := c.Responses.NewStreaming(ctx, p)
		var id string
		var seq int64
		for st.Next() {
			ev := st.Current()
			id, seq = ev.Response.ID, ev.SequenceNumber
			if ev.Type == "response.created" {
				break // the client drops the stream
			}
		}
		st.Close()
		if id == "" {
			t.Fatalf("no response.created: %v", st.Err())
		}
		r, evs, err := readStream(c.Responses.GetStreaming(ctx, id, responses.ResponseGetParams{StartingAfter: openai.Int(seq)}), nil)
		if err != nil {
			t.Fatal(err)
		}
		if evs[0].SequenceNumber != seq+1 {
			t.Errorf("the resumed stream starts at %d, want %d", evs[0].SequenceNumber, seq+1)
		}
		checkShellEvents(t, evs, cmds)
		if _, outs := shellItems(r); len(outs) != 1 || len(outs[0].Output) != 2 || outs[0].Output[1].Stdout != "two\n" {
			t.Errorf("the completed background response: %s", r.RawJSON())
		}
	})
}

// checkShellEvents: a stream's shell events, decoded typed by openai-go —
// the commands as the model wrote them (added, delta, done per command),
// the output's deltas before its done, a done per command, the items'
// added and done.
func checkShellEvents(t *testing.T, evs []responses.ResponseStreamEventUnion, commands []string) {
	t.Helper()
	var written = make([]string, len(commands))
	var doneCmds, outDone int
	var outDelta string
	var kinds []string
	for _, ev := range evs {
		switch ev.Type {
		case "response.shell_call_command.delta":
			e := ev.AsResponseShellCallCommandDelta()
			if int(e.CommandIndex) < len(written) {
				written[e.CommandIndex] += e.Delta
			}
		case "response.shell_call_command.done":
			e := ev.AsResponseShellCallCommandDone()
			if int(e.CommandIndex) >= len(commands) || e.Command != commands[e.CommandIndex] {
				t.Errorf("shell_call_command.done %s", e.RawJSON())
			}
			doneCmds++
		case "response.shell_call_output_content.delta":
			e := ev.AsResponseShellCallOutputContentDelta()
			if e.ItemID == "" {
				t.Errorf("an output delta without item_id: %s", e.RawJSON())
			}
			outDelta += e.Delta.Stdout + e.Delta.Stderr
		case "response.shell_call_output_content.done":
			e := ev.AsResponseShellCallOutputContentDone()
			if len(e.Output) == 0 {
				t.Errorf("an output done without its output: %s", e.RawJSON())
			}
			outDone++
		case "response.output_item.added", "response.output_item.done":
			if typ := ev.Item.Type; typ == "shell_call" || typ == "shell_call_output" {
				kinds = append(kinds, strings.TrimPrefix(ev.Type, "response.output_item.")+":"+typ)
			}
		}
	}
	if !slices.Equal(written, commands) || doneCmds != len(commands) || outDone != len(commands) || outDelta == "" {
		t.Errorf("shell events: commands written %q, %d command dones, output deltas %q, %d output dones", written, doneCmds, outDelta, outDone)
	}
	if want := []string{"added:shell_call", "done:shell_call", "added:shell_call_output", "done:shell_call_output"}; !slices.Equal(kinds, want) {
		t.Errorf("shell items in the stream: %v, want %v", kinds, want)
	}
}

// TestNodeShell: the hosted shell's conversation (shell, Python, shell on
// one container) through `extproc dev` on gVisor with the OpenAI Node SDK
// (7.59.0: turn 1 streamed, every shell event as the SDK parsed it, then
// previous_response_id) and with @openai/agents' hosted shellTool
// (container_auto) beside codeInterpreterTool, replaying result.history.
func TestNodeShell(t *testing.T) {
	node := nodeReady(t)
	sh := loadShapes(t)
	bin := buildExtproc(t)
	for _, mode := range []string{"openai", "agents"} {
		t.Run(mode, func(t *testing.T) {
			var m *model
			m = newModel(t, sh, shellScript(&m))
			m.live = true
			base := startDev(t, bin, m.URL(), shellDevConfig)
			prompts, _ := json.Marshal(shellPrompts)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, filepath.Join(nodeDir, "shell.mjs"))
			cmd.Env = append(os.Environ(), "OPENAI_BASE_URL="+base, "OPENAI_API_KEY="+apiKey, "PROMPTS="+string(prompts),
				`VARIANT={"mode":"`+mode+`"}`, "OPENAI_AGENTS_DISABLE_TRACING=1")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("shell.mjs %s: %v\nstderr:\n%s\nstdout:\n%s", mode, err, stderr.String(), stdout.String())
			}
			t.Logf("what the client decoded:\n%s", stdout.String())
			rep := gjson.ParseBytes(stdout.Bytes())
			turns := rep.Get("turns").Array()
			if len(turns) != 3 {
				t.Fatalf("%d turns reported", len(turns))
			}
			var container string
			for _, k := range []int{0, 2} {
				call := turns[k].Get(`calls.#(type=="shell_call")`)
				out := turns[k].Get(`calls.#(type=="shell_call_output")`)
				var cmds []string
				call.Get("commands").ForEach(func(_, v gjson.Result) bool { cmds = append(cmds, v.Str); return true })
				if !slices.Equal(cmds, shellCommands[k]) || call.Get("environment.type").Str != "container_reference" ||
					out.Get("call_id").Str != call.Get("call_id").Str || len(out.Get("output").Array()) != 2 {
					t.Errorf("turn %d: the client decoded %s", k+1, turns[k].Get("calls").Raw)
				}
				if k == 0 {
					container = call.Get("environment.container_id").Str
				} else if call.Get("environment.container_id").Str != container {
					t.Errorf("turn 3 ran in %s, turn 1 in %s", call.Get("environment.container_id").Str, container)
				}
			}
			if got := turns[0].Get(`calls.#(type=="shell_call_output").output.1.stdout`).Str; got != "41\n" {
				t.Errorf("turn 1: cat printed %q", got)
			}
			if got := turns[2].Get(`calls.#(type=="shell_call_output").output.1.outcome.exit_code`).Int(); got != 3 {
				t.Errorf("turn 3: the second command's exit code %d, want 3", got)
			}
			if !strings.HasPrefix(turns[2].Get("text").Str, "told: ") {
				t.Errorf("turn 3: %q (the model was not shown turn 1's shell call)", turns[2].Get("text").Str)
			}
			if mode != "openai" {
				return
			}
			var kinds []string
			deltas := ""
			for _, ev := range turns[0].Get("events").Array() {
				typ := ev.Get("type").Str
				if !slices.Contains(kinds, typ) {
					kinds = append(kinds, typ)
				}
				if typ == "response.shell_call_output_content.delta" {
					deltas += ev.Get("delta.stdout").Str
					if ev.Get("item_id").Str == "" {
						t.Errorf("an output delta without item_id: %s", ev.Raw)
					}
				}
			}
			for _, want := range []string{"response.output_item.added", "response.shell_call_command.added", "response.shell_call_command.delta",
				"response.shell_call_command.done", "response.output_item.done", "response.shell_call_output_content.delta",
				"response.shell_call_output_content.done"} {
				if !slices.Contains(kinds, want) {
					t.Errorf("the SDK's stream had no %s (it had %v)", want, kinds)
				}
			}
			if deltas != "41\n" {
				t.Errorf("output deltas %q, want the cat's 41", deltas)
			}
		})
	}
}
