// Package wasm is the default sandbox provider (`sandbox.provider: wasm`):
// a pool.Kind whose interpreters are worker processes, each running one
// CPython-WASI interpreter under wazero for one session. The pool
// (sandbox/pool) confines each worker to its own cgroup.
//
// Workers are the server's own binary re-executed with a hidden command
// (Config.WorkerCommand; the code they run is sandbox/worker). They start
// with an empty environment, no inherited descriptors but the control pipes
// and the runtime directory, in their own process group and (as root) their
// own network and IPC namespaces, with a parent-death signal. A worker
// waits for its init message, which the kind sends only after the pool has
// verified the cgroup membership.
//
// Warm interpreters wait, blocked on their first read, so a session's first
// run costs about a millisecond. A worker that is not warm restores its
// interpreter from the kind's snapshot (snapshot.go: taken by a trusted
// process at Prepare and every SnapshotRotateSessions sessions) instead of
// starting CPython; with pool.Config.SessionsPerWorker > 1 the pool recycles
// a worker for later sessions of the same owner (proc.Recycle). The guest
// has the standard library and the runtime's pure-Python packages, which the
// snapshot has imported.
package wasm
