package pool

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/sandbox"
	"github.com/codeinterp/codeinterp/sandbox/internal/wire"
)

// session is one interpreter's life as the caller sees it. When a run ends
// its interpreter (timeout, memory, crash), the next run gets a fresh one
// and says so (Result.StateLost).
type session struct {
	pool     *Pool
	id       string
	guestMem int64

	mu     sync.Mutex // serialises runs and guards the fields below
	proc   *proc      // nil after the interpreter was lost
	lost   bool
	closed bool
	runID  uint64
}

func (s *session) ID() string { return s.id }

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
	stateLost := false
	if s.proc == nil {
		w, err := s.pool.spawn(ctx, spawnOpts{id: s.pool.newID(), guestMem: s.guestMem})
		if err != nil {
			if ctx.Err() != nil {
				return sandbox.Result{Outcome: sandbox.OutcomeCancelled, Detail: ctx.Err().Error()}, nil
			}
			return sandbox.Result{Outcome: sandbox.OutcomeCrashed, Detail: "could not start an interpreter: " + err.Error()}, nil
		}
		s.proc, stateLost = w, s.lost
	}
	s.runID++
	w := s.proc
	if err := wire.Write(w.ctl, &wire.Msg{Kind: wire.KindRun, Run: &wire.Run{
		ID: s.runID, Code: []byte(code), TimeoutNanos: lim.RunTimeout.Nanoseconds(),
	}}); err != nil {
		return s.lose(w, start, stateLost, sandbox.OutcomeCrashed, "the worker stopped accepting work"), nil
	}
	// The worker reports its own timeout with the output so far; this
	// backstop covers a worker too stuck to do so.
	timer := time.NewTimer(lim.RunTimeout + timeoutGrace)
	defer timer.Stop()
	for {
		select {
		case m, ok := <-w.msgs:
			if !ok {
				// The worker died mid-run: its cgroup tells whether the
				// kernel's OOM killer did it.
				<-w.exited
				if w.oomKilled() {
					return s.lose(w, start, stateLost, sandbox.OutcomeMemoryLimit, "the worker exceeded its memory limit and was killed"), nil
				}
				return s.lose(w, start, stateLost, sandbox.OutcomeCrashed, fmt.Sprintf("the worker died (%v)", w.waitErr)), nil
			}
			if m.Kind != wire.KindResult || m.Result == nil || m.Result.ID != s.runID {
				return s.lose(w, start, stateLost, sandbox.OutcomeCrashed, "the worker broke protocol"), nil
			}
			res := s.result(m.Result, stateLost)
			if m.Result.InterpreterGone {
				w.kill()
				s.pool.release(w)
				s.proc, s.lost = nil, true
			}
			return res, nil
		case <-timer.C:
			return s.lose(w, start, stateLost, sandbox.OutcomeTimeout,
				fmt.Sprintf("the code ran longer than %s and was stopped", lim.RunTimeout)), nil
		case <-ctx.Done():
			return s.lose(w, start, stateLost, sandbox.OutcomeCancelled, ctx.Err().Error()), nil
		}
	}
}

// lose kills and reaps the session's worker (before anything is released)
// and reports the outcome.
func (s *session) lose(w *proc, start time.Time, stateLost bool, o sandbox.Outcome, detail string) sandbox.Result {
	w.kill()
	s.pool.release(w)
	s.proc, s.lost = nil, true
	s.pool.log.Info("sandbox worker ended", zap.String("session", s.id), zap.String("outcome", string(o)), zap.String("detail", detail))
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
	switch r.Status {
	case wire.StatusOK:
		res.Outcome = sandbox.OutcomeCompleted
	case wire.StatusError:
		res.Outcome = sandbox.OutcomeError
	case wire.StatusMemory:
		res.Outcome = sandbox.OutcomeMemoryLimit
		res.Detail = fmt.Sprintf("the code ran out of its %d MiB of memory", s.guestMem>>20)
	case wire.StatusTimeout:
		res.Outcome = sandbox.OutcomeTimeout
		res.Detail = fmt.Sprintf("the code ran longer than %s and was stopped", s.pool.cfg.Limits.RunTimeout)
	case wire.StatusExited:
		res.Outcome = sandbox.OutcomeCompleted
		if r.Detail != "the interpreter exited with status 0" {
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

// timeoutGrace is how long past the run's limit the server waits for the
// worker's own timeout report before it kills the worker.
const timeoutGrace = 2 * time.Second

func truncationNote(dropped int64) string {
	return fmt.Sprintf("\n[output truncated: %d more bytes were not kept]\n", dropped)
}

// Close ends the session and returns at once: killing and reaping the
// worker (about 10 ms: its address space and namespaces are torn down) and
// removing its cgroup happen in the background, and only after that is the
// session's slot released, so capacity never counts a worker that still
// exists.
func (s *session) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	w := s.proc
	s.proc = nil
	p := s.pool
	end := func() {
		if w != nil {
			w.kill()
			p.release(w)
		}
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
