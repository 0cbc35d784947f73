package filter

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/tidwall/gjson"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
)

// This file traces the filter's part (package telemetry): a span per
// selected /v1/responses stream, continuing the trace Envoy passes (gRPC
// metadata) or the client's own traceparent, its context sent on to the
// model server with the first request (a header mutation) and with every
// follow-up; and a GenAI chat span per model round the server makes.

// metadataCarrier reads gRPC metadata as a TextMapCarrier.
type metadataCarrier metadata.MD

func (c metadataCarrier) Get(k string) string {
	if v := metadata.MD(c).Get(k); len(v) > 0 {
		return v[0]
	}
	return ""
}
func (c metadataCarrier) Set(k, v string) { metadata.MD(c).Set(k, v) }
func (c metadataCarrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}

// headerValues reads Envoy's request headers as a TextMapCarrier.
type headerValues []*corev3.HeaderValue

func (h headerValues) Get(k string) string {
	for _, hv := range h {
		if strings.EqualFold(hv.GetKey(), k) {
			return headerValue(hv)
		}
	}
	return ""
}
func (h headerValues) Set(string, string) {}
func (h headerValues) Keys() []string {
	out := make([]string, 0, len(h))
	for _, hv := range h {
		out = append(out, hv.GetKey())
	}
	return out
}

// startSpan opens the stream's span once its request is selected: the
// parent is Envoy's trace (gRPC metadata), else the request's traceparent.
func (st *streamState) startSpan(ctx context.Context) {
	t := st.s.tel
	if !t.Enabled {
		return
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		ctx = t.Propagator.Extract(ctx, metadataCarrier(md))
	}
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = t.Propagator.Extract(ctx, headerValues(st.reqHdr))
	}
	_, st.span = st.s.tracer.Start(ctx, st.method+" "+st.path, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", st.method), attribute.String("url.path", st.path),
			attribute.String("codeinterp.request_id", st.requestID)))
}

// withSpan is ctx carrying the stream's span (ctx itself without one).
func (st *streamState) withSpan(ctx context.Context) context.Context {
	if st.span == nil {
		return ctx
	}
	return trace.ContextWithSpan(ctx, st.span)
}

// endSpan closes the stream's span with its outcome.
func (st *streamState) endSpan(err error) {
	if st.span == nil {
		return
	}
	st.span.SetAttributes(attribute.String("codeinterp.outcome", string(st.outcome)))
	if st.result != nil {
		st.span.SetAttributes(attribute.Int("http.response.status_code", st.result.Status),
			attribute.Int("codeinterp.rounds", st.result.Rounds), attribute.Int("codeinterp.tool_calls", st.result.ToolCalls))
	}
	if err != nil || st.outcome == OutcomeError || st.outcome == OutcomeUpstreamError {
		st.span.SetStatus(codes.Error, string(st.outcome))
	}
	st.span.End()
}

// traceHeader is the traceparent (and tracestate) of the stream's span for
// the request Envoy sends on to the model server, so that its spans join.
func (st *streamState) traceHeader() map[string]string {
	if st.span == nil {
		return nil
	}
	c := propagation.MapCarrier{}
	st.s.tel.Propagator.Inject(trace.ContextWithSpan(context.Background(), st.span), c)
	return c
}

// chatSpan opens the GenAI chat span of one model round the server makes,
// and puts its context in h for the model server.
func (u *httpUpstream) chatSpan(ctx context.Context, body []byte, h http.Header) (context.Context, trace.Span) {
	if u.tel == nil || !u.tel.Enabled {
		return ctx, nil
	}
	model := gjson.GetBytes(body, "model").Str
	ctx, span := u.tracer.Start(ctx, "chat "+model, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "chat"),
		attribute.String("gen_ai.provider.name", "openai"),
		attribute.String("gen_ai.request.model", model),
		attribute.String("server.address", u.host),
	))
	u.tel.Propagator.Inject(ctx, propagation.HeaderCarrier(h))
	return ctx, span
}

// endChat closes a chat span with what the answer (a Response object, or
// nil) says: its id, model, token usage and finish reason.
func endChat(span trace.Span, status int, resp []byte, err error) {
	if span == nil {
		return
	}
	if status != 0 {
		span.SetAttributes(attribute.Int("http.response.status_code", status))
	}
	r := gjson.ParseBytes(resp)
	if id := r.Get("id").Str; id != "" {
		span.SetAttributes(attribute.String("gen_ai.response.id", id), attribute.String("gen_ai.response.model", r.Get("model").Str))
	}
	if u := r.Get("usage"); u.Exists() {
		span.SetAttributes(attribute.Int64("gen_ai.usage.input_tokens", u.Get("input_tokens").Int()),
			attribute.Int64("gen_ai.usage.output_tokens", u.Get("output_tokens").Int()))
	}
	if st := r.Get("status").Str; st != "" {
		reason := st
		if ir := r.Get("incomplete_details.reason").Str; ir != "" {
			reason = ir
		}
		span.SetAttributes(attribute.StringSlice("gen_ai.response.finish_reasons", []string{reason}))
	}
	if err != nil || status >= 400 {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
	span.End()
}

// tracedBody ends a streamed round's chat span when the body is closed,
// with the last response.completed (or failed, incomplete) event's object.
type tracedBody struct {
	io.ReadCloser
	span   trace.Span
	status int
	line   []byte
	last   []byte
}

func (b *tracedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	for rest := p[:n]; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			b.keep(rest)
			break
		}
		b.keep(rest[:i])
		if d, ok := bytes.CutPrefix(b.line, []byte("data: ")); ok && gjson.GetBytes(d, "response.id").Exists() {
			b.last = append(b.last[:0], gjson.GetBytes(d, "response").Raw...)
		}
		b.line, rest = b.line[:0], rest[i+1:]
	}
	return n, err
}

// keep adds part of the current line (bounded: an event is far smaller).
func (b *tracedBody) keep(part []byte) {
	if room := 1<<20 - len(b.line); room > 0 {
		b.line = append(b.line, part[:min(len(part), room)]...)
	}
}

func (b *tracedBody) Close() error {
	err := b.ReadCloser.Close()
	endChat(b.span, b.status, b.last, nil)
	return err
}
