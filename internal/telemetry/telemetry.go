package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Config is the telemetry section of the configuration.
type Config struct {
	// Tracing turns tracing on (as OTEL_TRACES_EXPORTER=otlp does).
	Tracing bool
	// CaptureContent puts the code and its output on the run spans.
	CaptureContent bool
	// Version is this build's, for service.version.
	Version string
}

// Telemetry is what the parts of the server trace with.
type Telemetry struct {
	// Provider makes tracers; a no-op one when tracing is off.
	Provider trace.TracerProvider
	// Propagator reads and writes traceparent (W3C Trace Context and
	// Baggage).
	Propagator propagation.TextMapPropagator
	// CaptureContent: see Config.
	CaptureContent bool
	// Enabled reports tracing is on.
	Enabled bool

	shutdown func(context.Context) error
}

// Off is telemetry with tracing off: every span a no-op.
func Off() *Telemetry {
	return &Telemetry{Provider: noop.NewTracerProvider(), Propagator: propagator(), shutdown: func(context.Context) error { return nil }}
}

func propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// Setup returns the process's telemetry, configured by cfg and the
// process's OTEL_* environment (which the SDK's exporters read too).
func Setup(ctx context.Context, cfg Config) (*Telemetry, error) {
	env := func(k string) string { return strings.TrimSpace(os.Getenv(k)) }
	switch exp := env("OTEL_TRACES_EXPORTER"); exp {
	case "":
		if !cfg.Tracing {
			return Off(), nil
		}
	case "none":
		return Off(), nil
	case "otlp":
	default:
		return nil, fmt.Errorf("telemetry: OTEL_TRACES_EXPORTER=%q: only otlp and none are supported", exp)
	}
	protocol := env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = env("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var exp *otlptrace.Exporter
	var err error
	switch protocol {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("telemetry: OTEL_EXPORTER_OTLP_PROTOCOL=%q: want grpc or http/protobuf", protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: the OTLP exporter: %w", err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", "codeinterp")}
	if cfg.Version != "" {
		attrs = append(attrs, attribute.String("service.version", cfg.Version))
	}
	// The environment's service.name (OTEL_SERVICE_NAME) wins over ours.
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	// The SDK reads OTEL_TRACES_SAMPLER itself.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Telemetry{Provider: tp, Propagator: propagator(), CaptureContent: cfg.CaptureContent, Enabled: true, shutdown: tp.Shutdown}, nil
}

// Shutdown flushes the spans not yet exported.
func (t *Telemetry) Shutdown(ctx context.Context) error { return t.shutdown(ctx) }

// Tracer is the tracer of one part of the server (its package path).
func (t *Telemetry) Tracer(name string) trace.Tracer {
	return t.Provider.Tracer("github.com/codeinterp/codeinterp/" + name)
}

// The attributes codeinterp sets beyond the GenAI conventions'.
const (
	AttrContainerID = attribute.Key("codeinterp.container.id")
	AttrProvider    = attribute.Key("codeinterp.sandbox.provider")
	AttrOutcome     = attribute.Key("codeinterp.run.outcome")
	AttrOutputBytes = attribute.Key("codeinterp.run.output_bytes")
	AttrRunMS       = attribute.Key("codeinterp.run.duration_ms")
)

// Handler traces each request h serves as a server span named after the
// route that served it ("GET /v1/containers/{id}"), continuing the
// caller's traceparent.
func (t *Telemetry) Handler(name string, h http.Handler) http.Handler {
	if !t.Enabled {
		return h
	}
	tracer := t.Tracer(name)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := t.Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := tracer.Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
			attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path)))
		defer span.End()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		r = r.WithContext(ctx)
		h.ServeHTTP(sw, r)
		if r.Pattern != "" {
			span.SetName(r.Pattern)
			span.SetAttributes(attribute.String("http.route", r.Pattern))
		}
		span.SetAttributes(attribute.Int("http.response.status_code", sw.status))
		if sw.status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(sw.status))
		}
	})
}

// statusWriter remembers the status written (and flushes, for streams).
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
