// Package hostedtool is the seam between a protocol processor and the
// hosted tools it serves on a container. A hosted tool (OpenAI's
// code_interpreter and shell today; Anthropic's bash and text editor next)
// is, whatever the protocol that declares it:
//
//  1. a function the model server is given in its place (Tool.Function),
//  2. a call of that function decoded into an Action (Tool.Decode), which
//     says when its arguments are unusable (Action.Invalid),
//  3. the action run in the response's container (Action.Run on a
//     Runner), telling its output as it comes (Output),
//  4. what the model is told of the run (Action.ModelOutput).
//
// What a protocol shows of a tool — how it is declared, the items or
// blocks a client gets for a call, the stream events, how replayed items
// map back to the function call the model saw — is the processor's, in one
// file per tool (internal/interceptor: tool_codeinterpreter.go,
// tool_shell.go for the Responses API). The processor's loop, splice,
// replay and store are one copy over every tool: it finds a call by its
// function name, asks the tool to decode it, runs the action and renders
// it through the tool, never branching on which tool it is.
//
// A new tool is a package (one per tool: internal/codeinterpreter,
// internal/shelltool) implementing Tool and Action, plus, per protocol, the
// processor's small interface for its items and events. A new kind of
// action inside the sandbox (beyond a Python cell and shell commands) is a
// method on Runner, implemented by containerapi.Container and carried by
// the cluster's forwarded run.
//
// Files:
//   - tool.go: Tool, Action, Runner, Output, Outcome.
//   - declare.go: what the Responses API's declarations of every hosted
//     tool check alike (allowed_callers).
//   - network.go: what a container's network policy lets a tool reach,
//     in the words every tool's description uses.
package hostedtool
