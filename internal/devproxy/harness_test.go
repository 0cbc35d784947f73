package devproxy

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// script is a scripted ext_proc server's handling of one stream.
type script func(s extprocv3.ExternalProcessor_ProcessServer) error

type scriptedProc struct {
	extprocv3.UnimplementedExternalProcessorServer
	fn script
}

func (p *scriptedProc) Process(s extprocv3.ExternalProcessor_ProcessServer) error { return p.fn(s) }

// startProc serves fn over real gRPC on loopback and returns a client.
func startProc(t *testing.T, fn script) extprocv3.ExternalProcessorClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(gs, &scriptedProc{fn: fn})
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return extprocv3.NewExternalProcessorClient(cc)
}

// upstreamRecord is what the fake upstream saw.
type upstreamRecord struct {
	mu       sync.Mutex
	requests []recordedRequest
}

type recordedRequest struct {
	method, path, host string
	header             http.Header
	body               []byte
	contentLength      int64
}

func (u *upstreamRecord) all() []recordedRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]recordedRequest(nil), u.requests...)
}

// startUpstream records each request, then lets respond answer it.
func startUpstream(t *testing.T, respond func(w http.ResponseWriter, r *http.Request, body []byte)) (*url.URL, *upstreamRecord) {
	t.Helper()
	rec := &upstreamRecord{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.requests = append(rec.requests, recordedRequest{r.Method, r.URL.RequestURI(), r.Host, r.Header.Clone(), body, r.ContentLength})
		rec.mu.Unlock()
		respond(w, r, body)
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return u, rec
}

// localReplies collects what OnLocalReply reported.
type localReplies struct {
	mu      sync.Mutex
	details []string
}

func (l *localReplies) hook(_ int, d string) {
	l.mu.Lock()
	l.details = append(l.details, d)
	l.mu.Unlock()
}

func (l *localReplies) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.details...)
}

// startProxy runs the proxy in an httptest server.
func startProxy(t *testing.T, cfg Config) (*httptest.Server, *Proxy, *localReplies) {
	t.Helper()
	lr := &localReplies{}
	cfg.OnLocalReply = lr.hook
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return srv, p, lr
}

// recvKind receives one message and fails the stream if it is not want.
func recvKind(s extprocv3.ExternalProcessor_ProcessServer, want msgKind, log *[]*extprocv3.ProcessingRequest) (*extprocv3.ProcessingRequest, error) {
	req, err := s.Recv()
	if err != nil {
		return nil, err
	}
	if log != nil {
		*log = append(*log, req)
	}
	if got := requestKind(req); got != want {
		return req, errUnexpected{got, want}
	}
	return req, nil
}

type errUnexpected struct{ got, want msgKind }

func (e errUnexpected) Error() string { return "unexpected message kind" }

func requestKind(r *extprocv3.ProcessingRequest) msgKind {
	switch r.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return kindRequestHeaders
	case *extprocv3.ProcessingRequest_RequestBody:
		return kindRequestBody
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return kindRequestTrailers
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return kindResponseHeaders
	case *extprocv3.ProcessingRequest_ResponseBody:
		return kindResponseBody
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return kindResponseTrailers
	}
	return kindNone
}

// Builders for processor responses.

func rhResp(cr *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: cr}}}
}

func rbResp(cr *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: cr}}}
}

func shResp(cr *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{Response: cr}}}
}

func sbResp(cr *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{Response: cr}}}
}

func setRaw(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)}}
}

func appendRaw(k, v string) *corev3.HeaderValueOption {
	//lint:ignore SA1019 ext_proc reads the deprecated append field, never append_action.
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)}, Append: wrapperspb.Bool(true)}
}

func bodyMut(b string) *extprocv3.BodyMutation {
	return &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: []byte(b)}}
}

// passAll answers every message with "continue unchanged" until the stream ends.
func passAll(s extprocv3.ExternalProcessor_ProcessServer) error {
	for {
		req, err := s.Recv()
		if err != nil {
			return nil
		}
		var resp *extprocv3.ProcessingResponse
		switch requestKind(req) {
		case kindRequestHeaders:
			resp = rhResp(nil)
		case kindRequestBody:
			resp = rbResp(nil)
		case kindResponseHeaders:
			resp = shResp(nil)
		case kindResponseBody:
			resp = sbResp(nil)
		case kindRequestTrailers:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}}
		case kindResponseTrailers:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}}
		}
		if err := s.Send(resp); err != nil {
			return nil
		}
	}
}

func headerValue(h *corev3.HeaderMap, key string) (string, bool) {
	for _, hv := range h.GetHeaders() {
		if hv.GetKey() == key {
			return string(hv.GetRawValue()), true
		}
	}
	return "", false
}

func doRequest(t *testing.T, method, u, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}
