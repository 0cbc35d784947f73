package hostedtool

import (
	"context"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/containerapi"
	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/sandbox"
)

// Tool is one hosted tool family, free of any protocol's shapes.
type Tool interface {
	// Name is the tool's type as clients declare it ("code_interpreter",
	// "shell"): spans, logs and limits' messages name it.
	Name() string
	// FunctionName is the name of the function the model server calls.
	FunctionName() string
	// Function is the strict function tool ({"type":"function",…}) the
	// model server is given, described for the sandbox's environment and
	// the container's network policy (nil: none).
	Function(env sandbox.Environment, pol *egress.Policy) string
	// Decode reads a call's arguments (the function call's "arguments"
	// string) into an action. It never fails: an unusable call is an
	// Action whose Invalid says why.
	Decode(args gjson.Result) Action
}

// Action is one decoded call.
type Action interface {
	// Invalid says why the arguments are unusable ("" when usable);
	// such an action is not run.
	Invalid() string
	// Text is what the action runs, as one string: traces (when content is
	// captured) and items that show the call's input use it.
	Text() string
	// Run runs the action in the container r. progress, when not nil,
	// hears the output while it comes (from Run's goroutine); a runner
	// that cannot stream (a run forwarded to another replica) tells
	// nothing, and the result has it all.
	Run(ctx context.Context, r Runner, progress func(Output)) (containerapi.RunResult, error)
	// ModelOutput is what the model is told of the call.
	ModelOutput(o Outcome) string
}

// Runner is the container as a tool sees it: one method per kind of action
// the sandbox runs. containerapi.Container implements it.
type Runner interface {
	// Run runs a Python cell in the container's interpreter.
	Run(ctx context.Context, code string) (containerapi.RunResult, error)
	// Shell runs shell commands in the container's sandbox
	// (req.OnOutput hears their output as it comes).
	Shell(ctx context.Context, req sandbox.ShellRequest) (containerapi.RunResult, error)
}

var _ Runner = containerapi.Container(nil)

// Output is a piece of a running call's output: Command is the index of
// the command that wrote it (0 for a cell). Pieces never split a UTF-8
// character.
type Output struct {
	Command        int
	Stdout, Stderr string
}

// Outcome is what became of a call, as the model is told it.
type Outcome struct {
	// RunResult is the run's result (zero when the call did not run).
	containerapi.RunResult
	// NotRun says why a limit kept the call from running ("": it ran, or
	// its arguments were invalid).
	NotRun string
	// Shown says whether the client is shown the call's outputs (images
	// a model must not point at otherwise).
	Shown bool
}
