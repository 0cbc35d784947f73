// Package shelltool is OpenAI's hosted shell tool as this server serves
// it on a container: the pieces that do not depend on a transport or on
// the Responses loop — the declaration's check, the function tool a model
// server is given in its place, the call's arguments decoded into
// commands, the items the client sees (shell_call, shell_call_output),
// what the model is told of the run, and replayed items turned back into
// the function call and output the model saw.
//
// The interceptor's one loop drives it beside code_interpreter: a call of
// FunctionName runs by containerapi.Container.Shell (the gVisor sandbox's
// bash) and is spliced as the two items OpenAI returns.
//
// Files:
//   - declare.go: the declaration (environment container_auto with its
//     skills, container_reference; local stays the client's) and the
//     function tool.
//   - call.go: arguments → Action; results → items and the model's text;
//     max_output_length.
//   - replay.go: shell_call / shell_call_output items in a request's input
//     → function_call / function_call_output.
package shelltool
