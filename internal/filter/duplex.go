package filter

import (
	"context"
	"net/http"
	"strings"
	"sync"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/processor"
)

// This file is the response half in FULL_DUPLEX_STREAMED (docs/streaming.md;
// devproxy/duplex.go emulates Envoy's side). Envoy sends the response headers
// and then every body chunk as it arrives, without waiting for answers; the
// server answers with one HeadersResponse first, then streamed_response
// chunks, ending with end_of_stream (or a TrailersResponse) only after
// Envoy's own end. Three small handlers answer it: echoResponse (not ours,
// or the upstream's error passing through), bufferedResponse (an
// intercepted non-streaming request: the buffered loop, its answer sent in
// chunks) and liveResponse (an intercepted stream, live).

// maxChunk bounds one streamed_response body: Envoy recommends chunks of
// 64 KiB or less.
const maxChunk = 64 << 10

// DuplexMode is the override sent with the request_headers answer of every
// selected request unless streams are synthetic: request body BUFFERED as
// always, response body FULL_DUPLEX_STREAMED with trailers SEND (the
// pairing Envoy's config check demands of a filter-level duplex mode).
// It must be made here: an override to FULL_DUPLEX_STREAMED in the
// response_headers answer lets the body bytes Envoy held meanwhile reach
// the client unseen (envoyproxy/envoy#40340), and at request_headers the
// body that says "stream": true has not arrived yet.
func DuplexMode() *filterv3.ProcessingMode {
	return &filterv3.ProcessingMode{
		RequestBodyMode:     filterv3.ProcessingMode_BUFFERED,
		ResponseHeaderMode:  filterv3.ProcessingMode_SEND,
		ResponseBodyMode:    filterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
		ResponseTrailerMode: filterv3.ProcessingMode_SEND,
	}
}

// responseHandler answers the response messages of one duplex exchange.
// The stream's receive loop calls it, one message at a time; a handler may
// also send from a goroutine of its own, through duplexOut.
type responseHandler interface {
	// headers is a 2xx upstream answer with a body (the dispatcher passes
	// anything else through or refuses it).
	headers(ctx context.Context, code int, hdr http.Header) error
	body(ctx context.Context, b *extprocv3.HttpBody) error
	trailers(ctx context.Context, t *extprocv3.HttpTrailers) error
	// close stops what the handler started and waits for it.
	close()
}

// duplexOut sends a duplex exchange's answers; sends are serialized, as a
// gRPC stream's Send must be.
type duplexOut struct {
	mu   sync.Mutex
	send func(*extprocv3.ProcessingResponse) error
}

func (o *duplexOut) sendOne(r *extprocv3.ProcessingResponse) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.send(r)
}

func (o *duplexOut) sendAll(rs []*extprocv3.ProcessingResponse) error {
	for _, r := range rs {
		if err := o.sendOne(r); err != nil {
			return err
		}
	}
	return nil
}

// headers sends the one HeadersResponse, with mut (nil: unchanged).
func (o *duplexOut) headers(mut *extprocv3.HeaderMutation) error {
	return o.sendOne(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{HeaderMutation: mut}},
	}})
}

// chunks sends data as streamed_response bodies of at most maxChunk bytes;
// the last carries eos. Empty data with eos is one empty closing chunk.
func (o *duplexOut) chunks(data []byte, eos bool) error {
	for {
		n := min(len(data), maxChunk)
		last := n == len(data)
		if err := o.sendOne(newStreamedChunk(data[:n], eos && last)); err != nil || last {
			return err
		}
		data = data[n:]
	}
}

// streamedChunk is one streamed_response answer with its five nested
// messages in one allocation: an answer per chunk is the echo's steady
// cost. Each is new (gRPC may read a message after SendMsg returns).
type streamedChunk struct {
	resp   extprocv3.ProcessingResponse
	body   extprocv3.ProcessingResponse_ResponseBody
	br     extprocv3.BodyResponse
	common extprocv3.CommonResponse
	mut    extprocv3.BodyMutation
	sr     extprocv3.BodyMutation_StreamedResponse
	sbr    extprocv3.StreamedBodyResponse
}

func newStreamedChunk(data []byte, eos bool) *extprocv3.ProcessingResponse {
	c := &streamedChunk{}
	c.sbr.Body, c.sbr.EndOfStream = data, eos
	c.sr.StreamedResponse = &c.sbr
	c.mut.Mutation = &c.sr
	c.common.BodyMutation = &c.mut
	c.br.Response = &c.common
	c.body.ResponseBody = &c.br
	c.resp.Response = &c.body
	return &c.resp
}

// trailers ends the body when Envoy sent trailers: then no body message
// carries end_of_stream, and a TrailersResponse is the end.
func (o *duplexOut) trailers() error {
	return o.sendOne(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
		ResponseTrailers: &extprocv3.TrailersResponse{},
	}})
}

// chunkWriter turns writes into streamed_response chunks, for the live
// stream's event writer: each event leaves the moment it is written.
type chunkWriter struct{ o *duplexOut }

func (w chunkWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if err := w.o.chunks(p, false); err != nil {
		return 0, err
	}
	return len(p), nil
}

// newResponseHandler picks the handler for an exchange once its request
// body has been read. ex is nil when the request is not intercepted.
func (st *streamState) newResponseHandler(ex processor.Exchange) responseHandler {
	switch {
	case ex == nil:
		return &echoResponse{out: st.out}
	case ex.Live():
		return &liveResponse{st: st, out: st.out}
	default:
		return &bufferedResponse{st: st, out: st.out}
	}
}

// duplexMessage routes a response-direction message to the handler. A
// body message after the end of the body is Envoy re-delivering its last
// chunk (Envoy 1.35–1.37 do for bodies of about 1 MB or more,
// envoyproxy/envoy#46237): it is dropped, never answered.
func (st *streamState) duplexMessage(ctx context.Context, req *extprocv3.ProcessingRequest) error {
	if st.phase == phaseClosed {
		// An immediate response was sent; chunks Envoy had already sent
		// are still arriving and need no answer.
		return nil
	}
	switch r := req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		if st.phase != phaseResponseHeaders {
			return protocolError("response_headers in phase %s", st.phase)
		}
		st.phase = phaseResponseBody
		if st.ex == nil {
			return st.handler.headers(ctx, 0, http.Header{"Content-Type": {responseHeader(r.ResponseHeaders, "content-type")}})
		}
		code, hdr := parseResponseHeaders(r.ResponseHeaders)
		if code < 200 || code > 299 {
			// The upstream's own error reaches the client as it came.
			st.upstreamFailed(code)
			st.handler = &echoResponse{out: st.out}
			return st.handler.headers(ctx, code, hdr)
		}
		if r.ResponseHeaders.GetEndOfStream() {
			rs, _ := st.noUpstreamBody()
			return st.out.sendAll(rs)
		}
		return st.handler.headers(ctx, code, hdr)
	case *extprocv3.ProcessingRequest_ResponseBody:
		if st.phase != phaseResponseBody {
			return protocolError("response_body in phase %s", st.phase)
		}
		if st.bodyEnded {
			st.log.Debug("repeated end-of-stream body chunk ignored", zap.Int("bytes", len(r.ResponseBody.GetBody())))
			return nil
		}
		st.bodyEnded = r.ResponseBody.GetEndOfStream()
		return st.handler.body(ctx, r.ResponseBody)
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		if st.phase != phaseResponseBody || st.bodyEnded {
			return protocolError("response_trailers in phase %s", st.phase)
		}
		st.bodyEnded = true
		return st.handler.trailers(ctx, r.ResponseTrailers)
	}
	return protocolError("%s in phase %s", messageName(req), st.phase)
}

// responseHeader is one header of a response_headers message, without
// building the whole map.
func responseHeader(h *extprocv3.HttpHeaders, name string) string {
	for _, hv := range h.GetHeaders().GetHeaders() {
		if strings.EqualFold(hv.GetKey(), name) {
			return headerValue(hv)
		}
	}
	return ""
}

// echoResponse answers each message with itself: a response that is not
// ours, or the upstream's own error, reaches the client as it came. An
// event stream is answered chunk by chunk as it arrives. A JSON answer
// (hold) cannot be read before its end, so its last chunk is kept until
// Envoy's next message and, when that is the end, leaves with it: one
// answer less, and the client has the whole body no later than
// chunk-by-chunk would give it.
type echoResponse struct {
	out  *duplexOut
	hold bool
	held []byte // the last chunk, not yet answered
}

func (e *echoResponse) headers(_ context.Context, _ int, hdr http.Header) error {
	e.hold = isJSON(hdr.Get("content-type"))
	return e.out.headers(nil)
}

func (e *echoResponse) body(_ context.Context, b *extprocv3.HttpBody) error {
	data, eos := b.GetBody(), b.GetEndOfStream()
	if !e.hold {
		if len(data) == 0 && !eos {
			return nil
		}
		return e.out.chunks(data, eos)
	}
	if len(data) > 0 || eos {
		if err := e.flush(eos && len(data) == 0); err != nil {
			return err
		}
	}
	switch {
	case eos && len(data) > 0:
		return e.out.chunks(data, true)
	case len(data) > 0:
		e.held = data
	}
	return nil
}

// flush answers the held chunk, if any; with eos it is the end (an empty
// closing chunk when nothing is held).
func (e *echoResponse) flush(eos bool) error {
	held := e.held
	e.held = nil
	if len(held) == 0 && !eos {
		return nil
	}
	return e.out.chunks(held, eos)
}

func (e *echoResponse) trailers(context.Context, *extprocv3.HttpTrailers) error {
	if err := e.flush(false); err != nil {
		return err
	}
	return e.out.trailers()
}

func (e *echoResponse) close() {}

// isJSON reports a JSON media type (application/json, or a +json suffix).
func isJSON(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}
