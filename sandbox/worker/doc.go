// Package worker is the body of a sandbox worker process: the server's own
// binary, re-executed with a hidden command, hosting exactly one CPython-WASI
// interpreter under wazero for exactly one session.
//
// The process starts as the server's user, inside the cgroup the server made
// for it (the server verifies the attachment before it sends Init). It reads
// and compiles python.wasm while still privileged, then hardens itself
// (no_new_privs, no core dumps, not dumpable, dropped uid/gid, parent-death
// signal re-armed) before the guest runs a single instruction. The guest
// sees the stdlib read-only, an in-memory bounded /tmp and /mnt/data, real
// clocks and crypto randomness, and nothing else: no host files, no
// environment beyond PYTHONHOME, no sockets.
//
// Guest stdout and stderr go to bounded in-memory buffers: bytes past the
// bound are counted and dropped as they are written, whether they come from
// print or os.write. The control protocol (package wire) runs on separate
// pipes the guest cannot reach. Between runs the worker also serves the
// server's file operations (put, get, list) itself, in Go, on the same memfs
// trees, charged to the same budget: the guest is blocked reading its next
// program meanwhile.
package worker
