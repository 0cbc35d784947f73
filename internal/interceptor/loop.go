package interceptor

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/tidwall/gjson"
	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/containerapi"
	"github.com/codeinterp/codeinterp/internal/hostedtool"
	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sse"
)

// loop is the state of one exchange's agentic loop.
type loop struct {
	x           *Exchange
	cfg         Config
	log         *zap.Logger
	up          Upstream
	containerID string
	files       map[string]containerapi.File // the container's files by path, for citations
	sess        sandbox.Session
	opened      bool // a session existed before: a new one means lost state
	budget      int  // code calls still allowed
	followUps   int
	toolCalls   int
	// kept is the response remember stored (every call's outputs in it).
	kept []byte
	// abort ends the loop with an error for the client after a call that
	// could not run and may run on a retry (a container unavailable now):
	// a retryable error, not a tool result the model would answer.
	abort *failure
}

// response is the spliced response the client gets: the one remember
// kept when the two are the same (the request included the outputs).
func (l *loop) response(rounds []*round) []byte {
	if l.kept != nil && l.x.req.includeOutputs {
		return l.kept
	}
	return l.splice(rounds, false)
}

// CompleteResponse takes the upstream's answer to UpstreamBody and runs the
// loop: it executes the model's calls of our function in one sandbox session,
// sends follow-ups through up, and splices the rounds into one OpenAI-shaped
// response (JSON, or synthetic SSE when ClientStream).
//
// A non-2xx first answer passes through unchanged (status, content type,
// body), also for a streaming client. Later failures (a follow-up answered
// non-2xx: that status and body; a transport failure or an unusable upstream
// body: 502 with an OpenAI-shaped error) reach a streaming client as one SSE
// "error" event with status 200, since its stream has begun. The returned
// error is non-nil only when ctx ended (the client went away): the filter
// should then abandon the exchange. When !Intercepted the answer passes
// through unchanged.
func (x *Exchange) CompleteResponse(ctx context.Context, up Upstream, status int, header http.Header, body []byte) (*Result, error) {
	if !x.req.intercepted || status < 200 || status > 299 {
		return &Result{Status: status, ContentType: header.Get("Content-Type"), Body: body}, nil
	}
	l := x.newLoop(up)
	defer l.closeSession()
	defer x.Close()
	return l.run(ctx, body)
}

// newLoop starts the loop state of an intercepted exchange; up is nil on
// the live path (which streams its follow-ups itself).
func (x *Exchange) newLoop(up Upstream) *loop {
	l := &loop{x: x, cfg: x.ic.cfg, up: up, containerID: idgen.New("cntr_"), budget: x.req.maxCalls}
	if x.ctr != nil {
		l.containerID = x.ctr.ID()
	}
	l.log = x.ic.log.With(zap.String("container_id", l.containerID))
	return l
}

// roundSource is where the loop's rounds come from: the buffered path
// parses whole upstream answers, the live path streams them to the client
// as they arrive. drive is the one loop over either.
type roundSource interface {
	// read reads the pending upstream answer as a round (first: the
	// answer to the client's own request). An upstream that cannot be
	// used is a *failure.
	read(ctx context.Context, first bool) (*round, error)
	// hooks tells the client about each call as it runs (nil: nothing).
	hooks() callHooks
	// turned is told of each round after its calls ran; its error (the
	// client is gone) ends the loop.
	turned(rd *round) error
	// send sends a follow-up request; read reads its answer. A transport
	// failure or an error answer is a *failure.
	send(ctx context.Context, round int, body []byte) error
}

// drive runs the round → turn → follow-up loop over src until the model
// answers, then learns the container's files and stores the response
// (remember). It returns the rounds; an error is a *failure for the
// client, or the context's or the client's writer's.
func (l *loop) drive(ctx context.Context, src roundSource) ([]*round, error) {
	var rounds []*round
	for {
		rd, err := src.read(ctx, len(rounds) == 0)
		if err != nil {
			return rounds, err
		}
		rounds = append(rounds, rd)
		more := l.turn(ctx, rd, src.hooks())
		if l.abort != nil {
			return rounds, l.abort
		}
		if err := src.turned(rd); err != nil {
			return rounds, err
		}
		if err := ctx.Err(); err != nil && len(rd.calls) > 0 {
			return rounds, err
		}
		if !more {
			break
		}
		l.followUps++
		if err := src.send(ctx, l.followUps, l.followUpBody(rounds)); err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return rounds, ctxErr
			}
			return rounds, err
		}
	}
	l.learnFiles(ctx)
	l.remember(ctx, rounds)
	return rounds, nil
}

// bufferedRounds is the buffered path's roundSource: whole JSON answers.
type bufferedRounds struct {
	l    *loop
	up   Upstream
	body []byte
}

func (b *bufferedRounds) read(_ context.Context, _ bool) (*round, error) {
	rd, err := parseRound(b.body, &b.l.x.req)
	if err != nil {
		b.l.log.Warn("unusable upstream response", zap.Int("round", b.l.followUps), zap.Error(err))
		return nil, &failure{status: http.StatusBadGateway, code: "bad_upstream_response",
			msg: "The upstream model server returned a response this server could not read."}
	}
	return rd, nil
}

func (b *bufferedRounds) hooks() callHooks { return nil }

func (b *bufferedRounds) turned(*round) error { return nil }

func (b *bufferedRounds) send(ctx context.Context, round int, body []byte) error {
	st, hdr, answer, err := b.up.CreateResponse(ctx, body)
	if err != nil {
		b.l.log.Warn("follow-up request failed", zap.Int("round", round), zap.Error(err))
		return unreachable(round)
	}
	if st < 200 || st > 299 {
		b.l.log.Warn("follow-up answered with an error", zap.Int("round", round), zap.Int("status", st))
		return errorAnswer(st, hdr, answer)
	}
	b.body = answer
	return nil
}

func (l *loop) run(ctx context.Context, body []byte) (*Result, error) {
	rounds, err := l.drive(ctx, &bufferedRounds{l: l, up: l.up, body: body})
	if err != nil {
		var f *failure
		if !errors.As(err, &f) {
			return nil, err
		}
		if f.body != nil {
			return l.upstreamError(f.status, f.header, f.body), nil
		}
		return l.fail(f.status, f.code, f.msg), nil
	}
	final := l.response(rounds)
	res := &Result{Status: http.StatusOK, ContentType: ContentTypeJSON, Body: final, Rounds: l.followUps, ToolCalls: l.toolCalls}
	if l.x.req.clientStream {
		res.ContentType = ContentTypeSSE
		res.Body = sse.EventStream(final, l.x.req.obfuscate)
	}
	return res, nil
}

// callHooks lets the live path tell the client about each call as it runs;
// the buffered path passes nil. Every call of a round gets start then done,
// in output order, run or not (as OpenAI's lifecycle has interpreting and
// completed for every code_interpreter_call).
type callHooks interface {
	start(c *call) error
	// output hears a piece of a running call's output.
	output(c *call, o hostedtool.Output)
	done(c *call) error
}

// turn decides what follows a parsed round, for both paths: it counts the
// round's calls, applies the limits, runs the calls and reports whether a
// follow-up inference is due. A hook's error (the client is gone) stops the
// runs; the caller sees it through its context or its writer.
func (l *loop) turn(ctx context.Context, rd *round, hooks callHooks) (followUp bool) {
	if len(rd.calls) == 0 {
		return false
	}
	l.toolCalls += len(rd.calls)
	if why := l.stopReason(rd); why != "" {
		for _, c := range rd.calls {
			c.notRun = why
		}
		l.log.Info("loop stopped", zap.String("reason", why), zap.Int("round", l.followUps))
		if hooks != nil {
			for _, c := range rd.calls {
				if hooks.start(c) != nil || hooks.done(c) != nil {
					break
				}
			}
		}
		return false
	}
	if !l.execute(ctx, rd, hooks) || ctx.Err() != nil {
		return false
	}
	// A turn that also calls the client's own tools goes back to the
	// client now, with our calls already run.
	return !rd.clientCalls
}

// learnFiles learns the container's files when the loop ends, for the
// citations of the splice.
func (l *loop) learnFiles(ctx context.Context) {
	l.log.Debug("hosted tool loop done", zap.Int("follow_ups", l.followUps), zap.Int("calls", l.toolCalls), zap.Int("budget_left", l.budget))
	if ctr := l.x.ctr; ctr != nil {
		if files, err := ctr.Files(ctx); err == nil {
			l.files = make(map[string]containerapi.File, len(files))
			for _, f := range files {
				l.files[f.Path] = f
			}
		}
	}
}

// stopReason says why the calls of rd may not run at all, or "".
func (l *loop) stopReason(rd *round) string {
	switch {
	case l.followUps >= l.cfg.MaxRounds:
		return "the limit of " + strconv.Itoa(l.cfg.MaxRounds) + " hosted tool rounds for this response was reached"
	case l.budget <= 0:
		return "the limit of " + strconv.Itoa(l.x.req.maxCalls) + " hosted tool calls for this response was reached"
	case rd.status != "" && rd.status != "completed":
		return "the model's turn ended with status " + rd.status
	}
	return ""
}

// execute runs rd's calls in output order. One session serialises its runs,
// so running them one by one keeps shared state deterministic. It returns
// false when a hook failed (the client is gone), and the runs stopped.
func (l *loop) execute(ctx context.Context, rd *round, hooks callHooks) bool {
	for k, c := range rd.calls {
		if hooks != nil && hooks.start(c) != nil {
			return false
		}
		switch {
		case c.argErr != "":
			l.budget--
		case k >= l.cfg.MaxParallelCalls:
			c.notRun = "at most " + strconv.Itoa(l.cfg.MaxParallelCalls) + " hosted tool calls run per turn; call again for more"
		case l.budget <= 0:
			c.notRun = "the limit of " + strconv.Itoa(l.x.req.maxCalls) + " hosted tool calls for this response was reached"
		default:
			l.budget--
			var progress func(hostedtool.Output)
			if hooks != nil {
				progress = func(o hostedtool.Output) { hooks.output(c, o) }
			}
			l.runCall(ctx, c, progress)
			if ctx.Err() != nil || l.abort != nil {
				return true
			}
		}
		if hooks != nil && hooks.done(c) != nil {
			return false
		}
	}
	if ctr := l.x.ctr; ctr != nil {
		if files, err := ctr.Files(ctx); err == nil && len(files) > 0 {
			rd.filesNote = filesNote(ctr.ID(), files)
		}
	}
	return true
}

// followUpBody builds the next upstream request after the last round.
func (l *loop) followUpBody(rounds []*round) []byte {
	last := rounds[len(rounds)-1]
	req := &l.x.req
	var edits []jsonx.Edit

	usePrev := false
	switch l.cfg.FollowUp {
	case FollowUpPreviousResponseID:
		usePrev = last.id != "" && !req.conversation
	case FollowUpAuto:
		usePrev = last.id != "" && last.stored && !req.conversation
	}
	var input []string
	switch {
	case usePrev:
		edits = append(edits, jsonx.Set("previous_response_id", jsonx.Quote(last.id)))
		input = functionOutputs(last, req.includeOutputs)
	case req.conversation:
		// The conversation already holds the earlier items.
		input = functionOutputs(last, req.includeOutputs)
	default:
		input = append(input, arrayElems(req.input)...)
		for _, rd := range rounds {
			for _, it := range rd.items {
				input = append(input, it.Raw)
			}
			input = append(input, functionOutputs(rd, req.includeOutputs)...)
		}
	}
	edits = append(edits, jsonx.Set("input", string(jsonx.AppendArray(nil, input))))

	// A forcing tool_choice applied to the first turn only (as with OpenAI's
	// hosted tool); the last permitted turn must answer.
	if l.followUps >= l.cfg.MaxRounds || l.budget <= 0 {
		edits = append(edits, jsonx.Set("tool_choice", `"none"`))
	} else if tc := l.relaxToolChoice(req.toolChoice); tc != req.toolChoice {
		edits = append(edits, jsonx.Set("tool_choice", tc))
	}
	return jsonx.EditObject(string(req.upstream), edits...)
}

func (l *loop) relaxToolChoice(tc string) string {
	if tc == "" {
		return tc
	}
	v := gjson.Parse(tc)
	switch {
	case v.Type == gjson.String && v.Str == "required":
		return `"auto"`
	case v.IsObject() && v.Get("type").Str == "function" && l.x.req.toolFor(v.Get("name").Str) != nil:
		return `"auto"`
	case v.IsObject() && v.Get("type").Str == "allowed_tools" && v.Get("mode").Str == "required":
		return string(jsonx.EditObject(tc, jsonx.Set("mode", `"auto"`)))
	}
	return tc
}

// functionOutputs renders a function_call_output for every call of rd;
// shown says whether the client is shown the calls' outputs (images).
func functionOutputs(rd *round, shown bool) []string {
	out := make([]string, 0, len(rd.calls))
	for k, c := range rd.calls {
		text := c.act.ModelOutput(c.outcome(shown))
		if k == len(rd.calls)-1 && rd.filesNote != "" {
			text += rd.filesNote + "\n"
		}
		out = append(out, string(jsonx.AppendEditedObject(nil, `{}`,
			jsonx.Set("type", `"function_call_output"`),
			jsonx.Set("call_id", jsonx.Quote(c.callID)),
			jsonx.Set("output", jsonx.Quote(text)),
		)))
	}
	return out
}

func arrayElems(raw string) []string {
	var out []string
	gjson.Parse(raw).ForEach(func(_, v gjson.Result) bool {
		out = append(out, v.Raw)
		return true
	})
	return out
}
