package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/codeinterp/codeinterp/internal/telemetry/telemetrytest"
)

// TestTracing runs `extproc dev` exporting to the OpenTelemetry Collector's
// own OTLP receiver (over HTTP, then gRPC), with the standard OTEL_*
// environment: one buffered and one live response, each with two code runs,
// continue the traceparent the client sent; each is one trace with the
// request's server span, a chat span per model round the server made and
// an execute_tool span per run, as children of the request's; the model
// server gets the trace context; and no span carries the code or its
// output (telemetry.capture_content is off).
func TestTracing(t *testing.T) {
	sh := loadShapes(t)
	bin := buildExtproc(t)
	const marker = "TRACE_SECRET_7f3a"
	var m *model
	m = newModel(t, sh, func(t testing.TB, c *convo) reply {
		switch len(c.outputs()) {
		case 0:
			return reply{items: []string{m.call("x = 1\nprint('" + marker + "', x)")}}
		case 1:
			return reply{items: []string{m.call("x += 1\nprint('" + marker + "', x)")}}
		}
		return reply{items: []string{m.message("two runs done")}}
	})
	m.live = true
	for _, tc := range []struct {
		protocol string
		capture  bool // telemetry.capture_content: the code and output on the run spans
	}{{"http/protobuf", false}, {"grpc", false}, {"grpc", true}} {
		protocol, capture := tc.protocol, tc.capture
		name := strings.ReplaceAll(protocol, "/", "-")
		if capture {
			name += "-capture_content"
		}
		t.Run(name, func(t *testing.T) {
			rcv := telemetrytest.Start(t)
			endpoint := "http://" + rcv.HTTP
			if protocol == "grpc" {
				endpoint = "http://" + rcv.GRPC
			}
			env := []string{"OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint,
				"OTEL_EXPORTER_OTLP_PROTOCOL=" + protocol, "OTEL_SERVICE_NAME=codeinterp-e2e", "OTEL_BSP_SCHEDULE_DELAY=100",
				"CODEINTERP_CHECKPOINTS_ENABLED=false", fmt.Sprintf("CODEINTERP_TELEMETRY_CAPTURE_CONTENT=%v", capture)}
			p := startProc(t, bin, env, "dev", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--upstream", m.URL(),
				"--config", filepath.Join("..", "testdata", "e2e", "extproc.yaml"))
			t.Cleanup(func() { _ = p.cmd.Process.Kill() })
			base := p.baseURL(t)
			ctx := context.Background()
			type sent struct{ traceID, spanID string }
			var traces []sent
			for k, stream := range []bool{false, true} {
				tr := sent{fmt.Sprintf("%032x", time.Now().UnixNano()+int64(k)), fmt.Sprintf("%016x", 0xabc0+k)}
				traces = append(traces, tr)
				c := openai.NewClient(option.WithBaseURL(base+"/"), option.WithAPIKey(apiKey), option.WithMaxRetries(0),
					option.WithHeader("traceparent", "00-"+tr.traceID+"-"+tr.spanID+"-01"))
				p := ciParams("two runs", true)
				if stream {
					s := c.Responses.NewStreaming(ctx, p)
					for s.Next() {
					}
					if err := s.Err(); err != nil {
						t.Fatal(err)
					}
				} else if _, err := c.Responses.New(ctx, p); err != nil {
					t.Fatal(err)
				}
			}
			for _, tr := range traces {
				spans := rcv.Await(t, 30*time.Second, func(s []telemetrytest.Span) bool {
					n := 0
					for _, sp := range s {
						if sp.TraceID == tr.traceID {
							n++
						}
					}
					return n >= 5 // the request, two runs, two follow-ups
				})
				var req *telemetrytest.Span
				var runs, chats []telemetrytest.Span
				for i, sp := range spans {
					if sp.TraceID != tr.traceID {
						continue
					}
					for k, v := range sp.Attrs {
						if strings.Contains(fmt.Sprint(v), marker) && !capture {
							t.Errorf("span %q attribute %s carries the code or its output: %v", sp.Name, k, v)
						}
					}
					if sp.Service != "codeinterp-e2e" {
						t.Errorf("span %q: service.name %q, want OTEL_SERVICE_NAME's", sp.Name, sp.Service)
					}
					switch {
					case sp.Name == "POST /v1/responses":
						req = &spans[i]
					case sp.Name == "execute_tool code_interpreter":
						runs = append(runs, sp)
					case strings.HasPrefix(sp.Name, "chat "):
						chats = append(chats, sp)
					}
				}
				if req == nil || req.ParentID != tr.spanID || req.Kind != "Server" {
					t.Fatalf("trace %s: the request span %+v does not continue the client's traceparent (parent %s)", tr.traceID, req, tr.spanID)
				}
				if len(runs) != 2 || len(chats) != 2 {
					t.Fatalf("trace %s: %d execute_tool and %d chat spans, want 2 and 2", tr.traceID, len(runs), len(chats))
				}
				for _, r := range runs {
					if code := fmt.Sprint(r.Attrs["gen_ai.tool.call.arguments"]); capture != strings.Contains(code, marker) {
						t.Errorf("capture_content %v: the run span's code is %q", capture, code)
					}
					if r.ParentID != req.SpanID || r.Attrs["gen_ai.tool.name"] != "code_interpreter" || r.Attrs["gen_ai.operation.name"] != "execute_tool" ||
						r.Attrs["codeinterp.run.outcome"] != "completed" || r.Attrs["gen_ai.tool.call.id"] == "" || r.Attrs["codeinterp.sandbox.provider"] != "wasm" {
						t.Errorf("execute_tool span: %+v", r)
					}
				}
				for _, c := range chats {
					if c.ParentID != req.SpanID || c.Kind != "Client" || c.Attrs["gen_ai.request.model"] != "gpt-5.6" ||
						c.Attrs["gen_ai.response.id"] == nil || c.Attrs["gen_ai.usage.input_tokens"] == nil {
						t.Errorf("chat span: %+v", c)
					}
				}
			}
			// The run-time histogram links its observations to their traces
			// (exemplars, in the OpenMetrics exposition).
			var admin string
			for _, l := range p.all() {
				if a := logField(l, "admin"); a != "" {
					admin = a
				}
			}
			req, _ := http.NewRequest(http.MethodGet, "http://"+admin+"/metrics", nil)
			req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			metrics, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			exemplar := false
			for _, l := range strings.Split(string(metrics), "\n") {
				if strings.HasPrefix(l, "codeinterp_code_run_duration_seconds_bucket") {
					for _, tr := range traces {
						exemplar = exemplar || strings.Contains(l, `trace_id="`+tr.traceID+`"`)
					}
				}
			}
			if !exemplar {
				t.Errorf("no run-time bucket has an exemplar of the traces:\n%s", metrics)
			}
			// The model server got the trace context: the first request
			// under the request span, each follow-up under its chat span.
			for _, mr := range m.all() {
				tp := mr.header.Get("Traceparent")
				found := false
				for _, tr := range traces {
					found = found || strings.Contains(tp, tr.traceID)
				}
				if !found {
					t.Errorf("a request reached the model with traceparent %q, not one of the traces", tp)
				}
			}
		})
		m.mu.Lock()
		m.requests = nil
		m.mu.Unlock()
	}
}
