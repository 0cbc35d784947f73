// Package messages is Anthropic's Messages API (/v1/messages) as a second
// protocol behind the ext_proc filter, beside the Responses API's
// interceptor: a processor.Processor whose requests declare Anthropic's
// hosted code execution tool (package codeexec) and whose model server
// speaks the Messages API (vLLM, llama.cpp, SGLang, a translating gateway).
//
// A request declaring `code_execution_20250825` (or a later version that
// asks for nothing more) is rewritten for the model server: the
// declaration becomes the two client tools bash_code_execution and
// text_editor_code_execution, tool_choice naming code_execution follows
// them, sent-back server_tool_use / *_tool_result blocks become the
// tool_use / tool_result the model saw, a round's calls in one assistant
// turn and their results in one user turn (a call id this server did not
// make is refused, and so are the blocks in a request without the tool:
// history.go), container_upload blocks put the file into the
// container, a container holding files has them listed to the model at the
// end of the last user message, and stream is off upstream (on for a live
// stream). container.skills of type custom are skills of the Skills
// API, mounted in a new container as the Responses API's skill_reference
// (the model told them, the message's container lists them); Anthropic's
// prebuilt ones are a 400. The model server's calls of the
// two tools then run in the request's container (the same containers as
// the Responses API's, scoped to the caller's credential; "container":
// "cntr_…" reuses one), the follow-ups go back to the model server until it
// answers, and the client gets one assistant message with Anthropic's
// blocks: server_tool_use then bash_code_execution_tool_result /
// text_editor_code_execution_tool_result, the model's text, top-level
// container {id, expires_at}, usage summed over the rounds with
// server_tool_use.code_execution_requests, the last round's stop_reason.
// Other tools are the client's: a round that calls one ends the message
// (stop_reason tool_use) after the code execution calls of that round ran.
//
// Streams are Anthropic's events, live (live.go): the model server is
// asked to stream every round, and its text, thinking and client tool
// blocks reach the client delta by delta as it writes them, under the
// client's indexes (in order across rounds); message_start at its first
// event; a call of ours is held until the model has written it (its
// server_tool_use id binds the whole input), then announced with its input
// as one input_json_delta, run with pings, and answered by its result
// whole in its content_block_start; message_delta with the stop reason,
// container and usage, message_stop. A round answered as JSON is read
// whole (the buffered path's reading).
//
// Errors are Anthropic's shape, {"type":"error","error":{"type","message"}}
// (errors.go; the filter renders its own refusals of this route with
// ErrorBody).
//
// Files:
//   - processor.go: Config, New, the Processor, NewExchange (the container).
//   - request.go: the request's rewrite: tools, tool_choice, container,
//     container_upload.
//   - history.go: call ids and replayed blocks.
//   - exchange.go: the Exchange and the loop both paths drive.
//   - stream.go: the client's event stream.
//   - live.go: a round the model server streams.
//   - errors.go: Anthropic's error shape.
package messages
