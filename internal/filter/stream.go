package filter

import (
	"go.opentelemetry.io/otel/trace"

	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/tidwall/gjson"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/processor"
	"github.com/codeinterp/codeinterp/internal/store"
)

// phase is the message the stream expects next.
type phase int

const (
	phaseRequestHeaders phase = iota
	phaseRequestBody
	phaseResponseHeaders
	phaseResponseBody
	phaseDone   // the reply is decided; later messages are answered unchanged
	phaseLetGo  // not ours: every message is answered unchanged
	phaseClosed // an immediate_response was sent; Envoy will not send more
)

func (p phase) String() string {
	return [...]string{"request_headers", "request_body", "response_headers", "response_body", "done", "let_go", "closed"}[p]
}

// streamState is one stream's state machine.
type streamState struct {
	s         *Server
	log       *zap.Logger
	start     time.Time
	phase     phase
	outcome   Outcome
	requestID string
	method    string
	path      string
	// reqHdr are the client's request headers as Envoy sent them;
	// clientHdr, built from them only for an exchange that needs it
	// (callerHeader), is what follow-ups and containers see.
	reqHdr    []*corev3.HeaderValue
	clientHdr http.Header
	modes     *extprocv3.ProtocolConfiguration

	// route is the selected request's endpoint (request_headers).
	route        *route
	ex           processor.Exchange
	upstreamCode int
	upstreamHdr  http.Header
	result       *processor.Result
	upstream     *httpUpstream

	// out writes to the stream, serialized: the receive loop's answers, the
	// timeout override that must reach Envoy before the loop starts, and a
	// live stream's chunks from its goroutine.
	out *duplexOut

	// duplex: the response body is FULL_DUPLEX_STREAMED (duplexMode was
	// sent); handler answers its messages, bodyEnded once Envoy's end of
	// the body arrived.
	duplex    bool
	handler   responseHandler
	bodyEnded bool

	// span is the stream's trace span once its request was selected (nil:
	// tracing off, or not selected).
	span trace.Span
}

func newStreamState(s *Server) *streamState {
	return &streamState{s: s, log: s.log, start: time.Now(), outcome: OutcomeCancelled}
}

// run answers messages until the stream ends.
func (st *streamState) run(stream extprocv3.ExternalProcessor_ProcessServer) error {
	ctx := stream.Context()
	st.out = &duplexOut{send: stream.Send}
	for {
		req, err := stream.Recv()
		if err != nil {
			if isStreamEnd(ctx, err) {
				return nil
			}
			return err
		}
		if req.GetObservabilityMode() {
			// Responses are ignored in observability mode; this service
			// cannot work without them, so it only watches.
			if st.phase == phaseRequestHeaders {
				st.log.Warn("ext_proc observability_mode is set: codeinterp cannot intercept; configure a synchronous filter")
				st.phase = phaseLetGo
				st.outcome = OutcomeError
			}
			continue
		}
		if pc := req.GetProtocolConfig(); pc != nil && st.modes == nil {
			st.modes = pc
		}
		resps, err := st.handle(ctx, req)
		if err != nil {
			if isStreamEnd(ctx, err) {
				return nil
			}
			st.outcome = OutcomeError
			st.log.Error("ext_proc stream failed", zap.Error(err), zap.String("phase", st.phase.String()))
			return err
		}
		if err := st.out.sendAll(resps); err != nil {
			if isStreamEnd(ctx, err) {
				return nil
			}
			return err
		}
	}
}

// finish records the stream's outcome once.
func (st *streamState) finish(err error) {
	defer st.endSpan(err)
	if st.handler != nil {
		st.handler.close() // a live stream's goroutine uses the exchange
	}
	if st.ex != nil {
		st.ex.Close() // the container outlives the exchange; its use ends here
	}
	if st.s.metrics != nil {
		st.s.metrics.Requests.WithLabelValues(string(st.outcome)).Inc()
		if st.result != nil {
			st.s.metrics.LoopRounds.Observe(float64(st.result.Rounds))
		}
	}
	if st.outcome == OutcomeNotSelected {
		return // not ours: no log line per unrelated request
	}
	fields := []zap.Field{
		zap.String("outcome", string(st.outcome)),
		zap.String("method", st.method), zap.String("path", st.path),
		zap.Duration("duration", time.Since(st.start)),
	}
	if st.result != nil {
		fields = append(fields, zap.Int("status", st.result.Status), zap.Int("rounds", st.result.Rounds),
			zap.Int("tool_calls", st.result.ToolCalls))
	}
	if err != nil {
		fields = append(fields, zap.Error(err))
	}
	st.log.Info("request", fields...)
}

func (st *streamState) handle(ctx context.Context, req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
	ctx = st.withSpan(ctx)
	if st.handler != nil {
		return nil, st.duplexMessage(ctx, req) // the handler sends its own answers
	}
	if st.phase == phaseLetGo || st.phase == phaseDone {
		// Envoy sends more only if it ignored our mode_override (say an
		// allowed_override_modes list without NONE); answer unchanged.
		return one(continueFor(req))
	}
	if st.phase == phaseClosed {
		return nil, protocolError("%s after immediate_response", messageName(req))
	}
	switch r := req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		if st.phase != phaseRequestHeaders {
			return nil, protocolError("request_headers in phase %s", st.phase)
		}
		out, err := st.requestHeaders(r.RequestHeaders)
		if st.phase == phaseRequestBody {
			st.startSpan(ctx) // selected: the request is ours to trace
		}
		return out, err
	case *extprocv3.ProcessingRequest_RequestBody:
		if st.phase != phaseRequestBody {
			return nil, protocolError("request_body in phase %s", st.phase)
		}
		return st.requestBody(ctx, r.RequestBody)
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		if st.phase != phaseResponseHeaders {
			return nil, protocolError("response_headers in phase %s", st.phase)
		}
		return st.responseHeaders(r.ResponseHeaders)
	case *extprocv3.ProcessingRequest_ResponseBody:
		if st.phase != phaseResponseBody {
			return nil, protocolError("response_body in phase %s", st.phase)
		}
		return st.responseBody(ctx, r.ResponseBody)
	case *extprocv3.ProcessingRequest_RequestTrailers, *extprocv3.ProcessingRequest_ResponseTrailers:
		// Trailers are SKIP in the deployed filter config; if an operator
		// sends them anyway they pass unchanged.
		return one(continueFor(req))
	default:
		return nil, protocolError("message with no request set")
	}
}

func (st *streamState) requestHeaders(h *extprocv3.HttpHeaders) ([]*extprocv3.ProcessingResponse, error) {
	var strip []string
	st.reqHdr = h.GetHeaders().GetHeaders()
	for _, hv := range st.reqHdr {
		key := hv.GetKey()
		switch strings.ToLower(key) {
		case ":method":
			st.method = headerValue(hv)
		case ":path":
			st.path = headerValue(hv)
		case "x-request-id":
			st.requestID = headerValue(hv)
		default:
			if isInternalHeader(strings.ToLower(key)) {
				strip = append(strip, strings.ToLower(key))
			}
		}
	}
	if st.requestID == "" {
		st.requestID = idgen.Random("", 32)
	}
	st.log = st.s.log.With(zap.String("request_id", st.requestID))
	path, _, _ := strings.Cut(st.path, "?")

	resp := &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{}}
	if len(strip) > 0 {
		resp.Response.HeaderMutation = &extprocv3.HeaderMutation{RemoveHeaders: strip}
		st.log.Info("removed client-sent internal headers", zap.Strings("headers", strip))
	}
	out := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: resp}}

	st.route = st.s.routes[path]
	selected := st.s.methods[strings.ToUpper(st.method)] && st.route != nil
	if !selected || h.GetEndOfStream() {
		// Not ours (or no body to look at): one round trip, then Envoy
		// leaves the exchange alone.
		out.ModeOverride = LetGoMode()
		st.phase = phaseLetGo
		st.outcome = OutcomeNotSelected
		if selected {
			st.outcome = OutcomePassThrough
		}
		return one(out)
	}
	if m := st.modes; m != nil && (m.GetRequestBodyMode() != filterv3.ProcessingMode_BUFFERED || m.GetResponseBodyMode() != filterv3.ProcessingMode_BUFFERED) {
		st.outcome = OutcomeError
		st.log.Error("ext_proc filter misconfigured: codeinterp needs BUFFERED request and response bodies",
			zap.String("request_body_mode", m.GetRequestBodyMode().String()),
			zap.String("response_body_mode", m.GetResponseBodyMode().String()))
		return st.immediate(&apierror.Error{Status: http.StatusInternalServerError, Type: apierror.TypeServer,
			Message: "the code interpreter gateway is misconfigured (ext_proc body modes must be BUFFERED)"})
	}
	if !st.s.cfg.SyntheticStreams {
		out.ModeOverride = DuplexMode()
		st.duplex = true
	}
	st.phase = phaseRequestBody
	return one(out)
}

// callerHeader is the client's request headers without pseudo-headers and
// without the internal ones the request_headers answer removed, built on
// first use: a request that passes through never needs them.
func (st *streamState) callerHeader() http.Header {
	if st.clientHdr != nil {
		return st.clientHdr
	}
	st.clientHdr = make(http.Header, len(st.reqHdr))
	for _, hv := range st.reqHdr {
		key := strings.ToLower(hv.GetKey())
		if strings.HasPrefix(key, ":") || isInternalHeader(key) {
			continue
		}
		st.clientHdr.Add(key, headerValue(hv))
	}
	return st.clientHdr
}

func (st *streamState) requestBody(ctx context.Context, b *extprocv3.HttpBody) ([]*extprocv3.ProcessingResponse, error) {
	body := b.GetBody()
	if int64(len(body)) > st.s.cfg.MaxBodyBytes {
		st.outcome = OutcomeRejected
		return st.immediate(&apierror.Error{Status: http.StatusRequestEntityTooLarge, Type: apierror.TypeInvalidRequest,
			Message: fmt.Sprintf("Request body is %d bytes; the limit is %d bytes.", len(body), st.s.cfg.MaxBodyBytes),
			Code:    "request_too_large"})
	}
	if st.route.proc.PassesThrough(body) {
		// Not ours whoever asks: no caller to identify, no exchange; the
		// response is let go at response_headers (or echoed in duplex).
		st.outcome = OutcomePassThrough
		st.phase = phaseResponseHeaders
		if st.duplex {
			st.handler = st.newResponseHandler(nil)
		}
		return one(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
			RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{}},
		}})
	}
	hdr := st.callerHeader()
	owner, ok := store.Owner(hdr, st.s.cfg.AuthHeaders)
	if !ok && !st.s.cfg.AnonymousShared {
		owner = "" // no one: the interceptor refuses it a container
	}
	var rsv processor.Reservation
	if st.s.cfg.Background != nil && st.route.main && gjson.GetBytes(body, "background").Type == gjson.True {
		// Past the bounds a background request is refused before its
		// exchange opens a container.
		r, err := st.s.cfg.Background.Reserve(owner)
		if err != nil {
			return st.refuse(err)
		}
		rsv = r
	}
	ex, err := st.route.proc.NewExchange(ctx, processor.Caller{Owner: owner, Header: hdr}, body)
	if err != nil && rsv != nil {
		rsv.Release()
	}
	if err != nil {
		return st.refuse(err)
	}
	if bg, ok := ex.(processor.Backgrounded); ok && bg.Background() {
		return st.startBackground(ctx, processor.Caller{Owner: owner, Header: hdr}, bg, rsv)
	}
	if rsv != nil {
		rsv.Release()
	}
	st.ex = ex
	if st.duplex {
		ex.StreamLive() // before UpstreamBody: a live exchange asks the upstream for a stream
	}
	resp := &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{}}
	out := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: resp}}
	if ex.Modified() {
		nb := ex.UpstreamBody()
		mut := &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
			setHeader("content-length", strconv.Itoa(len(nb))),
		}}
		// The model server's spans of the first round join the trace.
		for k, v := range st.traceHeader() {
			mut.SetHeaders = append(mut.SetHeaders, setHeader(k, v))
		}
		if ex.Intercepted() {
			// The loop must read the upstream's JSON: ask for it uncompressed.
			mut.RemoveHeaders = []string{"accept-encoding"}
		}
		resp.Response.HeaderMutation = mut
		resp.Response.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: nb}}
	}
	if !ex.Intercepted() {
		st.outcome = OutcomePassThrough
		st.phase = phaseResponseHeaders // answered with a let-go override (or echoed in duplex)
		ex.Close()
		st.ex = nil
	}
	st.phase = phaseResponseHeaders
	if st.duplex {
		st.handler = st.newResponseHandler(st.ex)
	}
	return one(out)
}

func (st *streamState) responseHeaders(h *extprocv3.HttpHeaders) ([]*extprocv3.ProcessingResponse, error) {
	out := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{},
	}}
	if st.ex == nil {
		out.ModeOverride = LetGoMode()
		st.phase = phaseLetGo
		return one(out)
	}
	code, hdr := parseResponseHeaders(h)
	if code < 200 || code > 299 {
		st.upstreamFailed(code)
		out.ModeOverride = LetGoMode()
		st.phase = phaseLetGo
		return one(out)
	}
	if h.GetEndOfStream() {
		return st.noUpstreamBody()
	}
	st.upstreamCode, st.upstreamHdr = code, hdr
	st.phase = phaseResponseBody
	return one(out)
}

// upstreamFailed records a non-2xx first answer: the client sees the
// upstream's own error, untouched.
func (st *streamState) upstreamFailed(code int) {
	st.log.Info("upstream answered non-2xx; passing it through", zap.Int("status", code))
	st.outcome = OutcomeUpstreamError
}

func (st *streamState) noUpstreamBody() ([]*extprocv3.ProcessingResponse, error) {
	st.outcome = OutcomeUpstreamError
	return st.immediate(&apierror.Error{Status: http.StatusBadGateway, Type: apierror.TypeServer,
		Message: "The upstream model server answered without a body."})
}

func (st *streamState) responseBody(ctx context.Context, b *extprocv3.HttpBody) ([]*extprocv3.ProcessingResponse, error) {
	var pre []*extprocv3.ProcessingResponse
	if d := st.s.cfg.OverrideMessageTimeout; d > 0 {
		// Envoy restarts its message timer (once per message) and ignores
		// every other field of this response, so it is sent on its own,
		// before the long work starts.
		pre = append(pre, &extprocv3.ProcessingResponse{OverrideMessageTimeout: durationpb.New(d)})
	}
	res, refusal, err := st.completeBuffered(ctx, b.GetBody(), pre)
	if err != nil || refusal != nil {
		return refusal, err
	}
	st.phase = phaseDone
	return one(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
			HeaderMutation: st.resultHeaders(res),
			BodyMutation:   &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: res.Body}},
		}},
	}})
}

// completeBuffered runs the buffered loop over the upstream's whole first
// answer. It returns the result, or the responses that refuse the exchange
// instead (an oversized or undecodable upstream body), or the error that
// abandons the stream. pre goes to Envoy before the loop starts.
func (st *streamState) completeBuffered(ctx context.Context, body []byte, pre []*extprocv3.ProcessingResponse) (*processor.Result, []*extprocv3.ProcessingResponse, error) {
	if int64(len(body)) > st.s.cfg.MaxBodyBytes {
		r, _ := st.upstreamTooLarge()
		return nil, r, nil
	}
	decoded, err := decodeBody(body, st.upstreamHdr.Get("content-encoding"), st.s.cfg.MaxBodyBytes)
	if err != nil {
		st.outcome = OutcomeUpstreamError
		st.log.Error("upstream body unreadable", zap.Error(err))
		r, _ := st.immediate(&apierror.Error{Status: http.StatusBadGateway, Type: apierror.TypeServer,
			Message: "The upstream response could not be decoded."})
		return nil, append(pre, r...), nil
	}
	st.upstream = st.newUpstream()
	if len(pre) > 0 {
		if err := st.sendNow(ctx, pre); err != nil {
			return nil, nil, err
		}
	}
	res, err := st.ex.CompleteResponse(ctx, st.upstream, st.upstreamCode, st.upstreamHdr, decoded)
	if err != nil {
		st.outcome = OutcomeCancelled
		st.log.Info("exchange abandoned: the stream ended during the loop", zap.Error(err), zap.Int("follow_ups_sent", st.upstream.rounds))
		return nil, nil, err
	}
	st.result = res
	st.outcome = OutcomeCompleted
	if res.Status < 200 || res.Status > 299 {
		st.outcome = OutcomeUpstreamError
	}
	return res, nil, nil
}

func (st *streamState) upstreamTooLarge() ([]*extprocv3.ProcessingResponse, error) {
	st.outcome = OutcomeUpstreamError
	return st.immediate(&apierror.Error{Status: http.StatusBadGateway, Type: apierror.TypeServer,
		Message: fmt.Sprintf("The upstream response is larger than the %d-byte limit.", st.s.cfg.MaxBodyBytes)})
}

// resultHeaders are the header edits that go with a buffered result.
func (st *streamState) resultHeaders(res *processor.Result) *extprocv3.HeaderMutation {
	mut := &extprocv3.HeaderMutation{
		RemoveHeaders: []string{"content-encoding", "etag"},
		SetHeaders: []*corev3.HeaderValueOption{
			setHeader("content-type", res.ContentType),
			setHeader("content-length", strconv.Itoa(len(res.Body))),
		},
	}
	if res.Status != st.upstreamCode {
		mut.SetHeaders = append(mut.SetHeaders, setHeader(":status", strconv.Itoa(res.Status)))
	}
	return mut
}

// newUpstream is the follow-up client of this exchange.
func (st *streamState) newUpstream() *httpUpstream {
	return &httpUpstream{
		client:  st.s.client,
		url:     st.route.url,
		header:  followUpHeaders(st.callerHeader(), st.route.forward, st.s.cfg.Upstream.Headers, st.requestID),
		timeout: st.s.cfg.Upstream.Timeout,
		maxBody: st.s.cfg.MaxBodyBytes,
		tel:     st.s.tel,
		tracer:  st.s.tracer,
		host:    st.route.host,
	}
}

// sendNow writes responses before the current message is finished.
func (st *streamState) sendNow(_ context.Context, rs []*extprocv3.ProcessingResponse) error {
	if st.out == nil {
		return errors.New("filter: no sender")
	}
	return st.out.sendAll(rs)
}
