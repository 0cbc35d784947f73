package devproxy

import (
	"google.golang.org/grpc/metadata"

	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// This file is the exchange's side of the ext_proc stream: one message
// sent and its answer awaited, failures, the stream's open and close, and
// the processing mode an answer may override.

// call sends one message and waits for its one response (outside
// FULL_DUPLEX_STREAMED every message gets exactly one). It
// returns the response to apply; (nil, true) when processing has ended and
// the exchange goes on unprocessed; (nil, false) when the client already
// has its reply or is gone.
func (ex *exchange) call(ctx context.Context, req *extprocv3.ProcessingRequest, want msgKind) (*extprocv3.ProcessingResponse, bool) {
	if err := ex.open(ctx); err != nil {
		st := status.Convert(err)
		return ex.failure(ctx, ex.p.cfg.StatusOnError, fmt.Sprintf("ext_proc_error_gRPC_error_%d{%s}", st.Code(), st.Message()))
	}
	ex.send(req)

	timer := time.NewTimer(ex.p.messageTimeout())
	defer timer.Stop()
	overridden := false
	for {
		select {
		case <-ctx.Done():
			return nil, false
		case <-timer.C:
			// A message timeout is always 504, whatever status_on_error
			// says.
			return ex.failure(ctx, http.StatusGatewayTimeout, "ext_proc_error_per-message_timeout_exceeded")
		case m := <-ex.recv:
			if m.err != nil {
				if contextDone(ctx) {
					return nil, false
				}
				if errors.Is(m.err, io.EOF) {
					// An OK close; the pending message counts as unmodified.
					ex.complete = true
					ex.closeStream()
					return nil, true
				}
				st := status.Convert(m.err)
				return ex.failure(ctx, ex.p.cfg.StatusOnError, fmt.Sprintf("ext_proc_error_gRPC_error_%d{%s}", st.Code(), st.Message()))
			}
			resp := m.resp
			if d := resp.GetOverrideMessageTimeout(); d != nil {
				// override_message_timeout: restart the timer once per
				// message, within [1ms, max_message_timeout];
				// every other field of this response is ignored.
				v := d.AsDuration()
				if !overridden && ex.p.cfg.MaxMessageTimeout > 0 && v >= time.Millisecond && v <= ex.p.cfg.MaxMessageTimeout {
					overridden = true
					timer.Reset(v)
				} else {
					ex.p.log.Debug("override_message_timeout ignored", zap.Duration("value", v), zap.Bool("already_overridden", overridden))
				}
				continue
			}
			if ir, ok := resp.GetResponse().(*extprocv3.ProcessingResponse_ImmediateResponse); ok {
				ex.immediate(ir.ImmediateResponse)
				return nil, false
			}
			if responseKind(resp) != want {
				return ex.failure(ctx, ex.p.cfg.StatusOnError, "spurious_message")
			}
			return resp, true
		}
	}
}

// failure is a stream failure: fail-closed → local reply with status,
// fail-open → close the stream and go on unprocessed.
func (ex *exchange) failure(ctx context.Context, st int, details string) (*extprocv3.ProcessingResponse, bool) {
	ex.complete = true
	ex.closeStream()
	if ex.p.cfg.FailureModeAllow {
		ex.p.log.Info("ext_proc failure, continuing unprocessed (failure_mode_allow)", zap.String("details", details))
		return nil, true
	}
	if contextDone(ctx) {
		return nil, false
	}
	ex.localReply(st, "", details)
	return nil, false
}

// send sends one message with what every message carries; a failed Send
// means the stream is over, and Recv reports how it ended.
func (ex *exchange) send(req *extprocv3.ProcessingRequest) {
	req.MetadataContext = &corev3.Metadata{}
	if !ex.sent {
		req.ProtocolConfig = &extprocv3.ProtocolConfiguration{ // the first message only
			RequestBodyMode:  ex.mode.GetRequestBodyMode(),
			ResponseBodyMode: ex.mode.GetResponseBodyMode(),
		}
		ex.sent = true
	}
	_ = ex.stream.Send(req)
}

func (ex *exchange) open(ctx context.Context) error {
	if ex.stream != nil {
		return nil
	}
	sctx, cancel := context.WithCancel(ctx)
	// Envoy with tracing on sends its span's context to the ext_proc server
	// in the gRPC call's metadata; here the client's own, when it sent one.
	if tp := ex.r.Header.Get("traceparent"); tp != "" {
		md := metadata.Pairs("traceparent", tp)
		if ts := ex.r.Header.Get("tracestate"); ts != "" {
			md.Append("tracestate", ts)
		}
		sctx = metadata.NewOutgoingContext(sctx, md)
	}
	s, err := ex.p.cfg.Processor.Process(sctx)
	if err != nil {
		cancel()
		return err
	}
	ex.stream, ex.cancel = s, cancel
	recv := make(chan recvResult, 4)
	ex.recv = recv
	go func() {
		for {
			resp, err := s.Recv()
			select {
			case recv <- recvResult{resp, err}:
			case <-sctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return nil
}

// closeStream half-closes and resets the stream, as Envoy does when
// neither direction needs more messages.
func (ex *exchange) closeStream() {
	if ex.stream == nil || ex.closed {
		return
	}
	ex.closed = true
	_ = ex.stream.CloseSend()
	ex.cancel()
}

// applyModeOverride applies a mode_override as Envoy does: merged over the
// filter-level mode, an unset body mode meaning NONE, request_header_mode
// without effect.
func (ex *exchange) applyModeOverride(o *filterv3.ProcessingMode) bool {
	if o == nil || !ex.p.cfg.AllowModeOverride || filterLevelDuplex(ex.p.mode) {
		return true
	}
	merged := proto.Clone(ex.p.mode).(*filterv3.ProcessingMode)
	if o.GetResponseHeaderMode() != filterv3.ProcessingMode_DEFAULT {
		merged.ResponseHeaderMode = o.GetResponseHeaderMode()
	}
	merged.RequestBodyMode = o.GetRequestBodyMode()
	merged.ResponseBodyMode = o.GetResponseBodyMode()
	if o.GetRequestTrailerMode() != filterv3.ProcessingMode_DEFAULT {
		merged.RequestTrailerMode = o.GetRequestTrailerMode()
	}
	if o.GetResponseTrailerMode() != filterv3.ProcessingMode_DEFAULT {
		merged.ResponseTrailerMode = o.GetResponseTrailerMode()
	}
	if allowed := ex.p.cfg.AllowedOverrideModes; len(allowed) > 0 {
		match := false
		for _, a := range allowed {
			if a.GetResponseHeaderMode() == merged.GetResponseHeaderMode() &&
				a.GetRequestBodyMode() == merged.GetRequestBodyMode() &&
				a.GetResponseBodyMode() == merged.GetResponseBodyMode() &&
				a.GetRequestTrailerMode() == merged.GetRequestTrailerMode() &&
				a.GetResponseTrailerMode() == merged.GetResponseTrailerMode() {
				match = true
				break
			}
		}
		if !match {
			ex.p.log.Debug("mode_override not in allowed_override_modes; ignored")
			return true
		}
	}
	if err := supportedMode(merged); err != nil {
		// Envoy would switch modes; this emulation cannot, so it says so.
		ex.p.log.Error("mode_override asks for a mode devproxy does not emulate", zap.Error(err))
		ex.complete = true
		ex.closeStream()
		ex.localReply(ex.p.cfg.StatusOnError, "", "devproxy_unsupported_mode_override")
		return false
	}
	ex.mode = merged
	return true
}
