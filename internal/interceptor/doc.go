// Package interceptor holds all of codeinterp's OpenAI Responses-API logic,
// free of any transport: the ext_proc filter (or the dev proxy, or a test)
// hands it request and response bodies and gets bodies back.
//
// A request that declares a hosted tool (code_interpreter, or the hosted
// shell on a container) is rewritten for an upstream that only knows
// function tools: each tool becomes a strict function (hostedtool.Tool),
// forcing tool_choice values follow it, replayed items of the tools
// (code_interpreter_call, shell_call and shell_call_output) become
// function_call + function_call_output items, and stream is forced off
// (the live path asks the upstream for its own stream). The upstream's answer
// then drives the agentic loop: every call of a tool's function runs in the
// response's container (so Python state and files persist between calls,
// as in OpenAI's container), the outputs go back to the model in follow-up
// requests, and the rounds are spliced into one response in which each call
// appears as its tool's OpenAI items. Clients that asked for a stream get
// the events OpenAI would have sent, live (live.go) or from the spliced
// response.
//
// # Hosted tools
//
// The loop, the splice, the replay, the store and the live stream are one
// copy over every hosted tool: they reach a tool through the tool
// interface (hosted.go), which adds the Responses API's shapes to
// hostedtool.Tool. A new tool is a package implementing hostedtool.Tool and
// a tool_<name>.go here implementing tool (declaration check, item ids,
// items, replay, the container an item names, live events), listed in New.
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
//   - interceptor.go: New, and the tools it serves.
//   - hosted.go: the tool interface (the Responses side of hostedtool)
//     and the lookups the loop uses.
//   - tool_codeinterpreter.go: code_interpreter's declaration, its
//     code_interpreter_call item, its replay and live events.
//   - tool_shell.go: the hosted shell's declaration, its shell_call and
//     shell_call_output items, their replay and live events.
//   - containers.go: the Containers interface a response's code runs in.
//
// The request side:
//
//   - request.go: RewriteRequest: pass-through detection and the request's
//     rewrite, section by section.
//   - tools.go: the hosted tools validated (container, memory_limit,
//     network_policy) and rewritten in tools and tool_choice.
//   - replay.go: replayed items of the hosted tools in the input become
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
//   - round.go: one upstream answer read as a round and the calls of the
//     hosted tools' functions in it.
//   - run.go: running a call in the response's container or sandbox
//     session.
//   - images.go: the figures a run made, as code_interpreter_call outputs.
//   - splice.go: the rounds spliced into the one response the client gets.
//   - remember.go: keeping the finished response and its conversation in
//     the store.
//   - errors.go: upstream failures and the error answer or event the client
//     gets for them.
//   - live.go, live_round.go: the live path (StreamLive, StreamResponse):
//     the upstream's rounds streamed to the client as they arrive.
package interceptor
