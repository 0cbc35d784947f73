package interceptor

import (
	"context"
	"errors"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/containerapi"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/telemetry"
)

// This file runs a call's code: in the response's container when it has one,
// else in a sandbox session opened on first use and kept for the response.

// runCall runs c, traced as a GenAI execute_tool span: never the code or
// its output unless telemetry.capture_content says so.
func (l *loop) runCall(ctx context.Context, c *call) {
	ic := l.x.ic
	tool := "code_interpreter"
	if c.shell != nil {
		tool = "shell"
	}
	ctx, span := ic.tracer.Start(ctx, "execute_tool "+tool, trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "execute_tool"),
		attribute.String("gen_ai.tool.name", tool),
		attribute.String("gen_ai.tool.type", "function"),
		attribute.String("gen_ai.tool.call.id", c.callID),
		attribute.String("codeinterp.call.id", c.ciID),
		telemetry.AttrProvider.String(ic.provider.Environment().Provider),
	))
	defer func() {
		r := c.res
		span.SetAttributes(telemetry.AttrOutcome.String(string(r.Outcome)),
			telemetry.AttrOutputBytes.Int(len(r.Stdout)+len(r.Stderr)),
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
	l.runIn(ctx, c)
}

// runIn runs c in the container, or the response's session.
func (l *loop) runIn(ctx context.Context, c *call) {
	if c.shell != nil {
		l.runShell(ctx, c)
		return
	}
	if l.x.ctr != nil {
		l.runInContainer(ctx, c)
		return
	}
	sess, fresh, res, ok := l.session(ctx)
	if !ok {
		c.res = res
		return
	}
	r, err := sess.Run(ctx, c.code)
	if err != nil {
		outcome := sandbox.OutcomeCrashed
		if ctx.Err() != nil {
			outcome = sandbox.OutcomeCancelled
		}
		l.log.Warn("sandbox run failed", zap.String("call_id", c.callID), zap.Error(err))
		c.res = sandbox.Result{Outcome: outcome, Detail: "the sandbox could not run the code"}
		l.closeSession()
		return
	}
	if fresh {
		r.StateLost = true
	}
	c.res = r
	l.log.Debug("code call ran", zap.String("call_id", c.callID), zap.String("outcome", string(r.Outcome)), zap.Duration("duration", r.Duration))
}

// runInContainer runs a call in the response's container.
func (l *loop) runInContainer(ctx context.Context, c *call) {
	r, err := l.x.ctr.Run(ctx, c.code)
	l.ranInContainer(ctx, c, r, err)
}

// runShell runs a shell call's commands in the container (or the
// response's session), each bounded by the timeout it asked for within
// the operator's run timeout.
func (l *loop) runShell(ctx context.Context, c *call) {
	// The sandbox bounds it again by the operator's run timeout
	// (sandbox.run_timeout).
	req := sandbox.ShellRequest{Commands: c.shell.action.Commands, Timeout: c.shell.action.Timeout(defaultShellTimeout, maxShellTimeout)}
	if l.x.ctr != nil {
		r, err := l.x.ctr.Shell(ctx, req)
		l.ranInContainer(ctx, c, r, err)
		return
	}
	sess, _, res, ok := l.session(ctx)
	if !ok {
		c.res = res
		return
	}
	r, err := sandbox.Shell(ctx, sess, req)
	if err != nil {
		l.log.Warn("shell call failed", zap.String("call_id", c.callID), zap.Error(err))
		c.res = sandbox.Result{Outcome: sandbox.OutcomeCrashed, Detail: "the sandbox could not run the commands"}
		return
	}
	c.res = r
}

// The hosted shell's command timeouts: OpenAI's default when the model
// asks for none, and the most it may ask for before the sandbox's own
// bound applies.
const (
	defaultShellTimeout = 120 * time.Second
	maxShellTimeout     = 10 * time.Minute
)

// ranInContainer records a container run's result, or its error as an
// outcome (or the loop's abort).
func (l *loop) ranInContainer(ctx context.Context, c *call, r containerapi.RunResult, err error) {
	if err != nil {
		var le *sandbox.LimitError
		switch {
		case ctx.Err() != nil:
			c.res = sandbox.Result{Outcome: sandbox.OutcomeCancelled, Detail: "the request was cancelled"}
		case errors.Is(err, sandbox.ErrCapacity):
			c.res = sandbox.Result{Outcome: sandbox.OutcomeCapacity, Detail: "no Python interpreter was free in time; try again later"}
		case errors.As(err, &le):
			c.res = sandbox.Result{Outcome: sandbox.OutcomeRejected, Detail: "the container's memory_limit is above the sandbox's maximum"}
		case errors.Is(err, containerapi.ErrExpired):
			c.res = sandbox.Result{Outcome: sandbox.OutcomeRejected, Detail: "the container has expired"}
		case errors.Is(err, containerapi.ErrSecretsLost):
			c.res = sandbox.Result{Outcome: sandbox.OutcomeRejected, Detail: "the container's domain_secrets were lost when the server restarted " +
				"(they are kept only in its memory); send the same network_policy again on an auto container, or create a new container"}
		case errors.Is(err, sandbox.ErrNoNetwork):
			c.res = sandbox.Result{Outcome: sandbox.OutcomeRejected, Detail: "the container's network_policy needs a network this server no longer offers (sandbox.network)"}
		case errors.Is(err, containerapi.ErrUnavailable):
			// Nothing of the run was kept, and a retry may run it: the
			// client gets a retryable error (its SDK retries a 503), not
			// a tool result. The cause stays in the log: it names
			// servers and stores.
			c.res = sandbox.Result{Outcome: sandbox.OutcomeCapacity, Detail: "the container is temporarily unavailable"}
			l.abort = &failure{status: http.StatusServiceUnavailable, code: "container_unavailable",
				msg: "The container " + l.x.ctr.ID() + " cannot run code right now (the servers could not agree which of them runs it); nothing was run. Please retry the request."}
		default:
			c.res = sandbox.Result{Outcome: sandbox.OutcomeCrashed, Detail: "the sandbox could not run the code"}
		}
		l.log.Warn("container run failed", zap.String("call_id", c.callID), zap.Error(err))
		return
	}
	c.res, c.reset, c.behind, c.changed, c.images = r.Result, r.Reset, r.Behind, r.Changed, r.Images
	l.log.Debug("code call ran", zap.String("call_id", c.callID), zap.String("outcome", string(r.Outcome)), zap.Duration("duration", r.Duration))
}

// session returns the response's session, opening it on first use. fresh
// is set when it replaces an earlier one (whose state is gone). On failure
// ok is false and res says why, as a run outcome.
func (l *loop) session(ctx context.Context) (s sandbox.Session, fresh bool, res sandbox.Result, ok bool) {
	if l.sess != nil {
		return l.sess, false, res, true
	}
	s, err := l.x.ic.provider.Open(ctx, sandbox.SessionOptions{MemoryBytes: l.x.req.memoryBytes, Owner: l.x.owner, Network: l.x.req.network})
	if err != nil {
		var le *sandbox.LimitError
		switch {
		case ctx.Err() != nil:
			res = sandbox.Result{Outcome: sandbox.OutcomeCancelled, Detail: "the request was cancelled"}
		case errors.Is(err, sandbox.ErrCapacity):
			res = sandbox.Result{Outcome: sandbox.OutcomeCapacity, Detail: "no Python interpreter was free in time; try again later"}
		case errors.As(err, &le):
			res = sandbox.Result{Outcome: sandbox.OutcomeRejected, Detail: "the container's memory_limit is above the sandbox's maximum"}
		case errors.Is(err, sandbox.ErrNoNetwork):
			res = sandbox.Result{Outcome: sandbox.OutcomeRejected, Detail: "the container's network_policy needs a network this server does not offer (sandbox.network)"}
		default:
			res = sandbox.Result{Outcome: sandbox.OutcomeCrashed, Detail: "the Python sandbox is unavailable"}
		}
		l.log.Warn("sandbox session open failed", zap.Error(err))
		return nil, false, res, false
	}
	fresh = l.opened
	l.sess, l.opened = s, true
	return s, fresh, res, true
}

func (l *loop) closeSession() {
	if l.sess != nil {
		if err := l.sess.Close(); err != nil {
			l.log.Warn("sandbox session close failed", zap.Error(err))
		}
		l.sess = nil
	}
}
