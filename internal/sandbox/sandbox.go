package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/codeinterp/codeinterp/internal/allowlist"
)

// Provider hands out isolated Python sessions. One Session serves one
// response (one container): Python state persists across its runs and is
// never visible to another Session.
type Provider interface {
	// Open starts a session. It waits at most the provider's queue wait for
	// capacity and fails with an error matching ErrCapacity when none frees up.
	Open(ctx context.Context, opts SessionOptions) (Session, error)
	// Ready reports whether the provider can serve sessions now.
	Ready(ctx context.Context) error
	// Capacity reports the provider's current occupancy.
	Capacity() Capacity
	// Close stops every worker; open sessions fail afterwards.
	Close() error
	// Environment says what code running in a session can use, as found
	// on the running provider (for the tool description the model reads).
	Environment() Environment
}

// Environment describes a provider's interpreter.
type Environment struct {
	// Provider is the provider's name ("wasm", "gvisor").
	Provider string
	// PythonVersion is the interpreter's "major.minor" version.
	PythonVersion string
	// Packages are the notable third-party packages code can import, by
	// import name, sorted. Empty means the standard library only.
	Packages []string
	// Images reports whether figures a run leaves open come back as images.
	Images bool
	// Network reports whether sessions can be given an egress allowlist
	// (SessionOptions.Network): the gVisor provider with the operator's
	// sandbox.network.allowed_domains set. Without it every sandbox has no
	// network at all.
	Network bool
	// Shell reports whether sessions run shell commands (Sheller: the
	// hosted shell tool). The gVisor provider has bash; WASM has none.
	Shell bool
}

// Session is one interpreter's life. Runs on a Session are serialised.
type Session interface {
	// ID is a stable identifier, suitable for logs.
	ID() string
	// Run executes code with the session's state. Outcomes of the code
	// itself (errors, limits, timeouts, crashes) are reported in Result; an
	// error means the run could not be attempted (session closed, bad input
	// caught before running, provider shut down). When ctx ends during a run,
	// the worker is killed and reaped before Run returns OutcomeCancelled.
	Run(ctx context.Context, code string) (Result, error)
	// WriteFile creates or replaces a regular file at path (absolute, under
	// /mnt/data or /tmp) with data. What stands in its way is removed first:
	// whatever is at path that is not a regular file (a directory with
	// everything below it, a symbolic link, a FIFO), and whatever is not a
	// directory where one of path's parents must be (missing parents are
	// made). Links are never followed. It stays within the session's
	// scratch bound: an error matching ErrScratchFull when data does not
	// fit, ErrTooLarge above MaxFileBytes. On failure the file is not
	// written and no directory made for it stays; what was removed to make
	// way stays removed.
	WriteFile(ctx context.Context, path string, data []byte) error
	// ReadFile returns a regular file's bytes: an error matching ErrNotExist
	// (and fs.ErrNotExist) if there is none at path (a directory or a
	// symbolic link is not one: links are never followed), ErrTooLarge if it
	// holds more than max bytes (or MaxFileBytes).
	ReadFile(ctx context.Context, path string, max int64) ([]byte, error)
	// ListFiles lists the regular files below dir, recursively, sorted by
	// path (absolute), with size and modification time. Symbolic links are
	// neither listed nor followed; names that are not UTF-8 or longer than
	// MaxPathBytes cannot be named in the answer and are left out. More
	// files than one listing carries is never an error: the Listing is
	// Truncated.
	ListFiles(ctx context.Context, dir string) (Listing, error)
	// RemoveFiles removes what is at each path (absolute, under /mnt/data or
	// /tmp, not a root itself): a regular file, a symbolic link or other
	// non-directory, or a directory with everything below it. A path with
	// nothing at it is not an error. Links are never followed: a link is
	// removed, never its target, and a link in a parent's place means there
	// is nothing at the path. Paths are checked (cleanPath) before anything
	// is sent: one invalid path fails the call with ErrInvalidPath and
	// removes nothing.
	RemoveFiles(ctx context.Context, paths []string) error
	// Generation counts the interpreters this session has had: it grows by
	// one each time a fresh interpreter starts (the first, and each after
	// one was lost). Files and variables of an earlier generation are gone.
	//
	// Like Run, a file operation on a session whose interpreter was lost
	// first starts a fresh one; a file operation that gets no answer (the
	// interpreter died, or ctx ended during it) loses the interpreter, and
	// the next Run reports StateLost.
	Generation() uint64
	// Close ends the session and releases its capacity. It is idempotent.
	Close() error
	// Checkpoint returns the state of the session's interpreter between
	// runs (variables, imports, /tmp), for a later SessionOptions.Restore
	// on this server or another; the session goes on unchanged. An error
	// wrapping ErrNoCheckpoint says there is none to take now (no
	// interpreter, files held open, a provider that cannot checkpoint),
	// and nothing is harmed.
	Checkpoint(ctx context.Context) ([]byte, error)
}

// Listing is one ListFiles answer.
type Listing struct {
	Files []FileInfo // sorted by path
	// Truncated is set when dir holds more regular files than one listing carries
	// (MaxListFiles, or more than wire.MaxListPathTotal bytes of paths): Files is then
	// some of them (which ones is not promised), and never an error.
	Truncated bool
}

// FileInfo describes one regular file of a session's scratch space.
type FileInfo struct {
	Path    string // absolute and clean, e.g. "/mnt/data/out/result.csv"
	Size    int64
	ModTime time.Time
}

// Bounds of the file operations. Files travel whole in one control frame
// of the interpreter's protocol (64 MiB, base64 inside JSON), so one file is
// bounded below that whatever the scratch space holds.
const (
	MaxFileBytes = 32 << 20 // the largest file WriteFile and ReadFile move
	MaxListFiles = 10000    // the most files one ListFiles returns (more: Listing.Truncated)
	MaxPathBytes = 4096     // the longest path (Linux's PATH_MAX)
)

// SessionOptions tunes one session within the operator's limits.
type SessionOptions struct {
	// MemoryBytes asks for a guest memory size; zero means the operator's
	// default. Values above the operator's maximum are an error.
	MemoryBytes int64
	// Owner is the caller's identity (store.Owner of its credential), ""
	// when unknown. With sandbox.sessions_per_worker > 1 an interpreter
	// process serves several sessions in turn, but only of one non-empty
	// owner; sessions with no owner never share a process.
	Owner string
	// Network is the session's egress allowlist (a network_policy of type
	// allowlist, already checked against the operator's bound); nil, the
	// default, leaves the sandbox with no network at all. A session with
	// one always gets an interpreter of its own, started for it (never a
	// warm or recycled one) and never reused. A provider whose
	// Environment().Network is false fails the Open with ErrNoNetwork.
	Network *allowlist.Policy
	// Restore is a state a session of this provider returned from
	// Checkpoint: the session starts from it (its variables, imports and
	// /tmp) rather than a fresh interpreter. It must be the provider's own
	// (sealed and checked by the caller); one the provider definitely
	// cannot use fails the Open with an error wrapping ErrNoCheckpoint.
	// An Open that fails for any other reason (see ErrNoCheckpoint) says
	// nothing of the state: it may restore on a later try.
	Restore []byte
}

// ErrNoCheckpoint says a session's state cannot be checkpointed or
// restored; the session, or a fresh interpreter, goes on.
//
// On a restore (SessionOptions.Restore) it is a definite refusal, and
// callers may drop the state: an error wraps it only when the state can
// never be restored by this provider as configured — it is corrupt or
// cut short, it was made by another runtime or under other sandbox
// limits, the snapshot it was taken over is gone for good (no longer on
// this server, and its Bases does not have it or has one that fails its
// check, or it is of another runtime), or the provider cannot restore
// sessions at all. A failure that a later try may not meet never wraps
// it and is returned as it is: the caller's context ending (a refusal
// made while it ended included), a start or fetch timeout, no capacity,
// a worker or runsc that failed to start or run, a store or network
// error fetching a base, a local disk error. Callers keep the state
// then, and report a retryable error.
//
// On a checkpoint (Session.Checkpoint) it says there is none to take
// now, for any reason (open files, a state above the provider's bound,
// an interpreter that failed), and the session goes on.
var ErrNoCheckpoint = errors.New("sandbox: no checkpoint")

// Capacity is a snapshot of a provider's occupancy.
type Capacity struct {
	InUse int // sessions open now
	Max   int // sessions allowed at once
	Warm  int // pre-started interpreters waiting for a session
	// Waiting is how many opens are queued for a session to close: a
	// holder of idle sessions (the containers manager) closes one for them.
	Waiting int
}

// Outcome is the typed result of one run.
type Outcome string

// The outcomes a run can end with.
const (
	OutcomeCompleted       Outcome = "completed"          // the code ran to its end
	OutcomeError           Outcome = "error"              // a Python exception escaped; traceback in Stderr
	OutcomeTimeout         Outcome = "timeout"            // wall-time limit hit; the worker was killed
	OutcomeMemoryLimit     Outcome = "memory_limit"       // guest memory or worker cgroup limit hit
	OutcomeOutputTruncated Outcome = "output_truncated"   // the code ran, but stdout or stderr hit its bound
	OutcomeCapacity        Outcome = "capacity_exhausted" // no interpreter could be had in time
	OutcomeCancelled       Outcome = "cancelled"          // the caller's context ended; the worker was killed
	OutcomeCrashed         Outcome = "crashed"            // the worker died unexpectedly
	OutcomeRejected        Outcome = "rejected"           // the code was refused before running (e.g. too large)
)

// Failed reports whether the code did not run to completion on its own.
func (o Outcome) Failed() bool { return o != OutcomeCompleted && o != OutcomeOutputTruncated }

// LimitHit reports whether a resource limit (not the code's own logic) ended
// or cut the run.
func (o Outcome) LimitHit() bool {
	switch o {
	case OutcomeTimeout, OutcomeMemoryLimit, OutcomeOutputTruncated, OutcomeCapacity, OutcomeRejected:
		return true
	}
	return false
}

// Result is what one run produced.
type Result struct {
	Outcome         Outcome
	Stdout          string
	Stderr          string
	StdoutTruncated bool
	StderrTruncated bool
	Duration        time.Duration
	// StateLost is set when this run's interpreter is not the one the session
	// started with: an earlier run ended it (timeout, memory, crash), so
	// variables from before are gone.
	StateLost bool
	// Detail is a short human-readable reason for a non-completed outcome.
	Detail string
	// Images are the figures the run produced (a notebook shows them after
	// the cell), in the order they were made. Providers without a plotting
	// library return none.
	Images []Image
	// Commands are a shell run's results, one per command (Sheller); nil
	// for a Python run.
	Commands []CommandResult `json:",omitempty"`
}

// Image is one picture a run produced.
type Image struct {
	MediaType string // e.g. "image/png"
	Data      []byte // the encoded image
}

// ErrCapacity is matched (errors.Is) by errors that mean no interpreter was
// available within the queue wait.
var ErrCapacity = errors.New("sandbox: capacity exhausted")

// ErrNoNetwork is matched by an Open error when SessionOptions.Network is
// set and the provider cannot give a sandbox a network.
var ErrNoNetwork = errors.New("sandbox: this provider's sandbox has no network")

// ErrClosed is matched by errors from a closed Session or Provider.
var ErrClosed = errors.New("sandbox: closed")

// ErrScratchFull is matched by a WriteFile error when the file does not fit
// in the session's scratch space (/tmp and /mnt/data).
var ErrScratchFull = errors.New("sandbox: scratch space full")

// ErrTooLarge is matched by errors for a file above a bound (and for a
// directory tree too deep for the interpreter to walk).
var ErrTooLarge = errors.New("sandbox: too large")

// ErrNotExist is matched by a ReadFile or ListFiles error when there is no
// regular file (or directory) at the path. It wraps fs.ErrNotExist.
var ErrNotExist = fmt.Errorf("sandbox: no such file: %w", fs.ErrNotExist)

// ErrInvalidPath is matched by errors for a path the file operations refuse:
// relative, outside /mnt/data and /tmp (".." that climbs out of them), one of
// those roots where a file is meant, with a NUL byte or not UTF-8, longer
// than MaxPathBytes, with a name longer than a directory entry holds (255
// bytes; RemoveFiles finds nothing at such a path instead), or (ListFiles)
// not naming a directory. It wraps fs.ErrInvalid.
var ErrInvalidPath = fmt.Errorf("sandbox: invalid path: %w", fs.ErrInvalid)

// LimitError reports a request outside the operator's limits.
type LimitError struct {
	Limit string // the limit's name, e.g. "memory"
	Value int64
	Max   int64
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("sandbox: %s %d exceeds the maximum %d", e.Limit, e.Value, e.Max)
}
