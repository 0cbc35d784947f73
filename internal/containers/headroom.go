package containers

import (
	"context"

	"go.uber.org/zap"
)

// Headroom keeps checkpoints off the request path (issue 41). With
// checkpoints on, an idle interpreter that ran code must be checkpointed
// before it closes; when a new container needed its room, the request
// waited for that checkpoint (tens to hundreds of milliseconds). Instead,
// once fewer than headroom slots are free, the least recently used idle
// interpreter is checkpointed and closed in the background (a trim), so a
// new container finds a free slot. A request that finds the sandbox full
// all the same (a burst faster than the trims, or a pool too small for
// headroom) closes an idle interpreter that needs no checkpoint if there
// is one, else waits for the trim in flight — never for a checkpoint of
// its own making.
//
// A trimmed interpreter is forgotten and marked saving in one hold of
// m.mu (as an eviction is): its container's next response waits for the
// checkpoint (waitSaving) and restores it; never two interpreters of one
// container, never an older checkpoint while a newer one is written.

// headroom is how many session slots are kept free of idle interpreters
// when checkpoints are on: a quarter of the sandbox (2 of the default 8),
// none below 4 sessions (there each idle interpreter is kept until a new
// one needs its room, as before). Two, not one: a trim takes longer than
// a round of back-to-back new containers, so one slot is freed while the
// next request uses the other.
func headroom(max int) int { return max / 4 }

// keepHeadroom starts a trim when checkpoints are on, fewer than headroom
// slots are free, and an interpreter is idle. It is called when a
// container's interpreter is opened or goes idle.
func (m *Manager) keepHeadroom() {
	if m.cfg.Checkpoints == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	// The interpreters held, not the pool's sessions in use: a trimmed
	// one's slot comes back only once its worker is reaped, and counting
	// it meanwhile would trim another for nothing.
	if c := m.provider.Capacity(); c.Max-len(m.held) < headroom(c.Max) {
		m.trimLocked()
	}
}

// trimLocked starts checkpointing and closing the idle interpreter
// evictionLocked picks, unless a trim is in flight (one at a time: each
// takes a core). It returns the channel closed once the trim's
// interpreter is closed (the one in flight, if any), or nil when there is
// nothing to trim. Callers hold m.mu.
//
// The checkpoint is the victim's: it is taken with the server's context,
// never a requester's (a client hanging up must not cost another
// container its state). Close waits for trims in flight (m.trims).
func (m *Manager) trimLocked() <-chan struct{} {
	if m.trim != nil {
		return m.trim
	}
	if m.idle.Len() == 0 {
		return nil
	}
	h := m.evictionLocked()
	m.forgetLocked(h)
	saved := m.savingLocked(h)
	done := make(chan struct{})
	m.trim = done
	m.trims.Add(1)
	go func() {
		defer m.trims.Done()
		m.log.Debug("checkpointing and closing an idle container's interpreter to keep room", zap.String("container_id", h.cid))
		m.saveAndClose(context.Background(), h, saved)
		m.mu.Lock()
		m.trim = nil
		m.mu.Unlock()
		close(done)
	}()
	return done
}

// cleanIdleLocked returns the least recently used idle interpreter that
// closes without a checkpoint (checkpoints off, or its state already
// checkpointed, or no code ran on it), or nil. Callers hold m.mu.
func (m *Manager) cleanIdleLocked() *held {
	for e := m.idle.Front(); e != nil; e = e.Next() {
		if h := e.Value.(*held); m.cfg.Checkpoints == nil || !h.dirty.Load() {
			return h
		}
	}
	return nil
}
