package devproxy

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
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
