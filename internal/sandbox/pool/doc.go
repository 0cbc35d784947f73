// Package pool is the production sandbox.Provider, generic over the kind of
// interpreter (Kind): CPython-WASI worker processes (sandbox/wasm) or gVisor
// sandboxes running Debian's CPython (sandbox/gvisor).
//
// The pool owns what every kind shares, so that there is one copy of it:
// the session slots (Config.MaxSessions) and the queue wait for one, the
// warm interpreters started ahead of demand (Config.WarmWorkers) and their
// refills, one cgroup per interpreter (memory with no swap, pids, CPU) into
// which the kind must confine its outermost process before it runs anything
// untrusted, the run's time backstop, kill-and-reap before a session's
// capacity is released, OOM detection, and the mapping of an interpreter's
// report to a typed sandbox.Outcome. A kind only starts an interpreter and
// speaks its protocol.
//
// Warm interpreters wait, blocked on their first read, so a session's first
// run does not pay the interpreter's start-up; each kind runs trusted
// warm-up cells through the whole run path before it reports one started,
// so that the first call finds its pages touched, like the second. The warm
// interpreter a session takes is replaced once that session's first run has
// ended (or it closed, or 250 ms passed): a replacement started at once
// would take the cores the first call needs. An interpreter never serves a
// second session (a worker process may, in turn, with SessionsPerWorker >
// 1: only its owner's, each a fresh interpreter). When a run ends its
// interpreter (timeout, memory, crash), the next run of the session gets a
// fresh one and reports StateLost.
//
// The file operations of a session (WriteFile, ReadFile, ListFiles,
// RemoveFiles) are serialised with its runs, checked here (paths cleaned and
// kept under /mnt/data or /tmp, sizes against the scratch bound and
// MaxFileBytes; a removal of many paths is split into requests that fit a
// frame) and done by the kind on the interpreter's own scratch space
// (Interpreter.File); every kind's answer is checked against its request
// (wire.CheckFileResult) before anything of it reaches the caller.
// They replace a lost interpreter first, like a run; each fresh interpreter
// is a new Generation, with empty scratch space.
package pool
