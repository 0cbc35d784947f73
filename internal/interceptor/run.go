package interceptor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/containerapi"
	"github.com/codeinterp/codeinterp/internal/hostedtool"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/telemetry"
)

// This file runs a call's action: in the response's container when it has
// one, else in a sandbox session opened on first use and kept for the
// response (sessionRunner).

// runCall runs c, traced as a GenAI execute_tool span: never the code or
// its output unless telemetry.capture_content says so. progress (nil: no
// one listens) hears the output while it comes.
func (l *loop) runCall(ctx context.Context, c *call, progress func(hostedtool.Output)) {
	ic := l.x.ic
	name := c.tool.Name()
	ctx, span := ic.tracer.Start(ctx, "execute_tool "+name, trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "execute_tool"),
		attribute.String("gen_ai.tool.name", name),
		attribute.String("gen_ai.tool.type", "function"),
		attribute.String("gen_ai.tool.call.id", c.callID),
		attribute.String("codeinterp.call.id", c.ciID),
		telemetry.AttrProvider.String(ic.provider.Environment().Provider),
	))
	defer func() {
		r := c.res
		out := len(r.Stdout) + len(r.Stderr)
		for _, cmd := range r.Commands {
			out += len(cmd.Stdout) + len(cmd.Stderr)
		}
		span.SetAttributes(telemetry.AttrOutcome.String(string(r.Outcome)),
			telemetry.AttrOutputBytes.Int(out),
			telemetry.AttrRunMS.Int64(r.Duration.Milliseconds()),
			attribute.Bool("codeinterp.run.state_lost", r.StateLost || c.reset))
		if l.x.ctr != nil {
			span.SetAttributes(telemetry.AttrContainerID.String(l.x.ctr.ID()))
		}
		if ic.tel.CaptureContent {
			span.SetAttributes(attribute.String("gen_ai.tool.call.arguments", c.code),
				attribute.String("gen_ai.tool.call.result", r.Stdout+r.Stderr))
		}
		if r.Outcome.Failed() {
			span.SetStatus(codes.Error, string(r.Outcome))
		}
		span.End()
		if ic.usage != nil && l.x.owner != "" && r.Outcome != sandbox.OutcomeCapacity && r.Outcome != sandbox.OutcomeRejected {
			d := store.UsageDelta{Runs: 1, RunMillis: r.Duration.Milliseconds()}
			if err := ic.usage.Add(context.WithoutCancel(ctx), l.x.owner, time.Now(), d); err != nil {
				l.log.Warn("a run not accounted in the usage", zap.String("call_id", c.callID), zap.Error(err))
			}
		}
	}()
	var runner hostedtool.Runner = (*sessionRunner)(l)
	if l.x.ctr != nil {
		runner = l.x.ctr
	}
	r, err := c.act.Run(ctx, runner, progress)
	l.ran(ctx, c, r, err)
}

// errSessionOpen marks a failure to open the response's session.
var errSessionOpen = errors.New("the sandbox session could not be opened")

// ran records a run's result, or its error as an outcome (or the loop's
// abort).
func (l *loop) ran(ctx context.Context, c *call, r containerapi.RunResult, err error) {
	if err != nil {
		var le *sandbox.LimitError
		switch {
		case ctx.Err() != nil:
			c.res = sandbox.Result{Outcome: sandbox.OutcomeCancelled, Detail: "the request was cancelled"}
		case errors.Is(err, sandbox.ErrCapacity):
			c.res = sandbox.Result{Outcome: sandbox.OutcomeCapacity, Detail: "no Python interpreter was free in time; try again later"}
		case errors.As(err, &le):
			c.res = sandbox.Result{Outcome: sandbox.OutcomeRejected, Detail: "the container's memory_limit is above the sandbox's maximum"}
		case errors.Is(err, sandbox.ErrNoShell):
			c.res = sandbox.Result{Outcome: sandbox.OutcomeRejected, Detail: "this server's sandbox has no shell"}
		case errors.Is(err, containerapi.ErrExpired):
			c.res = sandbox.Result{Outcome: sandbox.OutcomeRejected, Detail: "the container has expired"}
		case errors.Is(err, containerapi.ErrSecretsLost):
			c.res = sandbox.Result{Outcome: sandbox.OutcomeRejected, Detail: "the container's domain_secrets were lost when the server restarted " +
				"(they are kept only in its memory); send the same network_policy again on an auto container, or create a new container"}
		case errors.Is(err, sandbox.ErrNoNetwork):
			c.res = sandbox.Result{Outcome: sandbox.OutcomeRejected, Detail: "the container's network_policy needs a network this server does not offer (sandbox.network)"}
		case errors.Is(err, containerapi.ErrUnavailable):
			// Nothing of the run was kept, and a retry may run it: the
			// client gets a retryable error (its SDK retries a 503), not
			// a tool result. The cause stays in the log: it names
			// servers and stores.
			c.res = sandbox.Result{Outcome: sandbox.OutcomeCapacity, Detail: "the container is temporarily unavailable"}
			l.abort = &failure{status: http.StatusServiceUnavailable, code: "container_unavailable",
				msg: "The container " + l.x.ctr.ID() + " cannot run code right now (the servers could not agree which of them runs it); nothing was run. Please retry the request."}
		case errors.Is(err, errSessionOpen):
			c.res = sandbox.Result{Outcome: sandbox.OutcomeCrashed, Detail: "the Python sandbox is unavailable"}
		default:
			c.res = sandbox.Result{Outcome: sandbox.OutcomeCrashed, Detail: "the sandbox could not run the code"}
		}
		l.log.Warn("run failed", zap.String("tool", c.tool.Name()), zap.String("call_id", c.callID), zap.Error(err))
		return
	}
	c.res, c.reset, c.behind, c.changed, c.images = r.Result, r.Reset, r.Behind, r.Changed, r.Images
	l.log.Debug("call ran", zap.String("tool", c.tool.Name()), zap.String("call_id", c.callID), zap.String("outcome", string(r.Outcome)), zap.Duration("duration", r.Duration))
}

// sessionRunner is the Runner of a response without a container: a sandbox
// session opened on first use and kept for the response; a run that fails
// closes it, and the next opens a fresh one (its result says the state is
// lost).
type sessionRunner loop

func (s *sessionRunner) Run(ctx context.Context, code string) (containerapi.RunResult, error) {
	return s.do(ctx, func(sess sandbox.Session) (sandbox.Result, error) { return sess.Run(ctx, code) })
}

func (s *sessionRunner) Shell(ctx context.Context, req sandbox.ShellRequest) (containerapi.RunResult, error) {
	return s.do(ctx, func(sess sandbox.Session) (sandbox.Result, error) { return sandbox.Shell(ctx, sess, req) })
}

func (s *sessionRunner) do(ctx context.Context, run func(sandbox.Session) (sandbox.Result, error)) (containerapi.RunResult, error) {
	l := (*loop)(s)
	sess, fresh, err := l.session(ctx)
	if err != nil {
		return containerapi.RunResult{}, err
	}
	r, err := run(sess)
	if err != nil {
		if !errors.Is(err, sandbox.ErrNoShell) {
			l.closeSession()
		}
		return containerapi.RunResult{}, err
	}
	if fresh {
		r.StateLost = true
	}
	return containerapi.RunResult{Result: r}, nil
}

// session returns the response's session, opening it on first use. fresh
// is set when it replaces an earlier one (whose state is gone).
func (l *loop) session(ctx context.Context) (s sandbox.Session, fresh bool, err error) {
	if l.sess != nil {
		return l.sess, false, nil
	}
	s, err = l.x.ic.provider.Open(ctx, sandbox.SessionOptions{MemoryBytes: l.x.req.memoryBytes, Owner: l.x.owner, Network: l.x.req.network})
	if err != nil {
		l.log.Warn("sandbox session open failed", zap.Error(err))
		return nil, false, fmt.Errorf("%w: %w", errSessionOpen, err)
	}
	fresh = l.opened
	l.sess, l.opened = s, true
	return s, fresh, nil
}

func (l *loop) closeSession() {
	if l.sess != nil {
		if err := l.sess.Close(); err != nil {
			l.log.Warn("sandbox session close failed", zap.Error(err))
		}
		l.sess = nil
	}
}
