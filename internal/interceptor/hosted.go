package interceptor

import (
	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/hostedtool"
)

// This file is the Responses API's side of the hosted-tool seam
// (internal/hostedtool): what a tool must say for this protocol beyond
// its function, its decoding, its run and what the model is told. The
// loop (loop.go), the splice (splice.go), the replay (replay.go), the
// store (remember.go) and the live stream (live.go, live_round.go) are one
// copy over every tool and reach a tool only through this interface; each
// tool's shapes are in its own file (tool_codeinterpreter.go,
// tool_shell.go).

// tool is one hosted tool as the Responses API shows it.
type tool interface {
	hostedtool.Tool
	// declares reports whether an entry of "tools" is this tool as this
	// server serves it (the shell with a local environment is not).
	declares(t gjson.Result) bool
	// check validates the declaration tools[i] (param) and records in r
	// what it asks of the response's container.
	check(i *Interceptor, r *request, param string, t gjson.Result) *apierror.Error
	// newIDs are the ids of the client's items for a new call: one per
	// item the call is shown as (code_interpreter_call; shell_call and
	// shell_call_output).
	newIDs() []string
	// items renders a finished call as the client's items, one per id;
	// outputs fills the outputs whatever the request's include said.
	items(l *loop, c *call, outputs bool) []string
	// replay turns an input item of this tool (as a client replays it)
	// into the items the model saw (ok false: not one of its items).
	// calls carries replayed calls by call_id from item to item.
	replay(i *Interceptor, it gjson.Result, calls map[string]gjson.Result) (model []string, ok bool)
	// itemContainer is the container an output item of this tool names
	// ("" when it is not one, or names none), for reusing it.
	itemContainer(it gjson.Result) string
	// liveEvents are the tool's events on a live stream.
	liveEvents
}

// liveEvents render a call on the live path (live.go) as OpenAI streams
// it. The stream's output index of the call's first item is s.at(lc);
// a tool shown as more items than the model's one function call has them
// follow it.
type liveEvents interface {
	// opened: the model started writing a call (its output_item.added).
	opened(s *liveStream, lc *liveCall)
	// argsDelta: a piece of the call's arguments.
	argsDelta(s *liveStream, lc *liveCall, piece string)
	// argsDone: the call's arguments are complete; c is the call decoded.
	argsDone(s *liveStream, lc *liveCall, c *call)
	// started: the call is about to run (or be reported not run).
	started(s *liveStream, lc *liveCall, c *call)
	// output: a piece of the running call's output.
	output(s *liveStream, lc *liveCall, c *call, o hostedtool.Output)
	// finished: the call ended; items are its final items (tool.items).
	finished(s *liveStream, lc *liveCall, c *call, items []string)
}

// served is a tool an exchange serves and where its function is in the
// upstream request's tools (-1: not declared there).
type served struct {
	t  tool
	at int
}

// toolFor is the tool an exchange serves under a function name, or nil.
func (r *request) toolFor(fn string) tool {
	for _, s := range r.tools {
		if s.t.FunctionName() == fn {
			return s.t
		}
	}
	return nil
}

// declaredTool is the tool of i that an entry of "tools" declares, or nil.
func (i *Interceptor) declaredTool(t gjson.Result) tool {
	if !t.IsObject() {
		return nil
	}
	for _, tl := range i.tools {
		if tl.declares(t) {
			return tl
		}
	}
	return nil
}

// itemContainer is the container an item of a hosted tool names, or "".
func (i *Interceptor) itemContainer(it gjson.Result) string {
	for _, t := range i.tools {
		if id := t.itemContainer(it); id != "" {
			return id
		}
	}
	return ""
}

// outcome is what became of c, as its tool reports it to the model.
func (c *call) outcome(shown bool) hostedtool.Outcome {
	o := hostedtool.Outcome{NotRun: c.notRun, Shown: shown}
	o.Result, o.Reset, o.Behind, o.Changed, o.Images = c.res, c.reset, c.behind, c.changed, c.images
	return o
}
