package shelltool

import (
	"context"
	"time"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/containerapi"
	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/hostedtool"
	"github.com/codeinterp/codeinterp/internal/sandbox"
)

// Tool is the hosted shell as a hostedtool.Tool.
type Tool struct{}

var _ hostedtool.Tool = Tool{}

// Name implements hostedtool.Tool.
func (Tool) Name() string { return "shell" }

// FunctionName implements hostedtool.Tool.
func (Tool) FunctionName() string { return FunctionName }

// Function implements hostedtool.Tool.
func (Tool) Function(_ sandbox.Environment, pol *egress.Policy) string {
	net := ""
	if pol != nil {
		net = hostedtool.NetworkDescription(pol)
	}
	return Function(Description(net))
}

// Decode implements hostedtool.Tool.
func (Tool) Decode(args gjson.Result) hostedtool.Action {
	a, argErr := Decode(args)
	return Call{Action: a, ArgErr: argErr, Raw: args.Str}
}

// The commands' time limits: OpenAI's default when the model asks for
// none, and the most it may ask for (the sandbox bounds it again by the
// operator's run timeout, sandbox.run_timeout).
const (
	DefaultTimeout = 120 * time.Second
	MaxTimeout     = 10 * time.Minute
)

// Call is one decoded call of the shell: its action, or why its arguments
// were unusable (ArgErr); Raw is the arguments string.
type Call struct {
	Action
	ArgErr string
	Raw    string
}

// Invalid implements hostedtool.Action.
func (c Call) Invalid() string { return c.ArgErr }

// Text implements hostedtool.Action: the raw arguments (the commands and
// their limits).
func (c Call) Text() string { return c.Raw }

// Run implements hostedtool.Action: the commands by Runner.Shell, each
// bounded by the timeout the model asked for within MaxTimeout; progress
// hears each piece of output as the sandbox sends it.
func (c Call) Run(ctx context.Context, r hostedtool.Runner, progress func(hostedtool.Output)) (containerapi.RunResult, error) {
	req := sandbox.ShellRequest{Commands: c.Commands, Timeout: c.Timeout(DefaultTimeout, MaxTimeout)}
	if progress != nil {
		req.OnOutput = func(k int, stdout, stderr string) {
			progress(hostedtool.Output{Command: k, Stdout: stdout, Stderr: stderr})
		}
	}
	return r.Shell(ctx, req)
}

// ModelOutput implements hostedtool.Action.
func (c Call) ModelOutput(o hostedtool.Outcome) string {
	return ModelOutput(c.Action, o.Result, c.ArgErr, o.NotRun)
}
