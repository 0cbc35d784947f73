package containers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/cluster"
	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/store"
)

// Placement gives each container one holder among the replicas sharing
// the store (cluster.Node): the one replica whose interpreter runs its
// code. Runs arriving elsewhere are forwarded to it.
type Placement interface {
	// Claim makes this server the holder of the container unless another
	// live one is; it is asked before every run. An error means no one
	// can tell who holds it: nothing runs (fencing fails closed).
	Claim(ctx context.Context, cid string) (cluster.Lease, bool, error)
	// Holder returns the container's lease as the store has it, taking
	// nothing (ok false: no one holds it).
	Holder(ctx context.Context, cid string) (cluster.Lease, bool, error)
	// Steal takes the container from a holder proven gone (ErrGone).
	Steal(ctx context.Context, cid string, gone cluster.Lease) (cluster.Lease, bool, error)
	// Confirm reports whether this server still holds the container
	// with token, as the store says: asked after a run, before its result
	// is reported, and before a checkpoint is written.
	Confirm(ctx context.Context, cid string, token uint64) (bool, error)
	// Release gives the container up (its interpreter closed here).
	Release(ctx context.Context, cid string)
	// Forward runs payload at the holder (ServeForwarded there);
	// progress, when set, hears the pieces the holder reports as it
	// runs (a shell's live output).
	Forward(ctx context.Context, cid string, l cluster.Lease, payload []byte, progress func([]byte)) ([]byte, error)
	// TTL is a lease's life unrenewed: how long at most a container
	// whose holder cannot be reached waits before another replica may
	// take it.
	TTL() time.Duration
}

// forwardedRun is a run sent to the container's holder.
type forwardedRun struct {
	Owner     string `json:"owner"`
	Container string `json:"container"`
	Code      string `json:"code"`
	// Shell is a hosted-shell call (its Code is then noShellCode, which a
	// holder that predates the shell runs as Python: a clear error, never
	// an empty run that succeeds).
	Shell *sandbox.ShellRequest `json:"shell,omitempty"`
	// Fresh and Ran are the forwarding response's view of the container
	// (made by it; code ran in it already), which decide whether a fresh
	// interpreter is a reset the model must be told of.
	Fresh  bool  `json:"fresh"`
	Ran    bool  `json:"ran"`
	Memory int64 `json:"memory"`
	// Secrets are the container's domain secrets when the forwarding
	// server holds them (they live only in memory): the holder keeps
	// them if it lacks them.
	Secrets []egress.Secret `json:"secrets,omitempty"`
	// Deleted asks the holder to drop the container its owner deleted
	// (no code): it does so only once the store no longer has it.
	Deleted bool `json:"deleted,omitempty"`
}

// shellPiece is a piece of a forwarded shell call's output, sent by the
// holder as its command prints it (cluster progress).
type shellPiece struct {
	Command int    `json:"c"`
	Stdout  string `json:"o,omitempty"`
	Stderr  string `json:"e,omitempty"`
}

// pieces passes a holder's shell pieces on to the call's OnOutput (nil:
// the call wants none, and none are asked for).
func pieces(act action) func([]byte) {
	if act.Shell == nil || act.Shell.OnOutput == nil {
		return nil
	}
	n, on := len(act.Shell.Commands), act.Shell.OnOutput
	return func(b []byte) {
		var p shellPiece
		// The holder proved the cluster key; a piece that does not
		// decode or names no command of the call is dropped all the same.
		if json.Unmarshal(b, &p) == nil && p.Command >= 0 && p.Command < n {
			on(p.Command, p.Stdout, p.Stderr)
		}
	}
}

// forwardedAnswer is the holder's answer.
type forwardedAnswer struct {
	Result RunResult    `json:"result"`
	Error  *runErrorMsg `json:"error,omitempty"`
}

// decodeAnswer reads the answer of the holder at addr: its result, or its
// error as this side's (errors.Is works across the wire).
func decodeAnswer(out []byte, addr string) (RunResult, error) {
	var a forwardedAnswer
	if err := json.Unmarshal(out, &a); err != nil {
		return RunResult{}, fmt.Errorf("containers: the holder's answer: %w", err)
	}
	if a.Error != nil {
		return RunResult{}, a.Error.decode(addr)
	}
	return a.Result, nil
}

// runErrorMsg carries the errors callers branch on across the wire.
type runErrorMsg struct {
	Kind    string              `json:"kind"`
	Message string              `json:"message"`
	Limit   *sandbox.LimitError `json:"limit,omitempty"`
}

var runErrorKinds = []struct {
	kind string
	err  error
}{
	{"expired", ErrExpired},
	{"not_found", ErrNotFound},
	{"capacity", sandbox.ErrCapacity},
	{"secrets_lost", ErrSecretsLost},
	{"no_network", sandbox.ErrNoNetwork},
	{"closed", sandbox.ErrClosed},
	{"unavailable", ErrUnavailable},
	{"moved", errMoved},
}

// errMoved is a forwarded run's answer from a server that no longer holds
// the container's lease (it lost it while the run waited for the one
// before it): the forwarding server claims again. Nothing ran.
var errMoved = errors.New("containers: this server no longer holds the container")

// unavailable is ErrUnavailable for why, with the cause.
func unavailable(why string, cause error) error {
	if cause == nil {
		return fmt.Errorf("%w: %s", ErrUnavailable, why)
	}
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, why, cause)
}

func encodeRunError(err error) *runErrorMsg {
	msg := &runErrorMsg{Kind: "other", Message: err.Error()}
	var le *sandbox.LimitError
	if errors.As(err, &le) {
		msg.Kind, msg.Limit = "limit", le
		return msg
	}
	for _, k := range runErrorKinds {
		if errors.Is(err, k.err) {
			msg.Kind = k.kind
			break
		}
	}
	return msg
}

func (e *runErrorMsg) decode(addr string) error {
	if e.Kind == "limit" && e.Limit != nil {
		return e.Limit
	}
	for _, k := range runErrorKinds {
		if e.Kind == k.kind {
			return fmt.Errorf("%w (on the container's holder %s: %s)", k.err, addr, e.Message)
		}
	}
	return fmt.Errorf("containers: on the container's holder %s: %s", addr, e.Message)
}

// drainWait bounds how long a run waits for a draining holder to
// checkpoint and release the container.
const drainWait = closeCheckpointTimeout + 5*time.Second

// leaseWaitSlack is how long past a lease's life a run waits for a holder
// that cannot be reached: by then its lease has expired by the store's
// clock, and the next claim takes it (or another holder answers).
const leaseWaitSlack = 2 * time.Second

// maxMoves bounds the claims a run makes after holders answered that
// they no longer hold the container.
const maxMoves = 8

// retryPause is the pause between two tries to place a run whose holder
// could not be reached or was moving.
const retryPause = 100 * time.Millisecond

// place decides where the run goes: here (done false: the caller runs it,
// this server holding the lease, c.lease its token), or to the container's
// holder (done: res and err are its). It fails closed: when the lease
// store cannot be asked, or the holder can be neither reached nor proven
// gone before its lease must have expired, the run is refused with
// ErrUnavailable and runs nowhere. A holder is taken from only when
// proven gone (another process answers at its address) or when its lease
// expired by the store's clock (Claim then takes it): never on a dial
// failure alone, which a paused or slow holder also gives.
func (c *container) place(ctx context.Context, act action) (res RunResult, done bool, err error) {
	m := c.m
	p := m.cfg.Placement
	cid := c.meta.ID
	var payload []byte
	moved := 0
	start := time.Now()
	waitUntil := start.Add(p.TTL() + leaseWaitSlack)
	drainUntil := start.Add(drainWait)
	pause := func(until time.Time, why string, cause error) error {
		if time.Now().After(until) {
			return unavailable(why, cause)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(retryPause):
			return nil
		}
	}
	for {
		l, mine, err := p.Claim(ctx, cid)
		if err != nil {
			if ctx.Err() != nil {
				return RunResult{}, true, ctx.Err()
			}
			m.log.Warn("the container lease store could not be asked; the run is refused", zap.String("container_id", cid), zap.Error(err))
			return RunResult{}, true, unavailable("the store that decides which server runs the container could not be reached", err)
		}
		if mine {
			c.lease, c.claimed = l.Token, time.Now()
			if c.h != nil && c.h.removed {
				m.release(c.h)
				c.h = nil
			}
			return RunResult{}, false, nil
		}
		// Another replica holds it. An interpreter held here (the lease
		// was taken from this server) must not run again.
		m.Fenced(cid)
		if c.h != nil {
			m.release(c.h)
			c.h = nil
		}
		if payload == nil {
			req := forwardedRun{Owner: c.meta.Owner, Container: cid, Code: act.Code, Shell: act.Shell, Fresh: c.fresh, Ran: c.ran, Memory: c.memory}
			m.mu.Lock()
			req.Secrets = m.secrets[cid].list
			m.mu.Unlock()
			if payload, err = json.Marshal(req); err != nil {
				return RunResult{}, true, fmt.Errorf("containers: %w", err)
			}
		}
		out, err := p.Forward(ctx, cid, l, payload, pieces(act))
		if err == nil {
			var res RunResult
			if res, err = decodeAnswer(out, l.Addr); err == nil {
				c.ran = true
				return res, true, nil
			}
			if !errors.Is(err, errMoved) {
				return RunResult{}, true, err
			}
		}
		var wait error
		switch {
		case errors.Is(err, cluster.ErrGone):
			// Another process answers at the holder's address: the
			// holder is gone (it did not start the run). Take the
			// container over, restoring its last checkpoint here.
			m.log.Info("the container's holder is gone; taking it over", zap.String("container_id", cid), zap.String("holder", l.Addr), zap.Error(err))
			if _, _, err := p.Steal(ctx, cid, l); err != nil {
				if ctx.Err() != nil {
					return RunResult{}, true, ctx.Err()
				}
				return RunResult{}, true, unavailable("the store that decides which server runs the container could not be reached", err)
			}
		case errors.Is(err, cluster.ErrMoved), errors.Is(err, errMoved):
			// The holder lost or gave up the lease since the claim (it may
			// have been paused past it meanwhile): the next claim says who
			// holds it now.
			if moved++; moved > maxMoves {
				return RunResult{}, true, unavailable("the container kept changing servers", err)
			}
			wait = pause(time.Now().Add(time.Hour), "", nil)
		case errors.Is(err, cluster.ErrUnreachable), errors.Is(err, cluster.ErrStoreUnavailable):
			// Not proof the holder is gone: a paused or slow holder, or
			// one cut off from the store, looks the same. Wait for it, or
			// for its lease to expire by the store's clock.
			m.log.Info("the container's holder cannot run it now; waiting for it or for its lease to expire", zap.String("container_id", cid), zap.String("holder", l.Addr), zap.Error(err))
			wait = pause(waitUntil, "the server holding the container could not be reached, and its lease has not expired", err)
		case errors.Is(err, cluster.ErrDraining):
			// The holder is stopping: it releases the container once
			// its checkpoint is written.
			wait = pause(drainUntil, "the server holding the container is stopping and has not released it", err)
		case errors.Is(err, cluster.ErrLost):
			return RunResult{}, true, fmt.Errorf("containers: the server running the container's code went away during the run (%s): %w", l.Addr, sandbox.ErrClosed)
		case ctx.Err() != nil:
			return RunResult{}, true, ctx.Err()
		default:
			return RunResult{}, true, fmt.Errorf("containers: forwarding the run to the container's holder: %w", err)
		}
		if wait != nil {
			return RunResult{}, true, wait
		}
	}
}

// ServeForwarded runs a run another replica forwarded to this one, the
// holder of its container (cluster.Config.Handler; the lease was checked
// by the caller, and is claimed again once the run has the interpreter's
// run lock, and confirmed before its result is answered). Its errors
// travel in the answer. A shell call's output goes to progress piece by
// piece as its commands print it, when the caller asked (progress set).
func (m *Manager) ServeForwarded(ctx context.Context, cid string, lease uint64, payload []byte, progress func([]byte)) ([]byte, error) {
	var req forwardedRun
	if err := json.Unmarshal(payload, &req); err != nil {
		return nil, fmt.Errorf("containers: a forwarded run: %w", err)
	}
	if req.Container != cid {
		return nil, fmt.Errorf("containers: a forwarded run of %s under the lease of %s", req.Container, cid)
	}
	answer := func(res RunResult, err error) ([]byte, error) {
		a := forwardedAnswer{Result: res}
		if err != nil {
			a.Error = encodeRunError(err)
		}
		return json.Marshal(a)
	}
	// The owner is bound to the container: a run or a drop naming another
	// owner than the interpreter held here, or than the store's record
	// has, is refused — a replica holding the cluster key cannot reach
	// another owner's container by naming it.
	m.mu.Lock()
	h, isHeld := m.held[cid]
	m.mu.Unlock()
	if isHeld && h.owner != req.Owner {
		m.log.Warn("refused a forwarded request naming another owner than the container's", zap.String("container_id", cid), zap.Bool("delete", req.Deleted))
		return answer(RunResult{}, fmt.Errorf("%w: %s", ErrNotFound, cid))
	}
	if req.Deleted {
		// Only a container the store no longer has for that owner: a
		// forged or mistaken request cannot drop a live one.
		if _, err := m.st.GetContainer(ctx, req.Owner, cid); !errors.Is(err, store.ErrNotFound) {
			return answer(RunResult{}, fmt.Errorf("containers: a drop of container %s, which its owner still has (%v)", cid, err))
		}
		m.drop(req.Owner, cid)
		return answer(RunResult{}, nil)
	}
	m.claim(cid) // unclaimed by the container's Close
	meta, err := m.st.GetContainer(ctx, req.Owner, cid)
	if err == nil && meta.Owner != req.Owner {
		err = store.ErrNotFound
	}
	if err != nil {
		m.unclaim(cid)
		if errors.Is(err, store.ErrNotFound) {
			err = fmt.Errorf("%w: %s", ErrNotFound, cid)
		}
		return answer(RunResult{}, err)
	}
	if len(req.Secrets) > 0 {
		m.mu.Lock()
		if _, ok := m.secrets[cid]; !ok {
			m.secrets[cid] = keptSecrets{owner: meta.Owner, list: req.Secrets}
		}
		m.mu.Unlock()
	}
	if req.Shell != nil && progress != nil {
		req.Shell.OnOutput = func(k int, stdout, stderr string) {
			if b, err := json.Marshal(shellPiece{Command: k, Stdout: stdout, Stderr: stderr}); err == nil {
				progress(b)
			}
		}
	}
	c := &container{m: m, meta: meta, fresh: req.Fresh, memory: req.Memory, ran: req.Ran, forwarded: true, lease: lease}
	defer c.Close()
	return answer(c.run(ctx, action{Code: req.Code, Shell: req.Shell}))
}

// Deleted implements api.SecretKeeper: the owner deleted the container
// (the store no longer has it). Its interpreter, secrets and checkpoint go
// at once: here, and at its holder when another replica holds it (the
// holder checks the store first). A holder that cannot be reached drops
// it when its next run finds the container gone, and its checkpoint is
// dropped here already.
func (m *Manager) Deleted(ctx context.Context, owner, cid string) {
	m.drop(owner, cid)
	p := m.cfg.Placement
	if p == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, deleteTimeout)
	defer cancel()
	// (drop released this server's own lease, if it held one.)
	l, held, err := p.Holder(ctx, cid)
	switch {
	case err != nil:
		m.log.Warn("a deleted container's holder could not be found; it drops the interpreter at its next use", zap.String("container_id", cid), zap.Error(err))
		return
	case !held:
		return
	}
	payload, err := json.Marshal(forwardedRun{Owner: owner, Container: cid, Deleted: true})
	if err == nil {
		var out []byte
		if out, err = p.Forward(ctx, cid, l, payload, nil); err == nil {
			_, err = decodeAnswer(out, l.Addr)
		}
	}
	if err != nil {
		m.log.Warn("the holder of a deleted container could not be told; it drops the interpreter at its next use", zap.String("container_id", cid), zap.String("holder", l.Addr), zap.Error(err))
	}
}

// deleteTimeout bounds telling a deleted container's holder.
const deleteTimeout = 10 * time.Second

// Fenced drops the interpreter held for cid after this server lost its
// lease (cluster.Config.OnLost, and a claim that finds another holder):
// it must not run again, a run in flight on it is cancelled (it reports
// ErrUnavailable, its effects discarded with the interpreter), and its
// state is not checkpointed over the new holder's.
func (m *Manager) Fenced(cid string) {
	m.mu.Lock()
	h, ok := m.held[cid]
	if ok {
		m.forgetLocked(h)
	}
	idle := ok && h.users == 0
	var cancel context.CancelCauseFunc
	if ok {
		cancel = h.cancelRun
	}
	m.mu.Unlock()
	if cancel != nil {
		cancel(errFenced)
	}
	if idle {
		h.close()
	}
	// In use: the last response's release closes it.
}

// errFenced is the cause of a run cancelled because its server lost the
// container's lease during it.
var errFenced = errors.New("containers: this server lost the container's lease during the run")

// released gives up the container's lease once its interpreter here
// closed, unless another was opened for it meanwhile.
func (m *Manager) released(cid string) {
	if m.cfg.Placement == nil {
		return
	}
	m.mu.Lock()
	_, again := m.held[cid]
	m.mu.Unlock()
	if !again {
		m.cfg.Placement.Release(context.Background(), cid)
	}
}
