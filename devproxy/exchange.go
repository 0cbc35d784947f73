package devproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// exchange is one HTTP request/response and its ext_proc stream.
type exchange struct {
	p    *Proxy
	w    http.ResponseWriter
	r    *http.Request
	mode *filterv3.ProcessingMode // in force now, after any override
	// cluster is the chosen route's cluster.
	cluster *url.URL

	stream  extprocv3.ExternalProcessor_ProcessClient
	cancel  context.CancelFunc
	recv    chan recvResult
	sent    bool // protocol_config goes on the first message only
	closed  bool
	started bool // response headers went to the client

	// complete is Envoy's "processing complete": after an immediate
	// response, an OK close, or a fail-open failure no message is sent.
	complete bool
}

type recvResult struct {
	resp *extprocv3.ProcessingResponse
	err  error
}

type msgKind int

const (
	kindNone msgKind = iota
	kindRequestHeaders
	kindRequestBody
	kindRequestTrailers
	kindResponseHeaders
	kindResponseBody
	kindResponseTrailers
)

func responseKind(r *extprocv3.ProcessingResponse) msgKind {
	switch r.GetResponse().(type) {
	case *extprocv3.ProcessingResponse_RequestHeaders:
		return kindRequestHeaders
	case *extprocv3.ProcessingResponse_RequestBody:
		return kindRequestBody
	case *extprocv3.ProcessingResponse_RequestTrailers:
		return kindRequestTrailers
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		return kindResponseHeaders
	case *extprocv3.ProcessingResponse_ResponseBody:
		return kindResponseBody
	case *extprocv3.ProcessingResponse_ResponseTrailers:
		return kindResponseTrailers
	}
	return kindNone
}

// dropsContentLength reports the modes in which Envoy removes
// content-length at header time and ignores a processor-set one: the
// streaming body modes, and BUFFERED when the headers are not sent.
func dropsContentLength(header filterv3.ProcessingMode_HeaderSendMode, body filterv3.ProcessingMode_BodySendMode) bool {
	switch body {
	case filterv3.ProcessingMode_STREAMED, filterv3.ProcessingMode_BUFFERED_PARTIAL, filterv3.ProcessingMode_FULL_DUPLEX_STREAMED:
		return true
	case filterv3.ProcessingMode_BUFFERED:
		return header == filterv3.ProcessingMode_SKIP
	}
	return false
}

func (ex *exchange) run(ctx context.Context) {
	r := ex.r
	reqH := requestHeaders(r)
	hasBody := r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0

	// Request headers: Envoy holds them until their response.
	clDrop := dropsContentLength(ex.mode.GetRequestHeaderMode(), ex.mode.GetRequestBodyMode())
	var hdrOut headersOutcome
	if ex.mode.GetRequestHeaderMode() != filterv3.ProcessingMode_SKIP && !ex.complete {
		resp, ok := ex.call(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
			RequestHeaders: &extprocv3.HttpHeaders{Headers: reqH.proto(), EndOfStream: !hasBody},
		}}, kindRequestHeaders)
		if !ok {
			return
		}
		if resp != nil {
			if !ex.applyModeOverride(resp.GetModeOverride()) {
				return
			}
			if hdrOut, ok = ex.applyHeadersResponse(reqH, resp.GetRequestHeaders().GetResponse(), clDrop); !ok {
				return
			}
		}
	}
	if clDrop {
		reqH.del("content-length")
	}

	// Request body: nothing goes upstream before its response.
	var body io.Reader
	bodyLen := int64(0)
	var trailer http.Header
	switch {
	case hdrOut.replaced:
		body, bodyLen = bytes.NewReader(hdrOut.body), int64(len(hdrOut.body))
	case !hasBody:
	case ex.mode.GetRequestBodyMode() == filterv3.ProcessingMode_BUFFERED && !ex.complete && !hdrOut.stopBody:
		data, over, err := readLimited(r.Body, ex.p.cfg.BufferLimit)
		if err != nil {
			return // the client reset its request; Envoy resets too
		}
		if over {
			ex.localReply(http.StatusRequestEntityTooLarge, "Payload Too Large", "request_payload_too_large")
			return
		}
		trailer = realTrailers(r.Trailer)
		resp, ok := ex.call(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: data, EndOfStream: trailer == nil},
		}}, kindRequestBody)
		if !ok {
			return
		}
		if resp != nil {
			held := ex.mode.GetRequestHeaderMode() == filterv3.ProcessingMode_SEND
			if data, ok = ex.applyBodyResponse(reqH, data, resp.GetRequestBody().GetResponse(), held, clDrop); !ok {
				return
			}
		}
		if trailer != nil && ex.mode.GetRequestTrailerMode() == filterv3.ProcessingMode_SEND && !ex.complete {
			if !ex.processTrailers(ctx, trailer, kindRequestTrailers) {
				return
			}
		}
		body, bodyLen = bytes.NewReader(data), int64(len(data))
	default:
		// Unbuffered: streamed through as it arrives.
		body, bodyLen = r.Body, r.ContentLength
		if clDrop {
			bodyLen = -1
		}
		trailer = r.Trailer
	}

	resp, ok := ex.forward(ctx, reqH, body, bodyLen, trailer)
	if !ok {
		return
	}
	defer resp.Body.Close()
	ex.handleResponse(ctx, resp)
}

// forward sends the request to the upstream cluster.
func (ex *exchange) forward(ctx context.Context, reqH *headerMap, body io.Reader, bodyLen int64, trailer http.Header) (*http.Response, bool) {
	path, _ := reqH.get(":path")
	method, _ := reqH.get(":method")
	u, err := upstreamURL(ex.cluster, path)
	if err != nil {
		ex.localReply(http.StatusBadRequest, "Bad Request", "invalid_path")
		return nil, false
	}
	if body == nil {
		body = http.NoBody
	}
	out, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		ex.localReply(http.StatusBadRequest, "Bad Request", "invalid_request")
		return nil, false
	}
	out.Header = reqH.httpHeader()
	out.Header.Del("Content-Length")
	// Envoy's codec frames with the content-length header when there is
	// one and chunks otherwise.
	out.ContentLength = bodyLen
	if _, ok := reqH.get("content-length"); !ok && bodyLen > 0 {
		out.ContentLength = -1
	}
	if bodyLen == 0 {
		out.Body = http.NoBody
	}
	out.Host = u.Host
	if len(trailer) > 0 {
		out.Trailer = trailer
	}
	resp, err := ex.p.transport.RoundTrip(out)
	if err != nil {
		if contextDone(ctx) {
			return nil, false
		}
		ex.localReply(http.StatusServiceUnavailable,
			"upstream connect error or disconnect/reset before headers. reset reason: connection failure",
			"upstream_reset_before_response_started{connection_failure}")
		return nil, false
	}
	return resp, true
}

// handleResponse runs the response half: the response headers message,
// then the body's (with a BUFFERED body the client gets neither before the
// body's response).
func (ex *exchange) handleResponse(ctx context.Context, resp *http.Response) {
	respH := &headerMap{h: []header{{":status", strconv.Itoa(resp.StatusCode)}}}
	rest := fromHTTP(resp.Header)
	rest.del("content-length")
	respH.h = append(respH.h, rest.h...)
	if resp.ContentLength >= 0 && ex.r.Method != http.MethodHead {
		respH.add("content-length", strconv.FormatInt(resp.ContentLength, 10))
	}
	// 204, 304, HEAD and content-length 0 carry no body message.
	hasBody := !(ex.r.Method == http.MethodHead || resp.StatusCode == http.StatusNoContent ||
		resp.StatusCode == http.StatusNotModified || resp.ContentLength == 0)

	if ex.mode.GetResponseBodyMode() == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED && !ex.complete {
		ex.duplexResponse(ctx, respH, resp, hasBody)
		return
	}
	clDrop := dropsContentLength(ex.mode.GetResponseHeaderMode(), ex.mode.GetResponseBodyMode())
	var hdrOut headersOutcome
	if ex.mode.GetResponseHeaderMode() != filterv3.ProcessingMode_SKIP && !ex.complete {
		pr, ok := ex.call(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
			ResponseHeaders: &extprocv3.HttpHeaders{Headers: respH.proto(), EndOfStream: !hasBody},
		}}, kindResponseHeaders)
		if !ok {
			return
		}
		if pr != nil {
			if !ex.applyResponseModeOverride(pr.GetModeOverride()) {
				return
			}
			if hdrOut, ok = ex.applyHeadersResponse(respH, pr.GetResponseHeaders().GetResponse(), clDrop); !ok {
				return
			}
		}
	}
	if clDrop {
		respH.del("content-length")
	}

	switch {
	case hdrOut.replaced:
		ex.writeBuffered(respH, hdrOut.body, nil)
	case !hasBody:
		ex.writeBuffered(respH, nil, nil)
	case ex.mode.GetResponseBodyMode() == filterv3.ProcessingMode_BUFFERED && !ex.complete && !hdrOut.stopBody:
		data, over, err := readLimited(resp.Body, ex.p.cfg.BufferLimit)
		if err != nil {
			if contextDone(ctx) {
				return
			}
			ex.localReply(http.StatusServiceUnavailable, "upstream connect error or disconnect/reset before headers. reset reason: remote reset",
				"upstream_reset_after_response_started{remote_reset}")
			return
		}
		if over {
			ex.localReply(http.StatusInternalServerError, "Internal Server Error", "response_payload_too_large")
			return
		}
		trailer := realTrailers(resp.Trailer)
		pr, ok := ex.call(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{Body: data, EndOfStream: trailer == nil},
		}}, kindResponseBody)
		if !ok {
			return
		}
		if pr != nil {
			held := ex.mode.GetResponseHeaderMode() == filterv3.ProcessingMode_SEND
			if data, ok = ex.applyBodyResponse(respH, data, pr.GetResponseBody().GetResponse(), held, clDrop); !ok {
				return
			}
		}
		if trailer != nil && ex.mode.GetResponseTrailerMode() == filterv3.ProcessingMode_SEND && !ex.complete {
			if !ex.processTrailers(ctx, trailer, kindResponseTrailers) {
				return
			}
		}
		ex.writeBuffered(respH, data, trailer)
	default:
		ex.writeStreamed(ctx, respH, resp)
	}
}

// realTrailers returns the trailers that actually arrived, or nil.
func realTrailers(t http.Header) http.Header {
	out := http.Header{}
	for k, vs := range t {
		if len(vs) > 0 {
			out[k] = vs
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func (ex *exchange) processTrailers(ctx context.Context, t http.Header, kind msgKind) bool {
	m := fromHTTP(t)
	req := &extprocv3.ProcessingRequest{}
	if kind == kindRequestTrailers {
		req.Request = &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{Trailers: m.proto()}}
	} else {
		req.Request = &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{Trailers: m.proto()}}
	}
	resp, ok := ex.call(ctx, req, kind)
	if !ok || resp == nil {
		return ok
	}
	var mut *extprocv3.HeaderMutation
	if kind == kindRequestTrailers {
		mut = resp.GetRequestTrailers().GetHeaderMutation()
	} else {
		mut = resp.GetResponseTrailers().GetHeaderMutation()
	}
	res, err := applyMutation(m, mut, ex.p.cfg.DisallowIsError, false, false)
	ex.p.rejected.Add(int64(res.rejected))
	if err != nil {
		ex.mutationFailed(err)
		return false
	}
	for k := range t {
		delete(t, k)
	}
	for k, vs := range m.httpHeader() {
		t[k] = vs
	}
	return true
}

// call sends one message and waits for its one response (outside
// FULL_DUPLEX_STREAMED every message gets exactly one). It
// returns the response to apply; (nil, true) when processing has ended and
// the exchange goes on unprocessed; (nil, false) when the client already
// has its reply or is gone.
func (ex *exchange) call(ctx context.Context, req *extprocv3.ProcessingRequest, want msgKind) (*extprocv3.ProcessingResponse, bool) {
	if err := ex.open(ctx); err != nil {
		st := status.Convert(err)
		return ex.failure(ctx, ex.p.cfg.StatusOnError, fmt.Sprintf("ext_proc_error_gRPC_error_%d{%s}", st.Code(), st.Message()))
	}
	ex.send(req)

	timer := time.NewTimer(ex.p.messageTimeout())
	defer timer.Stop()
	overridden := false
	for {
		select {
		case <-ctx.Done():
			return nil, false
		case <-timer.C:
			// A message timeout is always 504, whatever status_on_error
			// says.
			return ex.failure(ctx, http.StatusGatewayTimeout, "ext_proc_error_per-message_timeout_exceeded")
		case m := <-ex.recv:
			if m.err != nil {
				if contextDone(ctx) {
					return nil, false
				}
				if errors.Is(m.err, io.EOF) {
					// An OK close; the pending message counts as unmodified.
					ex.complete = true
					ex.closeStream()
					return nil, true
				}
				st := status.Convert(m.err)
				return ex.failure(ctx, ex.p.cfg.StatusOnError, fmt.Sprintf("ext_proc_error_gRPC_error_%d{%s}", st.Code(), st.Message()))
			}
			resp := m.resp
			if d := resp.GetOverrideMessageTimeout(); d != nil {
				// override_message_timeout: restart the timer once per
				// message, within [1ms, max_message_timeout];
				// every other field of this response is ignored.
				v := d.AsDuration()
				if !overridden && ex.p.cfg.MaxMessageTimeout > 0 && v >= time.Millisecond && v <= ex.p.cfg.MaxMessageTimeout {
					overridden = true
					timer.Reset(v)
				} else {
					ex.p.log.Debug("override_message_timeout ignored", zap.Duration("value", v), zap.Bool("already_overridden", overridden))
				}
				continue
			}
			if ir, ok := resp.GetResponse().(*extprocv3.ProcessingResponse_ImmediateResponse); ok {
				ex.immediate(ir.ImmediateResponse)
				return nil, false
			}
			if responseKind(resp) != want {
				return ex.failure(ctx, ex.p.cfg.StatusOnError, "spurious_message")
			}
			return resp, true
		}
	}
}

// failure is a stream failure: fail-closed → local reply with status,
// fail-open → close the stream and go on unprocessed.
func (ex *exchange) failure(ctx context.Context, st int, details string) (*extprocv3.ProcessingResponse, bool) {
	ex.complete = true
	ex.closeStream()
	if ex.p.cfg.FailureModeAllow {
		ex.p.log.Info("ext_proc failure, continuing unprocessed (failure_mode_allow)", zap.String("details", details))
		return nil, true
	}
	if contextDone(ctx) {
		return nil, false
	}
	ex.localReply(st, "", details)
	return nil, false
}

// send sends one message with what every message carries; a failed Send
// means the stream is over, and Recv reports how it ended.
func (ex *exchange) send(req *extprocv3.ProcessingRequest) {
	req.MetadataContext = &corev3.Metadata{}
	if !ex.sent {
		req.ProtocolConfig = &extprocv3.ProtocolConfiguration{ // the first message only
			RequestBodyMode:  ex.mode.GetRequestBodyMode(),
			ResponseBodyMode: ex.mode.GetResponseBodyMode(),
		}
		ex.sent = true
	}
	_ = ex.stream.Send(req)
}

func (ex *exchange) open(ctx context.Context) error {
	if ex.stream != nil {
		return nil
	}
	sctx, cancel := context.WithCancel(ctx)
	s, err := ex.p.cfg.Processor.Process(sctx)
	if err != nil {
		cancel()
		return err
	}
	ex.stream, ex.cancel = s, cancel
	recv := make(chan recvResult, 4)
	ex.recv = recv
	go func() {
		for {
			resp, err := s.Recv()
			select {
			case recv <- recvResult{resp, err}:
			case <-sctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return nil
}

// closeStream half-closes and resets the stream, as Envoy does when
// neither direction needs more messages.
func (ex *exchange) closeStream() {
	if ex.stream == nil || ex.closed {
		return
	}
	ex.closed = true
	_ = ex.stream.CloseSend()
	ex.cancel()
}

// applyModeOverride applies a mode_override as Envoy does: merged over the
// filter-level mode, an unset body mode meaning NONE, request_header_mode
// without effect.
func (ex *exchange) applyModeOverride(o *filterv3.ProcessingMode) bool {
	if o == nil || !ex.p.cfg.AllowModeOverride || filterLevelDuplex(ex.p.mode) {
		return true
	}
	merged := proto.Clone(ex.p.mode).(*filterv3.ProcessingMode)
	if o.GetResponseHeaderMode() != filterv3.ProcessingMode_DEFAULT {
		merged.ResponseHeaderMode = o.GetResponseHeaderMode()
	}
	merged.RequestBodyMode = o.GetRequestBodyMode()
	merged.ResponseBodyMode = o.GetResponseBodyMode()
	if o.GetRequestTrailerMode() != filterv3.ProcessingMode_DEFAULT {
		merged.RequestTrailerMode = o.GetRequestTrailerMode()
	}
	if o.GetResponseTrailerMode() != filterv3.ProcessingMode_DEFAULT {
		merged.ResponseTrailerMode = o.GetResponseTrailerMode()
	}
	if allowed := ex.p.cfg.AllowedOverrideModes; len(allowed) > 0 {
		match := false
		for _, a := range allowed {
			if a.GetResponseHeaderMode() == merged.GetResponseHeaderMode() &&
				a.GetRequestBodyMode() == merged.GetRequestBodyMode() &&
				a.GetResponseBodyMode() == merged.GetResponseBodyMode() &&
				a.GetRequestTrailerMode() == merged.GetRequestTrailerMode() &&
				a.GetResponseTrailerMode() == merged.GetResponseTrailerMode() {
				match = true
				break
			}
		}
		if !match {
			ex.p.log.Debug("mode_override not in allowed_override_modes; ignored")
			return true
		}
	}
	if err := supportedMode(merged); err != nil {
		// Envoy would switch modes; this emulation cannot, so it says so.
		ex.p.log.Error("mode_override asks for a mode devproxy does not emulate", zap.Error(err))
		ex.complete = true
		ex.closeStream()
		ex.localReply(ex.p.cfg.StatusOnError, "", "devproxy_unsupported_mode_override")
		return false
	}
	ex.mode = merged
	return true
}

// headersOutcome is what a headers response asks for beyond mutations.
type headersOutcome struct {
	replaced bool   // CONTINUE_AND_REPLACE supplied the body
	body     []byte // that body
	stopBody bool   // CONTINUE_AND_REPLACE: no more body messages this direction
}

func (ex *exchange) applyHeadersResponse(h *headerMap, cr *extprocv3.CommonResponse, clDrop bool) (headersOutcome, bool) {
	var out headersOutcome
	if cr == nil {
		return out, true
	}
	car := cr.GetStatus() == extprocv3.CommonResponse_CONTINUE_AND_REPLACE
	res, err := applyMutation(h, cr.GetHeaderMutation(), ex.p.cfg.DisallowIsError, clDrop, car)
	ex.p.rejected.Add(int64(res.rejected))
	if err != nil {
		ex.mutationFailed(err)
		return out, false
	}
	if !car {
		return out, true // a body_mutation outside CONTINUE_AND_REPLACE is ignored here
	}
	out.stopBody = true
	if bm := cr.GetBodyMutation(); bm != nil {
		switch m := bm.GetMutation().(type) {
		case *extprocv3.BodyMutation_Body:
			out.replaced, out.body = true, m.Body
		case *extprocv3.BodyMutation_ClearBody:
			out.replaced = m.ClearBody
		case *extprocv3.BodyMutation_StreamedResponse:
			// Valid only in FULL_DUPLEX_STREAMED; spurious here.
			_, ok := ex.failure(context.Background(), ex.p.cfg.StatusOnError, "spurious_message")
			return headersOutcome{}, ok
		}
		if out.replaced {
			h.del("content-length") // CONTINUE_AND_REPLACE: Envoy removes it and frames the new body itself
		}
	}
	return out, true
}

// applyBodyResponse applies a BUFFERED body response: header_mutation only
// while the headers are held, then the body mutation; a held
// content-length must equal the new body's length (clear_body counts as
// 0), or it is a fail-closed error.
func (ex *exchange) applyBodyResponse(h *headerMap, body []byte, cr *extprocv3.CommonResponse, held, clDrop bool) ([]byte, bool) {
	if cr == nil {
		return body, true
	}
	if held {
		res, err := applyMutation(h, cr.GetHeaderMutation(), ex.p.cfg.DisallowIsError, clDrop, false)
		ex.p.rejected.Add(int64(res.rejected))
		if err != nil {
			ex.mutationFailed(err)
			return nil, false
		}
	}
	bm := cr.GetBodyMutation()
	if bm == nil {
		return body, true
	}
	switch m := bm.GetMutation().(type) {
	case *extprocv3.BodyMutation_Body:
		body = m.Body
	case *extprocv3.BodyMutation_ClearBody:
		if !m.ClearBody {
			return body, true
		}
		body = nil
	case *extprocv3.BodyMutation_StreamedResponse:
		// Valid only in FULL_DUPLEX_STREAMED; spurious here.
		_, ok := ex.failure(context.Background(), ex.p.cfg.StatusOnError, "spurious_message")
		return body, ok
	default:
		return body, true
	}
	if cl, ok := h.get("content-length"); ok {
		n, err := strconv.ParseInt(strings.TrimSpace(cl), 10, 64)
		if err != nil || n != int64(len(body)) {
			ex.complete = true
			ex.closeStream()
			ex.localReply(ex.p.cfg.StatusOnError, "", "mismatch_between_content_length_and_the_length_of_the_mutated_body")
			return nil, false
		}
	}
	return body, true
}

func (ex *exchange) mutationFailed(err error) {
	details := "header_mutation_set_headers_failed"
	var me *mutationError
	if errors.As(err, &me) {
		details = me.details
	}
	ex.p.log.Info("header mutation failed", zap.Error(err))
	ex.complete = true
	ex.closeStream()
	ex.localReply(ex.p.cfg.StatusOnError, "", details)
}

// immediate sends an ImmediateResponse to the client: a status below 200
// becomes 200, its headers obey the filter's mutation_rules, a non-empty
// body gets content-length and a default text/plain content-type.
func (ex *exchange) immediate(ir *extprocv3.ImmediateResponse) {
	ex.complete = true
	ex.closeStream()
	st := int(ir.GetStatus().GetCode())
	if st < 200 {
		st = 200
	}
	h := &headerMap{}
	if mut := ir.GetHeaders(); mut != nil {
		// Disallowed edits are dropped; an invalid one stops the rest,
		// but the reply still goes out.
		for _, o := range mut.GetSetHeaders() {
			res, err := applyMutation(h, &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{o}}, false, false, false)
			ex.p.rejected.Add(int64(res.rejected))
			if err != nil {
				break
			}
		}
	}
	ex.reply(st, h, ir.GetBody(), ir.GetDetails())
}

// localReply is Envoy's sendLocalReply with a plain-text body.
func (ex *exchange) localReply(st int, body, details string) {
	ex.complete = true
	ex.closeStream()
	ex.reply(st, &headerMap{}, []byte(body), details)
}

func (ex *exchange) reply(st int, h *headerMap, body []byte, details string) {
	details = strings.Join(strings.Fields(details), "_")
	ex.p.log.Info("local reply", zap.Int("status", st), zap.String("details", details),
		zap.String("path", ex.r.URL.Path))
	if ex.p.cfg.OnLocalReply != nil {
		ex.p.cfg.OnLocalReply(st, details)
	}
	if ex.started {
		// The client already has headers; all Envoy can do is reset.
		panic(http.ErrAbortHandler)
	}
	h.del("content-length")
	if len(body) > 0 {
		h.set("content-length", strconv.Itoa(len(body)))
		if _, ok := h.get("content-type"); !ok {
			h.set("content-type", "text/plain")
		}
	} else {
		h.del("content-type")
	}
	h.del(":status")
	h.h = append([]header{{":status", strconv.Itoa(st)}}, h.h...)
	if ex.r.Method == http.MethodHead {
		body = nil
	}
	ex.writeBuffered(h, body, nil)
}

func (ex *exchange) writeHead(h *headerMap, trailer http.Header) {
	st, err := strconv.Atoi(func() string { v, _ := h.get(":status"); return v }())
	if err != nil || st < 100 || st > 999 {
		st = http.StatusBadGateway
	}
	dst := ex.w.Header()
	for k, vs := range h.httpHeader() {
		dst[k] = vs
	}
	for k := range trailer {
		dst.Add("Trailer", k)
	}
	ex.w.WriteHeader(st)
	ex.started = true
}

func (ex *exchange) writeBuffered(h *headerMap, body []byte, trailer http.Header) {
	ex.writeHead(h, trailer)
	if len(body) > 0 {
		_, _ = ex.w.Write(body)
	}
	for k, vs := range trailer {
		ex.w.Header()[k] = vs
	}
}

// writeStreamed passes an unprocessed body through, flushing each chunk so
// server-sent events reach the client as they arrive.
func (ex *exchange) writeStreamed(ctx context.Context, h *headerMap, resp *http.Response) {
	ex.writeHead(h, nil)
	rc := http.NewResponseController(ex.w)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := ex.w.Write(buf[:n]); werr != nil {
				return
			}
			_ = rc.Flush()
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			if contextDone(ctx) {
				return
			}
			panic(http.ErrAbortHandler) // upstream reset mid-body: reset the client too
		}
	}
	for k, vs := range realTrailers(resp.Trailer) {
		ex.w.Header()[http.TrailerPrefix+k] = vs
	}
}

// readLimited reads all of r, reporting over=true as soon as more than
// limit bytes arrive.
func readLimited(r io.Reader, limit int64) (data []byte, over bool, err error) {
	data, err = io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, false, err
	}
	if int64(len(data)) > limit {
		return nil, true, nil
	}
	return data, false, nil
}
