// Package pool is the production sandbox.Provider: a pool of worker
// processes, each running one CPython-WASI interpreter under wazero for one
// session, each confined by its own cgroup.
//
// Workers are the server's own binary re-executed with a hidden command
// (Config.WorkerCommand). They start with an empty environment, no inherited
// descriptors but the control pipes and the runtime directory, in their own
// process group and (as root) their own network and IPC namespaces, with a
// parent-death signal. The pool adds each worker to a fresh cgroup and
// verifies the membership before the worker may start the guest.
//
// Interpreters are started ahead of demand (Config.WarmWorkers) and wait,
// blocked on their first read, so a session's first run costs about a
// millisecond instead of the ~130 ms of interpreter start-up. A worker never
// serves a second session. Timeouts and cancellations kill the worker and
// reap it before the session's capacity is released.
package pool
