// Package gvisor is a pool.Kind that runs Debian's CPython (/usr/bin/python3
// with numpy, pandas, matplotlib, scipy, …) inside gVisor, one sandbox per
// interpreter, never reused between sessions.
//
// # Isolation layers, outermost first
//
//   - cgroup: the pool makes one group per interpreter (memory with no swap,
//     pids, CPU). Start spawns a launcher (the server binary re-executed
//     with a hidden command, LaunchMain) with an empty environment, its own
//     process group and a parent-death signal; it blocks on a pipe until
//     the server has confined and verified it, then execs runsc, so runsc,
//     its gofer, its sentry and every stub process that runs guest threads
//     (systrap and ptrace alike) are born inside the group. The pids limit
//     therefore bounds guest threads and processes too; the memory limit
//     bounds the sentry's memory file, which holds the guest's memory and
//     its tmpfs. Kill SIGKILLs the process group and the whole cgroup.
//   - gVisor: runsc --network=none (loopback only) --host-uds=none (open, to
//     connect to its egress proxy's socket only, for a session with a
//     network_policy allowlist: network.go)
//     --host-fifo=open (only the two control FIFOs below are host FIFOs)
//     --ignore-cgroups (the server owns them) --platform=systrap (default;
//     Config.Platform: ptrace or kvm). Guest syscalls are served by the
//     sentry, a user-space kernel: on systrap the stub processes that run
//     guest code have a seccomp filter that traps every system call into
//     it; the host kernel sees only the sentry's and gofer's own
//     seccomp-filtered calls. runsc is the pinned gVisor (pin.go,
//     runtime/build-runsc.sh); Prepare refuses any other version.
//   - the OCI bundle (written by the server from runtime-spec types): the
//     root is Config.RootFS, read-only — a Debian tree holding Debian's
//     essential set, python3 and the data-science packages, built with
//     mmdebstrap from the machine's apt sources by
//     runtime/build-gvisor-rootfs.sh (`make setup`; the gVisor image ships
//     the same tree), so nothing of the host's /usr or /etc is visible and
//     the sandbox is the same on every machine; a synthetic /etc/passwd,
//     /etc/group (one user) and /etc/hosts bound over the tree's; tmpfs
//     /tmp and /mnt/data (nosuid, nodev) of Limits.ScratchBytes each (both
//     live in the sentry's memory, so the cgroup bounds their sum with the
//     rest), the only writable paths;
//     pid, network, ipc, uts (hostname "sandbox") and mount namespaces; uid
//     and gid 65534 with no supplementary groups, no capabilities,
//     no_new_privs, RLIMIT_NOFILE 1024, RLIMIT_CORE 0, RLIMIT_AS (session
//     memory + 1.5 GiB, which the kernel sets on itself from its begin
//     frame: gVisor enforces it, so one huge allocation raises
//     MemoryError instead of an OOM kill of the sandbox; memory touched bit
//     by bit still ends in the cgroup's OOM kill, which the pool reports)
//     and RLIMIT_NPROC derived from Limits.Pids (gVisor enforces it on the
//     guest's tasks; without it a fork bomb exhausts the cgroup's pids and
//     the sentry dies — an idle sandbox already holds ≈80 host threads, so
//     this kind needs pids ≈512, RecommendedPids). The environment
//     is PATH, HOME=/tmp, LANG=C.UTF-8, MPLBACKEND=Agg, MPLCONFIGDIR and
//     glibc's MALLOC_* tunables (guestEnv).
//     Nothing of the host — no /root, /home, /usr, /usr/local, /etc,
//     resolv.conf, server binary or state directory — is visible.
//   - the host end: the guest's stdout and stderr are host pipes drained
//     for the sandbox's life and bounded per run as they are read; a run's
//     output ends at a marker carrying a fresh random nonce. Control frames
//     (4-byte length + JSON, sandbox/internal/wire's framing) travel on two
//     FIFOs bind-mounted as files at /run/ci/in and /run/ci/out; the host
//     bounds each frame (the base64 of the larger of the images' bound and
//     sandbox.MaxFileBytes, + 1 MiB) and validates kind, run id, status,
//     and image type, count and size; a file operation's answer must be a
//     file result, which the pool checks like every kind's
//     (wire.CheckFileResult: the request id, the error code, the bytes
//     against the read's bound, every listed path against the listed
//     directory). Code that forges a frame or a marker can only break its
//     own session: Run or File returns an error and the pool kills the
//     sandbox.
//   - the wall clock: the kernel arms an ITIMER_REAL alarm for the run's
//     timeout (a clean traceback for Python-level loops), and the host kills
//     the whole sandbox one second later whatever the guest does (a C loop
//     in numpy ignores Python's signals).
//
// # Network (network.go)
//
// A session with a network_policy allowlist (pool.StartOptions.Egress)
// keeps --network=none. The pool's egress.Session serves a unix socket in
// the interpreter's directory, bind-mounted read-only at /srv (an empty
// directory of every Debian root: runsc would make a missing mount point
// in the shared root on the host) with the CA bundle beside it; the begin
// frame starts the kernel's relay on 127.0.0.1:3128 and sets HTTP(S)_PROXY,
// the CA variables, pip's user install and the secrets' placeholders. The
// proxy enforces everything; sealed sessions are unchanged.
//
// # Checkpoints (checkpoint.go)
//
// With Config.ColdStart false (sandbox.snapshot: true, the default) a
// session's sandbox is not booted: it is restored (runsc restore) from a
// checkpoint of a sandbox whose kernel had imported the stack and reported
// ready. The checkpoint is taken by a trusted step that runs no user code:
// Prepare takes the first one for the pool's limits (it doubles as the
// probe), then every Config.SnapshotRotateSessions sessions a new one is
// taken in the background and replaces it; an image is removed once no
// restore is reading it. A restore keeps the image's tmpfs sizes and
// rlimits whatever the new spec says, so images are kept per imageKey
// (scratch size, RLIMIT_NPROC), and each records a runtimeStamp (runsc's
// binary and the root's MANIFEST; images live only in this process's state
// directory, so its kernel and configuration are fixed): an image
// whose stamp no longer matches is not restored. Only the mount sources
// differ per session (its FIFOs), and stdout and stderr are the new runsc's.
//
// Both ways, the kernel's first frame is "begin", sent by the host before
// any user code: the kernel sets RLIMIT_AS for the session, reseeds every
// generator the image could share (random, numpy's global RandomState,
// tempfile's names, multiprocessing's authkey; os.urandom, secrets, uuid4
// and numpy's default_rng read gVisor's getrandom, fresh in each restored
// sandbox) and answers ready. Clocks are the host's. What a restored session
// shares with the others of its image is the memory the trusted step left:
// the str hash seed and the address-space layout (docs/security.md).
//
// # The kernel
//
// kernel.py (embedded after sandbox/internal/cellrunner's cell runner, which
// the WASM guest's kernel shares, and passed to python3 -E -s -u -B -c) is
// one long-lived process per sandbox. It opens the FIFOs and moves them to fds
// 1000 and 1001, imports numpy, pandas and matplotlib (Agg; plt.show is a
// no-op that leaves figures for the capture) before reporting ready — the
// pool's warm interpreters pay those ≈2 s before a session needs them —
// and lists which packages of interest the sandbox's Python can import
// (Kind.Packages, Kind.Environment). Each run is compiled with its last
// expression shown as in a notebook, executed in one persistent namespace
// (__name__ "__main__", cwd /mnt/data on sys.path), tracebacks show the
// cell's source; afterwards every open figure is saved as PNG and closed
// (Config.ImageMaxCount / ImageMaxBytes; the rest are counted as dropped).
//
// Between runs the kernel also serves the session's file operations (put,
// get, list, remove: sandbox.Session's WriteFile, ReadFile, ListFiles and
// RemoveFiles) on the tmpfs mounts. They work from directory descriptors and
// never follow a symbolic link: every directory component is checked by
// lstat and by inode after it is opened (runsc follows a final link despite
// O_NOFOLLOW when O_DIRECTORY is given), files are opened O_NOFOLLOW and
// must be regular. A put makes way first (what is not a directory where a
// parent must be is unlinked and a directory made; what is not a regular
// file at the target is removed, a directory as a remove does), then writes
// a temporary file beside the target and renames it into place; when the
// tmpfs is full (ENOSPC: its size is the scratch bound) the temporary file
// and any directories made for it are removed. A remove unlinks what is not
// a directory (a link itself, never its target) and empties a directory
// depth first from descriptors, climbing back by ".." checked against the
// inode it came from, so a tree of any depth holds at most three
// descriptors; each directory is made writable (fchmod) before it is
// emptied, so a mode the code set does not stop it.
//
// # Measured on a 2-core bookworm VM (runsc 0.0~20221219, ptrace)
//
// Cold start to ready 2.6–3.5 s; warm print(25) round trip 0.8–1.7 ms; a
// pandas groupby + matplotlib PNG 155–164 ms in the sandbox vs 49–56 ms in
// native /usr/bin/python3; a warm sandbox uses ≈95 MiB of cgroup memory (the sum
// of its processes' RSS is ≈210 MiB because the sentry's memory file is
// mapped by several of them). See the Recommended* constants.
package gvisor
