package containers

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/checkpoint"
	"github.com/codeinterp/codeinterp/internal/sandbox"
)

// Checkpoints keeps containers' interpreter state (checkpoint.Keeper):
// sealed, bound to the owner and container, in a blob store any replica
// reads.
type Checkpoints interface {
	// Save returns a token naming the write.
	Save(ctx context.Context, owner, container string, fence uint64, state []byte) (string, error)
	// Load returns the state and its token: checkpoint.ErrNone when
	// there is none, an error wrapping checkpoint.ErrRefused for one that
	// must not be used.
	Load(ctx context.Context, owner, container string) ([]byte, string, error)
	// Head returns the token of the latest checkpoint (ErrNone: none),
	// and whether code ran on its state since (MarkRunning).
	Head(ctx context.Context, owner, container string) (string, bool, error)
	// MarkRunning records that code runs on the state of token.
	MarkRunning(ctx context.Context, owner, container, token string, fence uint64) error
	Drop(ctx context.Context, owner, container string) error
}

// closeCheckpointTimeout bounds the checkpoints Close takes.
const closeCheckpointTimeout = 20 * time.Second

// checkpointTimeout bounds one checkpoint and its upload.
const checkpointTimeout = 30 * time.Second

// openSession opens the container's interpreter: restored from its
// checkpoint when lookup is set and there is a usable one, else fresh. A
// checkpoint that cannot be used is logged and removed, and the caller's
// fresh interpreter makes the model be told its variables were reset.
func (m *Manager) openSession(ctx context.Context, owner, cid string, lookup bool, opts sandbox.SessionOptions) (sandbox.Session, string, bool, error) {
	if m.cfg.Checkpoints != nil && lookup {
		m.waitSaving(ctx, cid)
		state, token, err := m.cfg.Checkpoints.Load(ctx, owner, cid)
		switch {
		case err == nil:
			ropts := opts
			ropts.Restore = state
			sess, err := m.provider.Open(ctx, ropts)
			if err == nil {
				// Code ran on this state after it was taken (its holder
				// died before the next checkpoint): the model is told
				// what it gets is older than what it last saw.
				head, running, herr := m.cfg.Checkpoints.Head(ctx, owner, cid)
				behind := herr == nil && head == token && running
				m.log.Info("restored the container's interpreter from its checkpoint", zap.String("container_id", cid),
					zap.Int("bytes", len(state)), zap.Bool("older_than_last_run", behind))
				return sess, token, behind, nil
			}
			if !errors.Is(err, sandbox.ErrNoCheckpoint) {
				return nil, "", false, err
			}
			m.log.Warn("the container's checkpoint could not be restored; its interpreter starts fresh", zap.String("container_id", cid), zap.Error(err))
			m.dropCheckpoint(ctx, owner, cid)
		case errors.Is(err, checkpoint.ErrNone):
		case errors.Is(err, checkpoint.ErrRefused):
			m.log.Warn("the container's checkpoint was refused; its interpreter starts fresh", zap.String("container_id", cid), zap.Error(err))
			m.dropCheckpoint(ctx, owner, cid)
		default:
			// The store is down: runs still work, in a fresh interpreter.
			m.log.Warn("the checkpoint store could not be read; the interpreter starts fresh", zap.String("container_id", cid), zap.Error(err))
		}
	}
	sess, err := m.provider.Open(ctx, opts)
	return sess, "", false, err
}

// stale reports whether another server checkpointed the container since
// h's state was restored or saved here: its turns ran there, and h's
// variables are older than the container's. A store that cannot be read
// says nothing (h goes on).
//
// lease is the container's lease this server holds now (0: no cluster):
// the same lease as when h's state was last known newest means no other
// server held the container since, and the store is not read.
func (m *Manager) stale(ctx context.Context, h *held, lease uint64) bool {
	if m.cfg.Checkpoints == nil {
		return false
	}
	h.tokenMu.Lock()
	same := lease != 0 && h.lease == lease
	h.tokenMu.Unlock()
	if same {
		return false
	}
	head, _, err := m.cfg.Checkpoints.Head(ctx, h.owner, h.cid)
	if err != nil {
		return false
	}
	h.tokenMu.Lock()
	defer h.tokenMu.Unlock()
	if head != h.token {
		return true
	}
	if lease != 0 {
		h.lease = lease
	}
	return false
}

// waitSaving waits until a checkpoint of cid being taken before its
// interpreter closed is written, so the next interpreter restores it.
func (m *Manager) waitSaving(ctx context.Context, cid string) {
	m.mu.Lock()
	ch := m.saving[cid]
	m.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

// saveAndClose checkpoints an interpreter that no response uses and that
// is already forgotten (evicted, released for waiting sessions, closed
// with the Manager), then closes it.
func (m *Manager) saveAndClose(ctx context.Context, h *held) {
	if m.cfg.Checkpoints != nil {
		done := make(chan struct{})
		m.mu.Lock()
		m.saving[h.cid] = done
		m.mu.Unlock()
		defer func() {
			m.mu.Lock()
			if m.saving[h.cid] == done {
				delete(m.saving, h.cid)
			}
			m.mu.Unlock()
			close(done)
		}()
		h.runMu.Lock()
		m.save(ctx, h)
		h.runMu.Unlock()
	}
	h.close()
	m.released(h.cid)
}

// save checkpoints h's state if code ran since the last checkpoint.
// Callers hold h.runMu. A state that cannot be checkpointed leaves no
// checkpoint behind: an older one would restore variables the model saw
// change, without a word.
func (m *Manager) save(ctx context.Context, h *held) {
	if m.cfg.Checkpoints == nil || !h.dirty.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, checkpointTimeout)
	defer cancel()
	// Fencing: a server whose lease another replica took writes no
	// checkpoint over that replica's.
	if p := m.cfg.Placement; p != nil {
		if _, mine, err := p.Claim(ctx, h.cid); err == nil && !mine {
			m.log.Info("not checkpointing an interpreter whose container another replica holds now", zap.String("container_id", h.cid))
			return
		}
	}
	start := time.Now()
	state, err := h.sess.Checkpoint(ctx)
	var token string
	if err == nil {
		token, err = m.cfg.Checkpoints.Save(ctx, h.owner, h.cid, 0, state)
	}
	if err != nil {
		m.log.Info("the container's interpreter was not checkpointed; its next interpreter will start fresh",
			zap.String("container_id", h.cid), zap.Error(err))
		m.dropCheckpoint(ctx, h.owner, h.cid)
		return
	}
	h.dirty.Store(false)
	h.tokenMu.Lock()
	h.token = token
	h.tokenMu.Unlock()
	m.log.Debug("checkpointed the container's interpreter", zap.String("container_id", h.cid),
		zap.Int("bytes", len(state)), zap.Duration("took", time.Since(start)))
}

func (m *Manager) dropCheckpoint(ctx context.Context, owner, cid string) {
	if m.cfg.Checkpoints == nil {
		return
	}
	if err := m.cfg.Checkpoints.Drop(ctx, owner, cid); err != nil {
		m.log.Warn("removing the container's checkpoint failed", zap.String("container_id", cid), zap.Error(err))
	}
}

// scheduleCheckpointLocked arms h's background checkpoint when it went
// idle with code run since the last one; a use before it fires disarms it
// (unidleLocked), so fast turns are coalesced. Callers hold m.mu.
func (m *Manager) scheduleCheckpointLocked(h *held) {
	if m.cfg.Checkpoints == nil || m.cfg.CheckpointAfter <= 0 || !h.dirty.Load() {
		return
	}
	h.idleTimer = time.AfterFunc(m.cfg.CheckpointAfter, func() { m.idleCheckpoint(h) })
}

// idleCheckpoint takes h's background checkpoint: h is taken off the idle
// list for it (so no eviction closes it meanwhile) and put back after.
func (m *Manager) idleCheckpoint(h *held) {
	m.mu.Lock()
	if h.removed || h.users > 0 || h.elem == nil {
		m.mu.Unlock()
		return
	}
	// One background checkpoint at a time: each takes a core for tens to
	// hundreds of milliseconds, which runs are waiting for. A busy one
	// puts this one off by another CheckpointAfter.
	select {
	case m.bgCheckpoint <- struct{}{}:
	default:
		m.scheduleCheckpointLocked(h)
		m.mu.Unlock()
		return
	}
	defer func() { <-m.bgCheckpoint }()
	h.users++
	m.unidleLocked(h)
	m.mu.Unlock()
	h.runMu.Lock()
	m.save(context.Background(), h)
	h.runMu.Unlock()
	m.release(h)
}

// replaceStale closes h when it is stale (Manager.stale) and no other
// response uses it, so that the caller's next acquire restores the
// container's latest state. h's own unsaved turns (if any) lose to the
// store's newer state: the last checkpoint written wins.
func (m *Manager) replaceStale(ctx context.Context, h *held, lease uint64) bool {
	if !m.stale(ctx, h, lease) {
		return false
	}
	m.mu.Lock()
	if h.users != 1 || h.removed {
		m.mu.Unlock()
		return false
	}
	m.forgetLocked(h)
	m.mu.Unlock()
	m.log.Info("another server checkpointed the container since: its interpreter here is replaced by that state",
		zap.String("container_id", h.cid), zap.Bool("unsaved_turns_dropped", h.dirty.Load()))
	h.close()
	return true
}

// markRunning is called before each run: the first run on the state of a
// checkpoint records it in the store (MarkRunning), so that a server that
// restores that checkpoint after this one died knows it is older than
// the interpreter was. Callers hold h.runMu.
func (m *Manager) markRunning(ctx context.Context, h *held) {
	if m.cfg.Checkpoints == nil || h.dirty.Load() {
		return
	}
	h.tokenMu.Lock()
	token := h.token
	h.tokenMu.Unlock()
	if token == "" {
		return // no checkpoint yet: a restore finds none and says so
	}
	if err := m.cfg.Checkpoints.MarkRunning(ctx, h.owner, h.cid, token, 0); err != nil {
		m.log.Warn("marking the container's checkpoint as behind failed", zap.String("container_id", h.cid), zap.Error(err))
	}
}

// evictionLocked picks the idle interpreter to close for room: the least
// recently used one whose state is already checkpointed (or that never ran
// code), which closes at once, else the least recently used, which is
// checkpointed first while the caller waits. Callers hold m.mu, with the
// idle list not empty.
func (m *Manager) evictionLocked() *held {
	if m.cfg.Checkpoints != nil {
		for e := m.idle.Front(); e != nil; e = e.Next() {
			if h := e.Value.(*held); !h.dirty.Load() {
				return h
			}
		}
	}
	return m.idle.Front().Value.(*held)
}
