// Package sse is both directions of the Responses API's Server-Sent
// Events: writing a client's stream as OpenAI writes it, and reading an
// upstream's stream as it arrives.
//
// The files:
//
//   - writer.go: Writer, which renders events with OpenAI's framing, field
//     order, sequence numbers and delta obfuscation (Event, Delta,
//     Passthrough); EventStream, the whole stream OpenAI sends for a final
//     response object; ErrorEvent; Chunks, the token-sized pieces of a
//     delta.
//   - reader.go: Reader, which reads an upstream's events one by one as
//     soon as each is complete, within a bound on an event's size.
package sse
