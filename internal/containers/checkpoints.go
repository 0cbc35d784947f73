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
	// Save returns a token naming the write. fence is the token of the
	// container's lease the writer holds (0: no cluster): a write under
	// an older lease than the checkpoint's is refused (an error wrapping
	// checkpoint.ErrFenced).
	Save(ctx context.Context, owner, container string, fence uint64, state []byte) (string, error)
	// Load returns the state and its token: checkpoint.ErrNone when
	// there is none, an error wrapping checkpoint.ErrRefused for one that
	// must not be used (tampered: dropped), checkpoint.ErrForeign for one
	// another key or build wrote (kept), any other error for a store that
	// could not be read (kept; the run is refused).
	Load(ctx context.Context, owner, container string) ([]byte, string, error)
	// Head returns the token of the latest checkpoint (ErrNone: none),
	// and whether code ran on its state since (MarkRunning).
	Head(ctx context.Context, owner, container string) (string, bool, error)
	// MarkRunning records that code runs on the state of token, fenced
	// as Save is.
	MarkRunning(ctx context.Context, owner, container, token string, fence uint64) error
	Drop(ctx context.Context, owner, container string) error
}

// closeCheckpointTimeout bounds the checkpoints Close takes.
const closeCheckpointTimeout = 20 * time.Second

// checkpointTimeout bounds one checkpoint and its upload.
const checkpointTimeout = 30 * time.Second

// openSession opens the container's interpreter: restored from its
// checkpoint when lookup is set and there is a usable one, else fresh. A
// checkpoint that definitely cannot be used (tampered, or its state
// refused by the sandbox) is logged and removed, and the caller's fresh
// interpreter makes the model be told its variables were reset; one
// another key or build wrote is kept (a rolling update: the other build's
// replicas restore it). A failure that may pass (the store cannot be
// read, the sandbox could not start the restore) keeps the checkpoint and
// refuses the run (ErrUnavailable): a fresh interpreter would lose the
// state silently and soon checkpoint over it.
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
			switch {
			case errors.Is(err, sandbox.ErrNoCheckpoint):
				m.log.Warn("the container's checkpoint cannot be restored; its interpreter starts fresh", zap.String("container_id", cid), zap.Error(err))
				m.dropCheckpoint(ctx, owner, cid)
			case errors.Is(err, sandbox.ErrCapacity), ctx.Err() != nil:
				return nil, "", false, err
			default:
				m.log.Warn("restoring the container's checkpoint failed; it is kept and the run refused", zap.String("container_id", cid), zap.Error(err))
				return nil, "", false, unavailable("its checkpoint could not be restored now", err)
			}
		case errors.Is(err, checkpoint.ErrNone):
		case errors.Is(err, checkpoint.ErrRefused):
			m.log.Warn("the container's checkpoint was refused; its interpreter starts fresh", zap.String("container_id", cid), zap.Error(err))
			m.dropCheckpoint(ctx, owner, cid)
		case errors.Is(err, checkpoint.ErrForeign):
			m.log.Warn("the container's checkpoint was written by another key or build; it is kept, and this interpreter starts fresh", zap.String("container_id", cid), zap.Error(err))
		case ctx.Err() != nil:
			return nil, "", false, ctx.Err()
		default:
			m.log.Warn("the checkpoint store could not be read; the run is refused", zap.String("container_id", cid), zap.Error(err))
			return nil, "", false, unavailable("its checkpoint could not be read", err)
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
// with the Manager), then closes it. Callers forget h and mark it saving
// (savingLocked) in one hold of m.mu: in between, another response of the
// container would find neither h nor the checkpoint being written, and
// restore an older one — a second interpreter of one container.
func (m *Manager) saveAndClose(ctx context.Context, h *held, done chan struct{}) {
	if done != nil {
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

// savingLocked marks h's checkpoint as being written before it closes, so
// that the container's next interpreter waits for it (waitSaving); nil
// when checkpoints are off. Callers hold m.mu, and pass the channel to
// saveAndClose.
func (m *Manager) savingLocked(h *held) chan struct{} {
	if m.cfg.Checkpoints == nil {
		return nil
	}
	done := make(chan struct{})
	m.saving[h.cid] = done
	return done
}

// save checkpoints h's state if code ran since the last checkpoint.
// Callers hold h.runMu. The write is fenced: only while this server still
// holds the lease h last ran under (a lease store that cannot say, or
// another holder, skip it: h is dirty still, and the next holder's state
// wins), and the checkpoint store refuses it under an older lease than
// the checkpoint's own. A state that cannot be checkpointed at all leaves
// no checkpoint behind: an older one would restore variables the model saw
// change. A store that failed keeps what it had (the head says code ran
// on it since, so a restore says it is older).
func (m *Manager) save(ctx context.Context, h *held) {
	if m.cfg.Checkpoints == nil || !h.dirty.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, checkpointTimeout)
	defer cancel()
	fence := h.lease
	if p := m.cfg.Placement; p != nil {
		ok, err := p.Confirm(ctx, h.cid, fence)
		if err != nil || !ok || fence == 0 {
			m.log.Info("not checkpointing an interpreter whose lease this server cannot confirm", zap.String("container_id", h.cid),
				zap.Uint64("lease", fence), zap.Bool("held", ok), zap.Error(err))
			return
		}
	}
	start := time.Now()
	state, err := h.sess.Checkpoint(ctx)
	var token string
	if err == nil {
		token, err = m.cfg.Checkpoints.Save(ctx, h.owner, h.cid, fence, state)
	}
	switch {
	case err == nil:
	case errors.Is(err, checkpoint.ErrFenced):
		m.log.Warn("the checkpoint store refused a checkpoint under an older lease: another server holds the container", zap.String("container_id", h.cid), zap.Error(err))
		return
	case errors.Is(err, sandbox.ErrNoCheckpoint), errors.Is(err, checkpoint.ErrTooLarge):
		m.log.Info("the container's interpreter cannot be checkpointed; its next interpreter will start fresh",
			zap.String("container_id", h.cid), zap.Error(err))
		m.dropCheckpoint(ctx, h.owner, h.cid)
		return
	default:
		m.log.Warn("checkpointing the container's interpreter failed; its last checkpoint is kept (marked older than the interpreter)",
			zap.String("container_id", h.cid), zap.Error(err))
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

// scheduleCheckpointLocked arms h's background checkpoint when code ran
// on it since the last one, unless one is armed: it fires CheckpointAfter
// after the first run it covers, whether h is in use by then or not, so
// that the state is in the store within about CheckpointAfter of any
// response — the promise a kill -9 is measured against — also for a
// container in constant use (a use no longer puts it off). Runs within
// that time are coalesced into the one checkpoint. Callers hold m.mu.
func (m *Manager) scheduleCheckpointLocked(h *held) {
	if m.cfg.Checkpoints == nil || m.cfg.CheckpointAfter <= 0 || !h.dirty.Load() || h.idleTimer != nil || h.removed {
		return
	}
	m.armCheckpointLocked(h, m.cfg.CheckpointAfter)
}

// armCheckpointLocked makes h's background checkpoint fire in d. Callers
// hold m.mu, with none armed.
func (m *Manager) armCheckpointLocked(h *held, d time.Duration) {
	h.idleTimer = time.AfterFunc(d, func() { m.idleCheckpoint(h) })
}

// checkpointRetry is how soon a background checkpoint put off by another
// one is tried again.
const checkpointRetry = 25 * time.Millisecond

// idleCheckpoint takes h's background checkpoint. h is held for it (users:
// no eviction or release closes it meanwhile) and taken off the idle list
// if it was idle; a run in flight finishes first (the run lock), and runs
// arriving meanwhile wait for the checkpoint.
func (m *Manager) idleCheckpoint(h *held) {
	m.mu.Lock()
	h.idleTimer = nil
	if h.removed {
		m.mu.Unlock()
		return
	}
	// One background checkpoint at a time: each takes a core for tens to
	// hundreds of milliseconds, which runs are waiting for. A busy one
	// puts this one off briefly (not by another CheckpointAfter: the
	// state's durability is promised within about that).
	select {
	case m.bgCheckpoint <- struct{}{}:
	default:
		m.armCheckpointLocked(h, checkpointRetry)
		m.mu.Unlock()
		return
	}
	defer func() { <-m.bgCheckpoint }()
	h.users++
	m.unidleLocked(h)
	m.mu.Unlock()
	defer m.release(h)
	if !h.runMu.TryLock() {
		// A run is in flight: its state is checkpointed when it ends
		// (unlockRun), not waited for here (a long run would hold up
		// every other container's checkpoint). Retrying TryLock alone
		// would lose to the runs queued behind it for as long as the
		// container stays busy (a contended sync.Mutex hands itself to
		// its waiters), so the run hands its lock to the checkpoint; the
		// timer covers a lock held by something else than a run.
		m.mu.Lock()
		if !h.removed {
			h.checkpointDue = true
			if h.idleTimer == nil {
				m.armCheckpointLocked(h, checkpointRetry)
			}
		}
		m.mu.Unlock()
		return
	}
	m.mu.Lock()
	h.checkpointDue = false
	m.mu.Unlock()
	m.save(context.Background(), h)
	h.runMu.Unlock()
}

// unlockRun ends a run's hold of h.runMu. When h's background checkpoint
// came during the run (checkpointDue), the lock passes to that checkpoint
// instead, taken in the background (the run's answer does not wait for
// it; the runs queued behind it do, as behind any checkpoint), so a
// container in constant use is checkpointed within about
// CheckpointAfter too.
func (m *Manager) unlockRun(h *held) {
	m.mu.Lock()
	due := h.checkpointDue && !h.removed
	h.checkpointDue = false
	if due {
		h.users++ // kept open until the checkpoint is written
	}
	m.mu.Unlock()
	if !due {
		h.runMu.Unlock()
		return
	}
	go func() {
		defer m.release(h)
		defer h.runMu.Unlock()
		m.bgCheckpoint <- struct{}{} // one background checkpoint at a time
		defer func() { <-m.bgCheckpoint }()
		m.save(context.Background(), h)
		// A retry that found this checkpoint holding the lock asked for
		// the state it has just written.
		m.mu.Lock()
		h.checkpointDue = false
		m.mu.Unlock()
	}()
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
// the interpreter was. Callers hold h.runMu. The mark is fenced as a
// checkpoint is (lease: the one the run runs under): a refusal means
// another server holds the container, and the run must not go on
// (ErrUnavailable); a store that fails only loses the mark.
func (m *Manager) markRunning(ctx context.Context, h *held, lease uint64) error {
	if m.cfg.Checkpoints == nil || h.dirty.Load() {
		return nil
	}
	h.tokenMu.Lock()
	token := h.token
	h.tokenMu.Unlock()
	if token == "" {
		return nil // no checkpoint yet: a restore finds none and says so
	}
	err := m.cfg.Checkpoints.MarkRunning(ctx, h.owner, h.cid, token, lease)
	switch {
	case errors.Is(err, checkpoint.ErrFenced):
		return unavailable("another server wrote the container's checkpoint under a newer lease", err)
	case errors.Is(err, checkpoint.ErrNotLatest):
		// Another interpreter of the container checkpointed since this
		// one's state was taken: it is older than the container and must
		// not run (the caller drops it; the next run restores the latest).
		m.log.Warn("an interpreter older than the container's latest checkpoint was about to run; it is dropped", zap.String("container_id", h.cid), zap.Error(err))
		return unavailable("the container's interpreter here was older than its latest checkpoint", err)
	}
	if err != nil {
		m.log.Warn("marking the container's checkpoint as behind failed", zap.String("container_id", h.cid), zap.Error(err))
	}
	return nil
}

// evictionLocked picks the idle interpreter to close for room: the least
// recently used one whose state is already checkpointed (or that never ran
// code), which closes at once, else the least recently used, which is
// checkpointed first (in the background: a trim, headroom.go). Callers
// hold m.mu, with the idle list not empty.
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
