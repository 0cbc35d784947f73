package codeinterpreter

import (
	"context"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/containerapi"
	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/hostedtool"
	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/codeinterp/codeinterp/internal/sandbox"
)

// Tool is the code_interpreter under the function name the operator chose
// (interceptor.function_name).
type Tool struct{ Fn string }

var _ hostedtool.Tool = Tool{}

// Name implements hostedtool.Tool.
func (Tool) Name() string { return "code_interpreter" }

// FunctionName implements hostedtool.Tool.
func (t Tool) FunctionName() string { return t.Fn }

// Function implements hostedtool.Tool: a strict function with one "code"
// argument.
func (t Tool) Function(env sandbox.Environment, pol *egress.Policy) string {
	version := env.PythonVersion
	if version == "" {
		version = "3"
	}
	params := `{"type":"object","properties":{"code":{"type":"string","description":` +
		jsonx.Quote("The Python "+version+" source code to run.") +
		`}},"required":["code"],"additionalProperties":false}`
	return string(jsonx.AppendEditedObject(nil, `{}`,
		jsonx.Set("type", `"function"`),
		jsonx.Set("name", jsonx.Quote(t.Fn)),
		jsonx.Set("description", jsonx.Quote(Description(env, pol))),
		jsonx.Set("parameters", params),
		jsonx.Set("strict", "true"),
	))
}

// Description tells the model what the function gives it, from what the
// running provider reports: it mirrors what OpenAI's hosted tool offers,
// minus what this sandbox lacks. With a network policy (pol non-nil) it
// names the domains the code may reach and the placeholders of the domain
// secrets it may put in headers; without one it says there is no network.
func Description(env sandbox.Environment, pol *egress.Policy) string {
	version := env.PythonVersion
	if version == "" {
		version = "3"
	}
	d := "Runs Python " + version + " code in a sandboxed interpreter and returns its stdout, stderr and a status line. "
	switch {
	case pol != nil && len(env.Packages) == 0:
		d += "Only the Python standard library is available until you install more. " + hostedtool.NetworkDescription(pol)
	case pol != nil:
		d += "Besides the standard library these packages can be imported: " + strings.Join(env.Packages, ", ") + ". " + hostedtool.NetworkDescription(pol)
	case len(env.Packages) == 0:
		d += "Only the Python standard library is available (no third-party packages such as numpy or pandas) and there is no network access. "
	default:
		d += "Besides the standard library these packages can be imported: " + strings.Join(env.Packages, ", ") + ". " +
			"Nothing else can be installed and there is no network access. "
	}
	d += "Print what you need to see: only printed output is returned, not the value of the last expression. " +
		"Variables, imports and files persist between calls within this response. "
	if env.Images {
		d += "Files are in /mnt/data (/tmp for scratch); they are discarded afterwards. " +
			"Matplotlib figures still open when a call ends (plt.show() included) are shown to the user as images."
	} else {
		d += "Use /mnt/data (or /tmp) for scratch files; they are discarded afterwards."
	}
	return d
}

// Decode implements hostedtool.Tool.
func (Tool) Decode(args gjson.Result) hostedtool.Action {
	var a Action
	a.Code, a.ArgErr = ArgsCode(args)
	return a
}

// Action is one cell: its code, or why the arguments were unusable (Code
// then holds the raw arguments, what the client is shown).
type Action struct {
	Code   string
	ArgErr string
}

// Invalid implements hostedtool.Action.
func (a Action) Invalid() string { return a.ArgErr }

// Text implements hostedtool.Action.
func (a Action) Text() string { return a.Code }

// Run implements hostedtool.Action: the cell in the container's
// interpreter (its output comes whole, with the result).
func (a Action) Run(ctx context.Context, r hostedtool.Runner, _ func(hostedtool.Output)) (containerapi.RunResult, error) {
	return r.Run(ctx, a.Code)
}

// ModelOutput implements hostedtool.Action.
func (a Action) ModelOutput(o hostedtool.Outcome) string { return Report(a.ArgErr, o) }

// ArgsCode reads the code out of a call's arguments. When they are
// unusable argErr says why, and code is the raw arguments.
func ArgsCode(a gjson.Result) (code, argErr string) {
	switch {
	case a.Type != gjson.String:
		return "", "the arguments are missing"
	case !gjson.Valid(a.Str) || !gjson.Parse(a.Str).IsObject():
		return a.Str, "the arguments are not a JSON object"
	}
	v := gjson.Get(a.Str, "code")
	if v.Type != gjson.String {
		return a.Str, `the arguments have no string field "code"`
	}
	return v.Str, ""
}
