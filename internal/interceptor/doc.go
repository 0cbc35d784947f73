// Package interceptor holds all of codeinterp's OpenAI Responses-API logic,
// free of any transport: the ext_proc filter (or the dev proxy, or a test)
// hands it request and response bodies and gets bodies back.
//
// A request that declares the native code_interpreter tool is rewritten for
// an upstream that only knows function tools: the tool becomes a strict
// function with one "code" argument, forcing tool_choice values follow it,
// replayed code_interpreter_call history becomes function_call +
// function_call_output items, and stream is forced off. The upstream's answer
// then drives the agentic loop: every call of the function runs in one
// sandbox session per response (so Python state persists between calls, as in
// OpenAI's container), the outputs go back to the model in follow-up
// requests, and the rounds are spliced into one response in which each call
// appears as an OpenAI code_interpreter_call item. Clients that asked for a
// stream get the synthetic SSE event sequence OpenAI would have sent.
//
// JSON the interceptor does not own is carried byte-for-value (gjson/sjson
// and internal/jsonx edits on the raw body), so fields and item types from
// newer API versions survive. The event streams are written and read by
// internal/sse; errors are OpenAI's shape, apierror.Error.
//
// # Files
//
// The contract and its configuration:
//
//   - api.go: the types callers hold: Upstream, Result, Interceptor,
//     Option, Exchange and its accessors.
//   - config.go: Config, its defaults (DefaultConfig, WithDefaults) and
//     Validate.
//   - interceptor.go: New, and the function tool the native tool becomes.
//   - containers.go: the Containers interface a response's code runs in.
//
// The request side:
//
//   - request.go: RewriteRequest: pass-through detection and the request's
//     rewrite, section by section.
//   - tools.go: the native tool validated (container, memory_limit,
//     network_policy) and rewritten in tools and tool_choice.
//   - replay.go: replayed code_interpreter_call items in the input become
//     the function call and output the model saw.
//   - history.go: requests that continue a stored response or a
//     conversation (previous_response_id, conversation, item_reference).
//   - files.go: NewExchange, which connects a request to its container
//     (container ids, file_ids, input files) and the files' citations.
//
// The loop and the answer:
//
//   - loop.go: CompleteResponse and the agentic loop both paths drive:
//     rounds, limits, the calls' runs in turn and the follow-up requests.
//   - round.go: one upstream answer read as a round and the calls of our
//     function in it.
//   - run.go: running a call in the response's container or sandbox
//     session.
//   - report.go: what became of a call: its status, what the model is told
//     and the logs the client sees.
//   - images.go: the figures a run made, as code_interpreter_call outputs.
//   - splice.go: the rounds spliced into the one response the client gets.
//   - remember.go: keeping the finished response and its conversation in
//     the store.
//   - errors.go: upstream failures and the error answer or event the client
//     gets for them.
//   - live.go, live_round.go: the live path (StreamLive, StreamResponse):
//     the upstream's rounds streamed to the client as they arrive.
package interceptor
