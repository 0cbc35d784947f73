// Package codeexec is Anthropic's hosted code execution tool
// (`{"type":"code_execution_20250825","name":"code_execution"}` on the
// Messages API) as this server serves it on a container, free of any
// transport and of the Messages protocol: the declaration's check, the two
// client tools a model server is given in its place (bash_code_execution
// and text_editor_code_execution, with Anthropic's input shapes), a call's
// input decoded into one shell action on the container (sandbox.ShellRequest,
// run by containerapi.Container.Shell in the gVisor sandbox), and the
// action's result read back as Anthropic's result block and as the text the
// model is told.
//
// Bash is a session, as Anthropic's is: the working directory, the exported
// variables and the shell functions of one command are there in the next
// command of the same container. Each command still runs as its own
// `bash -lc` (the hosted shell's path: its own process group, timeout and
// output bounds); a prologue sources the state the previous command's EXIT
// trap saved in the sandbox's /tmp, and the trap saves it again however the
// command ends (its last command, `exit`, a failing `set -e`). State lives
// in the sandbox, so a gVisor checkpoint carries it to another replica or
// past a restart; a command killed at its timeout keeps the state before
// it. A persistent bash process would hold the session too, but its output
// would have to be cut at markers the command could forge, a command that
// ends it (exit, exec, a crash) would lose everything, and a timeout could
// not kill the command without killing the session.
//
// The editor runs in the same sandbox as a small Python program given its
// input on stdin (python3 -I: nothing of the session's environment changes
// it), acting on the sandbox's files as the sandbox's user, so what it
// creates under /mnt/data becomes a container file as what bash writes
// does.
//
// Files:
//   - declare.go: the tool's versions, the two tools for the model server.
//   - call.go: a tool_use's input → Call → sandbox.ShellRequest.
//   - session.go: the bash session's prologue and EXIT trap.
//   - editor.go, editor.py: the editor program and its answer.
//   - result.go: a run's result → Anthropic's result block and the
//     model's text.
package codeexec
