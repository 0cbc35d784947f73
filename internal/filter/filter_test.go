package filter

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/tidwall/gjson"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/interceptor"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
)

func TestMain(m *testing.M) { sandboxtest.Main(m) }

// noSandbox fails the test if the filter reaches for the sandbox in a case
// that must not run code.
type noSandbox struct{ t *testing.T }

func (p noSandbox) Open(context.Context, sandbox.SessionOptions) (sandbox.Session, error) {
	p.t.Error("the sandbox was opened in a case that runs no code")
	return nil, errors.New("unexpected")
}
func (noSandbox) Ready(context.Context) error      { return nil }
func (noSandbox) Capacity() sandbox.Capacity       { return sandbox.Capacity{} }
func (noSandbox) Close() error                     { return nil }
func (noSandbox) Environment() sandbox.Environment { return sandbox.Environment{Provider: "none"} }

// followUps is the operator-configured upstream: it records every
// follow-up and answers with the next scripted body.
type followUps struct {
	mu       sync.Mutex
	requests []followUp
	answers  []string
}

type followUp struct {
	header http.Header
	body   []byte
}

func (f *followUps) handler(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.requests = append(f.requests, followUp{r.Header.Clone(), b})
	var ans string
	if len(f.answers) > 0 {
		ans, f.answers = f.answers[0], f.answers[1:]
	}
	f.mu.Unlock()
	if ans == "" {
		http.Error(w, `{"error":{"message":"unscripted follow-up","type":"server_error","param":null,"code":null}}`, 500)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if strings.HasPrefix(ans, "event: ") {
		w.Header().Set("Content-Type", "text/event-stream") // a live stream's follow-up
	}
	_, _ = io.WriteString(w, ans)
}

func (f *followUps) all() []followUp {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]followUp(nil), f.requests...)
}

type env struct {
	client  extprocv3.ExternalProcessorClient
	server  *Server
	metrics *Metrics
	up      *followUps
	upURL   string
}

// startFilter serves cfg with BUFFERED response bodies (synthetic streams):
// the tests in this file are about that mode; duplex_test.go sets
// SyntheticStreams false through startDuplexFilter.
func startFilter(t *testing.T, cfg Config, prov sandbox.Provider, answers ...string) *env {
	t.Helper()
	cfg.SyntheticStreams = true
	return serveFilter(t, cfg, prov, answers...)
}

func serveFilter(t *testing.T, cfg Config, prov sandbox.Provider, answers ...string) *env {
	t.Helper()
	up := &followUps{answers: answers}
	hs := httptest.NewServer(http.HandlerFunc(up.handler))
	t.Cleanup(hs.Close)
	if cfg.Upstream.URL == "" {
		cfg.Upstream.URL = hs.URL + "/v1/responses"
	}
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	prov, err = m.InstrumentProvider(prov)
	if err != nil {
		t.Fatal(err)
	}
	ic, err := interceptor.New(interceptor.Config{}, prov, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(cfg, ic.Processor(), m, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return &env{client: extprocv3.NewExternalProcessorClient(cc), server: srv, metrics: m, up: up, upURL: cfg.Upstream.URL}
}

// envoyStream plays Envoy's side of one stream.
type envoyStream struct {
	t      *testing.T
	s      extprocv3.ExternalProcessor_ProcessClient
	cancel context.CancelFunc
	first  bool
}

func (e *env) open(t *testing.T) *envoyStream {
	ctx, cancel := context.WithCancel(context.Background())
	s, err := e.client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cancel)
	return &envoyStream{t: t, s: s, cancel: cancel, first: true}
}

func hdrs(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}

func (es *envoyStream) send(req *extprocv3.ProcessingRequest) {
	es.t.Helper()
	if es.first {
		req.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_BUFFERED, ResponseBodyMode: filterv3.ProcessingMode_BUFFERED}
		es.first = false
	}
	if err := es.s.Send(req); err != nil {
		es.t.Fatalf("send: %v", err)
	}
}

func (es *envoyStream) recv() *extprocv3.ProcessingResponse {
	es.t.Helper()
	r, err := es.s.Recv()
	if err != nil {
		es.t.Fatalf("recv: %v", err)
	}
	return r
}

func (es *envoyStream) requestHeaders(method, path string, eos bool, extra ...string) *extprocv3.ProcessingResponse {
	es.t.Helper()
	kv := append([]string{":method", method, ":path", path, ":authority", "gw.example", ":scheme", "http", "x-request-id", "req-test-1"}, extra...)
	es.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hdrs(kv...), EndOfStream: eos}}})
	return es.recv()
}

func (es *envoyStream) requestBody(body string) *extprocv3.ProcessingResponse {
	es.t.Helper()
	es.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: true}}})
	return es.recv()
}

func (es *envoyStream) responseHeaders(status int, extra ...string) *extprocv3.ProcessingResponse {
	es.t.Helper()
	kv := append([]string{":status", strconv.Itoa(status), "content-type", "application/json"}, extra...)
	es.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: hdrs(kv...)}}})
	return es.recv()
}

func (es *envoyStream) sendResponseBody(body []byte) {
	es.t.Helper()
	es.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: body, EndOfStream: true}}})
}

func setHeaders(m *extprocv3.HeaderMutation) map[string]string {
	out := map[string]string{}
	for _, o := range m.GetSetHeaders() {
		if o.GetHeader().GetValue() != "" {
			out[o.GetHeader().GetKey()] = "VALUE-FIELD-USED"
			continue
		}
		out[o.GetHeader().GetKey()] = string(o.GetHeader().GetRawValue())
	}
	return out
}

func isLetGo(m *filterv3.ProcessingMode) bool {
	return m != nil && m.GetRequestBodyMode() == filterv3.ProcessingMode_NONE &&
		m.GetResponseBodyMode() == filterv3.ProcessingMode_NONE && m.GetResponseHeaderMode() == filterv3.ProcessingMode_SKIP
}

func waitOutcome(t *testing.T, e *env, o Outcome, want float64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.server.Wait(ctx); err != nil {
		t.Fatalf("streams did not end: %v", err)
	}
	if got := testutil.ToFloat64(e.metrics.Requests.WithLabelValues(string(o))); got != want {
		t.Fatalf("requests_total{outcome=%q} = %v, want %v", o, got, want)
	}
}

const plainRequest = `{"model":"m","input":"hi","tools":[{"type":"function","name":"f","parameters":{"type":"object","properties":{}}}]}`

const ciRequest = `{"model":"m","input":"compute","stream":STREAM,"include":["code_interpreter_call.outputs"],"tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`

func TestNotSelectedIsLetGo(t *testing.T) {
	cases := []struct {
		name, method, path string
		eos                bool
		outcome            Outcome
	}{
		{"other path", "GET", "/v1/models", true, OutcomeNotSelected},
		{"other method", "GET", "/v1/responses", true, OutcomeNotSelected},
		{"path with query is still matched exactly", "POST", "/v1/responses/extra", false, OutcomeNotSelected},
		{"selected but no body", "POST", "/v1/responses?x=1", true, OutcomePassThrough},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := startFilter(t, Config{}, noSandbox{t})
			es := e.open(t)
			r := es.requestHeaders(tc.method, tc.path, tc.eos, "x-codeinterp-evil", "1", "authorization", "Bearer k")
			if r.GetRequestHeaders() == nil || !isLetGo(r.GetModeOverride()) {
				t.Fatalf("response %v, want a request_headers response with a let-go mode_override", r)
			}
			if rm := r.GetRequestHeaders().GetResponse().GetHeaderMutation().GetRemoveHeaders(); !slices.Equal(rm, []string{"x-codeinterp-evil"}) {
				t.Errorf("remove_headers %v", rm)
			}
			es.s.CloseSend()
			waitOutcome(t, e, tc.outcome, 1)
		})
	}
}

func TestPassThrough(t *testing.T) {
	e := startFilter(t, Config{}, noSandbox{t})
	es := e.open(t)
	r := es.requestHeaders("POST", "/v1/responses", false, "content-length", strconv.Itoa(len(plainRequest)))
	if r.GetRequestHeaders() == nil || r.GetModeOverride() != nil {
		t.Fatalf("request_headers answer %v", r)
	}
	r = es.requestBody(plainRequest)
	if r.GetRequestBody() == nil || r.GetRequestBody().GetResponse().GetBodyMutation() != nil || r.GetRequestBody().GetResponse().GetHeaderMutation() != nil {
		t.Fatalf("request_body answer %v, want an unchanged continue", r)
	}
	r = es.responseHeaders(200)
	if r.GetResponseHeaders() == nil || !isLetGo(r.GetModeOverride()) {
		t.Fatalf("response_headers answer %v, want a let-go override", r)
	}
	es.s.CloseSend()
	waitOutcome(t, e, OutcomePassThrough, 1)
	if n := len(e.up.all()); n != 0 {
		t.Fatalf("%d follow-ups for a pass-through", n)
	}
}

func TestRejectedRequests(t *testing.T) {
	cases := []struct {
		name       string
		cfg        Config
		body       string
		wantStatus int
		wantParam  string
	}{
		{"file_ids", Config{}, `{"model":"m","input":"x","tools":[{"type":"code_interpreter","container":{"type":"auto","file_ids":["file_1"]}}]}`, 400, "tools[0].container.file_ids"},
		// Malformed JSON without our tool is the upstream's to refuse; with it, ours.
		{"malformed JSON asking for the tool", Config{}, `{"model":"m","tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"input":`, 400, ""},
		{"over the body limit", Config{MaxBodyBytes: 64}, strings.Repeat(" ", 65), 413, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := startFilter(t, tc.cfg, noSandbox{t})
			es := e.open(t)
			es.requestHeaders("POST", "/v1/responses", false)
			r := es.requestBody(tc.body)
			ir := r.GetImmediateResponse()
			if ir == nil || int(ir.GetStatus().GetCode()) != tc.wantStatus {
				t.Fatalf("answer %v, want immediate_response %d", r, tc.wantStatus)
			}
			if ct := setHeaders(ir.GetHeaders())["content-type"]; ct != "application/json" {
				t.Errorf("content-type %q", ct)
			}
			eb, err := apierror.ParseBody(ir.GetBody())
			if err != nil {
				t.Fatalf("body %s is not an OpenAI error: %v", ir.GetBody(), err)
			}
			if tc.wantParam != "" && (eb.Error.Param == nil || *eb.Error.Param != tc.wantParam) {
				t.Errorf("param %v, want %s", eb.Error.Param, tc.wantParam)
			}
			es.s.CloseSend()
			waitOutcome(t, e, OutcomeRejected, 1)
		})
	}
}

func TestProtocolErrors(t *testing.T) {
	body := func(b string) *extprocv3.ProcessingRequest {
		return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: true}}}
	}
	cases := []struct {
		name  string
		steps func(es *envoyStream)
		last  *extprocv3.ProcessingRequest
	}{
		{"body before headers", func(*envoyStream) {}, body("{}")},
		{"response_body before response_headers", func(es *envoyStream) {
			es.requestHeaders("POST", "/v1/responses", false)
			es.requestBody(strings.ReplaceAll(ciRequest, "STREAM", "false"))
		}, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte("{}"), EndOfStream: true}}}},
		{"request_headers twice", func(es *envoyStream) {
			es.requestHeaders("POST", "/v1/responses", false)
		}, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hdrs(":method", "POST")}}}},
		{"empty message", func(*envoyStream) {}, &extprocv3.ProcessingRequest{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := startFilter(t, Config{}, noSandbox{t})
			es := e.open(t)
			tc.steps(es)
			es.send(tc.last)
			_, err := es.s.Recv()
			if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "codeinterp ext_proc") {
				t.Fatalf("got %v, want a FailedPrecondition naming the violation", err)
			}
			waitOutcome(t, e, OutcomeError, 1)
		})
	}
}

func TestMisconfiguredBodyModes(t *testing.T) {
	e := startFilter(t, Config{}, noSandbox{t})
	es := e.open(t)
	es.first = false
	es.send(&extprocv3.ProcessingRequest{
		ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_STREAMED, ResponseBodyMode: filterv3.ProcessingMode_BUFFERED},
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: hdrs(":method", "POST", ":path", "/v1/responses")}},
	})
	r := es.recv()
	if ir := r.GetImmediateResponse(); ir == nil || ir.GetStatus().GetCode() != 500 || !strings.Contains(string(ir.GetBody()), "BUFFERED") {
		t.Fatalf("answer %v", r)
	}
}

func TestNon2xxUpstreamIsLeftAlone(t *testing.T) {
	e := startFilter(t, Config{}, noSandbox{t})
	es := e.open(t)
	es.requestHeaders("POST", "/v1/responses", false)
	es.requestBody(strings.ReplaceAll(ciRequest, "STREAM", "true"))
	r := es.responseHeaders(429)
	if r.GetResponseHeaders() == nil || !isLetGo(r.GetModeOverride()) || r.GetResponseHeaders().GetResponse() != nil {
		t.Fatalf("answer %v, want an unchanged response_headers with a let-go override", r)
	}
	es.s.CloseSend()
	waitOutcome(t, e, OutcomeUpstreamError, 1)
}

// modelTurn is a Responses object whose output is the given items.
func modelTurn(id string, items ...string) string {
	return `{"id":"` + id + `","object":"response","created_at":1790010453,"status":"completed","model":"m","store":false,` +
		`"output":[` + strings.Join(items, ",") + `],` +
		`"usage":{"input_tokens":10,"input_tokens_details":{"cached_tokens":0},"output_tokens":5,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":15}}`
}

func callItem(callID, code string) string {
	args, _ := json.Marshal(map[string]string{"code": code})
	q, _ := json.Marshal(string(args))
	return `{"id":"fc_` + callID + `","type":"function_call","status":"completed","arguments":` + string(q) + `,"call_id":"` + callID + `","name":"code_interpreter"}`
}

func messageItem(text string) string {
	q, _ := json.Marshal(text)
	return `{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":` + string(q) + `}]}`
}

// TestInterceptedExchange runs one code call in the real sandbox and checks
// every message the filter sends Envoy and the follow-up it makes.
func TestInterceptedExchange(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run("stream="+strconv.FormatBool(stream), func(t *testing.T) {
			e := startFilter(t, Config{OverrideMessageTimeout: 5 * time.Minute}, sandboxtest.New(t),
				modelTurn("resp_2", messageItem("The answer is 42.")))
			es := e.open(t)
			r := es.requestHeaders("POST", "/v1/responses", false,
				"authorization", "Bearer client-key", "openai-project", "proj_1", "x-codeinterp-forged", "1", "cookie", "c=1")
			if rm := r.GetRequestHeaders().GetResponse().GetHeaderMutation().GetRemoveHeaders(); !slices.Equal(rm, []string{"x-codeinterp-forged"}) {
				t.Errorf("remove_headers %v", rm)
			}
			r = es.requestBody(strings.ReplaceAll(ciRequest, "STREAM", strconv.FormatBool(stream)))
			cr := r.GetRequestBody().GetResponse()
			nb := cr.GetBodyMutation().GetBody()
			if len(nb) == 0 {
				t.Fatalf("request_body answer %v, want a body mutation", r)
			}
			if got := setHeaders(cr.GetHeaderMutation())["content-length"]; got != strconv.Itoa(len(nb)) {
				t.Errorf("content-length %q for a %d-byte body", got, len(nb))
			}
			if !slices.Contains(cr.GetHeaderMutation().GetRemoveHeaders(), "accept-encoding") {
				t.Error("accept-encoding not removed")
			}
			if gjson.GetBytes(nb, "tools.0.type").Str != "function" || gjson.GetBytes(nb, "stream").Type != gjson.False {
				t.Errorf("upstream body %s", nb)
			}
			r = es.responseHeaders(200)
			if r.GetResponseHeaders() == nil || r.GetModeOverride() != nil {
				t.Fatalf("response_headers answer %v", r)
			}
			es.sendResponseBody([]byte(modelTurn("resp_1", callItem("call_a", "print(6*7)"))))
			r = es.recv()
			if d := r.GetOverrideMessageTimeout(); d == nil || d.AsDuration() != 5*time.Minute || r.GetResponse() != nil {
				t.Fatalf("first answer %v, want a bare override_message_timeout of 5m", r)
			}
			r = es.recv()
			cr = r.GetResponseBody().GetResponse()
			body := cr.GetBodyMutation().GetBody()
			h := setHeaders(cr.GetHeaderMutation())
			if h["content-length"] != strconv.Itoa(len(body)) {
				t.Errorf("content-length %q for %d bytes", h["content-length"], len(body))
			}
			if _, ok := h[":status"]; ok {
				t.Errorf(":status changed on success: %v", h)
			}
			wantCT := "application/json"
			if stream {
				wantCT = "text/event-stream"
			}
			if mt, _, err := mime.ParseMediaType(h["content-type"]); err != nil || mt != wantCT {
				t.Errorf("content-type %q, want %q", h["content-type"], wantCT)
			}
			if !bytes.Contains(body, []byte(`"type":"code_interpreter_call"`)) || !bytes.Contains(body, []byte(`42\n`)) {
				t.Errorf("final body lacks the call or its output:\n%s", body)
			}

			fu := e.up.all()
			if len(fu) != 1 {
				t.Fatalf("%d follow-ups, want 1", len(fu))
			}
			if fu[0].header.Get("Authorization") != "Bearer client-key" || fu[0].header.Get("Openai-Project") != "proj_1" {
				t.Errorf("follow-up headers %v lack the client's auth", fu[0].header)
			}
			if fu[0].header.Get("Cookie") != "" || fu[0].header.Get("X-Codeinterp-Forged") != "" {
				t.Errorf("follow-up carries headers it must not: %v", fu[0].header)
			}
			if fu[0].header.Get("X-Request-Id") != "req-test-1" {
				t.Errorf("follow-up x-request-id %q", fu[0].header.Get("X-Request-Id"))
			}
			out := gjson.GetBytes(fu[0].body, `input.#(type=="function_call_output").output`).Str
			if !strings.Contains(out, "42") {
				t.Errorf("follow-up function_call_output %q lacks the run's output", out)
			}
			es.s.CloseSend()
			waitOutcome(t, e, OutcomeCompleted, 1)
			if got := testutil.ToFloat64(e.metrics.CodeRuns.WithLabelValues("completed")); got != 1 {
				t.Errorf("code_runs_total{completed} = %v", got)
			}
			if got := testutil.CollectAndCount(e.metrics.LoopRounds); got != 1 {
				t.Errorf("loop_rounds observations %d", got)
			}
		})
	}
}

// gzip-encoded upstream answers are decoded and the encoding header removed.
func TestGzipUpstreamBody(t *testing.T) {
	e := startFilter(t, Config{}, noSandbox{t})
	es := e.open(t)
	es.requestHeaders("POST", "/v1/responses", false)
	es.requestBody(strings.ReplaceAll(ciRequest, "STREAM", "false"))
	es.responseHeaders(200, "content-encoding", "gzip")
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = io.WriteString(zw, modelTurn("resp_1", messageItem("no code needed")))
	zw.Close()
	es.sendResponseBody(buf.Bytes())
	r := es.recv()
	cr := r.GetResponseBody().GetResponse()
	if !slices.Contains(cr.GetHeaderMutation().GetRemoveHeaders(), "content-encoding") {
		t.Errorf("content-encoding not removed: %v", cr.GetHeaderMutation())
	}
	if !bytes.Contains(cr.GetBodyMutation().GetBody(), []byte("no code needed")) {
		t.Errorf("body %s", cr.GetBodyMutation().GetBody())
	}
}

// recordingProvider tells the test when a run starts and how it ended.
// Envoy resetting the stream (the client went away) cancels the run at
// once and no follow-up is made.
func TestStreamEndCancelsRun(t *testing.T) {
	started, ended := make(chan struct{}, 1), make(chan sandbox.Result, 1)
	rp := &sandboxtest.Observed{Provider: sandboxtest.New(t), Started: func() { started <- struct{}{} }, Ended: func(r sandbox.Result) { ended <- r }}
	e := startFilter(t, Config{}, rp, modelTurn("resp_2", messageItem("unexpected")))
	es := e.open(t)
	es.requestHeaders("POST", "/v1/responses", false)
	es.requestBody(strings.ReplaceAll(ciRequest, "STREAM", "false"))
	es.responseHeaders(200)
	es.sendResponseBody([]byte(modelTurn("resp_1", callItem("call_a", "import time\nprint('start', flush=True)\ntime.sleep(600)"))))
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatal("the run never started")
	}
	es.cancel()
	var res sandbox.Result
	select {
	case res = <-ended:
	case <-time.After(time.Minute):
		t.Fatal("the run was not cancelled after the stream ended")
	}
	if res.Outcome != sandbox.OutcomeCancelled {
		t.Fatalf("run outcome %s, want cancelled", res.Outcome)
	}
	waitOutcome(t, e, OutcomeCancelled, 1)
	if n := len(e.up.all()); n != 0 {
		t.Fatalf("%d follow-ups after the stream ended", n)
	}
}

func TestNewValidates(t *testing.T) {
	ic, err := interceptor.New(interceptor.Config{}, noSandbox{t}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"", "ftp://x/v1/responses", "/v1/responses", "http://"} {
		if _, err := New(Config{Upstream: UpstreamConfig{URL: u}}, ic.Processor(), nil, nil); err == nil {
			t.Errorf("upstream URL %q accepted", u)
		}
	}
	if _, err := New(Config{Upstream: UpstreamConfig{URL: "http://127.0.0.1:1/v1/responses"}}, nil, nil, nil); err == nil {
		t.Error("nil interceptor accepted")
	}
}

// TestFollowUpNeverFollowsRedirects: an upstream that redirects must not
// send the client's credentials (api-key survives Go's own cross-host
// redirect scrubbing) anywhere but the configured URL.
func TestFollowUpNeverFollowsRedirects(t *testing.T) {
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	defer other.Close()
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/v1/responses", http.StatusTemporaryRedirect)
	}))
	defer redirecting.Close()
	ic, err := interceptor.New(interceptor.DefaultConfig(), noSandbox{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Upstream: UpstreamConfig{URL: redirecting.URL + "/v1/responses"}}, ic.Processor(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	up := &httpUpstream{client: s.client, url: redirecting.URL + "/v1/responses",
		header: http.Header{"Api-Key": {"secret"}}, maxBody: 1 << 20}
	status, _, _, err := up.CreateResponse(context.Background(), []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if status != http.StatusTemporaryRedirect || elsewhere.Load() != 0 {
		t.Fatalf("status %d, requests elsewhere %d: the redirect was followed", status, elsewhere.Load())
	}
}

// shellSession is a session with a shell, for TestInstrumentedShell.
type shellSession struct {
	sandbox.Session
	calls int
}

func (s *shellSession) Shell(context.Context, sandbox.ShellRequest) (sandbox.Result, error) {
	s.calls++
	return sandbox.Result{Outcome: sandbox.OutcomeCompleted, Commands: []sandbox.CommandResult{{Stdout: "ok"}}}, nil
}

// TestInstrumentedShell: the metrics wrapper keeps a session's shell (and
// counts its runs), and a session without one still has none.
func TestInstrumentedShell(t *testing.T) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	inner := &shellSession{}
	is := &instrumentedSession{Session: inner, m: m}
	r, err := sandbox.Shell(context.Background(), is, sandbox.ShellRequest{Commands: []string{"true"}})
	if err != nil || inner.calls != 1 || r.Commands[0].Stdout != "ok" {
		t.Fatalf("through the wrapper: %+v %v (calls %d)", r, err, inner.calls)
	}
	bare := &instrumentedSession{Session: struct{ sandbox.Session }{}, m: m}
	if _, err := sandbox.Shell(context.Background(), bare, sandbox.ShellRequest{Commands: []string{"true"}}); !errors.Is(err, sandbox.ErrNoShell) {
		t.Fatalf("a session without a shell: %v", err)
	}
}
