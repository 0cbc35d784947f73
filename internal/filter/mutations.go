package filter

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/codeinterp/codeinterp/internal/apierror"
)

// headerValue is a header's value as Envoy sends it (raw_value), or value
// for processors' test clients that fill that instead.
func headerValue(hv *corev3.HeaderValue) string {
	if v := hv.GetRawValue(); len(v) > 0 {
		return string(v)
	}
	return hv.GetValue()
}

// parseResponseHeaders reads :status and the regular headers.
func parseResponseHeaders(h *extprocv3.HttpHeaders) (int, http.Header) {
	hdr := http.Header{}
	code := 0
	for _, hv := range h.GetHeaders().GetHeaders() {
		value := string(hv.GetRawValue())
		if value == "" {
			value = hv.GetValue()
		}
		key := strings.ToLower(hv.GetKey())
		if key == ":status" {
			code, _ = strconv.Atoi(value)
			continue
		}
		if !strings.HasPrefix(key, ":") {
			hdr.Add(key, value)
		}
	}
	return code, hdr
}

// decodeBody undoes a gzip content-encoding (some servers compress even
// unasked); anything else but identity is refused.
func decodeBody(body []byte, encoding string, limit int64) ([]byte, error) {
	switch strings.ToLower(strings.TrimSpace(encoding)) {
	case "", "identity":
		return body, nil
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		out, err := io.ReadAll(io.LimitReader(zr, limit+1))
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		if int64(len(out)) > limit {
			return nil, fmt.Errorf("gzip: decoded body exceeds %d bytes", limit)
		}
		return out, nil
	}
	return nil, fmt.Errorf("unsupported content-encoding %q", encoding)
}

func one(r *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, error) {
	return []*extprocv3.ProcessingResponse{r}, nil
}

// setHeader is a replace-all header edit. Envoy reads raw_value only.
func setHeader(key, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: key, RawValue: []byte(value)}}
}

// continueFor is the "no change" answer to any message.
func continueFor(req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	switch req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{}}}
	case *extprocv3.ProcessingRequest_RequestBody:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{}}}
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}}
	case *extprocv3.ProcessingRequest_ResponseBody:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}}
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}}
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}}
	}
	return &extprocv3.ProcessingResponse{}
}

func messageName(req *extprocv3.ProcessingRequest) string {
	switch req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return "request_headers"
	case *extprocv3.ProcessingRequest_RequestBody:
		return "request_body"
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return "response_headers"
	case *extprocv3.ProcessingRequest_ResponseBody:
		return "response_body"
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return "request_trailers"
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return "response_trailers"
	}
	return "empty message"
}

// LetGoMode is the override for exchanges the filter does not touch:
// bodies NONE and no response headers message. Body modes are written
// out although in a mode_override an unset body mode already means NONE
// (Envoy copies body modes verbatim).
func LetGoMode() *filterv3.ProcessingMode {
	return &filterv3.ProcessingMode{
		RequestBodyMode:    filterv3.ProcessingMode_NONE,
		ResponseBodyMode:   filterv3.ProcessingMode_NONE,
		ResponseHeaderMode: filterv3.ProcessingMode_SKIP,
	}
}

// immediate ends the exchange with an OpenAI-shaped error.
func (st *streamState) immediate(e *apierror.Error) ([]*extprocv3.ProcessingResponse, error) {
	st.phase = phaseClosed
	return one(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status: &typev3.HttpStatus{Code: typev3.StatusCode(e.Status)},
			Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
				setHeader("content-type", "application/json"),
			}},
			Body:    st.route.body(e),
			Details: "codeinterp_" + strings.ReplaceAll(strings.ToLower(http.StatusText(e.Status)), " ", "_"),
		},
	}})
}
