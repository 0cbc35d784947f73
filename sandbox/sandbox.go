package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"
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
	// Close ends the session and releases its capacity. It is idempotent.
	Close() error
}

// SessionOptions tunes one session within the operator's limits.
type SessionOptions struct {
	// MemoryBytes asks for a guest memory size; zero means the operator's
	// default. Values above the operator's maximum are an error.
	MemoryBytes int64
}

// Capacity is a snapshot of a provider's occupancy.
type Capacity struct {
	InUse int // sessions open now
	Max   int // sessions allowed at once
	Warm  int // pre-started interpreters waiting for a session
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
}

// Image is one picture a run produced.
type Image struct {
	MediaType string // e.g. "image/png"
	Data      []byte // the encoded image
}

// ErrCapacity is matched (errors.Is) by errors that mean no interpreter was
// available within the queue wait.
var ErrCapacity = errors.New("sandbox: capacity exhausted")

// ErrClosed is matched by errors from a closed Session or Provider.
var ErrClosed = errors.New("sandbox: closed")

// LimitError reports a request outside the operator's limits.
type LimitError struct {
	Limit string // the limit's name, e.g. "memory"
	Value int64
	Max   int64
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("sandbox: %s %d exceeds the maximum %d", e.Limit, e.Value, e.Max)
}
