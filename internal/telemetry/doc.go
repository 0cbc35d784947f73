// Package telemetry sets up OpenTelemetry tracing the standard way and
// names the spans codeinterp makes, after the GenAI semantic conventions.
//
// Setup turns tracing on when the configuration says so (telemetry.tracing)
// or the environment does (OTEL_TRACES_EXPORTER=otlp), and reads the rest
// as the OpenTelemetry SDK does: OTEL_EXPORTER_OTLP_ENDPOINT (and its
// _TRACES_ variant), OTEL_EXPORTER_OTLP_PROTOCOL (grpc or http/protobuf,
// the default), OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES,
// OTEL_TRACES_SAMPLER and its argument. Off, every tracer is a no-op.
//
// The spans (the callers make them with the tracer Setup returns):
//
//   - one per /v1/responses stream (package filter), continuing the trace
//     context Envoy passes in the gRPC metadata (traceparent), or else the
//     request's own traceparent header;
//   - one per model round the server makes (chat, with gen_ai.request.model,
//     gen_ai.response.id, gen_ai.usage.*, the finish reason), whose context
//     goes to the model server in traceparent;
//   - one per code run (execute_tool code_interpreter: the call id, the
//     container, the provider, the outcome, the output's size);
//   - one per request of the Containers, Files, Responses and
//     Conversations APIs.
//
// No span carries code, its output, file contents or a secret unless
// telemetry.capture_content is set (then the code and output only).
package telemetry
