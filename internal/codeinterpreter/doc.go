// Package codeinterpreter is OpenAI's code_interpreter as this server
// serves it on a container, as a hostedtool.Tool: the function a model
// server is given in its place (one "code" argument), a call's arguments
// decoded into a Python cell, the cell run in the container's interpreter,
// and what the model is told of the run (status, stdout, stderr, images,
// files written, a lost interpreter). The Responses API's items and events
// for it are internal/interceptor's (tool_codeinterpreter.go).
//
// Files:
//   - tool.go: Tool, its function and description, Decode and the action.
//   - report.go: what the model is told (Report, Status, OutcomeReason).
//   - images.go: which of a run's images can be shown, and the line that
//     tells the model about them.
package codeinterpreter
