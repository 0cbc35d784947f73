// Package worker is the body of a sandbox worker process: the server's own
// binary, re-executed with a hidden command, hosting one CPython-WASI
// interpreter under wazero per session — by default for exactly one session;
// with a snapshot it may serve several sessions of one owner in turn, each a
// fresh instance (KindNext).
//
// Sessions start either cold (python.wasm's _start) or, by default, from a
// snapshot (snapshot.go, restore.go): the trusted "snapshot" mode starts
// CPython in the reactor build, imports the stdlib modules and packages,
// defines the kernel (sandbox/internal/cellrunner's cell runner, which the
// gVisor kernel shares, then bootstrap.py's loop), and saves linear memory and the exported mutable
// globals; a worker instantiates the data-stripped module without a start
// function over a MAP_PRIVATE mapping of that image, sets the globals and
// runs post_restore.py (RNGs reseeded from the session's crypto/rand) and
// the kernel. The guest's monotonic clock is the host's system-wide one,
// offset if the image came from a boot whose clock read more.
//
// The process starts as the server's user, inside the cgroup the server made
// for it (the server verifies the attachment before it sends Init). It reads
// and compiles python.wasm while still privileged, then hardens itself
// (no_new_privs, no core dumps, not dumpable, dropped uid/gid, parent-death
// signal re-armed) before the guest runs a single instruction. The guest
// sees the stdlib read-only, an in-memory bounded /tmp and /mnt/data, real
// clocks and crypto randomness, and nothing else: no host files, no
// environment (PYTHONHOME only on the cold path), no sockets.
//
// A worker that serves one session runs its guest without wazero's
// cancellation checks (they halved CPython's speed): such a guest is never
// stopped in the process, only killed with it. A worker that recycles
// (wire.Init.Interruptible) has them, to end a session's guest that will
// not exit on end of input. Before reporting ready, every session runs
// cellrunner.WarmUpCells through the whole run path (warmUp), so that its
// first call finds the image's pages touched.
//
// Guest stdout and stderr go to bounded in-memory buffers: bytes past the
// bound are counted and dropped as they are written, whether they come from
// print or os.write. The control protocol (package wire) runs on separate
// pipes the guest cannot reach. Between runs the worker also serves the
// server's file operations (put, get, list) itself, in Go, on the same memfs
// trees, charged to the same budget: the guest is blocked reading its next
// program meanwhile.
package worker
