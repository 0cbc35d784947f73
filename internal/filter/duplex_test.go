package filter

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/tidwall/gjson"
	"google.golang.org/protobuf/proto"

	"github.com/codeinterp/codeinterp/internal/interceptor"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
	"github.com/codeinterp/codeinterp/internal/sse"
)

// These tests play Envoy in FULL_DUPLEX_STREAMED response mode: response
// headers, then body chunks sent without waiting for answers, then end of
// stream or trailers.

func startDuplexFilter(t *testing.T, cfg Config, prov sandbox.Provider, answers ...string) *env {
	t.Helper()
	cfg.SyntheticStreams = false
	return serveFilter(t, cfg, prov, answers...)
}

func (es *envoyStream) sendBody(body []byte, eos bool) {
	es.t.Helper()
	es.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: body, EndOfStream: eos}}})
}

func (es *envoyStream) sendTrailers() {
	es.t.Helper()
	es.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{Trailers: hdrs("x-upstream-trailer", "1")}}})
}

func (es *envoyStream) sendResponseHeaders(status int, contentType string) {
	es.t.Helper()
	es.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: hdrs(":status", strconv.Itoa(status), "content-type", contentType, "content-length", "999")}}})
}

// duplexEnd is how the response body of a duplex exchange ended.
type duplexEnd struct {
	body     []byte // the streamed_response bodies, concatenated
	chunks   int
	trailers bool // a TrailersResponse ended it
}

// readBody reads streamed_response answers until end_of_stream or a
// TrailersResponse, checking that every body answer carries
// streamed_response of at most 64 KiB, end_of_stream only on the last.
func (es *envoyStream) readBody() duplexEnd {
	es.t.Helper()
	var out duplexEnd
	for {
		r := es.recv()
		if r.GetResponseTrailers() != nil {
			out.trailers = true
			return out
		}
		sr := r.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if sr == nil {
			es.t.Fatalf("answer %v, want a streamed_response body", r)
		}
		if len(sr.GetBody()) > maxChunk {
			es.t.Errorf("streamed_response of %d bytes, more than 64 KiB", len(sr.GetBody()))
		}
		out.body = append(out.body, sr.GetBody()...)
		out.chunks++
		if sr.GetEndOfStream() {
			return out
		}
	}
}

// expectEnd checks that the server sends nothing more and ends the stream
// when Envoy half-closes: a repeated end-of-stream chunk got no answer.
func (es *envoyStream) expectEnd() {
	es.t.Helper()
	if err := es.s.CloseSend(); err != nil {
		es.t.Fatal(err)
	}
	r, err := es.s.Recv()
	if !errors.Is(err, io.EOF) {
		es.t.Fatalf("after the end: %v, %v; want the stream to end with no further answer", r, err)
	}
}

func TestDuplexModeOverride(t *testing.T) {
	cases := []struct {
		name      string
		cfg       Config
		method    string
		path      string
		eos       bool
		wantMode  *filterv3.ProcessingMode
		wantLetGo bool
	}{
		{"selected request with a body", Config{}, "POST", "/v1/responses", false, DuplexMode(), false},
		{"selected, query ignored", Config{}, "POST", "/v1/responses?api-version=1", false, DuplexMode(), false},
		{"selected but no body", Config{}, "POST", "/v1/responses", true, nil, true},
		{"not selected", Config{}, "GET", "/v1/models", true, nil, true},
		{"synthetic streams keep BUFFERED", Config{SyntheticStreams: true}, "POST", "/v1/responses", false, nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := serveFilter(t, tc.cfg, noSandbox{t})
			r := e.open(t).requestHeaders(tc.method, tc.path, tc.eos)
			got := r.GetModeOverride()
			switch {
			case tc.wantLetGo:
				if !isLetGo(got) {
					t.Fatalf("mode_override %v, want let-go", got)
				}
			case !proto.Equal(got, tc.wantMode):
				t.Fatalf("mode_override %v, want %v", got, tc.wantMode)
			}
		})
	}
	m := DuplexMode()
	if m.GetRequestBodyMode() != filterv3.ProcessingMode_BUFFERED || m.GetResponseBodyMode() != filterv3.ProcessingMode_FULL_DUPLEX_STREAMED ||
		m.GetResponseTrailerMode() != filterv3.ProcessingMode_SEND || m.GetResponseHeaderMode() != filterv3.ProcessingMode_SEND {
		t.Errorf("duplexMode %v: the request body must stay BUFFERED, the response be duplex with headers and trailers SEND", m)
	}
}

// A request that is not intercepted, or an upstream error, is echoed chunk
// for chunk: the override cannot be taken back once in duplex mode.
func TestDuplexEcho(t *testing.T) {
	big := bytes.Repeat([]byte("b"), 150<<10)
	cases := []struct {
		name     string
		request  string
		status   int
		trailers bool
	}{
		{"not intercepted", plainRequest, 200, false},
		{"not intercepted, with trailers", plainRequest, 200, true},
		{"upstream error of an intercepted request", strings.ReplaceAll(ciRequest, "STREAM", "true"), 429, false},
		{"upstream error, not streaming", strings.ReplaceAll(ciRequest, "STREAM", "false"), 500, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := startDuplexFilter(t, Config{}, noSandbox{t})
			es := e.open(t)
			es.requestHeaders("POST", "/v1/responses", false)
			es.requestBody(tc.request)
			es.sendResponseHeaders(tc.status, "application/json")
			if r := es.recv(); r.GetResponseHeaders() == nil || r.GetResponseHeaders().GetResponse().GetHeaderMutation() != nil {
				t.Fatalf("answer %v, want an unchanged headers response at once", r)
			}
			parts := [][]byte{[]byte(`{"a":`), big, []byte(`}`)}
			for _, p := range parts {
				es.sendBody(p, false)
			}
			if tc.trailers {
				es.sendTrailers()
			} else {
				es.sendBody(nil, true)
			}
			end := es.readBody()
			if want := bytes.Join(parts, nil); !bytes.Equal(end.body, want) {
				t.Errorf("echoed %d bytes, want the %d sent", len(end.body), len(want))
			}
			if end.trailers != tc.trailers {
				t.Errorf("ended by trailers %v, want %v", end.trailers, tc.trailers)
			}
			if end.chunks < 4 {
				t.Errorf("%d chunks: 150 KiB must be split", end.chunks)
			}
			if !tc.trailers {
				es.sendBody([]byte("again"), true) // Envoy 1.35–1.37 re-deliver the last chunk (envoyproxy/envoy#46237)
			}
			es.expectEnd()
		})
	}
}

// echoedResponse opens a duplex stream for a request that is not ours
// (plainRequest) and sends the upstream's response headers with
// contentType, checking they are answered at once.
func echoedResponse(t *testing.T, contentType string) *envoyStream {
	t.Helper()
	es := startDuplexFilter(t, Config{}, noSandbox{t}).open(t)
	es.requestHeaders("POST", "/v1/responses", false)
	es.requestBody(plainRequest)
	es.sendResponseHeaders(200, contentType)
	if r := es.recv(); r.GetResponseHeaders() == nil {
		t.Fatalf("answer %v, want the headers response", r)
	}
	return es
}

// TestDuplexEchoPacing: an event stream that is not ours is answered
// chunk by chunk as it arrives (each answer comes before Envoy sends the
// next chunk); a JSON answer, which no client reads before its end, keeps
// its last chunk until Envoy's next message, so the end leaves with it.
func TestDuplexEchoPacing(t *testing.T) {
	t.Run("event stream, live", func(t *testing.T) {
		es := echoedResponse(t, "text/event-stream; charset=utf-8")
		for _, ev := range []string{"event: a\ndata: {}\n\n", "event: b\ndata: {}\n\n"} {
			es.sendBody([]byte(ev), false)
			sr := es.recv().GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
			if string(sr.GetBody()) != ev || sr.GetEndOfStream() {
				t.Fatalf("answer %v, want %q at once", sr, ev)
			}
		}
		es.sendBody(nil, true)
		if end := es.readBody(); end.chunks != 1 || len(end.body) != 0 {
			t.Errorf("end: %d chunks, %q; want one empty closing chunk", end.chunks, end.body)
		}
		es.expectEnd()
	})
	for _, tc := range []struct {
		name     string
		trailers bool
	}{{"JSON, last chunk with the end", false}, {"JSON with trailers", true}} {
		t.Run(tc.name, func(t *testing.T) {
			es := echoedResponse(t, "application/json")
			es.sendBody([]byte(`{"a":`), false)
			es.sendBody([]byte(`1}`), false)
			if tc.trailers {
				es.sendTrailers()
			} else {
				es.sendBody(nil, true)
			}
			end := es.readBody()
			if string(end.body) != `{"a":1}` || end.trailers != tc.trailers {
				t.Fatalf("echoed %q (trailers %v)", end.body, end.trailers)
			}
			if want := 2; end.chunks != want {
				t.Errorf("%d body answers, want %d (the last with the end)", end.chunks, want)
			}
			es.expectEnd()
		})
	}
}

// An intercepted non-streaming request in duplex mode: the headers answer
// is withheld until the whole body is in, then carries the result's
// headers; the body follows in chunks.
func TestDuplexBuffered(t *testing.T) {
	for _, trailers := range []bool{false, true} {
		t.Run("trailers="+strconv.FormatBool(trailers), func(t *testing.T) {
			e := startDuplexFilter(t, Config{}, sandboxtest.New(t), modelTurn("resp_2", messageItem("The answer is 42.")))
			es := e.open(t)
			es.requestHeaders("POST", "/v1/responses", false, "authorization", "Bearer k")
			r := es.requestBody(strings.ReplaceAll(ciRequest, "STREAM", "false"))
			if nb := r.GetRequestBody().GetResponse().GetBodyMutation().GetBody(); gjson.GetBytes(nb, "stream").Type != gjson.False {
				t.Fatalf("upstream body %s: a non-streaming client's request must not ask for a stream", nb)
			}
			es.sendResponseHeaders(200, "application/json")
			first := modelTurn("resp_1", callItem("call_a", "print(6*7)"))
			es.sendBody([]byte(first[:40]), false)
			es.sendBody([]byte(first[40:]), false)
			if trailers {
				es.sendTrailers()
			} else {
				es.sendBody(nil, true)
			}
			h := es.recv()
			if h.GetResponseHeaders() == nil {
				t.Fatalf("first answer %v, want the (withheld) headers response", h)
			}
			set := setHeaders(h.GetResponseHeaders().GetResponse().GetHeaderMutation())
			end := es.readBody()
			if set["content-type"] != interceptor.ContentTypeJSON || set["content-length"] != strconv.Itoa(len(end.body)) {
				t.Errorf("headers %v for a %d-byte JSON answer", set, len(end.body))
			}
			if !bytes.Contains(end.body, []byte(`"type":"code_interpreter_call"`)) || !bytes.Contains(end.body, []byte(`42\n`)) {
				t.Errorf("answer lacks the call or its output:\n%s", end.body)
			}
			if end.trailers != trailers {
				t.Errorf("ended by trailers %v, want %v", end.trailers, trailers)
			}
			es.expectEnd()
			waitOutcome(t, e, OutcomeCompleted, 1)
		})
	}
}

// An intercepted stream, live: the headers answer comes before any body
// was sent, each upstream event is answered before the next is sent, and
// the run's follow-up streams too.
func TestDuplexLive(t *testing.T) {
	second := string(sse.EventStream([]byte(modelTurn("resp_2", messageItem("The answer is 42."))), false))
	e := startDuplexFilter(t, Config{}, sandboxtest.New(t), second)
	es := e.open(t)
	es.requestHeaders("POST", "/v1/responses", false, "authorization", "Bearer k")
	r := es.requestBody(strings.ReplaceAll(ciRequest, "STREAM", "true"))
	if nb := r.GetRequestBody().GetResponse().GetBodyMutation().GetBody(); gjson.GetBytes(nb, "stream").Type != gjson.True {
		t.Fatalf("upstream body %s: a live stream asks the upstream for one", nb)
	}
	es.sendResponseHeaders(200, "text/event-stream")
	h := es.recv() // before any body chunk: the headers answer is not withheld
	mut := h.GetResponseHeaders().GetResponse().GetHeaderMutation()
	if h.GetResponseHeaders() == nil || setHeaders(mut)["content-type"] != interceptor.ContentTypeSSE || !slices.Contains(mut.GetRemoveHeaders(), "content-length") {
		t.Fatalf("answer %v, want the headers response with an SSE content type and no content-length", h)
	}
	first := sse.EventStream([]byte(modelTurn("resp_1", callItem("call_a", "print(\"a\\tb\", 6*7)"))), false)
	events := strings.SplitAfter(string(first), "\n\n")

	// A reader collects the answers; gates hold the next upstream event
	// until the client side has what a live server sends for the last one.
	chunks := make(chan []byte, 256)
	ended := make(chan duplexEnd, 1)
	go func() {
		for {
			r, err := es.s.Recv()
			if err != nil {
				close(chunks)
				return
			}
			sr := r.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
			if sr == nil {
				t.Errorf("answer %v, want a streamed_response chunk", r)
				close(chunks)
				return
			}
			if len(sr.GetBody()) > maxChunk {
				t.Errorf("streamed_response of %d bytes", len(sr.GetBody()))
			}
			chunks <- sr.GetBody()
			if sr.GetEndOfStream() {
				ended <- duplexEnd{}
				close(chunks)
				return
			}
		}
	}()
	var got []byte
	waitFor := func(what string) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for !strings.Contains(string(got), what) {
			select {
			case c, ok := <-chunks:
				if !ok {
					t.Fatalf("the stream ended before %q arrived", what)
				}
				got = append(got, c...)
			case <-deadline:
				t.Fatalf("the client never got %q while the upstream held its next event: the stream is not live", what)
			}
		}
	}
	codeSeen := false
	for _, ev := range events {
		if ev == "" {
			continue
		}
		cut := len(ev) / 2 // each event in two pieces, cut inside it
		es.sendBody([]byte(ev[:cut]), false)
		es.sendBody([]byte(ev[cut:]), false)
		switch {
		case strings.HasPrefix(ev, "event: response.created"):
			waitFor("event: response.created")
		case strings.HasPrefix(ev, "event: response.output_item.added"):
			waitFor("event: response.code_interpreter_call.in_progress")
		case !codeSeen && strings.HasPrefix(ev, "event: response.function_call_arguments.delta") && strings.Contains(ev, "print"):
			waitFor("event: response.code_interpreter_call_code.delta")
			codeSeen = true
		}
	}
	es.sendBody(nil, true)
	waitFor("event: response.completed")
	select {
	case <-ended:
	case <-time.After(20 * time.Second):
		t.Fatal("no end_of_stream chunk after the stream's end")
	}
	for c := range chunks {
		got = append(got, c...)
	}
	es.sendBody(nil, true) // a repeated end of stream: ignored
	es.expectEnd()

	stream := string(got)
	for _, want := range []string{"event: response.created", "event: response.code_interpreter_call.in_progress",
		"event: response.code_interpreter_call_code.delta", "event: response.code_interpreter_call.interpreting",
		"event: response.code_interpreter_call.completed", "event: response.output_text.delta", "event: response.completed"} {
		if !strings.Contains(stream, want) {
			t.Errorf("client stream lacks %q", want)
		}
	}
	if strings.Contains(stream, "function_call_arguments") || strings.Count(stream, "event: response.created") != 1 {
		t.Errorf("client stream shows our function's events or a second response.created:\n%s", stream)
	}
	if !strings.Contains(stream, `a\tb 42`) {
		t.Errorf("client stream lacks the run's output:\n%s", stream)
	}
	fu := e.up.all()
	if len(fu) != 1 || gjson.GetBytes(fu[0].body, "stream").Type != gjson.True {
		t.Fatalf("follow-ups %d, want one asking for a stream", len(fu))
	}
	waitOutcome(t, e, OutcomeCompleted, 1)
}

// A gzip-encoded upstream stream (some servers compress unasked) is
// decoded as it arrives; a broken one ends the client's stream with an
// error event, never a silent empty body.
func TestDuplexLiveGzip(t *testing.T) {
	for _, broken := range []bool{false, true} {
		t.Run("broken="+strconv.FormatBool(broken), func(t *testing.T) {
			e := startDuplexFilter(t, Config{}, noSandbox{t})
			es := e.open(t)
			es.requestHeaders("POST", "/v1/responses", false)
			es.requestBody(strings.ReplaceAll(ciRequest, "STREAM", "true"))
			es.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
				Headers: hdrs(":status", "200", "content-type", "text/event-stream", "content-encoding", "gzip")}}})
			if r := es.recv(); !slices.Contains(r.GetResponseHeaders().GetResponse().GetHeaderMutation().GetRemoveHeaders(), "content-encoding") {
				t.Fatalf("headers answer %v must remove content-encoding", r)
			}
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			_, _ = zw.Write(sse.EventStream([]byte(modelTurn("resp_1", messageItem("no code needed"))), false))
			zw.Close()
			data := buf.Bytes()
			if broken {
				data = []byte("not gzip at all")
			}
			es.sendBody(data, false)
			es.sendBody(nil, true)
			got := string(es.readBody().body)
			want := []string{"event: response.completed", "no code needed"}
			if broken {
				want = []string{"event: error", "upstream_unavailable"} // nothing announced yet: no response.failed
			}
			for _, w := range want {
				if !strings.Contains(got, w) {
					t.Errorf("client stream lacks %q:\n%s", w, got)
				}
			}
			es.expectEnd()
		})
	}
}
