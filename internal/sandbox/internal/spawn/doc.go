// Package spawn starts the outermost process of an interpreter the way
// every kind (sandbox/wasm, sandbox/gvisor) must, and waits for its first
// frame: an empty environment, / as its directory, a process group of its
// own (so that one signal reaches all it forks) and SIGKILL as its
// parent-death signal; pipes whose child ends are closed here once the
// child has them; confinement in the interpreter's cgroup before it may
// run anything untrusted, and a low priority for a background start.
//
//   - spawn.go: Command, Start and Process (Confine, Foreground, Kill, Exited).
//   - await.go: Await, the wait for a process's next frame.
package spawn
