package devproxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

func okUpstream(body string) func(http.ResponseWriter, *http.Request, []byte) {
	return func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		_, _ = io.WriteString(w, body)
	}
}

// BUFFERED bodies with both header modes SEND: the four messages in
// order, one at a time; protocol_config on the first only; headers as
// lowercase key + raw_value after HCM mutation; nothing reaches the
// upstream before the request_body response.
func TestBufferedMessageOrder(t *testing.T) {
	var bodyAnswered atomic.Bool
	var mu sync.Mutex
	var seen []*extprocv3.ProcessingRequest
	// The client's answer can arrive before the processor's handler has
	// returned (Envoy closes the stream after forwarding): wait for it.
	handled := make(chan struct{})
	proc := startProc(t, func(s extprocv3.ExternalProcessor_ProcessServer) error {
		var log []*extprocv3.ProcessingRequest
		defer func() { mu.Lock(); seen = log; mu.Unlock(); close(handled) }()
		if _, err := recvKind(s, kindRequestHeaders, &log); err != nil {
			return err
		}
		if err := s.Send(rhResp(nil)); err != nil {
			return err
		}
		if _, err := recvKind(s, kindRequestBody, &log); err != nil {
			return err
		}
		bodyAnswered.Store(true)
		if err := s.Send(rbResp(nil)); err != nil {
			return err
		}
		if _, err := recvKind(s, kindResponseHeaders, &log); err != nil {
			return err
		}
		if err := s.Send(shResp(nil)); err != nil {
			return err
		}
		if _, err := recvKind(s, kindResponseBody, &log); err != nil {
			return err
		}
		if err := s.Send(sbResp(nil)); err != nil {
			return err
		}
		_, _ = s.Recv() // the close
		return nil
	})
	var upstreamSawEarly atomic.Bool
	up, rec := startUpstream(t, func(w http.ResponseWriter, r *http.Request, b []byte) {
		if !bodyAnswered.Load() {
			upstreamSawEarly.Store(true)
		}
		okUpstream(`{"ok":true}`)(w, r, b)
	})
	srv, _, _ := startProxy(t, Config{Upstream: up, Processor: proc, AllowModeOverride: true})

	resp, body := doRequest(t, "POST", srv.URL+"/v1/responses?x=1", `{"a":1}`, map[string]string{
		"Authorization": "Bearer k", "Connection": "keep-alive", "X-Mixed-Case": "V",
	})
	if resp.StatusCode != 200 || body != `{"ok":true}` {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	if upstreamSawEarly.Load() {
		t.Fatal("the upstream got the request before the request_body response")
	}
	select {
	case <-handled:
	case <-time.After(30 * time.Second):
		t.Fatal("the processor's stream never ended")
	}
	mu.Lock()
	log := seen
	mu.Unlock()
	kinds := []msgKind{}
	for _, m := range log {
		kinds = append(kinds, requestKind(m))
	}
	if want := []msgKind{kindRequestHeaders, kindRequestBody, kindResponseHeaders, kindResponseBody}; !slices.Equal(kinds, want) {
		t.Fatalf("message kinds %v, want %v", kinds, want)
	}
	// protocol_config on the first message only.
	if pc := log[0].GetProtocolConfig(); pc == nil || pc.GetRequestBodyMode() != filterv3.ProcessingMode_BUFFERED || pc.GetResponseBodyMode() != filterv3.ProcessingMode_BUFFERED {
		t.Errorf("first message protocol_config = %v", log[0].GetProtocolConfig())
	}
	for i, m := range log[1:] {
		if m.GetProtocolConfig() != nil {
			t.Errorf("message %d carries protocol_config", i+1)
		}
	}
	// Lowercase key + raw_value, :authority, no hop-by-hop headers.
	h := log[0].GetRequestHeaders()
	if h.GetEndOfStream() {
		t.Error("request_headers end_of_stream with a body")
	}
	for _, hv := range h.GetHeaders().GetHeaders() {
		if hv.GetValue() != "" || hv.GetKey() != strings.ToLower(hv.GetKey()) {
			t.Errorf("header %q: value %q (want key lowercase, value empty, raw_value set)", hv.GetKey(), hv.GetValue())
		}
	}
	for k, want := range map[string]string{":method": "POST", ":path": "/v1/responses?x=1", ":scheme": "http",
		"authorization": "Bearer k", "x-mixed-case": "V", "content-length": "7", "x-forwarded-proto": "http"} {
		if got, _ := headerValue(h.GetHeaders(), k); got != want {
			t.Errorf("request header %s = %q, want %q", k, got, want)
		}
	}
	if got, ok := headerValue(h.GetHeaders(), ":authority"); !ok || got != strings.TrimPrefix(srv.URL, "http://") {
		t.Errorf(":authority = %q", got)
	}
	for _, k := range []string{"connection", "host", "transfer-encoding"} {
		if _, ok := headerValue(h.GetHeaders(), k); ok {
			t.Errorf("header %s reached the processor", k)
		}
	}
	if id, _ := headerValue(h.GetHeaders(), "x-request-id"); len(id) != 36 {
		t.Errorf("x-request-id = %q, want a generated UUID", id)
	}
	if b := log[1].GetRequestBody(); string(b.GetBody()) != `{"a":1}` || !b.GetEndOfStream() {
		t.Errorf("request_body = %q eos=%v", b.GetBody(), b.GetEndOfStream())
	}
	if st, _ := headerValue(log[2].GetResponseHeaders().GetHeaders(), ":status"); st != "200" {
		t.Errorf("response :status = %q", st)
	}
	if b := log[3].GetResponseBody(); string(b.GetBody()) != `{"ok":true}` || !b.GetEndOfStream() {
		t.Errorf("response_body = %q eos=%v", b.GetBody(), b.GetEndOfStream())
	}
	if got := rec.all(); len(got) != 1 || string(got[0].body) != `{"a":1}` || got[0].path != "/v1/responses?x=1" {
		t.Errorf("upstream saw %+v", got)
	}
}

// No body → end_of_stream on headers and no body message, even in
// BUFFERED, in both directions.
func TestAbsentBodiesSendNoBodyMessage(t *testing.T) {
	kinds := make(chan []msgKind, 1)
	proc := startProc(t, func(s extprocv3.ExternalProcessor_ProcessServer) error {
		var got []msgKind
		defer func() { kinds <- got }()
		for {
			req, err := s.Recv()
			if err != nil {
				return nil
			}
			got = append(got, requestKind(req))
			switch requestKind(req) {
			case kindRequestHeaders:
				if !req.GetRequestHeaders().GetEndOfStream() {
					return status.Error(codes.InvalidArgument, "request_headers without end_of_stream")
				}
				_ = s.Send(rhResp(nil))
			case kindResponseHeaders:
				if !req.GetResponseHeaders().GetEndOfStream() {
					return status.Error(codes.InvalidArgument, "response_headers without end_of_stream")
				}
				_ = s.Send(shResp(nil))
			default:
				return status.Error(codes.InvalidArgument, "unexpected body message")
			}
		}
	})
	up, _ := startUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) { w.WriteHeader(http.StatusNoContent) })
	srv, _, _ := startProxy(t, Config{Upstream: up, Processor: proc})
	resp, _ := doRequest(t, "GET", srv.URL+"/x", "", nil)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if got := <-kinds; !slices.Equal(got, []msgKind{kindRequestHeaders, kindResponseHeaders}) {
		t.Fatalf("messages %v", got)
	}
}

// A chunked body that turns out empty → body "" with end_of_stream.
func TestEmptyChunkedBody(t *testing.T) {
	type bodyMsg struct {
		body []byte
		eos  bool
	}
	got := make(chan bodyMsg, 1)
	proc := startProc(t, func(s extprocv3.ExternalProcessor_ProcessServer) error {
		if _, err := recvKind(s, kindRequestHeaders, nil); err != nil {
			return err
		}
		_ = s.Send(rhResp(nil))
		req, err := recvKind(s, kindRequestBody, nil)
		if err != nil {
			return err
		}
		got <- bodyMsg{req.GetRequestBody().GetBody(), req.GetRequestBody().GetEndOfStream()}
		_ = s.Send(rbResp(nil))
		return passAll(s)
	})
	up, _ := startUpstream(t, okUpstream("{}"))
	srv, _, _ := startProxy(t, Config{Upstream: up, Processor: proc})
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "POST /v1/responses HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if m := <-got; len(m.body) != 0 || !m.eos {
		t.Fatalf("body message %q eos=%v, want empty with end_of_stream", m.body, m.eos)
	}
}

// mode_override: honoured only in headers responses with
// allow_mode_override; an unset body mode means NONE and a DEFAULT header
// mode keeps the filter's; an override not exactly in a non-empty
// allowed_override_modes is ignored.
func TestModeOverride(t *testing.T) {
	bufferedResponseOnly := &filterv3.ProcessingMode{ResponseBodyMode: filterv3.ProcessingMode_BUFFERED}
	cases := []struct {
		name      string
		cfg       Config
		override  *filterv3.ProcessingMode
		inBody    bool // send the override in the request_body response instead
		wantKinds []msgKind
	}{
		{
			name: "unset request body mode becomes NONE", cfg: Config{AllowModeOverride: true},
			override:  bufferedResponseOnly,
			wantKinds: []msgKind{kindRequestHeaders, kindResponseHeaders, kindResponseBody},
		},
		{
			name: "ignored without allow_mode_override", cfg: Config{},
			override:  bufferedResponseOnly,
			wantKinds: []msgKind{kindRequestHeaders, kindRequestBody, kindResponseHeaders, kindResponseBody},
		},
		{
			name: "ignored in a body response", cfg: Config{AllowModeOverride: true},
			override:  &filterv3.ProcessingMode{ResponseHeaderMode: filterv3.ProcessingMode_SKIP},
			inBody:    true,
			wantKinds: []msgKind{kindRequestHeaders, kindRequestBody, kindResponseHeaders, kindResponseBody},
		},
		{
			name: "DEFAULT response header mode keeps SEND; SKIP skips", cfg: Config{AllowModeOverride: true},
			override:  &filterv3.ProcessingMode{ResponseHeaderMode: filterv3.ProcessingMode_SKIP, RequestBodyMode: filterv3.ProcessingMode_BUFFERED},
			wantKinds: []msgKind{kindRequestHeaders, kindRequestBody},
		},
		{
			name: "not in allowed_override_modes", cfg: Config{AllowModeOverride: true, AllowedOverrideModes: []*filterv3.ProcessingMode{
				{ResponseHeaderMode: filterv3.ProcessingMode_SEND, RequestTrailerMode: filterv3.ProcessingMode_SKIP, ResponseTrailerMode: filterv3.ProcessingMode_SKIP},
			}},
			override:  bufferedResponseOnly,
			wantKinds: []msgKind{kindRequestHeaders, kindRequestBody, kindResponseHeaders, kindResponseBody},
		},
		{
			name: "exactly in allowed_override_modes (request_header_mode not compared)", cfg: Config{AllowModeOverride: true, AllowedOverrideModes: []*filterv3.ProcessingMode{
				{RequestHeaderMode: filterv3.ProcessingMode_SKIP, ResponseHeaderMode: filterv3.ProcessingMode_SEND, ResponseBodyMode: filterv3.ProcessingMode_BUFFERED,
					RequestTrailerMode: filterv3.ProcessingMode_SKIP, ResponseTrailerMode: filterv3.ProcessingMode_SKIP},
			}},
			override:  bufferedResponseOnly,
			wantKinds: []msgKind{kindRequestHeaders, kindResponseHeaders, kindResponseBody},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kinds := make(chan []msgKind, 1)
			proc := startProc(t, func(s extprocv3.ExternalProcessor_ProcessServer) error {
				var got []msgKind
				defer func() { kinds <- got }()
				for {
					req, err := s.Recv()
					if err != nil {
						return nil
					}
					k := requestKind(req)
					got = append(got, k)
					var resp *extprocv3.ProcessingResponse
					switch k {
					case kindRequestHeaders:
						resp = rhResp(nil)
						if !tc.inBody {
							resp.ModeOverride = tc.override
						}
					case kindRequestBody:
						resp = rbResp(nil)
						if tc.inBody {
							resp.ModeOverride = tc.override
						}
					case kindResponseHeaders:
						resp = shResp(nil)
					case kindResponseBody:
						resp = sbResp(nil)
					}
					_ = s.Send(resp)
				}
			})
			up, rec := startUpstream(t, okUpstream(`{"x":1}`))
			cfg := tc.cfg
			cfg.Upstream, cfg.Processor = up, proc
			srv, _, _ := startProxy(t, cfg)
			resp, body := doRequest(t, "POST", srv.URL+"/v1/responses", `{"in":1}`, nil)
			if resp.StatusCode != 200 || body != `{"x":1}` {
				t.Fatalf("got %d %q", resp.StatusCode, body)
			}
			if r := rec.all(); len(r) != 1 || string(r[0].body) != `{"in":1}` {
				t.Fatalf("upstream saw %+v", r)
			}
			srv.Close() // ends the exchange's stream for sure
			if got := <-kinds; !slices.Equal(got, tc.wantKinds) {
				t.Fatalf("messages %v, want %v", got, tc.wantKinds)
			}
		})
	}
}

// BUFFERED + SEND keeps content-length, and a held content-length must
// match a mutated body (clear_body counts as 0), or the exchange fails
// closed and the upstream gets nothing.
func TestBodyMutationContentLength(t *testing.T) {
	cases := []struct {
		name        string
		cr          *extprocv3.CommonResponse
		wantStatus  int
		wantDetails string
		wantBody    string // what the upstream gets; "" with wantStatus≠200 means nothing
		wantCL      int64
	}{
		{
			name:        "mismatch fails closed",
			cr:          &extprocv3.CommonResponse{BodyMutation: bodyMut(`{"longer":true}`)},
			wantStatus:  500,
			wantDetails: "mismatch_between_content_length_and_the_length_of_the_mutated_body",
		},
		{
			name:        "clear_body counts as zero",
			cr:          &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_ClearBody{ClearBody: true}}},
			wantStatus:  500,
			wantDetails: "mismatch_between_content_length_and_the_length_of_the_mutated_body",
		},
		{
			name: "content-length set to match",
			cr: &extprocv3.CommonResponse{
				HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setRaw("content-length", "15")}},
				BodyMutation:   bodyMut(`{"longer":true}`),
			},
			wantStatus: 200, wantBody: `{"longer":true}`, wantCL: 15,
		},
		{
			name: "content-length removed",
			cr: &extprocv3.CommonResponse{
				HeaderMutation: &extprocv3.HeaderMutation{RemoveHeaders: []string{"content-length"}},
				BodyMutation:   bodyMut(`{"longer":true}`),
			},
			wantStatus: 200, wantBody: `{"longer":true}`, wantCL: -1,
		},
		{
			name: "content-length set through value only is empty, so mismatch",
			cr: &extprocv3.CommonResponse{
				HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "content-length", Value: "15"}}}},
				BodyMutation:   bodyMut(`{"longer":true}`),
			},
			wantStatus:  500,
			wantDetails: "mismatch_between_content_length_and_the_length_of_the_mutated_body",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			proc := startProc(t, func(s extprocv3.ExternalProcessor_ProcessServer) error {
				if _, err := recvKind(s, kindRequestHeaders, nil); err != nil {
					return err
				}
				_ = s.Send(rhResp(nil))
				if _, err := recvKind(s, kindRequestBody, nil); err != nil {
					return err
				}
				_ = s.Send(rbResp(tc.cr))
				return passAll(s)
			})
			up, rec := startUpstream(t, okUpstream(`{}`))
			srv, _, lr := startProxy(t, Config{Upstream: up, Processor: proc})
			resp, body := doRequest(t, "POST", srv.URL+"/v1/responses", `{"a":1}`, nil)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d %q, want %d", resp.StatusCode, body, tc.wantStatus)
			}
			got := rec.all()
			if tc.wantStatus != 200 {
				if len(got) != 0 {
					t.Fatalf("the upstream got %d requests after a fail-closed mutation", len(got))
				}
				if d := lr.list(); !slices.Contains(d, tc.wantDetails) {
					t.Fatalf("details %v, want %s", d, tc.wantDetails)
				}
				if body != "" || resp.Header.Get("Content-Type") != "" {
					t.Errorf("local reply body %q content-type %q; Envoy sends neither for an empty body", body, resp.Header.Get("Content-Type"))
				}
				return
			}
			if len(got) != 1 || string(got[0].body) != tc.wantBody || got[0].contentLength != tc.wantCL {
				t.Fatalf("upstream saw %+v", got)
			}
		})
	}
}

// CONTINUE_AND_REPLACE with a body in a headers response replaces it,
// removes content-length, and sends no body message for that direction.
func TestContinueAndReplace(t *testing.T) {
	kinds := make(chan []msgKind, 1)
	proc := startProc(t, func(s extprocv3.ExternalProcessor_ProcessServer) error {
		var got []msgKind
		defer func() { kinds <- got }()
		for {
			req, err := s.Recv()
			if err != nil {
				return nil
			}
			got = append(got, requestKind(req))
			switch requestKind(req) {
			case kindRequestHeaders:
				_ = s.Send(rhResp(&extprocv3.CommonResponse{
					Status: extprocv3.CommonResponse_CONTINUE_AND_REPLACE,
					HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
						setRaw(":method", "POST"), setRaw("content-type", "application/json")}},
					BodyMutation: bodyMut(`{"replaced":true}`),
				}))
			case kindResponseHeaders:
				_ = s.Send(shResp(nil))
			case kindResponseBody:
				_ = s.Send(sbResp(nil))
			default:
				_ = s.Send(rbResp(nil))
			}
		}
	})
	up, rec := startUpstream(t, okUpstream(`{}`))
	srv, _, _ := startProxy(t, Config{Upstream: up, Processor: proc})
	resp, _ := doRequest(t, "GET", srv.URL+"/v1/responses", "", nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	got := rec.all()
	if len(got) != 1 || got[0].method != "POST" || string(got[0].body) != `{"replaced":true}` {
		t.Fatalf("upstream saw %+v", got)
	}
	srv.Close()
	if k := <-kinds; !slices.Equal(k, []msgKind{kindRequestHeaders, kindResponseHeaders, kindResponseBody}) {
		t.Fatalf("messages %v", k)
	}
}

// Header mutations: removals before sets, append false replaces and true
// adds, only raw_value is read, and the default mutation_rules skip what
// they refuse (an error only with disallow_is_error).
func TestHeaderMutationRules(t *testing.T) {
	mut := &extprocv3.HeaderMutation{
		RemoveHeaders: []string{"x-remove", ":path", "host", "x-envoy-keep"},
		SetHeaders: []*corev3.HeaderValueOption{
			setRaw("x-set", "new"),
			setRaw("x-remove", "re-added"), // removals come first, so this survives
			appendRaw("x-multi", "two"),
			setRaw("x-replace", "only"),
			{Header: &corev3.HeaderValue{Key: "x-value-only", Value: "ignored"}},
			setRaw("host", "evil.example"),
			setRaw(":authority", "evil.example"),
			setRaw("x-envoy-internal", "true"),
			setRaw(":scheme", "https"),
			appendRaw(":path", "/more"),
			setRaw(":path", "/rewritten"),
		},
	}
	run := func(t *testing.T, disallowIsError bool) (*http.Response, []recordedRequest, *Proxy, *localReplies) {
		proc := startProc(t, func(s extprocv3.ExternalProcessor_ProcessServer) error {
			if _, err := recvKind(s, kindRequestHeaders, nil); err != nil {
				return err
			}
			_ = s.Send(rhResp(&extprocv3.CommonResponse{HeaderMutation: mut}))
			return passAll(s)
		})
		up, rec := startUpstream(t, okUpstream(`{}`))
		srv, p, lr := startProxy(t, Config{Upstream: up, Processor: proc, DisallowIsError: disallowIsError})
		req, _ := http.NewRequest("GET", srv.URL+"/orig", nil)
		req.Header.Set("X-Remove", "old")
		req.Header.Add("X-Multi", "one")
		req.Header.Add("X-Replace", "a")
		req.Header.Add("X-Replace", "b")
		req.Header.Set("X-Envoy-Keep", "k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp, rec.all(), p, lr
	}
	t.Run("default rules skip disallowed edits", func(t *testing.T) {
		resp, got, p, _ := run(t, false)
		if resp.StatusCode != 200 || len(got) != 1 {
			t.Fatalf("status %d, upstream requests %d", resp.StatusCode, len(got))
		}
		h := got[0].header
		checks := map[string][]string{
			"X-Set": {"new"}, "X-Remove": {"re-added"}, "X-Multi": {"one", "two"}, "X-Replace": {"only"},
			"X-Value-Only": {""}, "X-Envoy-Internal": nil, "X-Envoy-Keep": {"k"},
		}
		for k, want := range checks {
			if gotV := h.Values(k); !slices.Equal(gotV, want) {
				t.Errorf("%s = %q, want %q", k, gotV, want)
			}
		}
		if got[0].path != "/rewritten" {
			t.Errorf("path %q, want /rewritten", got[0].path)
		}
		// Host is rewritten to the upstream (auto_host_rewrite), never to the processor's value.
		if got[0].host == "evil.example" {
			t.Error("processor changed host")
		}
		// Disallowed: remove :path, host, x-envoy-keep; set host, :authority, x-envoy-internal, :scheme; append :path.
		if n := p.RejectedHeaderMutations(); n != 8 {
			t.Errorf("rejected_header_mutations = %d, want 8", n)
		}
	})
	t.Run("disallow_is_error fails closed", func(t *testing.T) {
		resp, got, _, lr := run(t, true)
		if resp.StatusCode != 500 || len(got) != 0 {
			t.Fatalf("status %d, upstream requests %d", resp.StatusCode, len(got))
		}
		if d := lr.list(); !slices.Contains(d, "header_mutation_remove_headers_failed") {
			t.Fatalf("details %v", d)
		}
	})
}

// ImmediateResponse: a status below 200 or none becomes 200; a non-empty
// body gets content-length and a default text/plain content-type; its
// headers obey the filter's mutation_rules; it is accepted at response
// headers too.
func TestImmediateResponse(t *testing.T) {
	cases := []struct {
		name       string
		ir         *extprocv3.ImmediateResponse
		atResponse bool
		wantStatus int
		wantCT     string
		wantBody   string
		wantHeader map[string]string
	}{
		{
			name:       "status below 200 becomes 200; plain text default",
			ir:         &extprocv3.ImmediateResponse{Status: &typev3.HttpStatus{Code: 100}, Body: []byte("hi")},
			wantStatus: 200, wantCT: "text/plain", wantBody: "hi",
		},
		{
			name:       "missing status becomes 200; empty body gets no content-type",
			ir:         &extprocv3.ImmediateResponse{},
			wantStatus: 200, wantCT: "", wantBody: "",
		},
		{
			name: "processor content-type kept, x-envoy and host headers dropped",
			ir: &extprocv3.ImmediateResponse{
				Status: &typev3.HttpStatus{Code: 400},
				Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
					setRaw("content-type", "application/json"), setRaw("x-envoy-foo", "1"), setRaw("host", "h"), setRaw("x-ok", "yes"),
				}},
				Body: []byte(`{"error":{}}`),
			},
			wantStatus: 400, wantCT: "application/json", wantBody: `{"error":{}}`,
			wantHeader: map[string]string{"X-Envoy-Foo": "", "X-Ok": "yes"},
		},
		{
			name: "an invalid header stops later edits but the reply goes out",
			ir: &extprocv3.ImmediateResponse{
				Status: &typev3.HttpStatus{Code: 403},
				Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
					setRaw("x-first", "1"), setRaw("x-bad", "a\nb"), setRaw("x-after", "2"),
				}},
				Body: []byte("no"),
			},
			wantStatus: 403, wantCT: "text/plain", wantBody: "no",
			wantHeader: map[string]string{"X-First": "1", "X-After": ""},
		},
		{
			name:       "accepted at response_headers",
			ir:         &extprocv3.ImmediateResponse{Status: &typev3.HttpStatus{Code: 502}, Body: []byte("bad")},
			atResponse: true,
			wantStatus: 502, wantCT: "text/plain", wantBody: "bad",
			wantHeader: map[string]string{"X-Upstream": ""},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			proc := startProc(t, func(s extprocv3.ExternalProcessor_ProcessServer) error {
				imm := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: tc.ir}}
				if _, err := recvKind(s, kindRequestHeaders, nil); err != nil {
					return err
				}
				if !tc.atResponse {
					_ = s.Send(imm)
					_, _ = s.Recv()
					return nil
				}
				_ = s.Send(rhResp(nil))
				if _, err := recvKind(s, kindRequestBody, nil); err != nil {
					return err
				}
				_ = s.Send(rbResp(nil))
				if _, err := recvKind(s, kindResponseHeaders, nil); err != nil {
					return err
				}
				_ = s.Send(imm)
				_, _ = s.Recv()
				return nil
			})
			up, rec := startUpstream(t, func(w http.ResponseWriter, r *http.Request, b []byte) {
				w.Header().Set("X-Upstream", "1")
				okUpstream(`{"upstream":true}`)(w, r, b)
			})
			srv, _, _ := startProxy(t, Config{Upstream: up, Processor: proc})
			resp, body := doRequest(t, "POST", srv.URL+"/v1/responses", `{}`, nil)
			if resp.StatusCode != tc.wantStatus || body != tc.wantBody || resp.Header.Get("Content-Type") != tc.wantCT {
				t.Fatalf("got %d %q content-type %q", resp.StatusCode, body, resp.Header.Get("Content-Type"))
			}
			if tc.wantBody != "" && resp.ContentLength != int64(len(tc.wantBody)) {
				t.Errorf("content-length %d", resp.ContentLength)
			}
			for k, v := range tc.wantHeader {
				if resp.Header.Get(k) != v {
					t.Errorf("%s = %q, want %q", k, resp.Header.Get(k), v)
				}
			}
			if n := len(rec.all()); tc.atResponse != (n == 1) {
				t.Errorf("upstream requests %d", n)
			}
		})
	}
}

// The message timer (a timeout is 504 whatever status_on_error; fail-open
// goes on unprocessed) and override_message_timeout (once per message,
// within [1ms, max_message_timeout], its other fields ignored).
func TestMessageTimeout(t *testing.T) {
	never := make(chan struct{})
	t.Cleanup(func() { close(never) })
	cases := []struct {
		name        string
		cfg         Config
		script      func(s extprocv3.ExternalProcessor_ProcessServer) error
		wantStatus  int
		wantDetails string
		wantForward bool
	}{
		{
			name: "no answer → 504 whatever status_on_error",
			cfg:  Config{MessageTimeout: 50 * time.Millisecond, StatusOnError: 503},
			script: func(s extprocv3.ExternalProcessor_ProcessServer) error {
				_, _ = s.Recv()
				<-s.Context().Done()
				return nil
			},
			wantStatus: 504, wantDetails: "ext_proc_error_per-message_timeout_exceeded",
		},
		{
			name: "fail open continues unprocessed",
			cfg:  Config{MessageTimeout: 50 * time.Millisecond, FailureModeAllow: true},
			script: func(s extprocv3.ExternalProcessor_ProcessServer) error {
				_, _ = s.Recv()
				<-s.Context().Done()
				return nil
			},
			wantStatus: 200, wantForward: true,
		},
		{
			name: "override extends the timer; its other fields are ignored",
			// The override must reach the proxy within the first timer:
			// generous, so a loaded machine cannot make this flaky.
			cfg: Config{MessageTimeout: 1500 * time.Millisecond, MaxMessageTimeout: time.Minute},
			script: func(s extprocv3.ExternalProcessor_ProcessServer) error {
				if _, err := recvKind(s, kindRequestHeaders, nil); err != nil {
					return err
				}
				o := rhResp(&extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setRaw("x-from-override", "1")}}})
				o.OverrideMessageTimeout = durationpb.New(30 * time.Second)
				_ = s.Send(o)
				time.Sleep(3 * time.Second) // well past the original 1.5s
				_ = s.Send(rhResp(nil))
				return passAll(s)
			},
			wantStatus: 200, wantForward: true,
		},
		{
			name: "override above max_message_timeout is ignored",
			cfg:  Config{MessageTimeout: 200 * time.Millisecond, MaxMessageTimeout: 10 * time.Second},
			script: func(s extprocv3.ExternalProcessor_ProcessServer) error {
				_, _ = s.Recv()
				_ = s.Send(&extprocv3.ProcessingResponse{OverrideMessageTimeout: durationpb.New(time.Minute)})
				<-s.Context().Done()
				return nil
			},
			wantStatus: 504, wantDetails: "ext_proc_error_per-message_timeout_exceeded",
		},
		{
			name: "override without max_message_timeout is ignored",
			cfg:  Config{MessageTimeout: 200 * time.Millisecond},
			script: func(s extprocv3.ExternalProcessor_ProcessServer) error {
				_, _ = s.Recv()
				_ = s.Send(&extprocv3.ProcessingResponse{OverrideMessageTimeout: durationpb.New(time.Second)})
				<-s.Context().Done()
				return nil
			},
			wantStatus: 504, wantDetails: "ext_proc_error_per-message_timeout_exceeded",
		},
		{
			name: "only the first override per message counts",
			cfg:  Config{MessageTimeout: 100 * time.Millisecond, MaxMessageTimeout: time.Minute},
			script: func(s extprocv3.ExternalProcessor_ProcessServer) error {
				_, _ = s.Recv()
				_ = s.Send(&extprocv3.ProcessingResponse{OverrideMessageTimeout: durationpb.New(400 * time.Millisecond)})
				_ = s.Send(&extprocv3.ProcessingResponse{OverrideMessageTimeout: durationpb.New(time.Minute)})
				<-s.Context().Done()
				return nil
			},
			wantStatus: 504, wantDetails: "ext_proc_error_per-message_timeout_exceeded",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			proc := startProc(t, tc.script)
			up, rec := startUpstream(t, okUpstream(`{}`))
			cfg := tc.cfg
			cfg.Upstream, cfg.Processor = up, proc
			srv, _, lr := startProxy(t, cfg)
			resp, _ := doRequest(t, "POST", srv.URL+"/v1/responses", `{}`, nil)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.wantStatus)
			}
			got := rec.all()
			if tc.wantForward != (len(got) == 1) {
				t.Fatalf("upstream requests %d", len(got))
			}
			if tc.wantForward && got[0].header.Get("X-From-Override") != "" {
				t.Error("a field of the override response was applied")
			}
			if tc.wantDetails != "" && !slices.Contains(lr.list(), tc.wantDetails) {
				t.Errorf("details %v, want %s", lr.list(), tc.wantDetails)
			}
		})
	}
}

// Stream failures and spurious responses: a non-OK close or a spurious
// response is status_on_error (fail-open continues), an OK close continues
// unprocessed.
func TestStreamFailures(t *testing.T) {
	cases := []struct {
		name        string
		failOpen    bool
		script      func(s extprocv3.ExternalProcessor_ProcessServer) error
		wantStatus  int
		wantDetails string
		wantForward bool
	}{
		{
			name: "non-OK close → status_on_error",
			script: func(s extprocv3.ExternalProcessor_ProcessServer) error {
				_, _ = s.Recv()
				return status.Error(codes.Internal, "boom")
			},
			wantStatus: 500, wantDetails: "ext_proc_error_gRPC_error_13{boom}",
		},
		{
			name:     "non-OK close with failure_mode_allow continues",
			failOpen: true,
			script: func(s extprocv3.ExternalProcessor_ProcessServer) error {
				_, _ = s.Recv()
				return status.Error(codes.Internal, "boom")
			},
			wantStatus: 200, wantForward: true,
		},
		{
			name: "OK close continues unprocessed",
			script: func(s extprocv3.ExternalProcessor_ProcessServer) error {
				_, _ = s.Recv()
				return nil
			},
			wantStatus: 200, wantForward: true,
		},
		{
			name: "wrong-phase response is spurious",
			script: func(s extprocv3.ExternalProcessor_ProcessServer) error {
				_, _ = s.Recv()
				_ = s.Send(sbResp(nil))
				_, _ = s.Recv()
				return nil
			},
			wantStatus: 500, wantDetails: "spurious_message",
		},
		{
			name: "empty response is spurious",
			script: func(s extprocv3.ExternalProcessor_ProcessServer) error {
				_, _ = s.Recv()
				_ = s.Send(&extprocv3.ProcessingResponse{})
				_, _ = s.Recv()
				return nil
			},
			wantStatus: 500, wantDetails: "spurious_message",
		},
		{
			name:     "spurious with failure_mode_allow continues",
			failOpen: true,
			script: func(s extprocv3.ExternalProcessor_ProcessServer) error {
				_, _ = s.Recv()
				_ = s.Send(sbResp(nil))
				_, _ = s.Recv()
				return nil
			},
			wantStatus: 200, wantForward: true,
		},
		{
			name: "streamed_response outside FULL_DUPLEX_STREAMED is spurious",
			script: func(s extprocv3.ExternalProcessor_ProcessServer) error {
				_, _ = s.Recv()
				_ = s.Send(rhResp(nil))
				_, _ = s.Recv()
				_ = s.Send(rbResp(&extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
					Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{Body: []byte("x")}}}}))
				_, _ = s.Recv()
				return nil
			},
			wantStatus: 500, wantDetails: "spurious_message",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			proc := startProc(t, tc.script)
			up, rec := startUpstream(t, okUpstream(`{"u":1}`))
			srv, _, lr := startProxy(t, Config{Upstream: up, Processor: proc, FailureModeAllow: tc.failOpen})
			resp, body := doRequest(t, "POST", srv.URL+"/v1/responses", `{"c":1}`, nil)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d %q, want %d", resp.StatusCode, body, tc.wantStatus)
			}
			got := rec.all()
			if tc.wantForward {
				if len(got) != 1 || string(got[0].body) != `{"c":1}` || body != `{"u":1}` {
					t.Fatalf("upstream saw %+v, client got %q", got, body)
				}
			} else if len(got) != 0 {
				t.Fatalf("upstream got %d requests", len(got))
			}
			if tc.wantDetails != "" && !slices.Contains(lr.list(), tc.wantDetails) {
				t.Errorf("details %v, want %s", lr.list(), tc.wantDetails)
			}
		})
	}
}

// Buffer limits: a buffered request over the limit is a 413, a buffered
// response over it a 500.
func TestBufferLimits(t *testing.T) {
	t.Run("request over the limit → 413 and no body message", func(t *testing.T) {
		kinds := make(chan []msgKind, 1)
		proc := startProc(t, func(s extprocv3.ExternalProcessor_ProcessServer) error {
			var got []msgKind
			defer func() { kinds <- got }()
			for {
				req, err := s.Recv()
				if err != nil {
					return nil
				}
				got = append(got, requestKind(req))
				_ = s.Send(rhResp(nil))
			}
		})
		up, rec := startUpstream(t, okUpstream(`{}`))
		srv, _, lr := startProxy(t, Config{Upstream: up, Processor: proc, BufferLimit: 16})
		resp, body := doRequest(t, "POST", srv.URL+"/v1/responses", strings.Repeat("x", 17), nil)
		if resp.StatusCode != 413 || body != "Payload Too Large" {
			t.Fatalf("got %d %q", resp.StatusCode, body)
		}
		if len(rec.all()) != 0 || !slices.Contains(lr.list(), "request_payload_too_large") {
			t.Fatalf("upstream %d, details %v", len(rec.all()), lr.list())
		}
		srv.Close()
		if k := <-kinds; !slices.Equal(k, []msgKind{kindRequestHeaders}) {
			t.Fatalf("messages %v", k)
		}
	})
	t.Run("request at the limit passes", func(t *testing.T) {
		proc := startProc(t, passAll)
		up, rec := startUpstream(t, okUpstream(`{}`))
		srv, _, _ := startProxy(t, Config{Upstream: up, Processor: proc, BufferLimit: 16})
		resp, _ := doRequest(t, "POST", srv.URL+"/v1/responses", strings.Repeat("x", 16), nil)
		if resp.StatusCode != 200 || len(rec.all()) != 1 {
			t.Fatalf("status %d upstream %d", resp.StatusCode, len(rec.all()))
		}
	})
	t.Run("response over the limit → 500", func(t *testing.T) {
		proc := startProc(t, passAll)
		up, _ := startUpstream(t, okUpstream(strings.Repeat("y", 17)))
		srv, _, lr := startProxy(t, Config{Upstream: up, Processor: proc, BufferLimit: 16})
		resp, _ := doRequest(t, "POST", srv.URL+"/v1/responses", `{}`, nil)
		if resp.StatusCode != 500 || !slices.Contains(lr.list(), "response_payload_too_large") {
			t.Fatalf("status %d details %v", resp.StatusCode, lr.list())
		}
	})
	t.Run("unbuffered after override: no limit", func(t *testing.T) {
		proc := startProc(t, func(s extprocv3.ExternalProcessor_ProcessServer) error {
			if _, err := recvKind(s, kindRequestHeaders, nil); err != nil {
				return err
			}
			r := rhResp(nil)
			r.ModeOverride = &filterv3.ProcessingMode{ResponseHeaderMode: filterv3.ProcessingMode_SKIP}
			_ = s.Send(r)
			return passAll(s)
		})
		big := strings.Repeat("z", 100)
		up, rec := startUpstream(t, okUpstream(big))
		srv, _, _ := startProxy(t, Config{Upstream: up, Processor: proc, BufferLimit: 16, AllowModeOverride: true})
		resp, body := doRequest(t, "POST", srv.URL+"/v1/responses", big, nil)
		if resp.StatusCode != 200 || body != big || len(rec.all()) != 1 || string(rec.all()[0].body) != big {
			t.Fatalf("status %d body %d bytes", resp.StatusCode, len(body))
		}
	})
}

// A body response's header_mutation applies while headers are held
// (BUFFERED + SEND), including :status on the response.
func TestResponseBodyMutation(t *testing.T) {
	proc := startProc(t, func(s extprocv3.ExternalProcessor_ProcessServer) error {
		for _, k := range []msgKind{kindRequestHeaders, kindRequestBody, kindResponseHeaders} {
			if _, err := recvKind(s, k, nil); err != nil {
				return err
			}
			switch k {
			case kindRequestHeaders:
				_ = s.Send(rhResp(nil))
			case kindRequestBody:
				_ = s.Send(rbResp(nil))
			case kindResponseHeaders:
				_ = s.Send(shResp(nil))
			}
		}
		if _, err := recvKind(s, kindResponseBody, nil); err != nil {
			return err
		}
		nb := "data: hello\n\n"
		_ = s.Send(sbResp(&extprocv3.CommonResponse{
			HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
				setRaw(":status", "201"), setRaw("content-type", "text/event-stream"), setRaw("content-length", fmt.Sprint(len(nb)))}},
			BodyMutation: bodyMut(nb),
		}))
		return passAll(s)
	})
	up, _ := startUpstream(t, okUpstream(`{"orig":true}`))
	srv, _, _ := startProxy(t, Config{Upstream: up, Processor: proc})
	resp, body := doRequest(t, "POST", srv.URL+"/v1/responses", `{}`, nil)
	if resp.StatusCode != 201 || body != "data: hello\n\n" || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("got %d %q %q", resp.StatusCode, body, resp.Header.Get("Content-Type"))
	}
}

// Without a processor the proxy is a plain route: the baseline.
func TestNoProcessorIsPlainProxy(t *testing.T) {
	up, rec := startUpstream(t, func(w http.ResponseWriter, _ *http.Request, b []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("data: 1\n\n"))
		w.(http.Flusher).Flush()
		_, _ = w.Write([]byte("data: 2\n\n"))
	})
	srv, _, _ := startProxy(t, Config{Upstream: up})
	resp, body := doRequest(t, "POST", srv.URL+"/v1/responses", `{"s":1}`, map[string]string{"Accept-Encoding": "gzip"})
	if resp.StatusCode != 200 || body != "data: 1\n\ndata: 2\n\n" {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	if got := rec.all(); len(got) != 1 || got[0].header.Get("Accept-Encoding") != "gzip" || string(got[0].body) != `{"s":1}` {
		t.Fatalf("upstream saw %+v", got)
	}
}

// An upstream path prefix is prepended to the request path.
func TestUpstreamPathPrefix(t *testing.T) {
	up, rec := startUpstream(t, okUpstream(`{}`))
	up.Path = "/prefix/"
	srv, _, _ := startProxy(t, Config{Upstream: up})
	doRequest(t, "GET", srv.URL+"/v1/models?a=b", "", nil)
	if got := rec.all(); len(got) != 1 || got[0].path != "/prefix/v1/models?a=b" {
		t.Fatalf("upstream saw %+v", got)
	}
}

func TestNewRejectsUnemulatedModes(t *testing.T) {
	up, _ := startUpstream(t, okUpstream(`{}`))
	for _, m := range []filterv3.ProcessingMode_BodySendMode{filterv3.ProcessingMode_STREAMED, filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, filterv3.ProcessingMode_BUFFERED_PARTIAL} {
		if _, err := New(Config{Upstream: up, ProcessingMode: &filterv3.ProcessingMode{ResponseBodyMode: m}}); err == nil {
			t.Errorf("mode %s accepted", m)
		}
	}
	if _, err := New(Config{}); err == nil {
		t.Error("missing upstream accepted")
	}
}
