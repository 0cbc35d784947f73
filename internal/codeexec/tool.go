package codeexec

import (
	"context"
	"encoding/json"
	"time"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/containerapi"
	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/hostedtool"
	"github.com/codeinterp/codeinterp/internal/sandbox"
)

// This file is the two tools on the hosted tools' seam (hostedtool): each
// is a function the model server calls, a call decoded into an action run
// on the container, and what the model is told. The Messages processor
// finds a call by its function name and never branches on which tool it is.

// Limits bound the tools' calls.
type Limits struct {
	// Timeout bounds each call (0: the sandbox's run timeout).
	Timeout time.Duration
	// StdoutBytes is the sandbox's bound of a command's stdout, which the
	// editor's answer must fit in (0: 64 KiB, the sandbox's default).
	StdoutBytes int
}

// Tool is bash_code_execution or text_editor_code_execution as a
// hostedtool.Tool.
type Tool struct {
	name   string
	limits Limits
}

var _ hostedtool.Tool = Tool{}

// Tools are the two tools with limits.
func Tools(l Limits) []Tool {
	if l.StdoutBytes <= 0 {
		l.StdoutBytes = 64 << 10
	}
	return []Tool{{name: BashName, limits: l}, {name: EditorName, limits: l}}
}

// Name implements hostedtool.Tool: the declaration's type.
func (t Tool) Name() string { return Type20250825 }

// FunctionName implements hostedtool.Tool.
func (t Tool) FunctionName() string { return t.name }

// Function implements hostedtool.Tool: the function ({"type":"function",
// "name","description","parameters"}) for the model server; a Messages
// processor gives it as a client tool (name, description, input_schema).
func (t Tool) Function(env sandbox.Environment, pol *egress.Policy) string {
	e := Environment{Packages: env.Packages}
	if pol != nil {
		e.Network = hostedtool.NetworkDescription(pol)
	}
	k := 0
	if t.name == EditorName {
		k = 1
	}
	tl := gjson.Parse(tools(e)[k])
	return `{"type":"function","name":"` + t.name + `","description":` + tl.Get("description").Raw + `,"parameters":` + tl.Get("input_schema").Raw + `}`
}

// Decode implements hostedtool.Tool: args is the input object as a JSON
// string (a function call's arguments).
func (t Tool) Decode(args gjson.Result) hostedtool.Action {
	c := Decode(t.name, gjson.Parse(args.Str))
	c.limits = t.limits
	return &c
}

// Invalid implements hostedtool.Action.
func (c *Call) Invalid() string { return c.Why }

// Text implements hostedtool.Action: the bash command, or the editor's
// input.
func (c *Call) Text() string {
	if c.Name == BashName {
		return c.Bash
	}
	return c.Input
}

// Run implements hostedtool.Action: one command of the container's bash
// session (the editor is a program run by it).
func (c *Call) Run(ctx context.Context, r hostedtool.Runner, progress func(hostedtool.Output)) (containerapi.RunResult, error) {
	req := c.Request(c.limits.Timeout, c.limits.StdoutBytes)
	if progress != nil && c.Name == BashName {
		req.OnOutput = func(k int, stdout, stderr string) {
			progress(hostedtool.Output{Command: k, Stdout: stdout, Stderr: stderr})
		}
	}
	return r.Shell(ctx, req)
}

// ModelOutput implements hostedtool.Action: the text ModelText makes of
// the call's result block.
func (c *Call) ModelOutput(o hostedtool.Outcome) string {
	r := c.Result(o)
	return ModelText(c.Name, gjson.Parse(c.Input), gjson.Parse(r.Content))
}

// Result is the call's result block content for o: an invalid input's
// error, a call a limit kept from running (unavailable), or the run's.
func (c *Call) Result(o hostedtool.Outcome) Result {
	switch {
	case c.Why != "":
		return ErrorResult(c.Name, ErrInvalidInput, c.Why)
	case o.NotRun != "":
		return ErrorResult(c.Name, ErrUnavailable, o.NotRun)
	}
	return c.Outcome(o.RunResult, nil)
}

// Args is input as a function call's arguments (a JSON string), for Decode.
func Args(input gjson.Result) gjson.Result {
	b, _ := json.Marshal(input.Raw)
	return gjson.ParseBytes(b)
}
