package egress

import (
	"fmt"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// testParentSpan stands for the span of the request that opened a session.
var testParentSpan = trace.NewSpanContext(trace.SpanContextConfig{
	TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled,
})

// TestDecisionSpans: with a tracer, each connection's decision is a span
// under the span of the request that opened the session — the host, the
// result and the reason's code — and none carries a secret.
func TestDecisionSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	e := newEnv(t, func(c *Config, _ *Policy) { c.Tracer = tp.Tracer("egress") })
	if code, _, _, err := e.get("https://allowed.test/"); err != nil || code != 200 {
		t.Fatalf("allowed: %d %v", code, err)
	}
	if code, _, _, err := e.get("https://secret.test/"); err != nil || code != 200 {
		t.Fatalf("terminated: %d %v", code, err)
	}
	if code, _, _, err := e.get("https://evil.test/"); err == nil && code == 200 {
		t.Fatal("a host outside the policy was reached")
	}
	got := map[string]string{}
	for _, s := range rec.Ended() {
		if s.Parent().SpanID() != testParentSpan.SpanID() || s.SpanContext().TraceID() != testParentSpan.TraceID() {
			t.Errorf("span %q is not under the session's request span", s.Name())
		}
		attrs := map[string]string{}
		for _, a := range s.Attributes() {
			attrs[string(a.Key)] = a.Value.String()
			if strings.Contains(a.Value.String(), testSecret) {
				t.Errorf("span %q carries the secret", s.Name())
			}
		}
		got[s.Name()] = attrs["codeinterp.egress.result"] + "/" + attrs["codeinterp.egress.reason"]
	}
	want := map[string]string{
		"egress allowed.test": "allowed/" + reasonTunnel,
		"egress secret.test":  "allowed/" + reasonTerminated,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("span %s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
	if r := got["egress evil.test"]; !strings.HasPrefix(r, "refused/") {
		t.Errorf("the refused connection's span: %q (all: %v)", r, fmt.Sprint(got))
	}
}
