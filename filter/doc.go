// Package filter is codeinterp's Envoy ext_proc service
// (envoy.service.ext_proc.v3.ExternalProcessor). Envoy opens one gRPC
// stream per HTTP request; Server.Process runs one state machine per stream
// over request_headers, request_body, response_headers and response_body,
// expecting the filter configuration codeinterp is deployed with: header
// modes SEND, body modes BUFFERED, trailers SKIP, allow_mode_override.
//
//   - request_headers: requests whose method and path are not configured
//     are let go with a mode_override (bodies NONE, response headers SKIP),
//     so they cost one round trip. Client-sent x-codeinterp-* headers are
//     removed. The headers a follow-up needs (authorization, api-key, …) are
//     remembered.
//   - request_body: the interceptor decides. No code_interpreter tool → the
//     body continues unchanged and the response is let go at
//     response_headers. Otherwise the rewritten body replaces it with a
//     matching content-length; a refused request gets an immediate_response
//     with OpenAI's error JSON.
//   - response_headers: a non-2xx upstream answer is left alone (the client
//     sees the upstream's own error).
//   - response_body: override_message_timeout is sent first (when
//     configured), then the loop runs: code in the sandbox, follow-ups to the
//     operator's upstream URL with the client's auth headers. The final body
//     replaces the upstream's with the right :status, content-type and
//     content-length.
//
// The stream's context ending (client gone, Envoy reset) cancels sandbox
// runs and follow-ups at once. Protocol violations end the stream with a
// gRPC error, which Envoy turns into a 500; bad input gets an OpenAI-shaped
// error; nothing panics or hangs.
package filter
