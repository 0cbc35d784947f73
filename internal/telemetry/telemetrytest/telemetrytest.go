// Package telemetrytest runs the OpenTelemetry Collector's own OTLP
// receiver (go.opentelemetry.io/collector/receiver/otlpreceiver, the code a
// collector runs) in a test, over gRPC and HTTP on loopback ports, and
// hands the tests the spans it received.
package telemetrytest

import (
	"context"
	"net"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/receiver/receivertest"
)

// Receiver is a running OTLP receiver.
type Receiver struct {
	// GRPC and HTTP are its endpoints (host:port).
	GRPC, HTTP string
	sink       *consumertest.TracesSink
}

// Start starts a receiver for the test's lifetime.
func Start(t testing.TB) *Receiver {
	t.Helper()
	f := otlpreceiver.NewFactory()
	cfg := f.CreateDefaultConfig().(*otlpreceiver.Config)
	r := &Receiver{GRPC: freeAddr(t), HTTP: freeAddr(t), sink: new(consumertest.TracesSink)}
	cfg.Protocols.GRPC.GetOrInsertDefault().NetAddr.Endpoint = r.GRPC
	cfg.Protocols.HTTP.GetOrInsertDefault().ServerConfig.NetAddr.Endpoint = r.HTTP
	recv, err := f.CreateTraces(context.Background(), receivertest.NewNopSettings(f.Type()), cfg, r.sink)
	if err != nil {
		t.Fatalf("otlp receiver: %v", err)
	}
	if err := recv.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatalf("otlp receiver start: %v", err)
	}
	t.Cleanup(func() { _ = recv.Shutdown(context.Background()) })
	return r
}

func freeAddr(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Span is one received span, flattened for assertions.
type Span struct {
	TraceID, SpanID, ParentID string
	Name, Kind                string
	Service                   string
	Attrs                     map[string]any
	Status                    string
}

// Spans returns every span received so far.
func (r *Receiver) Spans() []Span {
	var out []Span
	for _, td := range r.sink.AllTraces() {
		rss := td.ResourceSpans()
		for i := range rss.Len() {
			rs := rss.At(i)
			svc, _ := rs.Resource().Attributes().Get("service.name")
			sss := rs.ScopeSpans()
			for j := range sss.Len() {
				ss := sss.At(j).Spans()
				for k := range ss.Len() {
					out = append(out, flatten(ss.At(k), svc.AsString()))
				}
			}
		}
	}
	return out
}

func flatten(s ptrace.Span, svc string) Span {
	sp := Span{TraceID: s.TraceID().String(), SpanID: s.SpanID().String(), Name: s.Name(), Kind: s.Kind().String(),
		Service: svc, Attrs: s.Attributes().AsRaw(), Status: s.Status().Code().String()}
	if !s.ParentSpanID().IsEmpty() {
		sp.ParentID = s.ParentSpanID().String()
	}
	return sp
}

// Await returns the spans once done says they are all there, or fails the
// test after timeout.
func (r *Receiver) Await(t testing.TB, timeout time.Duration, done func([]Span) bool) []Span {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := r.Spans()
		if done(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("the receiver has %d spans; the expected ones did not all arrive", len(s))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
