// Package devproxy is a small HTTP front proxy that drives an Envoy
// ext_proc server the way Envoy's HTTP ext_proc filter does. It exists so
// that `extproc dev` runs on a laptop without Envoy and so that end-to-end
// tests exercise the real gRPC ext_proc server through the same message
// order, timers and mutation rules Envoy applies.
//
// Production runs Envoy (or Envoy Gateway), not this package. The proxy
// emulates one filter configuration: header modes SEND or SKIP, body modes
// NONE or BUFFERED (and FULL_DUPLEX_STREAMED responses), trailer modes SKIP
// or SEND, allow_mode_override, the
// per-message timer with max_message_timeout, failure_mode_allow and
// status_on_error. It follows Envoy's behaviour as read from its source
// (envoyproxy/envoy at 6806efb8, 1.39.0-dev: ext_proc.cc,
// processor_state.cc, mutation_utils.cc) and its ext_proc integration
// tests:
//
//   - message order: request_headers, request_body, response_headers,
//     response_body, exactly one response per message, nothing sent
//     upstream before the request_body response is applied;
//   - an absent body gives end_of_stream on the headers message and no body
//     message; a present empty body gives body "" with end_of_stream;
//   - protocol_config only on the stream's first message;
//   - mode_override honoured only in headers responses with
//     allow_mode_override, merged over the filter-level mode, an unset body
//     mode meaning NONE, checked against allowed_override_modes;
//   - buffer limit: a request over it gets 413, a response 500;
//   - header mutations read raw_value only, remove before set, append
//     true/false, the default mutation_rules (no host, :authority, :method,
//     :scheme, x-envoy-*; no removing pseudo-headers or host);
//   - a body mutation whose length differs from the held content-length is
//     a fail-closed error and nothing is forwarded;
//   - CONTINUE_AND_REPLACE with a body removes content-length;
//   - immediate_response: status < 200 becomes 200, a non-empty body gets
//     content-length and a default text/plain content-type, its headers
//     obey the filter's mutation_rules;
//   - message timeout → 504, override_message_timeout once per message
//     within [1ms, max_message_timeout] with its other fields ignored;
//   - a non-OK gRPC close → status_on_error, an OK close → continue
//     unprocessed, spurious responses → status_on_error.
//
// Routing is a route table like Envoy's (Config.Routes): the first route
// whose match (path, prefix or path_separated_prefix) fits the request's
// path picks the cluster, and a route may disable the filter as
// ExtProcPerRoute{disabled: true} does; unmatched requests take the
// default route, Config.Upstream through the filter. `extproc dev` routes
// /v1/containers and /v1/files to the Containers and Files API this way,
// as deploy/envoy/envoy.yaml does.
//
// FULL_DUPLEX_STREAMED responses (duplex.go; a test per rule in
// duplex_test.go) follow Envoy's rules for that mode: the config check (trailers SEND) and a filter-level
// duplex mode disabling mode_override; the headers message and every chunk
// sent without waiting for answers; the headers answer first (an early body
// answer is a 500) and possibly withheld; streamed_response only; each
// chunk written and flushed to the client at once; end_of_stream or a
// TrailersResponse ends the body, with Envoy's trailers forwarded;
// content-length dropped unless AllowContentLengthHeader; no message
// timer, only StreamIdleTimeout (504 before headers, a reset after); and,
// optionally, Envoy 1.35–1.37's repeated end-of-stream chunk
// (DuplicateEndOfStream).
//
// Deliberate simplifications: STREAMED and BUFFERED_PARTIAL body modes, a
// FULL_DUPLEX_STREAMED request body, a switch to FULL_DUPLEX_STREAMED in a
// response_headers answer (Envoy leaks the held bytes, #40340),
// observability mode, attributes and metadata forwarding are not emulated
// (a mode_override asking for one is answered with status_on_error so a
// test notices); the upstream Host is
// rewritten to the upstream URL's host (as a route with auto_host_rewrite);
// header count and size limits are not enforced.
//
// Files: proxy.go is the HTTP front (routes, the upstream, one exchange per
// request); exchange.go drives one exchange (headers, body and trailers
// each way, in the route's processing mode); stream.go is its side of the
// ext_proc stream; apply.go applies the server's answers (mutations, an
// immediate response); reply.go writes the client's answer; duplex.go is
// FULL_DUPLEX_STREAMED; headers.go the header map and its mutation rules.
package devproxy
