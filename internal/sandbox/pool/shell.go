package pool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/codeinterp/codeinterp/internal/sandbox"
)

// Shell implements sandbox.Sheller on a kind whose interpreters run shell
// commands (Sheller); any other kind's sessions fail with
// sandbox.ErrNoShell. The commands share the session's interpreter (its
// sandbox: files, processes, limits, network) but not its Python state.
func (s *session) Shell(ctx context.Context, req sandbox.ShellRequest) (sandbox.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return sandbox.Result{}, sandbox.ErrClosed
	}
	if len(req.Commands) == 0 {
		return sandbox.Result{Outcome: sandbox.OutcomeRejected, Detail: "no commands"}, nil
	}
	total := 0
	for _, c := range req.Commands {
		total += len(c)
	}
	lim := s.pool.cfg.Limits
	if total > lim.SourceBytes {
		return sandbox.Result{Outcome: sandbox.OutcomeRejected,
			Detail: fmt.Sprintf("the commands are %d bytes; the limit is %d", total, lim.SourceBytes)}, nil
	}
	timeout := req.Timeout
	if timeout <= 0 || timeout > lim.RunTimeout {
		timeout = lim.RunTimeout
	}
	start := time.Now()
	w, err := s.interpreter(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return notRun(req, sandbox.Result{Outcome: sandbox.OutcomeCancelled, Detail: ctx.Err().Error()}), nil
		}
		return notRun(req, sandbox.Result{Outcome: sandbox.OutcomeCrashed, Detail: "could not start an interpreter: " + err.Error()}), nil
	}
	sh, ok := w.Interpreter.(Sheller)
	if !ok {
		return sandbox.Result{}, fmt.Errorf("%w (%s)", sandbox.ErrNoShell, s.pool.kind.Name())
	}
	stateLost := s.lost
	s.lost = false
	s.runID++
	// The kind times each command itself; this backstop covers an
	// interpreter too stuck to answer.
	backstopAfter := time.Duration(len(req.Commands))*(timeout+timeoutGrace) + timeoutGrace
	runCtx, cancel := context.WithTimeout(ctx, backstopAfter)
	var onOutput func(int, string, string)
	var pieces *sandbox.TextPieces
	if req.OnOutput != nil {
		pieces = sandbox.NewTextPieces(req.OnOutput)
		onOutput = pieces.Piece
	}
	cmds, err := sh.Shell(runCtx, s.runID, req.Commands, timeout, onOutput)
	if pieces != nil {
		pieces.Flush()
	}
	backstop := errors.Is(runCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
	cancel()
	s.refilled()
	if err != nil {
		var r sandbox.Result
		switch {
		case ctx.Err() != nil:
			r = s.lose(w, start, stateLost, sandbox.OutcomeCancelled, ctx.Err().Error())
		case backstop:
			r = s.lose(w, start, stateLost, sandbox.OutcomeTimeout, "the sandbox did not answer in time and was stopped")
		default:
			w.Kill()
			if w.oomKilled() {
				r = s.lose(w, start, stateLost, sandbox.OutcomeMemoryLimit, "the sandbox exceeded its memory limit and was killed")
			} else {
				r = s.lose(w, start, stateLost, sandbox.OutcomeCrashed, err.Error())
			}
		}
		return notRun(req, r), nil
	}
	res := sandbox.Result{Outcome: sandbox.OutcomeCompleted, Duration: time.Since(start), StateLost: stateLost, Commands: cmds}
	for _, c := range cmds {
		if c.StdoutTruncated || c.StderrTruncated {
			res.Outcome = sandbox.OutcomeOutputTruncated
		}
	}
	return res, nil
}

// notRun marks every command of req not run, under r's outcome.
func notRun(req sandbox.ShellRequest, r sandbox.Result) sandbox.Result {
	r.Commands = make([]sandbox.CommandResult, len(req.Commands))
	for k := range r.Commands {
		r.Commands[k] = sandbox.CommandResult{NotRun: true, ExitCode: -1}
	}
	return r
}
