package containers

import (
	"container/list"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/sandbox"
)

// held is an interpreter this server holds for a container.
type held struct {
	cid    string
	owner  string
	memory int64
	sess   sandbox.Session
	users  int           // responses using it now
	elem   *list.Element // in Manager.idle while users == 0
	runMu  sync.Mutex    // one run (with its file sync) at a time
	// synced is the session generation files describes: a new one has an
	// empty /mnt/data, whatever was recorded for the one before.
	synced uint64
	// files are the store's files the interpreter holds, by path, as the
	// last mirror or collect left them.
	files  map[string]syncedFile
	ranGen uint64 // the generation that ran code last
	// skillsGen is the session generation the container's skills were
	// last written into (0: none yet).
	skillsGen uint64
	// removed: closed by eviction or Close, not to be used again.
	removed bool
	// dirty: code ran since the last checkpoint.
	dirty atomic.Bool
	// token names the checkpoint h's state was restored from or last
	// saved as ("" for none): another token at the store's head means
	// another server saved the container since (Manager.stale).
	tokenMu sync.Mutex
	token   string
	// lease is the container's lease (cluster) under which h's state is
	// known to be the container's newest (0: not known): while this
	// server holds that same lease no other server can have run it, so
	// Manager.stale need not read the store.
	lease uint64
	// behind: h was restored from a checkpoint older than the container's
	// last run (its holder died first); the next run says so, once.
	behind bool
	// idleTimer takes its background checkpoint CheckpointAfter after the
	// first run since the last one (guarded by Manager.mu).
	idleTimer *time.Timer
	// checkpointDue: the background checkpoint came while a run held
	// runMu; that run's end takes it (container.unlockRun), before the
	// runs queued behind it (guarded by Manager.mu).
	checkpointDue bool
	// cancelRun cancels the run in flight on it, if any (guarded by
	// Manager.mu): Fenced calls it when the lease is lost.
	cancelRun context.CancelCauseFunc
	closeOnce sync.Once
}

// close closes h's session once, whichever of its ends comes first.
func (h *held) close() { h.closeOnce.Do(func() { _ = h.sess.Close() }) }

// syncedFile is one container file as an interpreter holds it.
type syncedFile struct {
	id, rev string    // the store's file and its revision
	stamp   fileStamp // the interpreter's size and mtime of it
	stamped bool      // stamp is known (it is read by the listing after a write)
}

type fileStamp struct {
	size int64
	mod  int64 // Unix nanoseconds
}

// acquire returns the container's held interpreter, opening one. When the
// sandbox is full it makes room first: an idle interpreter that closes
// without a checkpoint is closed, else it waits for a trim (headroom.go)
// to checkpoint and close one in the background — a requester never
// takes another container's checkpoint on its own path. A container this
// response made whose code has not run yet (fresh) has no checkpoint to
// look for: its interpreter is opened without asking the store.
func (m *Manager) acquire(ctx context.Context, owner, cid string, memory int64, network *egress.Policy, fresh bool, lease uint64) (*held, bool, error) {
	m.mu.Lock()
	if h, ok := m.held[cid]; ok && !h.removed {
		h.users++
		m.unidleLocked(h)
		m.mu.Unlock()
		return h, false, nil
	}
	// One interpreter's room at most: a closed one's slot comes back to
	// the pool a few milliseconds after its close (the worker reaped),
	// and the Open below queues for it. Re-checking the capacity here
	// meanwhile would close (and checkpoint) one more for nothing.
	var evict *held
	var room <-chan struct{}
	if c := m.provider.Capacity(); c.InUse >= c.Max && m.idle.Len() > 0 {
		switch evict = m.cleanIdleLocked(); {
		case evict != nil:
			m.forgetLocked(evict)
		case m.trim != nil:
			room = m.trim // its interpreter's room is on its way
		default:
			room = m.trimLocked()
		}
	}
	m.mu.Unlock()
	if evict != nil {
		m.log.Info("closing an idle container's interpreter to make room", zap.String("container_id", evict.cid))
		evict.close()
		m.released(evict.cid)
	}
	if room != nil {
		select {
		case <-room:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
	sess, token, behind, err := m.openSession(ctx, owner, cid, !fresh, sandbox.SessionOptions{MemoryBytes: memory, Owner: owner, Network: network})
	if err != nil {
		return nil, false, err
	}
	restored := token != ""
	h := &held{cid: cid, owner: owner, memory: memory, sess: sess, users: 1, files: map[string]syncedFile{}, token: token, behind: behind, lease: lease}
	m.mu.Lock()
	if old, ok := m.held[cid]; ok && !old.removed {
		// Another response opened one meanwhile: use that, drop ours.
		old.users++
		m.unidleLocked(old)
		m.mu.Unlock()
		_ = sess.Close()
		return old, false, nil
	}
	m.held[cid] = h
	m.mu.Unlock()
	m.keepHeadroom()
	return h, !restored, nil
}

// release marks one response done with h. An interpreter no response
// uses is kept for its container's next response, unless sessions are
// queued for capacity: then it is closed at once for them, as an eviction
// would close it later. Kept, it would hold its slot while they wait:
// every new container queued behind idle ones and ran out of queue wait.
func (m *Manager) release(h *held) {
	m.mu.Lock()
	h.users--
	if h.users > 0 || h.removed {
		// A removed one (dropped, fenced, lost) closes with its last user.
		last := h.removed && h.users == 0
		m.mu.Unlock()
		if last {
			h.close()
		}
		return
	}
	if m.provider.Capacity().Waiting == 0 {
		h.elem = m.idle.PushBack(h)
		m.scheduleCheckpointLocked(h)
		m.mu.Unlock()
		m.keepHeadroom()
		return
	}
	m.forgetLocked(h)
	saved := m.savingLocked(h)
	m.mu.Unlock()
	m.log.Info("closing a released interpreter: sessions are waiting for capacity", zap.String("container_id", h.cid))
	m.saveAndClose(context.Background(), h, saved)
}

// lose forgets h after its session failed.
func (m *Manager) lose(h *held) {
	m.mu.Lock()
	m.forgetLocked(h)
	m.mu.Unlock()
	h.close()
	m.released(h.cid)
}

// forgetLocked marks h removed (never to be used again) and takes it out
// of held and the idle list. Callers hold m.mu and close its session.
func (m *Manager) forgetLocked(h *held) {
	h.removed = true
	if m.held[h.cid] == h {
		delete(m.held, h.cid)
	}
	m.unidleLocked(h)
}

// unidleLocked takes h off the idle list if it is on it; its background
// checkpoint stays armed (a use does not put it off), unless h is removed.
// Callers hold m.mu.
func (m *Manager) unidleLocked(h *held) {
	if h.idleTimer != nil && h.removed {
		h.idleTimer.Stop()
		h.idleTimer = nil
	}
	if h.elem != nil {
		m.idle.Remove(h.elem)
		h.elem = nil
	}
}

// drop closes the interpreter of a container that is gone or expired, and
// removes its checkpoint.
func (m *Manager) drop(owner, cid string) {
	m.mu.Lock()
	if m.secrets[cid].owner == owner {
		delete(m.secrets, cid)
	}
	h, ok := m.held[cid]
	if ok && h.owner != owner {
		// Another owner's container of that id: not this one to drop.
		m.mu.Unlock()
		return
	}
	if ok {
		m.forgetLocked(h)
	}
	m.mu.Unlock()
	if ok && h.users == 0 {
		h.close()
	}
	m.dropCheckpoint(context.Background(), owner, cid)
	m.released(cid)
}

// Held reports how many interpreters the manager holds (for tests and
// metrics).
func (m *Manager) Held() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.held)
}

// Close closes every held interpreter.
func (m *Manager) Close() error {
	if m.stopChecks != nil {
		m.stopChecks()
	}
	type closing struct {
		h    *held
		done chan struct{}
	}
	m.mu.Lock()
	hs := make([]closing, 0, len(m.held))
	for _, h := range m.held {
		h.removed = true
		m.unidleLocked(h)
		hs = append(hs, closing{h, m.savingLocked(h)})
	}
	m.held = map[string]*held{}
	m.idle.Init()
	m.mu.Unlock()
	// A drain: every interpreter's state is checkpointed before it closes
	// (bounded: a server told to stop has a grace period, not forever).
	// At most closeParallel at a time: each checkpoint holds its state in
	// memory until it is written.
	ctx, cancel := context.WithTimeout(context.Background(), closeCheckpointTimeout)
	defer cancel()
	var wg sync.WaitGroup
	slots := make(chan struct{}, closeParallel)
	for _, c := range hs {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			m.saveAndClose(ctx, c.h, c.done)
		}()
	}
	wg.Wait()
	// Trims in flight were forgotten before: their checkpoints are
	// written (or time out) before the provider closes.
	m.trims.Wait()
	return nil
}

// closeParallel bounds the checkpoints Close takes at once.
const closeParallel = 4
