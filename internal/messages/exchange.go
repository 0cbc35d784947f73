package messages

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/codeexec"
	"github.com/codeinterp/codeinterp/internal/containerapi"
	"github.com/codeinterp/codeinterp/internal/hostedtool"
	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/codeinterp/codeinterp/internal/processor"
	"github.com/codeinterp/codeinterp/internal/store"
)

// Exchange is one /v1/messages request.
type Exchange struct {
	p     *Processor
	req   *request
	owner string
	ctr   containerapi.Container
	live  bool
}

var _ processor.Exchange = (*Exchange)(nil)

// Intercepted implements processor.Exchange.
func (x *Exchange) Intercepted() bool { return x.req.intercepted }

// Modified implements processor.Exchange.
func (x *Exchange) Modified() bool { return x.req.intercepted }

// UpstreamBody implements processor.Exchange.
func (x *Exchange) UpstreamBody() []byte { return x.req.upstream }

// StreamLive makes a streaming exchange live: the model server is asked
// to stream every round (UpstreamBody and the follow-ups say stream true)
// and StreamResponse passes its deltas on as they come. Call it before
// UpstreamBody; calling it again is harmless.
func (x *Exchange) StreamLive() bool {
	if x.req.intercepted && x.req.stream && !x.live {
		x.live = true
		x.req.upstream = jsonx.EditObject(string(x.req.upstream), jsonx.Set("stream", "true"))
	}
	return x.live
}

// Live implements processor.Exchange.
func (x *Exchange) Live() bool { return x.live }

// StreamHead implements processor.Exchange: 200 and an event stream for a
// live exchange whose model server answered 2xx, else the answer as it is.
func (x *Exchange) StreamHead(status int, header http.Header) (int, http.Header) {
	h := header.Clone()
	if h == nil {
		h = http.Header{}
	}
	h.Del("Content-Length")
	if !x.live || status < 200 || status > 299 {
		return status, h
	}
	h.Set("Content-Type", processor.ContentTypeSSE)
	h.Set("Cache-Control", "no-cache")
	return http.StatusOK, h
}

// Close implements processor.Exchange.
func (x *Exchange) Close() {
	if x.ctr != nil {
		_ = x.ctr.Close()
	}
}

// CompleteResponse implements processor.Exchange: the loop over whole
// answers, the client's message as JSON (or, for a streaming client of a
// filter that does not stream live, the same message as Anthropic's
// events). A non-2xx first answer passes through.
func (x *Exchange) CompleteResponse(ctx context.Context, up processor.Upstream, status int, header http.Header, body []byte) (*processor.Result, error) {
	defer x.Close()
	if !x.req.intercepted || status < 200 || status > 299 {
		return &processor.Result{Status: status, ContentType: header.Get("Content-Type"), Body: body}, nil
	}
	col := &collector{}
	l := &loop{x: x, em: col}
	final, f := l.drive(ctx, wholeAnswer(body), func(ctx context.Context, b []byte) (source, *failure) {
		st, _, answer, err := up.CreateResponse(ctx, b)
		if f := l.followUpFailure(ctx, st, answer, err); f != nil {
			return nil, f
		}
		return wholeAnswer(answer), nil
	})
	if f != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return &processor.Result{Status: f.status, ContentType: processor.ContentTypeJSON, Body: f.body, Rounds: l.rounds, ToolCalls: l.calls}, nil
	}
	res := &processor.Result{Status: http.StatusOK, ContentType: processor.ContentTypeJSON, Body: final, Rounds: l.rounds, ToolCalls: l.calls}
	if x.req.stream {
		res.ContentType = processor.ContentTypeSSE
		res.Body = eventStream(final)
	}
	return res, nil
}

// StreamResponse implements processor.Exchange: the live stream. The
// model server streams every round (stream true); its text, thinking and
// client tool blocks reach the client delta by delta as the model writes
// them, re-indexed into the one message; a call of ours is announced
// (server_tool_use, its input whole: its id binds the input, history.go)
// once the model has written it, then runs with pings, then its result
// block; message_delta and message_stop end the message after the last
// round. A model server that answers a round with JSON instead is read
// whole. A failure after the stream began is Anthropic's error event.
func (x *Exchange) StreamResponse(ctx context.Context, up processor.StreamUpstream, status int, header http.Header, body io.Reader, w io.Writer) error {
	defer x.Close()
	if c, ok := body.(io.Closer); ok {
		defer c.Close()
	}
	if !x.live || status < 200 || status > 299 {
		_, err := io.Copy(w, body)
		return err
	}
	ev := newEvents(w, x.p.cfg.PingEvery)
	l := &loop{x: x, em: ev}
	rc, ok := body.(io.ReadCloser)
	if !ok {
		rc = io.NopCloser(body)
	}
	first, err := x.answer(ev, header, rc)
	if err != nil {
		return x.streamFailure(ctx, w, err)
	}
	_, f := l.drive(ctx, first, func(ctx context.Context, b []byte) (source, *failure) {
		st, hdr, rc, err := up.CreateResponseStream(ctx, b)
		if err != nil {
			return nil, l.followUpFailure(ctx, 0, nil, err)
		}
		if st < 200 || st > 299 {
			data, _ := readBounded(rc, x.p.cfg.MaxBodyBytes)
			rc.Close()
			return nil, l.followUpFailure(ctx, st, data, nil)
		}
		src, err := x.answer(ev, hdr, rc)
		if err != nil {
			return nil, l.followUpFailure(ctx, 0, nil, err)
		}
		return src, nil
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if f != nil {
		ev.write("error", string(f.body))
	}
	return ev.err
}

// answer is a live round's source: the model server's event stream, or
// its JSON message when it answered with one (read whole, rc closed).
func (x *Exchange) answer(ev *events, header http.Header, rc io.ReadCloser) (source, error) {
	if ct := header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "text/event-stream") {
		defer rc.Close()
		data, err := readBounded(rc, x.p.cfg.MaxBodyBytes)
		if err != nil {
			return nil, err
		}
		return wholeAnswer(data), nil
	}
	return liveAnswer(ev, rc), nil
}

func (x *Exchange) streamFailure(ctx context.Context, w io.Writer, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	x.p.log.Warn("unusable upstream answer", zap.Error(err))
	ev := newEvents(w, 0)
	ev.write("error", string(errorJSON(http.StatusBadGateway, "The upstream model server's answer could not be read.")))
	return ev.err
}

func readBounded(r io.Reader, max int) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, int64(max)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > max {
		return nil, fmt.Errorf("the answer exceeds %d bytes", max)
	}
	return b, nil
}

// failure is what the client gets instead of a message: a status and an
// Anthropic error body (or the model server's own).
type failure struct {
	status int
	body   []byte
}

// emitter is where the loop's message goes: collected whole (buffered)
// or as events (live).
type emitter interface {
	// start is told the message's head (message_start's message).
	start(head string)
	// block is told each content block, in order.
	block(b string)
	// running is called as a call starts; the function it returns as it
	// ends (pings in between).
	running() func()
	// finish is told the stop (message_delta's delta and usage).
	finish(delta, usage string)
}

// loop is one exchange's rounds.
type loop struct {
	x      *Exchange
	em     emitter
	rounds int // follow-ups made
	calls  int // code execution calls
	blocks []string
	usage  usage
	// started: the first round's head was read (id, model: the message's).
	started   bool
	id, model string
	// round is the round's token in its call ids (history.go).
	round string
}

type usage struct {
	input, output, cacheCreate, cacheRead int64
	cache                                 bool
}

func (u *usage) add(v gjson.Result) {
	u.input += v.Get("input_tokens").Int()
	u.output += v.Get("output_tokens").Int()
	if c := v.Get("cache_creation_input_tokens"); c.Type == gjson.Number {
		u.cache, u.cacheCreate = true, u.cacheCreate+c.Int()
	}
	if c := v.Get("cache_read_input_tokens"); c.Type == gjson.Number {
		u.cache, u.cacheRead = true, u.cacheRead+c.Int()
	}
}

func (u usage) json(calls int) string {
	cc, cr := "null", "null"
	if u.cache {
		cc, cr = strconv.FormatInt(u.cacheCreate, 10), strconv.FormatInt(u.cacheRead, 10)
	}
	return `{"input_tokens":` + strconv.FormatInt(u.input, 10) + `,"cache_creation_input_tokens":` + cc +
		`,"cache_read_input_tokens":` + cr + `,"output_tokens":` + strconv.FormatInt(u.output, 10) +
		`,"server_tool_use":{"web_search_requests":0,"web_fetch_requests":0,"code_execution_requests":` + strconv.Itoa(calls) + `}}`
}

// round is one answer of the model server as the loop reads it.
type round struct {
	// content is the model's blocks as it wrote them (the follow-up's
	// assistant turn), results the tool_results of the calls of ours.
	content, results []string
	ours, theirs     int
	// stop and seq are the answer's stop_reason and stop_sequence (raw JSON).
	stop, seq string
}

// source reads one round of the model server's answer: it tells the loop
// the answer's head (l.begin), each block as it is complete (l.modelBlock)
// and the round's usage, and sets the round's stop. A whole JSON answer
// (wholeAnswer) and an event stream (liveAnswer) are the two.
type source func(ctx context.Context, l *loop, rd *round) *failure

// drive runs rounds until the model answers without a call of ours (or
// with a client tool's call too, which ends the turn for the client to
// answer), or MaxRounds follow-ups were made (stop_reason "pause_turn").
// src is the first answer; send makes a follow-up and returns its answer.
// It returns the client's message.
func (l *loop) drive(ctx context.Context, src source, send func(context.Context, []byte) (source, *failure)) ([]byte, *failure) {
	p := l.x.p
	msgs := gjson.GetBytes(l.x.req.upstream, "messages").Array()
	history := make([]string, len(msgs))
	for k, m := range msgs {
		history[k] = m.Raw
	}
	for {
		rd := &round{}
		l.round = newRound()
		if f := src(ctx, l, rd); f != nil {
			if ctx.Err() != nil {
				return nil, cancelled()
			}
			return nil, f
		}
		if ctx.Err() != nil {
			return nil, cancelled()
		}
		if rd.ours == 0 || rd.theirs > 0 || l.rounds >= p.cfg.MaxRounds {
			stop := rd.stop
			if rd.ours > 0 && rd.theirs == 0 {
				stop = `"pause_turn"` // the loop's bound: the client may continue
			}
			return l.finish(stop, rd.seq), nil
		}
		history = append(history, `{"role":"assistant","content":`+string(jsonx.AppendArray(nil, rd.content))+`}`,
			`{"role":"user","content":`+string(jsonx.AppendArray(nil, rd.results))+`}`)
		next := jsonx.EditObject(string(l.x.req.upstream), jsonx.Set("messages", string(jsonx.AppendArray(nil, history))))
		l.rounds++
		var f *failure
		if src, f = send(ctx, next); f != nil {
			return nil, f
		}
	}
}

// wholeAnswer is a round the model server answered as one JSON message.
func wholeAnswer(body []byte) source {
	return func(ctx context.Context, l *loop, rd *round) *failure {
		m := gjson.ParseBytes(body)
		if !gjson.ValidBytes(body) || !m.Get("content").IsArray() {
			return l.unusable()
		}
		l.begin(m)
		l.usage.add(m.Get("usage"))
		m.Get("content").ForEach(func(_, b gjson.Result) bool {
			l.modelBlock(ctx, rd, b, false)
			return ctx.Err() == nil
		})
		rd.stop, rd.seq = m.Get("stop_reason").Raw, m.Get("stop_sequence").Raw
		return nil
	}
}

// begin is told a round's message head (its id, model and usage): the
// first round's opens the client's message.
func (l *loop) begin(m gjson.Result) {
	if l.started {
		return
	}
	l.started = true
	l.id, l.model = m.Get("id").Str, m.Get("model").Str
	l.em.start(`{"id":` + jsonx.Quote(l.id) + `,"type":"message","role":"assistant","model":` + jsonx.Quote(l.model) +
		`,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":` + strconv.FormatInt(m.Get("usage.input_tokens").Int(), 10) +
		`,"output_tokens":1},"container":null}`)
}

// modelBlock is told each whole block of a round, in order: a call of ours
// runs (its blocks emitted), anything else is the client's (emitted unless
// streamed says the live stream already sent it).
func (l *loop) modelBlock(ctx context.Context, rd *round, b gjson.Result, streamed bool) {
	rd.content = append(rd.content, b.Raw)
	if b.Get("type").Str == "tool_use" && codeexec.IsToolName(b.Get("name").Str) {
		rd.ours++
		rd.results = append(rd.results, l.call(ctx, b))
		return
	}
	if b.Get("type").Str == "tool_use" {
		rd.theirs++
	}
	l.blocks = append(l.blocks, b.Raw)
	if !streamed {
		l.em.block(b.Raw)
	}
}

func (l *loop) unusable() *failure {
	l.x.p.log.Warn("unusable upstream answer", zap.Int("round", l.rounds))
	return &failure{status: http.StatusBadGateway, body: errorJSON(http.StatusBadGateway, "The upstream model server returned a response this server could not read.")}
}

func cancelled() *failure {
	return &failure{status: 499, body: errorJSON(http.StatusBadRequest, "The request was cancelled.")}
}

// followUpFailure is what a follow-up's failed answer (err, or a status
// that is not 2xx with its body) becomes for the client; nil for a 2xx.
func (l *loop) followUpFailure(ctx context.Context, st int, answer []byte, err error) *failure {
	p := l.x.p
	switch {
	case err != nil:
		if ctx.Err() != nil {
			return cancelled()
		}
		p.log.Warn("follow-up failed", zap.Int("round", l.rounds), zap.Error(err))
		return &failure{status: http.StatusBadGateway, body: errorJSON(http.StatusBadGateway, "The upstream model server could not be reached for a follow-up request.")}
	case st < 200 || st > 299:
		p.log.Warn("follow-up answered with an error", zap.Int("round", l.rounds), zap.Int("status", st))
		if gjson.GetBytes(answer, "type").Str == "error" {
			return &failure{status: st, body: answer}
		}
		return &failure{status: st, body: errorJSON(st, "The upstream model server answered a follow-up request with status "+strconv.Itoa(st)+".")}
	}
	return nil
}

func (l *loop) emit(b string) {
	l.blocks = append(l.blocks, b)
	l.em.block(b)
}

// call runs one tool_use of ours through the hosted tools' seam (the tool
// found by its function name decodes the input, runs the action on the
// container and says what the model is told): its server_tool_use block,
// the run, its result block; it returns the tool_result the model server
// gets.
func (l *loop) call(ctx context.Context, b gjson.Result) string {
	p := l.x.p
	name := b.Get("name").Str
	action := p.tools[name].Decode(codeexec.Args(b.Get("input")))
	c := action.(*codeexec.Call) // the blocks are Anthropic's: tool_codeexec.go
	c.UpstreamID = b.Get("id").Str
	c.ID = p.callID(l.x.owner, l.round, name, c.Input)
	l.calls++
	l.emit(`{"type":"server_tool_use","id":` + jsonx.Quote(c.ID) + `,"name":` + jsonx.Quote(name) + `,"input":` + c.Input + `,"caller":{"type":"direct"}}`)
	var o hostedtool.Outcome
	if action.Invalid() == "" {
		done := l.em.running()
		rr, err := action.Run(ctx, l.x.ctr, nil)
		done()
		o = hostedtool.Outcome{RunResult: rr, Shown: true}
		if err != nil {
			p.log.Warn("a code execution call failed", zap.String("tool", name), zap.Error(err))
			o.NotRun = notRun(err)
		}
	}
	r := c.Result(o)
	l.emit(c.Block(r))
	res := `{"type":"tool_result","tool_use_id":` + jsonx.Quote(c.UpstreamID) + `,"content":` + jsonx.Quote(action.ModelOutput(o))
	if r.IsError {
		res += `,"is_error":true`
	}
	return res + "}"
}

// finish ends the message: its stop, usage and container.
func (l *loop) finish(stop, seq string) []byte {
	if stop == "" {
		stop = "null"
	}
	if seq == "" {
		seq = "null"
	}
	container := `{"id":` + jsonx.Quote(l.x.ctr.ID()) + `,"expires_at":` + jsonx.Quote(l.x.p.now().Add(l.x.p.cfg.ContainerExpiry).UTC().Format(time.RFC3339Nano)) +
		`,"skills":` + containerSkillsJSON(l.x.ctr.Skills()) + `}`
	u := l.usage.json(l.calls)
	l.em.finish(`{"stop_reason":`+stop+`,"stop_sequence":`+seq+`,"container":`+container+`}`, u)
	return []byte(`{"id":` + jsonx.Quote(l.id) + `,"type":"message","role":"assistant","model":` + jsonx.Quote(l.model) +
		`,"content":` + string(jsonx.AppendArray(nil, l.blocks)) + `,"stop_reason":` + stop + `,"stop_sequence":` + seq +
		`,"usage":` + u + `,"container":` + container + `}`)
}

// notRun is why a call that could not run did not: the error_message of
// its unavailable result.
func notRun(err error) string {
	switch {
	case errors.Is(err, containerapi.ErrSecretsLost):
		return "the container's network secrets are not held by this server"
	case errors.Is(err, containerapi.ErrUnavailable):
		return "the container is temporarily unavailable"
	}
	return "the container could not run the call"
}

// containerSkillsJSON is the message's container.skills: Anthropic's
// {type, skill_id, version} for each skill the container mounts (this
// server's skills are all "custom"), null for none.
func containerSkillsJSON(sk []store.ContainerSkill) string {
	if len(sk) == 0 {
		return "null"
	}
	out := make([]string, len(sk))
	for i, s := range sk {
		out[i] = `{"type":"custom","skill_id":` + jsonx.Quote(s.SkillID) + `,"version":` + jsonx.Quote(strconv.Itoa(s.Version)) + `}`
	}
	return string(jsonx.AppendArray(nil, out))
}
