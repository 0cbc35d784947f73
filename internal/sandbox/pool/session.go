package pool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/internal/wire"
)

// session is one interpreter's life as the caller sees it. When a run (or
// a file operation) ends its interpreter (timeout, memory, crash), the next
// operation gets a fresh one, and the next run says so (Result.StateLost).
type session struct {
	pool   *Pool
	id     string
	memory int64
	owner  string
	// egress is the session's proxy (nil: no network): every interpreter
	// it starts, the first and any replacement, is served by it, so its
	// budgets are the session's. Closed with the session.
	egress *egress.Session
	// gen is Generation: atomic so that reading it does not wait for a run.
	gen atomic.Uint64

	mu sync.Mutex // serialises runs and file operations and guards the fields below
	it *interp    // nil after the interpreter was lost
	// lost is set when an interpreter's state was lost and no run has
	// reported it yet (whichever operation started the replacement).
	lost   bool
	closed bool
	runID  uint64 // numbers runs and file operations alike

	// refill returns the spare token of the warm interpreter this session
	// took (nil: it took none), once: see deferRefill.
	refill func()
}

// deferRefill puts off replacing the warm interpreter the session took
// until its first run has ended, it closes, or refillDelay has passed,
// whichever comes first. Starting the replacement is a process, a cgroup
// and an interpreter start-up (a sandbox restore for gVisor): run beside the
// session's first call, on a small machine it takes the cores that call
// needs — the call a model waits for. A burst of opens still refills within
// refillDelay.
func (s *session) deferRefill() {
	p := s.pool
	once := sync.OnceFunc(func() { p.spares <- struct{}{} })
	t := time.AfterFunc(refillDelay, once)
	s.refill = func() {
		t.Stop()
		once()
	}
}

// refillDelay bounds how long a session's first run holds back the refill
// of the warm interpreter it took (a warm call takes about a millisecond).
const refillDelay = 250 * time.Millisecond

// refilled starts the deferred refill, if any. Callers hold s.mu.
func (s *session) refilled() {
	if s.refill != nil {
		s.refill()
		s.refill = nil
	}
}

func (s *session) ID() string { return s.id }

// WorkerPID is the process id of the session's interpreter, 0 when it has
// none (after Close or a loss): for diagnostics and tests of which process
// served which session.
func (s *session) WorkerPID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.it == nil {
		return 0
	}
	return s.it.PID()
}

func (s *session) Generation() uint64 { return s.gen.Load() }

// interpreter returns the session's interpreter, first replacing one that
// was lost or that died while idle (a process the last run left behind
// killed it, the OOM killer). Callers hold s.mu.
func (s *session) interpreter(ctx context.Context) (*interp, error) {
	if s.it != nil {
		select {
		case <-s.it.Exited():
			s.pool.release(s.it)
			s.it, s.lost = nil, true
		default:
		}
	}
	if s.it == nil {
		w, err := s.pool.start(ctx, s.pool.newID(), s.memory, false, s.egress, nil)
		if err != nil {
			return nil, err
		}
		w.owner, w.sessions = s.owner, 1
		s.it = w
		s.gen.Add(1)
	}
	return s.it, nil
}

func (s *session) Run(ctx context.Context, code string) (sandbox.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return sandbox.Result{}, sandbox.ErrClosed
	}
	start := time.Now()
	lim := s.pool.cfg.Limits
	if len(code) > lim.SourceBytes {
		return sandbox.Result{
			Outcome: sandbox.OutcomeRejected,
			Detail:  fmt.Sprintf("the code is %d bytes; the limit is %d", len(code), lim.SourceBytes),
		}, nil
	}
	w, err := s.interpreter(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return sandbox.Result{Outcome: sandbox.OutcomeCancelled, Detail: ctx.Err().Error()}, nil
		}
		return sandbox.Result{Outcome: sandbox.OutcomeCrashed, Detail: "could not start an interpreter: " + err.Error()}, nil
	}
	stateLost := s.lost
	s.lost = false
	s.runID++
	// The kind reports its own timeout with the output so far where it
	// can; this backstop covers an interpreter too stuck to do so.
	runCtx, cancel := context.WithTimeout(ctx, lim.RunTimeout+timeoutGrace)
	r, err := w.Run(runCtx, s.runID, []byte(code), lim.RunTimeout)
	backstop := errors.Is(runCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
	cancel()
	s.refilled()
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return s.lose(w, start, stateLost, sandbox.OutcomeCancelled, ctx.Err().Error()), nil
		case backstop:
			return s.lose(w, start, stateLost, sandbox.OutcomeTimeout,
				fmt.Sprintf("the code ran longer than %s and was stopped", lim.RunTimeout)), nil
		}
		// The interpreter died or broke protocol: once it is reaped, its
		// cgroup tells whether the kernel's OOM killer did it.
		w.Kill()
		if w.oomKilled() {
			return s.lose(w, start, stateLost, sandbox.OutcomeMemoryLimit, "the interpreter exceeded its memory limit and was killed"), nil
		}
		return s.lose(w, start, stateLost, sandbox.OutcomeCrashed, err.Error()), nil
	}
	res := s.result(r, stateLost)
	if r.InterpreterGone {
		w.Kill()
		if r.Status == wire.StatusExited && w.oomKilled() {
			// The interpreter did not exit on its own: the kernel's OOM
			// killer ended a process of it (gVisor's sentry, typically).
			res.Outcome = sandbox.OutcomeMemoryLimit
			res.Detail = fmt.Sprintf("the code ran out of its %d MiB of memory and the interpreter was killed", s.memory>>20)
		}
		s.pool.release(w)
		s.it, s.lost = nil, true
	}
	return res, nil
}

// lose kills and reaps the session's interpreter (before anything is
// released) and reports the outcome.
// Checkpoint implements sandbox.Session: the state of the session's
// interpreter between runs. A session with no live interpreter (never
// run since one was lost) has none to give.
func (s *session) Checkpoint(ctx context.Context) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, sandbox.ErrClosed
	}
	if s.it == nil || s.lost {
		return nil, fmt.Errorf("%w: the session has no interpreter", sandbox.ErrNoCheckpoint)
	}
	cp, ok := s.it.Interpreter.(Checkpointer)
	if !ok {
		return nil, fmt.Errorf("%w: the %s provider cannot checkpoint a session", sandbox.ErrNoCheckpoint, s.pool.kind.Name())
	}
	state, err := cp.Checkpoint(ctx)
	if err != nil && !errors.Is(err, sandbox.ErrNoCheckpoint) {
		// The interpreter broke protocol or died: it is not trusted on.
		s.lose(s.it, time.Now(), true, sandbox.OutcomeCrashed, "checkpoint: "+err.Error())
		return nil, fmt.Errorf("%w: %v", sandbox.ErrNoCheckpoint, err)
	}
	return state, err
}

func (s *session) lose(w *interp, start time.Time, stateLost bool, o sandbox.Outcome, detail string) sandbox.Result {
	s.pool.release(w)
	s.it, s.lost = nil, true
	s.pool.log.Info("sandbox interpreter ended", zap.String("provider", s.pool.kind.Name()), zap.String("session", s.id),
		zap.String("outcome", string(o)), zap.String("detail", detail))
	return sandbox.Result{Outcome: o, Detail: detail, Duration: time.Since(start), StateLost: stateLost}
}

func (s *session) result(r *wire.Result, stateLost bool) sandbox.Result {
	res := sandbox.Result{
		Stdout:          string(r.Stdout),
		Stderr:          string(r.Stderr),
		StdoutTruncated: r.StdoutDropped > 0,
		StderrTruncated: r.StderrDropped > 0,
		Duration:        time.Duration(r.DurationNanos),
		StateLost:       stateLost,
		Detail:          r.Detail,
	}
	if r.StdoutDropped > 0 {
		res.Stdout += truncationNote(r.StdoutDropped)
	}
	if r.StderrDropped > 0 {
		res.Stderr += truncationNote(r.StderrDropped)
	}
	for _, im := range r.Images {
		res.Images = append(res.Images, sandbox.Image{MediaType: im.MediaType, Data: im.Data})
	}
	if r.ImagesDropped > 0 {
		res.Stderr += fmt.Sprintf("\n[%d more figures were not kept: the run made more than the limit]\n", r.ImagesDropped)
	}
	switch r.Status {
	case wire.StatusOK:
		res.Outcome = sandbox.OutcomeCompleted
	case wire.StatusError:
		res.Outcome = sandbox.OutcomeError
	case wire.StatusMemory:
		res.Outcome = sandbox.OutcomeMemoryLimit
		res.Detail = fmt.Sprintf("the code ran out of its %d MiB of memory", s.memory>>20)
	case wire.StatusTimeout:
		res.Outcome = sandbox.OutcomeTimeout
		res.Detail = fmt.Sprintf("the code ran longer than %s and was stopped", s.pool.cfg.Limits.RunTimeout)
	case wire.StatusExited:
		res.Outcome = sandbox.OutcomeCompleted
		if r.Detail != ExitedCleanly {
			res.Outcome = sandbox.OutcomeCrashed
		}
	default:
		res.Outcome = sandbox.OutcomeCrashed
		res.Detail = "unknown status " + r.Status
	}
	if res.Outcome == sandbox.OutcomeCompleted && (res.StdoutTruncated || res.StderrTruncated) {
		res.Outcome = sandbox.OutcomeOutputTruncated
	}
	return res
}

// ExitedCleanly is the Detail of a wire.StatusExited report whose
// interpreter ended with status 0 (sys.exit() at the top level, os._exit(0)):
// the run completed, though the session's state is gone.
const ExitedCleanly = "the interpreter exited with status 0"

// timeoutGrace is how long past the run's limit the pool waits for the
// interpreter's own timeout report before it kills the interpreter.
const timeoutGrace = 2 * time.Second

func truncationNote(dropped int64) string {
	return fmt.Sprintf("\n[output truncated: %d more bytes were not kept]\n", dropped)
}

// Close ends the session and returns at once: killing and reaping the
// interpreter (about 10 ms for a worker process: its address space and
// namespaces are torn down) and removing its cgroup happen in the
// background, and only after that is the session's slot released, so
// capacity never counts an interpreter that still exists.
// closeEgress ends the session's proxy, once its interpreter is gone.
func (s *session) closeEgress() {
	if s.egress != nil {
		if err := s.egress.Close(); err != nil {
			s.pool.log.Warn("closing a session's egress proxy failed", zap.Error(err))
		}
		if f := s.pool.cfg.EgressUsed; f != nil && s.owner != "" {
			if n := s.egress.BytesUsed(); n > 0 {
				f(s.owner, n)
			}
		}
	}
}

func (s *session) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.refilled()
	w := s.it
	s.it = nil
	p := s.pool
	end := func() {
		if w != nil {
			p.recycleOrRelease(w)
		}
		s.closeEgress()
		<-p.slots
	}
	// The check and the Add are one step under p.mu, and Pool.Close sets
	// closed under p.mu before it waits: no Add can race its Wait.
	p.mu.Lock()
	if p.closed.Load() {
		p.mu.Unlock()
		end()
		return nil
	}
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		end()
	}()
	return nil
}
