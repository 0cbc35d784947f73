package devproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/status"
)

// DefaultStreamIdleTimeout is the HCM's stream_idle_timeout default: in
// FULL_DUPLEX_STREAMED it is the only timer that runs.
const DefaultStreamIdleTimeout = 5 * time.Minute

// checkDuplex is Envoy's config-time rule (config.cc): a direction
// whose body mode is FULL_DUPLEX_STREAMED must have its trailer mode SEND,
// or the filter configuration is rejected.
func checkDuplex(m *filterv3.ProcessingMode) error {
	if m.GetRequestBodyMode() == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED && m.GetRequestTrailerMode() != filterv3.ProcessingMode_SEND {
		return errors.New("request_body_mode FULL_DUPLEX_STREAMED requires request_trailer_mode SEND")
	}
	if m.GetResponseBodyMode() == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED && m.GetResponseTrailerMode() != filterv3.ProcessingMode_SEND {
		return errors.New("response_body_mode FULL_DUPLEX_STREAMED requires response_trailer_mode SEND")
	}
	return nil
}

// filterLevelDuplex reports a filter-level FULL_DUPLEX_STREAMED body mode,
// which makes Envoy ignore every mode_override (ext_proc.cc
// onReceiveMessage).
func filterLevelDuplex(m *filterv3.ProcessingMode) bool {
	return m.GetRequestBodyMode() == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED ||
		m.GetResponseBodyMode() == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
}

// pumpEvent is one thing the upstream side of a duplex response did.
type pumpEvent struct {
	eos      bool        // Envoy sent end_of_stream on a body message
	trailers http.Header // Envoy sent the trailers message (real trailers)
	err      error       // the upstream body failed mid-way
}

// duplexResponse is the response half in FULL_DUPLEX_STREAMED: the
// headers message, then every upstream chunk sent the moment it arrives
// without waiting for any answer, then trailers; the answers are applied as
// they come, each streamed_response written and flushed to the client at
// once. There is no message timer, only the stream idle timeout.
func (ex *exchange) duplexResponse(ctx context.Context, respH *headerMap, resp *http.Response, hasBody bool) {
	if err := ex.open(ctx); err != nil {
		st := status.Convert(err)
		ex.failure(ctx, ex.p.cfg.StatusOnError, fmt.Sprintf("ext_proc_error_gRPC_error_%d{%s}", st.Code(), st.Message()))
		return
	}
	send := ex.send
	// The processor sees the original content-length; Envoy strips it
	// afterwards, as in every mode that streams the body, unless
	// allow_content_length_header.
	send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: respH.proto(), EndOfStream: !hasBody},
	}})
	clDrop := !ex.p.cfg.AllowContentLengthHeader
	if clDrop {
		respH.del("content-length")
	}

	// The pump is the only sender after the headers message, so sends
	// never overlap (a gRPC stream's Send is not concurrency-safe).
	events := make(chan pumpEvent, 1)
	pctx, stopPump := context.WithCancel(ctx)
	defer stopPump()
	if hasBody {
		go ex.pump(pctx, resp, send, events)
	}

	idle := time.NewTimer(ex.p.streamIdleTimeout())
	defer idle.Stop()
	headersDone := false
	eosReceived := !hasBody
	var trailers http.Header
	rc := http.NewResponseController(ex.w)
	for {
		select {
		case <-ctx.Done():
			return
		case <-idle.C:
			// The stream idle timeout: the request is complete here, so
			// 504 (408 would be for an incomplete one); a reset once the
			// client has headers.
			ex.complete = true
			ex.closeStream()
			ex.localReply(http.StatusGatewayTimeout, "stream timeout", "stream_idle_timeout")
			return
		case ev := <-events:
			idle.Reset(ex.p.streamIdleTimeout())
			switch {
			case ev.err != nil:
				ex.complete = true
				ex.closeStream()
				if ex.started {
					panic(http.ErrAbortHandler)
				}
				ex.localReply(http.StatusServiceUnavailable, "upstream connect error or disconnect/reset before headers. reset reason: remote reset",
					"upstream_reset_after_response_started{remote_reset}")
				return
			case ev.eos:
				eosReceived = true
			case ev.trailers != nil:
				trailers = ev.trailers
			}
			events = nil // the pump reports once, at its end
		case m := <-ex.recv:
			idle.Reset(ex.p.streamIdleTimeout())
			if m.err != nil {
				if contextDone(ctx) {
					return
				}
				if errors.Is(m.err, io.EOF) {
					// An OK close ends processing; what was already
					// drained to the processor is gone (simplification: the
					// rest is not passed through).
					ex.complete = true
					ex.closeStream()
					if !ex.started {
						ex.writeHead(respH, nil)
					}
					return
				}
				st := status.Convert(m.err)
				ex.duplexFailure(ctx, fmt.Sprintf("ext_proc_error_gRPC_error_%d{%s}", st.Code(), st.Message()))
				return
			}
			pr := m.resp
			if pr.GetOverrideMessageTimeout() != nil {
				continue // no timer runs in this mode, so there is nothing to restart
			}
			switch r := pr.GetResponse().(type) {
			case *extprocv3.ProcessingResponse_ImmediateResponse:
				ex.immediate(r.ImmediateResponse)
				return
			case *extprocv3.ProcessingResponse_ResponseHeaders:
				if headersDone {
					ex.duplexFailure(ctx, "spurious_message")
					return
				}
				headersDone = true
				if _, ok := ex.applyHeadersResponse(respH, r.ResponseHeaders.GetResponse(), clDrop); !ok {
					return
				}
				if clDrop {
					respH.del("content-length")
				}
				if !hasBody {
					ex.writeBuffered(respH, nil, nil)
					return
				}
			case *extprocv3.ProcessingResponse_ResponseBody:
				sr := r.ResponseBody.GetResponse().GetBodyMutation().GetStreamedResponse()
				if !headersDone || sr == nil {
					// A body response before the headers response, or one
					// without streamed_response, is spurious.
					ex.duplexFailure(ctx, "spurious_message")
					return
				}
				// header_mutation is ignored here: in this mode headers change
				// through the headers response only.
				if !ex.started {
					ex.writeHead(respH, nil)
				}
				if len(sr.GetBody()) > 0 {
					if _, err := ex.w.Write(sr.GetBody()); err != nil {
						return
					}
				}
				_ = rc.Flush()
				if sr.GetEndOfStream() {
					if !eosReceived {
						ex.p.log.Debug("streamed_response end_of_stream before Envoy's end of stream")
					}
					ex.complete = true
					return
				}
			case *extprocv3.ProcessingResponse_ResponseTrailers:
				if !headersDone || trailers == nil {
					// Trailers are answered only after Envoy sent real
					// ones; synthesized trailers are unsupported.
					ex.duplexFailure(ctx, "spurious_message")
					return
				}
				m := fromHTTP(trailers)
				res, err := applyMutation(m, r.ResponseTrailers.GetHeaderMutation(), ex.p.cfg.DisallowIsError, false, false)
				ex.p.rejected.Add(int64(res.rejected))
				if err != nil {
					ex.mutationFailed(err)
					return
				}
				if !ex.started {
					ex.writeHead(respH, nil)
				}
				for k, vs := range m.httpHeader() {
					ex.w.Header()[http.TrailerPrefix+k] = vs
				}
				ex.complete = true
				return
			default:
				ex.duplexFailure(ctx, "spurious_message")
				return
			}
		}
	}
}

// duplexFailure is a fail-closed failure in this mode: failure_mode_allow
// does not apply once body bytes went to the processor, and a client
// that already has headers can only be reset.
func (ex *exchange) duplexFailure(ctx context.Context, details string) {
	ex.complete = true
	ex.closeStream()
	if contextDone(ctx) {
		return
	}
	ex.localReply(ex.p.cfg.StatusOnError, "", details)
}

// pump sends each upstream chunk as it is read: drained, never
// kept, no answer awaited. With real trailers the last body message never
// carries end_of_stream and the trailers message follows when the
// trailer mode is SEND.
func (ex *exchange) pump(ctx context.Context, resp *http.Response, send func(*extprocv3.ProcessingRequest), events chan<- pumpEvent) {
	report := func(ev pumpEvent) {
		select {
		case events <- ev:
		case <-ctx.Done():
		}
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if ctx.Err() != nil {
				return
			}
			send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
				ResponseBody: &extprocv3.HttpBody{Body: append([]byte(nil), buf[:n]...)},
			}})
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			report(pumpEvent{err: err})
			return
		}
	}
	if ctx.Err() != nil {
		return
	}
	if t := realTrailers(resp.Trailer); t != nil {
		if ex.mode.GetResponseTrailerMode() == filterv3.ProcessingMode_SEND {
			send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{
				ResponseTrailers: &extprocv3.HttpTrailers{Trailers: fromHTTP(t).proto()},
			}})
			report(pumpEvent{trailers: t})
		}
		// Trailers SKIP: the processor never sees an end of stream.
		return
	}
	send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{EndOfStream: true},
	}})
	if ex.p.cfg.DuplicateEndOfStream {
		send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{EndOfStream: true},
		}})
	}
	report(pumpEvent{eos: true})
}

func (p *Proxy) streamIdleTimeout() time.Duration { return p.cfg.StreamIdleTimeout }

// applyResponseModeOverride is applyModeOverride for the response_headers
// response. A switch to FULL_DUPLEX_STREAMED there is refused: Envoy lets
// the body bytes it held while the headers response was pending go on to
// the client without the processor seeing them (envoyproxy/envoy#40340,
// #44201), which this emulation does not reproduce, so a test notices.
func (ex *exchange) applyResponseModeOverride(o *filterv3.ProcessingMode) bool {
	if o.GetResponseBodyMode() == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED && ex.p.cfg.AllowModeOverride &&
		!filterLevelDuplex(ex.p.mode) && ex.mode.GetResponseBodyMode() != filterv3.ProcessingMode_FULL_DUPLEX_STREAMED {
		ex.p.log.Error("mode_override to FULL_DUPLEX_STREAMED in a response_headers response: Envoy would leak the held body bytes")
		ex.complete = true
		ex.closeStream()
		ex.localReply(ex.p.cfg.StatusOnError, "", "devproxy_unsupported_mode_override")
		return false
	}
	return ex.applyModeOverride(o)
}
