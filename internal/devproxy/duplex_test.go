package devproxy

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// One test per rule of Envoy's FULL_DUPLEX_STREAMED body mode (as read
// from ext_proc.cc, processor_state.cc and Envoy's full-duplex
// integration tests), the response direction switched to duplex by a
// mode_override in the request_headers answer, as codeinterp's server
// does.

// duplexOverride is the override codeinterp sends (filter.DuplexMode).
func duplexOverride() *filterv3.ProcessingMode {
	return &filterv3.ProcessingMode{
		RequestBodyMode:     filterv3.ProcessingMode_BUFFERED,
		ResponseHeaderMode:  filterv3.ProcessingMode_SEND,
		ResponseBodyMode:    filterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
		ResponseTrailerMode: filterv3.ProcessingMode_SEND,
	}
}

func rspHeaders(cr *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{Response: cr}}}
}

func streamed(body string, eos bool) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{
		Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
			StreamedResponse: &extprocv3.StreamedBodyResponse{Body: []byte(body), EndOfStream: eos}}}}}}}
}

// duplexPrelude answers request_headers with the duplex override and the
// request body unchanged (GET requests have none), then reads the response
// headers message.
func duplexPrelude(s extprocv3.ExternalProcessor_ProcessServer, withBody bool) (*extprocv3.ProcessingRequest, error) {
	if _, err := recvKind(s, kindRequestHeaders, nil); err != nil {
		return nil, err
	}
	if err := s.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{}},
		ModeOverride: duplexOverride()}); err != nil {
		return nil, err
	}
	if withBody {
		if _, err := recvKind(s, kindRequestBody, nil); err != nil {
			return nil, err
		}
		if err := s.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{}}}); err != nil {
			return nil, err
		}
	}
	return recvKind(s, kindResponseHeaders, nil)
}

// chunkedUpstream sends parts one by one, flushed, each after its gate
// (nil: at once), then the given trailers.
func chunkedUpstream(parts []string, gates []chan struct{}, trailers map[string]string) func(http.ResponseWriter, *http.Request, []byte) {
	return func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		for k := range trailers {
			w.Header().Add("Trailer", k)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		rc := http.NewResponseController(w)
		for i, p := range parts {
			if i < len(gates) && gates[i] != nil {
				<-gates[i]
			}
			_, _ = io.WriteString(w, p)
			_ = rc.Flush()
		}
		for k, v := range trailers {
			w.Header().Set(k, v)
		}
	}
}

func duplexProxy(t *testing.T, up func(http.ResponseWriter, *http.Request, []byte), proc script, edit func(*Config)) (string, *localReplies) {
	t.Helper()
	u, _ := startUpstream(t, up)
	cfg := Config{Upstream: u, Processor: startProc(t, proc), AllowModeOverride: true, MessageTimeout: time.Second}
	if edit != nil {
		edit(&cfg)
	}
	srv, _, lr := startProxy(t, cfg)
	return srv.URL, lr
}

// echoBody answers every body chunk with itself until Envoy's end, then
// ends the body; it returns what it saw.
func echoBody(s extprocv3.ExternalProcessor_ProcessServer) (chunks int, eos int, err error) {
	for {
		req, err := s.Recv()
		if err != nil {
			return chunks, eos, err
		}
		b := req.GetResponseBody()
		if b == nil {
			return chunks, eos, errors.New("not a body message")
		}
		chunks++
		if b.GetEndOfStream() {
			eos++
			return chunks, eos, s.Send(streamed(string(b.GetBody()), true))
		}
		if err := s.Send(streamed(string(b.GetBody()), false)); err != nil {
			return chunks, eos, err
		}
	}
}

// A filter-level duplex mode needs trailer mode SEND, and disables
// mode_override altogether.
func TestDuplexConfigCheck(t *testing.T) {
	u, _ := startUpstream(t, okUpstream("x"))
	bad := &filterv3.ProcessingMode{RequestHeaderMode: filterv3.ProcessingMode_SEND, ResponseHeaderMode: filterv3.ProcessingMode_SEND,
		ResponseBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, ResponseTrailerMode: filterv3.ProcessingMode_SKIP}
	if _, err := New(Config{Upstream: u, ProcessingMode: bad}); err == nil || !strings.Contains(err.Error(), "requires response_trailer_mode SEND") {
		t.Fatalf("New with duplex and trailers SKIP: %v, want the config check", err)
	}

	// Filter-level duplex: a let-go override is ignored, the body still
	// goes to the processor.
	saw := make(chan int, 1)
	good := &filterv3.ProcessingMode{RequestHeaderMode: filterv3.ProcessingMode_SEND, ResponseHeaderMode: filterv3.ProcessingMode_SEND,
		ResponseBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, ResponseTrailerMode: filterv3.ProcessingMode_SEND}
	url, _ := duplexProxy(t, chunkedUpstream([]string{"a", "b"}, nil, nil), func(s extprocv3.ExternalProcessor_ProcessServer) error {
		if _, err := recvKind(s, kindRequestHeaders, nil); err != nil {
			return err
		}
		letGo := &filterv3.ProcessingMode{ResponseHeaderMode: filterv3.ProcessingMode_SKIP}
		if err := s.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{}}, ModeOverride: letGo}); err != nil {
			return err
		}
		if _, err := recvKind(s, kindResponseHeaders, nil); err != nil {
			return err
		}
		if err := s.Send(rspHeaders(nil)); err != nil {
			return err
		}
		n, _, err := echoBody(s)
		saw <- n
		return err
	}, func(c *Config) { c.ProcessingMode = good })
	_, b := fetch(t, url+"/x")
	if string(b) != "ab" || <-saw < 2 {
		t.Fatalf("body %q: the let-go override must be ignored under a filter-level duplex mode", b)
	}
}

// Envoy sends the headers and every chunk without waiting for
// an answer; the processor may withhold its headers answer until the body
// is in, and answers with any number of chunks.
func TestDuplexSendsWithoutWaiting(t *testing.T) {
	url, lr := duplexProxy(t, chunkedUpstream([]string{"one ", "two ", "three"}, nil, nil), func(s extprocv3.ExternalProcessor_ProcessServer) error {
		if _, err := duplexPrelude(s, false); err != nil {
			return err
		}
		var body []byte
		for { // nothing answered yet: every chunk must still arrive
			req, err := recvKind(s, kindResponseBody, nil)
			if err != nil {
				return err
			}
			body = append(body, req.GetResponseBody().GetBody()...)
			if req.GetResponseBody().GetEndOfStream() {
				break
			}
		}
		if err := s.Send(rspHeaders(nil)); err != nil {
			return err
		}
		for _, w := range strings.Fields(string(body)) {
			if err := s.Send(streamed(strings.ToUpper(w), false)); err != nil {
				return err
			}
		}
		return s.Send(streamed("!", true))
	}, nil)
	resp, b := fetch(t, url+"/x")
	if resp.StatusCode != 200 || string(b) != "ONETWOTHREE!" {
		t.Fatalf("%d %q (local replies %v)", resp.StatusCode, b, lr.list())
	}
}

// A body answer before the headers answer, or one without
// streamed_response, is a 500.
func TestDuplexSpuriousAnswers(t *testing.T) {
	cases := []struct {
		name   string
		answer func(s extprocv3.ExternalProcessor_ProcessServer) error
	}{
		{"body before headers", func(s extprocv3.ExternalProcessor_ProcessServer) error {
			return s.Send(streamed("early", false))
		}},
		{"body mutation that is not streamed_response", func(s extprocv3.ExternalProcessor_ProcessServer) error {
			if err := s.Send(rspHeaders(nil)); err != nil {
				return err
			}
			return s.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{
				Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: []byte("whole")}}}}}})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			gate := make(chan struct{})
			defer close(gate)
			url, lr := duplexProxy(t, chunkedUpstream([]string{"a", "b"}, []chan struct{}{nil, gate}, nil), func(s extprocv3.ExternalProcessor_ProcessServer) error {
				if _, err := duplexPrelude(s, false); err != nil {
					return err
				}
				if err := tc.answer(s); err != nil {
					return err
				}
				_, err := s.Recv()
				return err
			}, nil)
			resp, _ := fetch(t, url+"/x")
			if resp.StatusCode != 500 || !containsStr(lr.list(), "spurious_message") {
				t.Fatalf("status %d, local replies %v; want 500 spurious_message", resp.StatusCode, lr.list())
			}
		})
	}
}

// Each streamed_response reaches the client at once (flushed): the
// client reads the first event while the upstream still holds the second.
func TestDuplexForwardsEachChunkAtOnce(t *testing.T) {
	gate := make(chan struct{})
	url, _ := duplexProxy(t, chunkedUpstream([]string{"data: 1\n\n", "data: 2\n\n"}, []chan struct{}{nil, gate}, nil),
		func(s extprocv3.ExternalProcessor_ProcessServer) error {
			if _, err := duplexPrelude(s, false); err != nil {
				return err
			}
			if err := s.Send(rspHeaders(nil)); err != nil {
				return err
			}
			_, _, err := echoBody(s)
			return err
		}, nil)
	resp, err := http.Get(url + "/x")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "data: 1\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	close(gate) // only now may the upstream send the second event
	rest, _ := io.ReadAll(br)
	if string(rest) != "\ndata: 2\n\n" {
		t.Fatalf("rest %q", rest)
	}
}

// end_of_stream from the processor ends the client's body; with
// DuplicateEndOfStream Envoy re-delivers its final chunk, as 1.35–1.37 do
// for large bodies (envoyproxy/envoy#46237).
func TestDuplexEndOfStream(t *testing.T) {
	eosSeen := make(chan int, 1)
	url, _ := duplexProxy(t, chunkedUpstream([]string{"x", "y"}, nil, nil), func(s extprocv3.ExternalProcessor_ProcessServer) error {
		if _, err := duplexPrelude(s, false); err != nil {
			return err
		}
		if err := s.Send(rspHeaders(nil)); err != nil {
			return err
		}
		_, eos, err := echoBody(s)
		if err != nil {
			return err
		}
		req, err := s.Recv() // the repeated end of stream
		if err == nil && req.GetResponseBody().GetEndOfStream() {
			eos++
		}
		eosSeen <- eos
		return nil
	}, func(c *Config) { c.DuplicateEndOfStream = true })
	_, b := fetch(t, url+"/x")
	if string(b) != "xy" {
		t.Fatalf("body %q", b)
	}
	if n := <-eosSeen; n != 2 {
		t.Fatalf("processor saw %d end-of-stream chunks, want 2 (the emulated re-delivery)", n)
	}
}

// With upstream trailers the body never carries end_of_stream; the
// trailers message follows and a TrailersResponse ends the body.
func TestDuplexTrailers(t *testing.T) {
	url, _ := duplexProxy(t, chunkedUpstream([]string{"p", "q"}, nil, map[string]string{"X-Checksum": "abc"}), func(s extprocv3.ExternalProcessor_ProcessServer) error {
		if _, err := duplexPrelude(s, false); err != nil {
			return err
		}
		if err := s.Send(rspHeaders(nil)); err != nil {
			return err
		}
		for {
			req, err := s.Recv()
			if err != nil {
				return err
			}
			if b := req.GetResponseBody(); b != nil {
				if b.GetEndOfStream() {
					return errors.New("end_of_stream on a body with trailers")
				}
				if err := s.Send(streamed(string(b.GetBody()), false)); err != nil {
					return err
				}
				continue
			}
			if req.GetResponseTrailers() == nil {
				return errors.New("want trailers")
			}
			return s.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{
				HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: setHV("x-checksum", "def")}}}})
		}
	}, nil)
	resp, b := fetch(t, url+"/x")
	if string(b) != "pq" || resp.Trailer.Get("X-Checksum") != "def" {
		t.Fatalf("body %q trailers %v", b, resp.Trailer)
	}
}

// Headers change through the HeadersResponse only; content-length is
// dropped unless allow_content_length_header.
func TestDuplexHeaders(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(map[bool]string{false: "content-length dropped", true: "allow_content_length_header"}[keep], func(t *testing.T) {
			url, _ := duplexProxy(t, okUpstream("hello"), func(s extprocv3.ExternalProcessor_ProcessServer) error {
				h, err := duplexPrelude(s, false)
				if err != nil {
					return err
				}
				if v, _ := headerValue(h.GetResponseHeaders().GetHeaders(), "content-length"); v != "5" {
					return errors.New("the processor must see the original content-length")
				}
				if err := s.Send(rspHeaders(&extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: setHV("x-from-headers", "1")}})); err != nil {
					return err
				}
				for {
					req, err := s.Recv()
					if err != nil {
						return err
					}
					b := req.GetResponseBody()
					r := streamed(string(b.GetBody()), b.GetEndOfStream())
					r.GetResponseBody().Response.HeaderMutation = &extprocv3.HeaderMutation{SetHeaders: setHV("x-from-body", "1")}
					if err := s.Send(r); err != nil || b.GetEndOfStream() {
						return err
					}
				}
			}, func(c *Config) { c.AllowContentLengthHeader = keep })
			resp, b := fetch(t, url+"/x")
			if string(b) != "hello" || resp.Header.Get("X-From-Headers") != "1" || resp.Header.Get("X-From-Body") != "" {
				t.Fatalf("body %q headers %v", b, resp.Header)
			}
			if got := resp.ContentLength; (got == 5) != keep {
				t.Fatalf("content length %d with allow_content_length_header=%v", got, keep)
			}
		})
	}
}

// No message timer runs, only the stream idle timeout: a
// slow answer within it is fine; silence past it is 504, or a reset once
// the client has headers.
func TestDuplexTimers(t *testing.T) {
	t.Run("slow answer past message_timeout", func(t *testing.T) {
		url, lr := duplexProxy(t, okUpstream("ok"), func(s extprocv3.ExternalProcessor_ProcessServer) error {
			if _, err := duplexPrelude(s, false); err != nil {
				return err
			}
			time.Sleep(300 * time.Millisecond) // 6× the message timeout
			if err := s.Send(rspHeaders(nil)); err != nil {
				return err
			}
			_, _, err := echoBody(s)
			return err
		}, func(c *Config) { c.MessageTimeout = 50 * time.Millisecond })
		resp, b := fetch(t, url+"/x")
		if resp.StatusCode != 200 || string(b) != "ok" {
			t.Fatalf("%d %q, local replies %v: no message timer may run in duplex mode", resp.StatusCode, b, lr.list())
		}
	})
	t.Run("idle before headers", func(t *testing.T) {
		url, lr := duplexProxy(t, okUpstream("ok"), func(s extprocv3.ExternalProcessor_ProcessServer) error {
			if _, err := duplexPrelude(s, false); err != nil {
				return err
			}
			<-s.Context().Done()
			return nil
		}, func(c *Config) { c.StreamIdleTimeout = 200 * time.Millisecond })
		resp, _ := fetch(t, url+"/x")
		if resp.StatusCode != 504 || !containsStr(lr.list(), "stream_idle_timeout") {
			t.Fatalf("status %d, local replies %v; want 504 stream_idle_timeout", resp.StatusCode, lr.list())
		}
	})
	t.Run("idle after headers", func(t *testing.T) {
		url, _ := duplexProxy(t, okUpstream("ok"), func(s extprocv3.ExternalProcessor_ProcessServer) error {
			if _, err := duplexPrelude(s, false); err != nil {
				return err
			}
			if err := s.Send(rspHeaders(nil)); err != nil {
				return err
			}
			if err := s.Send(streamed("partial", false)); err != nil {
				return err
			}
			<-s.Context().Done()
			return nil
		}, func(c *Config) { c.StreamIdleTimeout = 200 * time.Millisecond })
		resp, err := http.Get(url + "/x")
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || err == nil {
			t.Fatalf("status %d, body %q, read error %v; want the started response reset", resp.StatusCode, b, err)
		}
	})
}

// A switch to duplex in the response_headers answer is refused: Envoy would
// let the body bytes it held meanwhile reach the client unseen (#40340).
func TestDuplexOverrideAtResponseHeadersRefused(t *testing.T) {
	url, lr := duplexProxy(t, okUpstream("ok"), func(s extprocv3.ExternalProcessor_ProcessServer) error {
		if _, err := recvKind(s, kindRequestHeaders, nil); err != nil {
			return err
		}
		if err := s.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{}}}); err != nil {
			return err
		}
		if _, err := recvKind(s, kindResponseHeaders, nil); err != nil {
			return err
		}
		if err := s.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}},
			ModeOverride: duplexOverride()}); err != nil {
			return err
		}
		_, err := s.Recv()
		return err
	}, nil)
	resp, _ := fetch(t, url+"/x")
	if resp.StatusCode != 500 || !containsStr(lr.list(), "devproxy_unsupported_mode_override") {
		t.Fatalf("status %d, local replies %v", resp.StatusCode, lr.list())
	}
}

func containsStr(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func setHV(key, value string) []*corev3.HeaderValueOption {
	return []*corev3.HeaderValueOption{setRaw(key, value)}
}

// fetch GETs u and reads the whole body; a transport error fails t.
func fetch(t *testing.T, u string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}
