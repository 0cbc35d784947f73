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
// edits on the raw body), so fields and item types from newer API versions
// survive.
package interceptor
