package interceptor

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/hostedtool"
	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/codeinterp/codeinterp/internal/shelltool"
	"github.com/codeinterp/codeinterp/internal/sse"
)

// This file is OpenAI's hosted shell as the Responses API shows it (the
// tool's protocol-free part is internal/shelltool): the declaration
// {"type":"shell","environment":{"type":"container_auto"|
// "container_reference"}}, a call shown as two items (shell_call, then
// shell_call_output), their replay, and their live events.

// shellTool is the hosted shell for this protocol.
type shellTool struct{ shelltool.Tool }

var _ tool = shellTool{}

func (shellTool) declares(t gjson.Result) bool { return shelltool.Hosted(t) }

// check validates a hosted shell declaration: a provider without a shell
// refuses it (never a silent pass-through), a container_reference names
// the response's container (the same one a code_interpreter names), a
// container_auto is read as a code_interpreter's auto container — one
// container for both tools.
func (shellTool) check(i *Interceptor, r *request, param string, t gjson.Result) *apierror.Error {
	env := i.provider.Environment()
	if !env.Shell {
		return apierror.Invalid(param, "unsupported_tool",
			"The shell tool with a container environment is not available on this server: its sandbox (%s) has no shell. Use the code_interpreter tool, or an environment of type 'local'.", env.Provider)
	}
	d, apiErr := shelltool.Check(param, t)
	if apiErr != nil {
		return apiErr
	}
	p := param + ".environment"
	if d.Reference != "" {
		if i.containers == nil {
			return apierror.Invalid(p+".container_id", "container_not_found",
				"Container '%s' not found. This server starts a fresh container for every response; use {\"type\": \"container_auto\"}.", d.Reference)
		}
		if err := checkContainerID(p+".container_id", d.Reference); err != nil {
			return err
		}
		if err := r.container.name(p+".container_id", d.Reference); err != nil {
			return err
		}
		if r.containerParam == "" {
			r.containerParam = p
		}
		return nil
	}
	mem, apiErr := i.checkContainer(r, p, d.Container)
	if apiErr != nil {
		return apiErr
	}
	r.memoryBytes = max(r.memoryBytes, mem)
	if r.containerParam == "" {
		r.containerParam = p
	}
	return nil
}

func (shellTool) newIDs() []string {
	return []string{idgen.NewTagged("sh_", 50), idgen.NewTagged("sho_", 50)}
}

// items renders a shell call as the shell_call and shell_call_output
// items OpenAI's hosted shell returns (max_output_length applied).
func (shellTool) items(l *loop, c *call, _ bool) []string {
	a := shellAction(c)
	results := shelltool.Cut(c.res.Commands, a.MaxOutputLength)
	if c.argErr != "" || c.notRun != "" {
		results = nil
	}
	return []string{
		shelltool.CallItem(c.ciID, c.callID, a, "completed", l.containerID),
		shelltool.OutputItem(c.moreIDs[0], c.callID, shelltool.Status(c.res, c.argErr, c.notRun), a, results),
	}
}

// shellAction is a shell call's action (empty when its arguments were
// unusable).
func shellAction(c *call) shelltool.Action {
	if sc, ok := c.act.(shelltool.Call); ok {
		return sc.Action
	}
	return shelltool.Action{}
}

func (shellTool) replay(_ *Interceptor, it gjson.Result, calls map[string]gjson.Result) ([]string, bool) {
	if fc, ok := shelltool.Replay(it); ok {
		calls[it.Get("call_id").Str] = it
		return []string{fc}, true
	}
	if fo, ok := shelltool.ReplayOutput(it, calls); ok {
		return []string{fo}, true
	}
	return nil, false
}

func (shellTool) itemContainer(it gjson.Result) string {
	if it.Get("type").Str != "shell_call" || it.Get("environment.type").Str != "container_reference" {
		return ""
	}
	return it.Get("environment.container_id").Str
}

// The live events: OpenAI's shell_call_command.* while the model writes
// the commands (no item_id, as its types have them), the shell_call done
// when it runs, then the shell_call_output added, its
// shell_call_output_content.delta pieces while each command runs and a
// .done per command with the command's whole output.

// shellLive is what a live shell call has shown.
type shellLive struct {
	dec      *jsonx.StringsDecoder
	cmds     []strings.Builder // each command's text sent
	cmdDone  []bool
	argsDone bool
	// The output pieces sent per command (stdout, stderr), and the
	// characters left of max_output_length (-1: no bound).
	out  [][2]strings.Builder
	left []int
	max  int64
}

func (shellTool) opened(s *liveStream, lc *liveCall) {
	lc.st = &shellLive{dec: jsonx.NewStringsDecoder("commands")}
	item := shelltool.CallItem(lc.ids[0], lc.callID, shelltool.Action{}, "in_progress", s.l.containerID)
	s.out.sw.Event("response.output_item.added", sse.Field{Key: "item", Value: item}, lc.outputIndex(0))
}

func commandIndex(k int) sse.Field { return sse.Field{Key: "command_index", Value: strconv.Itoa(k)} }

// command shows piece of command k: added when it is new, its text as a
// delta, done when it ended.
func (st *shellLive) command(s *liveStream, lc *liveCall, k int, text string, end bool) {
	for len(st.cmds) <= k {
		n := len(st.cmds)
		st.cmds = append(st.cmds, strings.Builder{})
		st.cmdDone = append(st.cmdDone, false)
		s.out.sw.Event("response.shell_call_command.added", sse.Field{Key: "command", Value: `""`}, commandIndex(n), lc.outputIndex(0))
	}
	if st.cmdDone[k] {
		return
	}
	if text != "" {
		st.cmds[k].WriteString(text)
		s.out.sw.Delta("response.shell_call_command.delta", text, commandIndex(k), lc.outputIndex(0))
	}
	if end {
		st.cmdDone[k] = true
		s.out.sw.Event("response.shell_call_command.done", sse.Field{Key: "command", Value: jsonx.Quote(st.cmds[k].String())}, commandIndex(k), lc.outputIndex(0))
	}
}

func (shellTool) argsDelta(s *liveStream, lc *liveCall, piece string) {
	st := lc.st.(*shellLive)
	for _, p := range st.dec.Feed(piece) {
		st.command(s, lc, p.Index, p.Text, p.End)
	}
}

// argsDone completes the commands from the decoded call: what the deltas
// lack (arguments that could not be decoded as they came, or were never
// streamed) goes out as further events.
func (shellTool) argsDone(s *liveStream, lc *liveCall, c *call) {
	st := lc.st.(*shellLive)
	if st.argsDone {
		return
	}
	st.argsDone = true
	for k, cmd := range shellAction(c).Commands {
		if k < len(st.cmds) && st.cmdDone[k] {
			continue
		}
		rest := cmd
		if k < len(st.cmds) {
			if sent := st.cmds[k].String(); strings.HasPrefix(cmd, sent) {
				rest = cmd[len(sent):]
			}
		}
		st.command(s, lc, k, rest, true)
	}
}

// started: the shell_call is complete, and its output item opens.
func (shellTool) started(s *liveStream, lc *liveCall, c *call) {
	st := lc.st.(*shellLive)
	a := shellAction(c)
	item := shelltool.CallItem(c.ciID, c.callID, a, "completed", s.l.containerID)
	s.finished[lc.at] = item
	s.out.sw.Event("response.output_item.done", sse.Field{Key: "item", Value: item}, lc.outputIndex(0))
	st.max = a.MaxOutputLength
	out := shelltool.OutputItem(c.moreIDs[0], c.callID, "in_progress", a, nil)
	s.out.sw.Event("response.output_item.added", sse.Field{Key: "item", Value: out}, lc.outputIndex(1))
}

// output sends a piece of a command's output as it comes, within
// max_output_length characters of the command's stdout and stderr
// together (the final output is cut the same way, stdout first).
func (shellTool) output(s *liveStream, lc *liveCall, c *call, o hostedtool.Output) {
	st := lc.st.(*shellLive)
	for len(st.out) <= o.Command {
		st.out = append(st.out, [2]strings.Builder{})
		left := -1
		if st.max > 0 {
			left = int(st.max)
		}
		st.left = append(st.left, left)
	}
	keep := func(text string) string {
		if st.left[o.Command] < 0 || text == "" {
			return text
		}
		n := utf8.RuneCountInString(text)
		if n <= st.left[o.Command] {
			st.left[o.Command] -= n
			return text
		}
		i := 0
		for k := 0; k < st.left[o.Command]; k++ {
			_, size := utf8.DecodeRuneInString(text[i:])
			i += size
		}
		st.left[o.Command] = 0
		return text[:i]
	}
	stdout, stderr := keep(o.Stdout), keep(o.Stderr)
	shellDelta(s, lc, c, st, o.Command, stdout, stderr)
}

func shellDelta(s *liveStream, lc *liveCall, c *call, st *shellLive, k int, stdout, stderr string) {
	if stdout == "" && stderr == "" {
		return
	}
	for len(st.out) <= k {
		st.out = append(st.out, [2]strings.Builder{})
		st.left = append(st.left, 0)
	}
	st.out[k][0].WriteString(stdout)
	st.out[k][1].WriteString(stderr)
	var d []jsonx.Edit
	if stdout != "" {
		d = append(d, jsonx.Set("stdout", jsonx.Quote(stdout)))
	}
	if stderr != "" {
		d = append(d, jsonx.Set("stderr", jsonx.Quote(stderr)))
	}
	s.out.sw.Event("response.shell_call_output_content.delta", sse.Field{Key: "delta", Value: string(jsonx.AppendEditedObject(nil, `{}`, d...))},
		sse.Field{Key: "item_id", Value: jsonx.Quote(c.moreIDs[0])}, commandIndex(k), lc.outputIndex(1))
}

// finished sends per command what the deltas lack of its final output (a
// run forwarded to another replica streams nothing) and its .done with the
// command's whole output, then the shell_call_output item.
func (shellTool) finished(s *liveStream, lc *liveCall, c *call, items []string) {
	st := lc.st.(*shellLive)
	gjson.Get(items[1], "output").ForEach(func(key, o gjson.Result) bool {
		k := int(key.Int())
		stdout, stderr := o.Get("stdout").Str, o.Get("stderr").Str
		var sentOut, sentErr string
		if k < len(st.out) {
			sentOut, sentErr = st.out[k][0].String(), st.out[k][1].String()
		}
		restOut, restErr := "", ""
		if strings.HasPrefix(stdout, sentOut) {
			restOut = stdout[len(sentOut):]
		}
		if strings.HasPrefix(stderr, sentErr) {
			restErr = stderr[len(sentErr):]
		}
		shellDelta(s, lc, c, st, k, restOut, restErr)
		s.out.sw.Event("response.shell_call_output_content.done", sse.Field{Key: "output", Value: "[" + o.Raw + "]"},
			sse.Field{Key: "item_id", Value: jsonx.Quote(c.moreIDs[0])}, commandIndex(k), lc.outputIndex(1))
		return true
	})
	s.out.sw.Event("response.output_item.done", sse.Field{Key: "item", Value: items[1]}, lc.outputIndex(1))
}
