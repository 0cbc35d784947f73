// Package processor is the seam between the Envoy-facing filter and an
// endpoint's logic, as envoyproxy/ai-gateway's Processor is: the filter
// drives Envoy's ext_proc stream (headers, bodies, the upstream
// follow-ups) and asks a Processor what to do with a request body; the
// Processor's Exchange decides the rest of that request. The Responses
// API's code_interpreter (package interceptor) is one Processor; another
// endpoint or wire format would be another, with no edit of the filter.
//
// The types both sides share — who called (Caller), what the client gets
// (Result), how an exchange reaches the model (Upstream, StreamUpstream)
// — live here, so that neither imports the other.
package processor
