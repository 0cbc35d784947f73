package interceptor

import (
	"strings"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/codeinterpreter"
	"github.com/codeinterp/codeinterp/internal/hostedtool"
	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sse"
)

// This file is code_interpreter as the Responses API shows it (the tool's
// protocol-free part is internal/codeinterpreter): the declaration
// {"type":"code_interpreter","container":…}, the code_interpreter_call
// item, its replay, and its live events (output_item.added, in_progress,
// code deltas, interpreting, completed, output_item.done).

// ciTool is the code_interpreter for this protocol.
type ciTool struct{ codeinterpreter.Tool }

var _ tool = ciTool{}

func (ciTool) declares(t gjson.Result) bool { return t.Get("type").Str == "code_interpreter" }

func (ciTool) check(i *Interceptor, r *request, param string, t gjson.Result) *apierror.Error {
	mem, err := i.checkNativeTool(r, param, t)
	if err != nil {
		return err
	}
	r.memoryBytes = max(r.memoryBytes, mem)
	return nil
}

func (ciTool) newIDs() []string { return []string{idgen.NewTagged("ci_", 50)} }

func (ciTool) items(l *loop, c *call, outputs bool) []string {
	return []string{l.ciItem(c, outputs || l.x.req.includeOutputs)}
}

func (ciTool) replay(i *Interceptor, it gjson.Result, _ map[string]gjson.Result) ([]string, bool) {
	return i.replayCode(it)
}

func (ciTool) itemContainer(it gjson.Result) string {
	if it.Get("type").Str != "code_interpreter_call" {
		return ""
	}
	return it.Get("container_id").Str
}

// checkNativeTool validates one native code_interpreter declaration and
// returns the memory it asks for (0 = operator default).
func (i *Interceptor) checkNativeTool(r *request, param string, t gjson.Result) (int64, *apierror.Error) {
	var mem int64
	var apiErr *apierror.Error
	hasContainer := false
	t.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "type":
		case "allowed_callers":
			if err := hostedtool.CheckAllowedCallers(param+".allowed_callers", v); err != nil {
				apiErr = err
			}
		case "container":
			hasContainer = true
			r.containerParam = param + ".container"
			mem, apiErr = i.checkContainer(r, param+".container", v)
		default:
			apiErr = apierror.Invalid(param+"."+k.Str, "unknown_parameter", "Unknown parameter: '%s.%s'.", param, k.Str)
		}
		return apiErr == nil
	})
	if apiErr != nil {
		return 0, apiErr
	}
	if !hasContainer {
		return 0, apierror.Invalid(param+".container", "missing_required_parameter", "Missing required parameter: '%s.container'.", param)
	}
	return mem, nil
}

// ciStatus maps a call's fate to the code_interpreter_call status.
func ciStatus(c *call) string { return codeinterpreter.Status(c.argErr, c.outcome(false)) }

// modelOutput is what the model is told about a code_interpreter call.
func modelOutput(c *call, imagesShown bool) string {
	return codeinterpreter.Report(c.argErr, c.outcome(imagesShown))
}

// statusNote is the last line of a call's logs that says why it did not
// complete, for clients told "completed" (interceptor.call_status: openai);
// "" when it completed or a Python traceback already says it.
func statusNote(c *call) string {
	switch {
	case c.argErr != "":
		return "[not run: invalid arguments (" + c.argErr + ")]"
	case c.notRun != "":
		return "[not run: " + c.notRun + "]"
	case c.res.Outcome == sandbox.OutcomeCompleted, c.res.Outcome == sandbox.OutcomeError:
		return ""
	}
	return "[" + ciStatus(c) + ": " + codeinterpreter.OutcomeReason(c.res) + "]"
}

// logs is the client-visible text output of a call: stdout, then stderr.
func logs(c *call) string {
	out, errOut := c.res.Stdout, c.res.Stderr
	if out != "" && errOut != "" && !strings.HasSuffix(out, "\n") {
		out += "\n"
	}
	return out + errOut
}

// ciItem renders a call as the code_interpreter_call OpenAI's hosted tool
// returns, with its fields in OpenAI's order.
func (l *loop) ciItem(c *call, outputs bool) string {
	status, note := ciStatus(c), ""
	if l.x.ic.cfg.CallStatus == CallStatusOpenAI && status != "completed" {
		// OpenAI's clients know no other final status: the reason goes
		// in the logs.
		status, note = "completed", statusNote(c)
	}
	out := "null"
	if outputs {
		out = string(appendOutputs(nil, c, note))
	}
	return `{"id":` + jsonx.Quote(c.ciID) + `,"type":"code_interpreter_call","status":` + jsonx.Quote(status) +
		`,"code":` + jsonx.Quote(c.code) + `,"container_id":` + jsonx.Quote(l.containerID) + `,"outputs":` + out + `}`
}

// The live events: the call's code as the model writes it, then its run.

// ciLive is what a live code_interpreter call has shown.
type ciLive struct {
	dec      jsonx.CodeDecoder
	sent     strings.Builder // the code deltas sent
	codeDone bool
}

func (ciTool) opened(s *liveStream, lc *liveCall) {
	lc.st = &ciLive{}
	outputs := "null"
	if s.l.x.req.includeOutputs {
		outputs = "[]"
	}
	oi := lc.outputIndex(0)
	s.out.sw.Event("response.output_item.added", sse.Field{Key: "item", Value: `{"id":` + jsonx.Quote(lc.ids[0]) +
		`,"type":"code_interpreter_call","status":"in_progress","code":"","container_id":` + jsonx.Quote(s.l.containerID) +
		`,"outputs":` + outputs + `}`}, oi)
	s.out.sw.Event("response.code_interpreter_call.in_progress", sse.Field{Key: "item_id", Value: jsonx.Quote(lc.ids[0])}, oi)
}

func (ciTool) argsDelta(s *liveStream, lc *liveCall, piece string) {
	st := lc.st.(*ciLive)
	ciCodeDelta(s, lc, st.dec.Feed(piece))
}

func ciCodeDelta(s *liveStream, lc *liveCall, piece string) {
	if piece == "" {
		return
	}
	lc.st.(*ciLive).sent.WriteString(piece)
	s.out.sw.Delta("response.code_interpreter_call_code.delta", piece,
		sse.Field{Key: "item_id", Value: jsonx.Quote(lc.ids[0])}, lc.outputIndex(0))
}

// argsDone ends a call's code: what the deltas lack of it (a call whose
// arguments could not be decoded as they came, or that was never
// streamed) goes out as further deltas, then code.done.
func (ciTool) argsDone(s *liveStream, lc *liveCall, c *call) {
	st := lc.st.(*ciLive)
	if st.codeDone {
		return
	}
	st.codeDone = true
	if sent := st.sent.String(); strings.HasPrefix(c.code, sent) {
		for _, piece := range sse.Chunks(c.code[len(sent):]) {
			ciCodeDelta(s, lc, piece)
		}
	}
	s.out.sw.Event("response.code_interpreter_call_code.done", sse.Field{Key: "code", Value: jsonx.Quote(c.code)},
		sse.Field{Key: "item_id", Value: jsonx.Quote(lc.ids[0])}, lc.outputIndex(0))
}

func (ciTool) started(s *liveStream, lc *liveCall, _ *call) {
	s.out.sw.Event("response.code_interpreter_call.interpreting",
		sse.Field{Key: "item_id", Value: jsonx.Quote(lc.ids[0])}, lc.outputIndex(0))
}

// output: a cell's output comes with its result (OpenAI streams none).
func (ciTool) output(*liveStream, *liveCall, *call, hostedtool.Output) {}

func (ciTool) finished(s *liveStream, lc *liveCall, _ *call, items []string) {
	oi := lc.outputIndex(0)
	s.out.sw.Event("response.code_interpreter_call.completed", sse.Field{Key: "item_id", Value: jsonx.Quote(lc.ids[0])}, oi)
	s.out.sw.Event("response.output_item.done", sse.Field{Key: "item", Value: items[0]}, oi)
}
