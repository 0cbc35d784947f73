package interceptor

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sort"

	"github.com/tidwall/gjson"
	"github.com/tidwall/pretty"
	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/hostedtool"
	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/codeinterp/codeinterp/internal/sse"
)

// This file is the live path of a streaming client: the upstream streams
// every round (stream:true), and the client gets each event as it arrives,
// renumbered and re-indexed into the spliced response, with the hosted
// tools' calls turned into their tools' lifecycles as the model writes them
// and as they run (tool.liveEvents). The buffered path (CompleteResponse) is untouched by it; both share
// the loop's turn/execute/finish, the splice and the event writer.

// StreamLive makes an intercepted streaming exchange live: from now on
// UpstreamBody asks the upstream for a stream (as every follow-up will),
// and the upstream's answer goes to StreamResponse instead of
// CompleteResponse. It reports whether the exchange is live; it changes
// nothing (false) when the client did not ask for a stream or the request
// is not intercepted. Call it before sending UpstreamBody; calling it again
// is harmless.
func (x *Exchange) StreamLive() bool {
	if !x.req.intercepted || !x.req.clientStream {
		return false
	}
	if !x.req.live {
		x.req.live = true
		x.req.upstream = jsonx.EditObject(string(x.req.upstream), jsonx.Set("stream", "true"))
	}
	return true
}

// Live reports whether StreamLive made the exchange live.
func (x *Exchange) Live() bool { return x.req.live }

// StreamHead is what the client's response starts with, given the first
// upstream answer's status and headers: for a 2xx answer of a live exchange
// 200 and an SSE content type (the stream that StreamResponse writes);
// otherwise the upstream's own status and headers (the answer passes
// through). Content-Length is dropped either way: a live body's length is
// not known, a passed-through one is the transport's business.
func (x *Exchange) StreamHead(status int, header http.Header) (int, http.Header) {
	h := header.Clone()
	if h == nil {
		h = http.Header{}
	}
	h.Del("Content-Length")
	if !x.req.live || status < 200 || status > 299 {
		return status, h
	}
	h.Set("Content-Type", ContentTypeSSE)
	h.Set("Cache-Control", "no-cache")
	return http.StatusOK, h
}

// StreamResponse runs the loop of a live exchange (StreamLive) and writes
// the client's event stream to w as it goes. status, header and body are
// the first upstream answer (to UpstreamBody), read as it arrives; follow-ups
// go through up. Each event is written whole with one Write call and, when
// w has a Flush() error method, flushed at once.
//
// A non-2xx first answer (or an exchange that is not live) is copied to w
// unchanged: StreamHead says the client gets the upstream's status. Later
// failures — a follow-up answered non-2xx, an upstream stream that breaks
// off or sends what cannot be read, the upstream's own error event — end
// the client's stream with OpenAI's "error" event, then (once the response
// has been announced) "response.failed" with what was produced so far; the
// return is nil, the stream is complete. The returned error is non-nil only
// when ctx ended (the client went away: every run and follow-up is
// cancelled and nothing is left running) or writing to w failed; the
// filter should then abandon the stream. body is closed when it is an
// io.Closer, when StreamResponse returns or ctx ends.
func (x *Exchange) StreamResponse(ctx context.Context, up StreamUpstream, status int, header http.Header, body io.Reader, w io.Writer) error {
	if c, ok := body.(io.Closer); ok {
		defer c.Close()
		stop := context.AfterFunc(ctx, func() { _ = c.Close() })
		defer stop()
	}
	out := &liveOut{w: w, sw: sse.Writer{Obfuscate: x.req.obfuscate}}
	out.fl, _ = w.(interface{ Flush() error })
	if !x.req.live || status < 200 || status > 299 {
		defer x.Close()
		if _, err := io.Copy(w, body); err != nil {
			return err
		}
		return out.flush()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	l := x.newLoop(nil)
	defer l.closeSession()
	defer x.Close()
	s := &liveStream{l: l, up: up, out: out, finished: map[int]string{}}
	return s.run(ctx, body)
}

// liveOut writes events to the client, one Write (and Flush) per batch of
// events produced by one upstream event. The sse.Writer numbers them.
type liveOut struct {
	w   io.Writer
	fl  interface{ Flush() error }
	sw  sse.Writer
	err error // the first write error; nothing is written after it
}

func (o *liveOut) flush() error {
	if o.err != nil {
		return o.err
	}
	if b := o.sw.Bytes(); len(b) > 0 {
		if _, err := o.w.Write(b); err != nil {
			o.err = err
			return err
		}
		o.sw.Reset()
	}
	if o.fl != nil {
		if err := o.fl.Flush(); err != nil {
			o.err = err
		}
	}
	return o.err
}

// liveStream is the state of one live exchange across its rounds.
type liveStream struct {
	l   *loop
	up  StreamUpstream
	out *liveOut

	started  bool           // response.created went out
	opening  gjson.Result   // the first round's response.created response, as shown
	base     int            // spliced output index of the current round's output 0
	rs       *roundState    // the round being streamed or run
	finished map[int]string // client-visible output_item.done items by spliced index, for response.failed
	held     []*heldMessage // messages whose ending waits for their citations
	body     io.Reader      // the upstream answer being read
}

func (s *liveStream) run(ctx context.Context, body io.Reader) error {
	s.body = body
	l := s.l
	rounds, err := l.drive(ctx, s)
	if err != nil {
		return s.end(ctx, err)
	}
	// One response, one id: the client bound the stream to the id that
	// response.created announced (openai-go's accumulator rejects a terminal
	// with another), so it stays: this server's own id with a response
	// store, else the first round's.
	final := l.response(rounds)
	if id := s.opening.Get("id"); id.Type == gjson.String {
		final = jsonx.EditObject(string(final), jsonx.Set("id", id.Raw))
	}
	if len(s.held) > 0 {
		s.releaseHeld(final)
	}
	if bytesHasNewline(final) {
		final = pretty.Ugly(final)
	}
	s.out.sw.Event(terminalEvent(gjson.GetBytes(final, "status").Str), sse.Field{Key: "response", Value: string(final)})
	return s.out.flush()
}

// The roundSource of the live path.

func (s *liveStream) read(ctx context.Context, first bool) (*round, error) {
	return s.streamRound(ctx, s.body, first)
}

func (s *liveStream) hooks() callHooks { return s }

func (s *liveStream) turned(rd *round) error {
	if s.out.err != nil {
		return s.out.err
	}
	s.base += len(rd.items)
	for _, c := range rd.calls {
		s.base += len(c.moreIDs) // a tool shown as more items than one
	}
	return nil
}

func (s *liveStream) send(ctx context.Context, round int, req []byte) error {
	st, hdr, b, err := s.up.CreateResponseStream(ctx, req)
	if err != nil {
		s.l.log.Warn("follow-up request failed", zap.Int("round", round), zap.Error(err))
		return unreachable(round)
	}
	stop := context.AfterFunc(ctx, func() { _ = b.Close() })
	if st < 200 || st > 299 {
		eb, _ := io.ReadAll(io.LimitReader(b, 1<<20))
		stop()
		_ = b.Close()
		s.l.log.Warn("follow-up answered with an error", zap.Int("round", round), zap.Int("status", st))
		return errorAnswer(st, hdr, eb)
	}
	s.body = closeOnReturn{b, stop}
	return nil
}

// closeOnReturn is a follow-up's body: streamRound closes it when the
// round ends.
type closeOnReturn struct {
	io.ReadCloser
	stop func() bool
}

func terminalEvent(status string) string {
	switch status {
	case "incomplete":
		return "response.incomplete"
	case "failed":
		return "response.failed"
	}
	return "response.completed"
}

// end finishes the stream after err: a failure becomes the client's error
// event (and response.failed once the response was announced); the
// client's going away or a write error is returned.
func (s *liveStream) end(ctx context.Context, err error) error {
	var f *failure
	if !errors.As(err, &f) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	s.l.log.Warn("live stream failed", zap.Int("round", s.l.followUps), zap.String("code", f.code), zap.String("message", f.msg))
	code, param := "null", "null"
	if f.code != "" {
		code = jsonx.Quote(f.code)
	}
	if f.param != "" {
		param = jsonx.Quote(f.param)
	}
	s.out.sw.Event("error", sse.Field{Key: "code", Value: code}, sse.Field{Key: "message", Value: jsonx.Quote(f.msg)}, sse.Field{Key: "param", Value: param})
	if s.started {
		s.out.sw.Event("response.failed", sse.Field{Key: "response", Value: s.failedResponse(f)})
	}
	return s.out.flush()
}

// failedResponse is the opening response with status failed, the error,
// and the items finished so far.
func (s *liveStream) failedResponse(f *failure) string {
	idx := make([]int, 0, len(s.finished))
	for k := range s.finished {
		idx = append(idx, k)
	}
	sort.Ints(idx)
	items := make([]string, 0, len(idx))
	for _, k := range idx {
		items = append(items, s.finished[k])
	}
	code := "null"
	if f.code != "" {
		code = jsonx.Quote(f.code)
	}
	return string(jsonx.EditObject(s.opening.Raw,
		jsonx.Set("status", `"failed"`),
		jsonx.Set("error", `{"code":`+code+`,"message":`+jsonx.Quote(f.msg)+`}`),
		jsonx.Set("output", string(jsonx.AppendArray(nil, items))),
	))
}

func bytesHasNewline(b []byte) bool {
	for _, c := range b {
		if c == '\n' || c == '\r' {
			return true
		}
	}
	return false
}

// The callHooks of the live path: the call's run, as its tool shows it.

// liveOf is the live call the client was shown for c.
func (s *liveStream) liveOf(c *call) *liveCall { return s.rs.calls[c.index] }

func (s *liveStream) start(c *call) error {
	lc := s.liveOf(c)
	lc.t.started(s, lc, c)
	return s.out.flush()
}

func (s *liveStream) output(c *call, o hostedtool.Output) {
	lc := s.liveOf(c)
	lc.t.output(s, lc, c, o)
	_ = s.out.flush() // a failed write ends the loop after the run (turned)
}

func (s *liveStream) done(c *call) error {
	lc := s.liveOf(c)
	items := c.tool.items(s.l, c, false)
	for k, it := range items {
		s.finished[lc.at+k] = it
	}
	lc.t.finished(s, lc, c, items)
	return s.out.flush()
}
