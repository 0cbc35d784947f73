// Package wire is the control protocol between the server and an
// interpreter: length-prefixed JSON frames (a 4-byte big-endian length,
// then the JSON) on channels that are separate from anything the guest's
// output reaches. The WASM worker (sandbox/worker) speaks Msg; the gVisor
// kernel (sandbox/gvisor) speaks its own frames in the same framing, with a
// bound of its own.
//
//   - wire.go: the messages (Msg and what it carries), their kinds, status
//     and error codes and the bounds, and the framing: Write and Read for
//     Msg, WriteFrame and ReadFrame for any message under a caller's bound.
//   - receive.go: Receiver, which reads a peer's frames in the background.
//   - check.go: CheckFileResult, the check of a file operation's answer
//     against its request that the pool makes of every kind's answers.
package wire
