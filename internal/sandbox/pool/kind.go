package pool

import (
	"context"
	"time"

	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/cgroup"
	"github.com/codeinterp/codeinterp/internal/sandbox/internal/wire"
)

// Kind is one sort of interpreter the pool manages: CPython-WASI worker
// processes (sandbox/wasm) or gVisor sandboxes (sandbox/gvisor). The pool
// owns everything the kinds share — session slots, the warm pool and its
// refills, queue wait, the cgroup of each interpreter, kill-and-reap before
// capacity is released, the run's time backstop and the mapping of reports
// to typed outcomes — so a kind only starts an interpreter and speaks its
// protocol.
type Kind interface {
	// Name is the provider's name in configuration and logs ("wasm").
	Name() string
	// Prepare runs once, in New, before any interpreter starts: it checks
	// that the runtime is present and usable and does trusted set-up work
	// (compilation caches, bundle roots). Its error says what to install.
	Prepare(ctx context.Context) error
	// MaxMemoryBytes is the largest session memory the kind can honour.
	MaxMemoryBytes() int64
	// Environment describes the interpreter; valid after Prepare.
	Environment() sandbox.Environment
	// Start starts one interpreter and returns once it is warm and waiting
	// for its first program. It must call o.Confine with the process id of
	// the interpreter's outermost process before that process can run
	// anything untrusted (and before it starts children), and fail if
	// Confine fails.
	Start(ctx context.Context, o StartOptions) (Interpreter, error)
	// Close releases what Prepare set up. The pool calls it after every
	// interpreter has been killed and reaped.
	Close() error
}

// StartOptions are one interpreter's settings.
type StartOptions struct {
	ID          string // unique, safe in file and cgroup names
	MemoryBytes int64  // the session's memory (guest or sandbox)
	Limits      Limits // the operator's limits (output, scratch, pids, ...)
	// Background marks a warm refill nobody waits for: the kind should run
	// it at low priority (see Interpreter.Foreground).
	Background bool
	// Confine adds pid to the interpreter's own cgroup and verifies the
	// membership from the kernel. It is a no-op when isolation is off.
	Confine func(pid int) error
	// Group is the interpreter's cgroup (nil when isolation is off), for a
	// kind whose interpreter is several processes to kill them all.
	Group cgroup.Group
	// Egress is the session's proxy (the pool opened it from
	// sandbox.SessionOptions.Network); nil: no network. The kind serves it
	// where its sandbox can reach it for the interpreter's life (it does
	// not close it: the session outlives its interpreters). The pool
	// starts such an interpreter for one session only, and only on a kind
	// whose Environment().Network is set.
	Egress *egress.Session
	// Restore is a Checkpointer's state the interpreter resumes from
	// instead of starting fresh (nil: fresh). A kind that cannot restore
	// it, or that finds it does not match what it runs, fails the start.
	// It fails with an error wrapping sandbox.ErrNoCheckpoint only when
	// the state definitely can never be restored here (the rule is
	// sandbox.ErrNoCheckpoint's); any other failure (ctx, a timeout, a
	// process or store that failed) is returned as it is, and the pool
	// passes it on unchanged.
	Restore []byte
}

// Checkpointer is implemented by interpreters whose state can be taken
// between runs and restored into a new interpreter (StartOptions.Restore),
// in this process or another server's: a wasm worker.
type Checkpointer interface {
	// Checkpoint returns the interpreter's state, opaque to the pool; the
	// interpreter goes on unchanged. A state that cannot be taken now
	// (the code holds open files) is an error wrapping
	// sandbox.ErrNoCheckpoint, and the interpreter is unharmed; any other
	// error means the pool kills it.
	Checkpoint(ctx context.Context) ([]byte, error)
}

// SessionRestorer is implemented by kinds whose Start honours
// StartOptions.Restore; the pool refuses a restore on any other kind
// rather than start a fresh interpreter in its place.
type SessionRestorer interface {
	// RestoresSessions reports whether this kind, as configured, can.
	RestoresSessions() bool
}

// RefillWeigher is implemented by kinds whose warm-pool refills must
// yield the CPU to running sessions (issue 41: a gVisor session's cell
// needs its stub and its sentry on a core each, and refills took them
// right after a burst of new sessions). A refill's cgroup gets
// RefillCPUWeight (cgroup v2 units, the kernel's default 100) while it
// starts and waits warm, and cgroup.DefaultCPUWeight once a session takes
// it. The quota is the same either way: with no session running, a
// refill gets the whole core.
type RefillWeigher interface {
	RefillCPUWeight() uint64
}

// Recycler is implemented by interpreters whose process can start a fresh
// interpreter in place (a WASM worker restoring its snapshot): the pool
// uses it for sessions_per_worker > 1.
type Recycler interface {
	// Recycle ends the current interpreter and starts a fresh one in the
	// same process; nothing of the old one (memory, files, output) may
	// remain. It returns once the new one waits for its first program. On
	// error the pool kills the process.
	Recycle(ctx context.Context) error
}

// Interpreter is one started interpreter. The pool serialises calls to Run
// and File.
type Interpreter interface {
	// PID is the process id of the interpreter's outermost process.
	PID() int
	// Run sends one program and waits for its report. timeout is the run's
	// wall-time limit, which the kind enforces itself where it can so that
	// the output so far is kept (reporting wire.StatusTimeout and
	// InterpreterGone). Run returns an error when no report could be had:
	// the interpreter died, broke protocol, or ctx ended (the pool's backstop
	// deadline or the caller's cancellation). The pool then kills it.
	Run(ctx context.Context, runID uint64, code []byte, timeout time.Duration) (*wire.Result, error)
	// File performs one operation on the interpreter's scratch space while
	// no run is in progress: kind is wire.KindPut, KindGet, KindList or
	// KindRemove, and req.Path (req.Paths for a removal) is clean, absolute
	// and under /mnt/data or /tmp (the pool checked it). It returns the interpreter's answer with req.ID, whose
	// Error says whether the operation itself failed (the interpreter stays
	// usable then). Like Run, an error means no valid answer could be had:
	// the interpreter died, broke protocol, or ctx ended; the pool then kills
	// it. The pool maps answers to typed errors and enforces the bounds
	// (sizes, counts, paths) again, so a kind only does the operation.
	File(ctx context.Context, kind string, req *wire.FileRequest) (*wire.FileResult, error)
	// Foreground restores normal priority to a warm interpreter handed to a
	// session.
	Foreground()
	// Kill ends every process of the interpreter and returns once they are
	// reaped. It is idempotent and safe from several goroutines.
	Kill()
	// Exited is closed once the interpreter's processes are reaped, whether
	// Kill ended them or they died.
	Exited() <-chan struct{}
	// Diagnostics is a short tail of the interpreter's own diagnostic
	// output (never guest output), for error messages.
	Diagnostics() string
}

// Sheller is implemented by interpreters that run shell commands beside
// their Python (sandbox.Sheller; a gVisor sandbox's bash). The pool
// serialises it with Run and File.
type Sheller interface {
	// Shell runs commands one after another, each bounded by timeout
	// (the kind kills a command past it, with its process group, and
	// reports it TimedOut), each command's stdout and stderr bounded by
	// the Limits' StdoutBytes and StderrBytes. onOutput (may be nil) gets
	// each piece of output as it comes. It returns one result per command
	// that ran; an error means no valid answer could be had (the
	// interpreter died, broke protocol, or ctx ended), and the pool kills
	// the interpreter.
	Shell(ctx context.Context, runID uint64, commands []string, timeout time.Duration, onOutput func(command int, stdout, stderr string)) ([]sandbox.CommandResult, error)
}
