// Package filter is codeinterp's Envoy ext_proc service
// (envoy.service.ext_proc.v3.ExternalProcessor). Envoy opens one gRPC
// stream per HTTP request; Server.Process runs one state machine per stream
// over request_headers, request_body, response_headers and response_body,
// expecting the filter configuration codeinterp is deployed with: header
// modes SEND, body modes BUFFERED, trailers SKIP, allow_mode_override.
//
//   - request_headers: requests whose method and path are not configured
//     are let go with a mode_override (bodies NONE, response headers SKIP),
//     so they cost one round trip. Selected requests get DuplexMode (request
//     body BUFFERED, response body FULL_DUPLEX_STREAMED, trailers SEND)
//     unless Config.SyntheticStreams: the body that says "stream": true is
//     not there yet, and a later switch would leak bytes (docs/streaming.md).
//     Client-sent x-codeinterp-* headers are removed. The headers a
//     follow-up needs (authorization, api-key, …) are remembered.
//   - request_body: the interceptor decides. No code_interpreter tool → the
//     body continues unchanged and the response is let go at
//     response_headers; interceptor.PassesThrough says so of most such
//     requests without parsing, before the caller is identified or an
//     Exchange made. Otherwise the rewritten body replaces it with a
//     matching content-length; a refused request gets an immediate_response
//     with OpenAI's error JSON.
//   - response_headers: a non-2xx upstream answer is left alone (the client
//     sees the upstream's own error).
//   - response_body (BUFFERED, synthetic streams): override_message_timeout
//     is sent first (when configured), then the loop runs: code in the
//     sandbox, follow-ups to the operator's upstream URL with the client's
//     auth headers. The final body replaces the upstream's with the right
//     :status, content-type and content-length.
//   - the response in FULL_DUPLEX_STREAMED (duplex.go): one small handler per
//     kind of exchange answers the headers and each chunk as Envoy sends
//     them — echoResponse (not intercepted, or the upstream's error: each
//     chunk answered with itself, an event stream's at once, a JSON
//     answer's when the next message comes, so its last chunk leaves with
//     the end), bufferedResponse (a non-streaming client:
//     the headers answer withheld, the buffered loop over the whole body,
//     its answer in chunks) and liveResponse (a streaming client: the
//     headers answer at once, the upstream's chunks piped into the
//     interceptor's live stream, every event it writes sent as a
//     streamed_response chunk of at most 64 KiB). end_of_stream (or a
//     TrailersResponse) goes out only after Envoy's own end; a repeated
//     end-of-stream chunk is dropped. Sends are serialized (duplexOut).
//
// The stream's context ending (client gone, Envoy reset) cancels sandbox
// runs and follow-ups at once. Protocol violations end the stream with a
// gRPC error, which Envoy turns into a 500; bad input gets an OpenAI-shaped
// error; nothing panics or hangs.
package filter
