package filter

import (
	"context"
	"io"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/codeinterp/codeinterp/internal/interceptor"
)

// scriptedStream is Envoy's side of one stream without a transport: Recv
// hands out the scripted messages, Send counts the answers. It measures
// the server's own work per exchange, which the e2e benchmarks see mixed
// with gRPC's and the front proxy's.
type scriptedStream struct {
	grpc.ServerStream
	ctx     context.Context
	msgs    []*extprocv3.ProcessingRequest
	next    int
	answers int
}

func (s *scriptedStream) Context() context.Context { return s.ctx }
func (s *scriptedStream) Recv() (*extprocv3.ProcessingRequest, error) {
	if s.next == len(s.msgs) {
		return nil, io.EOF
	}
	s.next++
	return s.msgs[s.next-1], nil
}
func (s *scriptedStream) Send(*extprocv3.ProcessingResponse) error { s.answers++; return nil }
func (s *scriptedStream) SetHeader(metadata.MD) error              { return nil }
func (s *scriptedStream) SendHeader(metadata.MD) error             { return nil }
func (s *scriptedStream) SetTrailer(metadata.MD)                   {}

// BenchmarkPassThroughExchange is the server's work for one request
// without the tool, as Envoy drives it in the deployed configuration:
// request headers and body, then a FULL_DUPLEX_STREAMED JSON answer
// echoed (response headers, one chunk, the end of stream).
func BenchmarkPassThroughExchange(b *testing.B) {
	ic, err := interceptor.New(interceptor.Config{}, noSandbox{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	srv, err := New(Config{Upstream: UpstreamConfig{URL: "http://127.0.0.1:1/v1/responses"}}, ic.Processor(), nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"model":"gpt-5.6","input":"Say hi.","store":false,"stream":false,"tools":[{"type":"function","name":"lookup","parameters":{"type":"object"}}]}`)
	answer := []byte(`{"id":"resp_1","object":"response","status":"completed","output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"` +
		strings.Repeat("Hi there. ", 140) + `"}]}]}`)
	msgs := []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hdrs(
			":authority", "gw.example", ":path", "/v1/responses", ":method", "POST", ":scheme", "http",
			"content-type", "application/json", "authorization", "Bearer sk-test-0123456789", "user-agent", "OpenAI/Python 2.8.1",
			"accept", "application/json", "accept-encoding", "gzip, deflate", "x-stainless-lang", "python",
			"x-forwarded-proto", "http", "x-request-id", "4f6d1c1e-5b7a-4d0e-9a43-3c1f0e2b7d55", "content-length", "150")}}},
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: body, EndOfStream: true}}},
		{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: hdrs(
			":status", "200", "content-type", "application/json", "content-length", "1478", "date", "Wed, 02 Dec 2026 07:00:00 GMT")}}},
		{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: answer}}},
		{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{EndOfStream: true}}},
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		s := &scriptedStream{ctx: ctx, msgs: msgs}
		if err := srv.Process(s); err != nil {
			b.Fatal(err)
		}
		if s.answers < 4 {
			b.Fatalf("%d answers", s.answers)
		}
	}
}
