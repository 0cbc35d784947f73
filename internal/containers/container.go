package containers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/store"
)

// container is one response's use of a container.
type container struct {
	m      *Manager
	meta   store.Container
	fresh  bool  // made for this response
	memory int64 // session memory (0: the operator's default)

	mu     sync.Mutex
	h      *held // acquired on the first run
	opened bool  // h was opened for this response, not held before
	ran    bool
	closed bool
	// forwarded: another replica sent this run here, the holder.
	forwarded bool
	// lease is the token of the container's lease this server holds for
	// the run (cluster; 0: none).
	lease uint64
	// placed is the result of a run sent to the container's holder.
	placed RunResult
	// claimed is when place last found the lease this server's.
	claimed time.Time
	// openedFresh: the interpreter hold last got was opened without state
	// (not held before, no checkpoint restored); dropped: an interpreter
	// of this response ended and was dropped (lost), so a fresh one next
	// is a reset the model must be told of.
	openedFresh, dropped bool
}

func (c *container) ID() string { return c.meta.ID }

// Network implements Container: the stored policy, without values.
func (c *container) Network() *egress.Policy {
	n := c.meta.Network
	if n == nil {
		return nil
	}
	pol := &egress.Policy{AllowedDomains: append([]string(nil), n.AllowedDomains...)}
	for _, s := range n.Secrets {
		pol.Secrets = append(pol.Secrets, egress.Secret{Domain: s.Domain, Name: s.Name})
	}
	return pol
}

// Files lists the container's files from the store.
func (c *container) Files(ctx context.Context) ([]File, error) {
	files, err := c.allFiles(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]File, 0, len(files))
	for _, f := range files {
		out = append(out, toRef(f))
	}
	return out, nil
}

func (c *container) allFiles(ctx context.Context) ([]store.File, error) {
	var all []store.File
	after := ""
	for {
		page, more, err := c.m.st.ListFiles(ctx, c.meta.Owner, c.meta.ID, store.ListOptions{Limit: 100, Order: "asc", After: after})
		if err != nil {
			return nil, fmt.Errorf("containers: list files: %w", err)
		}
		all = append(all, page...)
		if !more || len(page) == 0 {
			return all, nil
		}
		after = page[len(page)-1].ID
	}
}

func toRef(f store.File) File {
	return File{ID: f.ID, Path: f.Path, Filename: f.Filename, Bytes: f.Bytes}
}

// Run implements Container. The store is the truth for
// /mnt/data: before the code runs, the interpreter's /mnt/data is made to
// match it (whatever the API added, replaced or deleted meanwhile); after,
// the store takes what the code created, changed and deleted, and whatever
// it could not keep is removed again, so the two agree after every run
// whatever the code, the API and the interpreter's deaths did.
func (c *container) Run(ctx context.Context, code string) (RunResult, error) {
	return c.run(ctx, action{Code: code})
}

// Shell implements Container: the hosted shell's commands, in the
// container's interpreter's sandbox (its files, processes, limits and
// network), with the files kept as a run's are. The Python state is not
// touched. A provider without a shell fails with sandbox.ErrNoShell.
func (c *container) Shell(ctx context.Context, req sandbox.ShellRequest) (RunResult, error) {
	return c.run(ctx, action{Code: noShellCode, Shell: &req})
}

func (c *container) run(ctx context.Context, act action) (RunResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return RunResult{}, sandbox.ErrClosed
	}
	m := c.m
	if _, err := m.touch(ctx, c.meta.Owner, c.meta.ID, m.cfg.Now()); err != nil {
		if errors.Is(err, store.ErrExpired) || errors.Is(err, store.ErrNotFound) {
			m.drop(c.meta.Owner, c.meta.ID)
			return RunResult{}, fmt.Errorf("%w: %s", ErrExpired, c.meta.ID)
		}
		return RunResult{}, fmt.Errorf("containers: %w", err)
	}
	h, err := c.lockRun(ctx, act)
	if err != nil || h == nil {
		return c.placed, err
	}
	defer func() { m.unlockRun(h) }() // prepare may replace h

	// A container that existed before this response, whose interpreter
	// this server did not hold (another replica ran it, or it was closed
	// to make room), starts with its files but without its variables.
	reset := !c.ran && !c.fresh && c.opened
	h, replaced, err := c.prepare(ctx, h)
	switch {
	case errors.Is(err, errHold):
		return RunResult{}, err
	case err != nil:
		m.log.Warn("copying the container's files into the interpreter failed", zap.String("container_id", c.meta.ID), zap.Error(err))
		if h.sess.Generation() != h.synced || ctx.Err() != nil {
			// The interpreter ended during the copy (the request was
			// cancelled, it crashed): the next run restores the
			// container's checkpoint rather than go on in a fresh one.
			c.lost(h)
		}
		return RunResult{Result: sandbox.Result{Outcome: sandbox.OutcomeRejected,
			Detail: "the container's files could not be copied into the interpreter, so the code did not run: " + strings.TrimPrefix(err.Error(), "containers: ")}}, nil
	}
	reset = reset || replaced || c.dropped && c.openedFresh
	c.dropped = false
	behind := h.behind && !reset
	h.behind = false
	if err := m.markRunning(ctx, h, c.lease); err != nil {
		c.fenced(h)
		return RunResult{}, err
	}
	gen := h.sess.Generation()
	res, err := c.runFenced(ctx, h, act)
	if err != nil {
		c.fail(h)
		return RunResult{}, err
	}
	// The result is reported only if this server held the lease all
	// along: a holder paused past its lease (another replica may have
	// taken the container and run it since) drops what it ran instead.
	if err := c.confirm(ctx); err != nil {
		c.fenced(h)
		return RunResult{}, err
	}
	h.lease = c.lease
	c.ran = true
	h.ranGen = gen
	h.dirty.Store(true)
	m.mu.Lock()
	m.scheduleCheckpointLocked(h)
	m.mu.Unlock()
	out := RunResult{Result: res, Reset: reset || res.StateLost, Behind: behind && !res.StateLost}
	// A run that ended its interpreter took its files along: they are not
	// the code's deletions, and the next run's mirror gives the new
	// interpreter the container's files.
	if !interpreterEnded(res.Outcome) {
		var note string
		out.Changed, note = c.settle(ctx, h, gen)
		if note != "" {
			out.Stderr += "\n[" + note + "]\n"
		}
	} else {
		c.lost(h)
	}
	for _, im := range res.Images {
		f, err := c.storeImage(ctx, im)
		if err != nil {
			m.log.Warn("storing an image failed", zap.String("container_id", c.meta.ID), zap.Error(err))
			continue
		}
		out.Images = append(out.Images, toRef(f))
	}
	return out, nil
}

// lockRun gets the run its interpreter with its run lock held: here, under
// this server's lease on the container (claimed before, and again after
// a wait for the run lock, when the lease may have moved). A run that went
// to the container's holder instead returns a nil h, its result in
// c.placed.
func (c *container) lockRun(ctx context.Context, act action) (*held, error) {
	m := c.m
	p := m.cfg.Placement
	for attempt := 0; ; attempt++ {
		if p != nil && !c.forwarded {
			res, done, err := c.place(ctx, act)
			if done {
				c.placed = res
				return nil, err
			}
		}
		if err := c.hold(ctx); err != nil {
			return nil, err
		}
		h := c.h
		waited := !h.runMu.TryLock()
		if waited {
			h.runMu.Lock()
		}
		m.mu.Lock()
		removed := h.removed
		m.mu.Unlock()
		if removed {
			// Dropped while this run waited (the run before it lost the
			// lease, or the interpreter broke): get the container's
			// interpreter again.
			h.runMu.Unlock()
			m.release(h)
			c.h = nil
			if attempt >= 2 {
				return nil, unavailable("the container's interpreter kept being replaced", nil)
			}
			continue
		}
		if p == nil || !waited && !c.forwarded && time.Since(c.claimed) < p.TTL()/4 {
			return h, nil // the claim place just made holds
		}
		// The run waited for the one before it, or for its interpreter
		// to be restored, or was forwarded (its lease checked before
		// that): the lease may have moved since.
		l, mine, err := p.Claim(ctx, c.meta.ID)
		if err == nil && mine {
			c.lease = l.Token
			return h, nil
		}
		h.runMu.Unlock()
		switch {
		case err != nil:
			return nil, unavailable("the store that decides which server runs the container could not be reached", err)
		case c.forwarded:
			c.fenced(h)
			return nil, errMoved
		case attempt >= 2:
			c.fenced(h)
			return nil, unavailable("the container kept changing servers", nil)
		}
		c.fenced(h)
	}
}

// runFenced runs act in h, cancelled when this server loses the
// container's lease (Fenced): such a run's result is not reported.
func (c *container) runFenced(ctx context.Context, h *held, act action) (sandbox.Result, error) {
	m := c.m
	if m.cfg.Placement == nil {
		return act.run(ctx, h.sess)
	}
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	m.mu.Lock()
	h.cancelRun = cancel
	m.mu.Unlock()
	res, err := act.run(rctx, h.sess)
	m.mu.Lock()
	h.cancelRun = nil
	m.mu.Unlock()
	if errors.Is(context.Cause(rctx), errFenced) {
		return sandbox.Result{}, unavailable("the server running the container lost its lease during the run; what the run did was discarded", errFenced)
	}
	return res, err
}

// confirm checks that this server still holds the lease the run ran
// under (no cluster: it always does).
func (c *container) confirm(ctx context.Context) error {
	p := c.m.cfg.Placement
	if p == nil {
		return nil
	}
	ok, err := p.Confirm(ctx, c.meta.ID, c.lease)
	switch {
	case err != nil:
		return unavailable("whether this server still held the container's lease during the run could not be confirmed; what the run did was discarded", err)
	case !ok:
		return unavailable("the server running the container lost its lease during the run (it was paused or cut off longer than its lease); what the run did was discarded", nil)
	}
	return nil
}

// fenced drops h, which must not run again here: this server lost (or
// cannot confirm) the container's lease. Its state is not checkpointed.
func (c *container) fenced(h *held) {
	c.m.Fenced(c.meta.ID)
	c.drop(h)
}

// drop forgets h (it must not run again) and gives up this response's use
// of it; it closes with its last user. The lease is untouched.
func (c *container) drop(h *held) {
	c.m.mu.Lock()
	c.m.forgetLocked(h)
	c.m.mu.Unlock()
	if c.h == h {
		c.m.release(h)
		c.h = nil
	}
}

// errHold marks prepare's failure to get an interpreter at all (capacity):
// the run's error, not a copy-in that failed.
var errHold = errors.New("containers: no interpreter")

// prepare mirrors the store into h before a run. When the code's own
// scratch files (/tmp) take the room the container's files need, it
// replaces h by a fresh interpreter, which has all of it, and says so;
// the caller holds h.runMu, and then the new one's.
func (c *container) prepare(ctx context.Context, h *held) (*held, bool, error) {
	err := c.mirror(ctx, h)
	if !errors.Is(err, sandbox.ErrScratchFull) || h.ranGen != h.sess.Generation() {
		return h, false, err
	}
	c.m.log.Info("replacing an interpreter whose scratch space cannot take the container's files", zap.String("container_id", c.meta.ID), zap.Error(err))
	c.fail(h)
	if err := c.hold(ctx); err != nil {
		return h, false, fmt.Errorf("%w: %w", errHold, err)
	}
	h.runMu.Unlock()
	h = c.h
	h.runMu.Lock()
	return h, true, c.mirror(ctx, h)
}

// settle is the store's side of a run that left its interpreter alive:
// what the code wrote and deleted is collected, and what was not kept
// leaves /mnt/data now, so the two agree after the run (when everything
// was kept the interpreter holds only container files, and the next run's
// mirror adds what the API added meanwhile). note is one line for the
// model, or "".
func (c *container) settle(ctx context.Context, h *held, gen uint64) (changed []File, note string) {
	changed, note, dirty := c.collect(ctx, h, gen)
	if !dirty {
		return changed, note
	}
	if err := c.mirror(ctx, h); err != nil && h.sess.Generation() == gen {
		c.m.log.Warn("making the interpreter's files match the store after a run failed", zap.String("container_id", c.meta.ID), zap.Error(err))
		note = joinNotes(note, "the interpreter's /mnt/data could not be made to match the container's files: "+strings.TrimPrefix(err.Error(), "containers: "))
	}
	return changed, note
}

// interpreterEnded reports whether a run with outcome o surely ended its
// interpreter (the pool kills the worker on these), so that collecting
// would only start a new one. Where it cannot tell (a MemoryError the
// interpreter survives, an exit with status 0), collect checks the
// session's generation instead.
func interpreterEnded(o sandbox.Outcome) bool {
	switch o {
	case sandbox.OutcomeTimeout, sandbox.OutcomeCrashed, sandbox.OutcomeCancelled:
		return true
	}
	return false
}

// hold acquires the container's interpreter for this response if it has
// none.
func (c *container) hold(ctx context.Context) error {
	if c.h != nil {
		return nil
	}
	pol, err := c.m.policy(c.meta)
	if err != nil {
		return err
	}
	h, opened, err := c.m.acquire(ctx, c.meta.Owner, c.meta.ID, c.memory, pol, c.fresh && !c.ran, c.lease)
	if err != nil {
		return err
	}
	if !opened && c.m.replaceStale(ctx, h, c.lease) {
		// Another server ran the container since this one's interpreter
		// was checkpointed or restored: the next one restores its state.
		if h, opened, err = c.m.acquire(ctx, c.meta.Owner, c.meta.ID, c.memory, pol, false, c.lease); err != nil {
			return err
		}
	}
	c.h, c.opened, c.openedFresh = h, c.opened || opened, opened
	return nil
}

// maxMirrorPasses bounds mirror's passes. One pass removes every file a
// listing shows that the store does not have (up to sandbox.MaxListFiles),
// so 16 passes clear what code can leave in a scratch space (memfs holds at
// most 65 536 inodes; a tmpfs is bounded by bytes, at least 4 KiB a file).
const maxMirrorPasses = 16

// mirror makes the interpreter's /mnt/data hold exactly the container's
// files: what the store lacks is removed, what the interpreter lacks or
// holds in another version is written (replacing whatever is in its way).
// A pass lists the interpreter, then changes it; the next pass confirms
// and records the stamps of what was written. Errors wrap the sandbox's
// (sandbox.ErrScratchFull when the files do not fit).
func (c *container) mirror(ctx context.Context, h *held) error {
	if err := c.mountSkills(ctx, h); err != nil {
		return err
	}
	stored, err := c.allFiles(ctx)
	if err != nil {
		return err
	}
	want := make(map[string]store.File, len(stored))
	for _, f := range stored {
		want[f.Path] = f
	}
	for pass := 0; ; pass++ {
		l, err := h.sess.ListFiles(ctx, DataDir)
		if err != nil {
			return fmt.Errorf("containers: list %s: %w", DataDir, err)
		}
		// A listing starts a fresh interpreter if the session lost its
		// own: its /mnt/data is empty, whatever was recorded.
		if gen := h.sess.Generation(); h.synced != gen {
			h.files, h.synced = map[string]syncedFile{}, gen
		}
		have := make(map[string]fileStamp, len(l.Files))
		var remove []string
		for _, fi := range l.Files {
			have[fi.Path] = stampOf(fi)
			if _, ok := want[fi.Path]; !ok {
				remove = append(remove, fi.Path)
			}
		}
		for p := range h.files {
			if _, ok := want[p]; !ok {
				delete(h.files, p)
			}
		}
		var write []store.File
		for _, p := range slices.Sorted(maps.Keys(want)) {
			f, r := want[p], h.files[p]
			st, listed := have[p]
			switch {
			case r.id != f.ID || r.rev != f.Revision:
				write = append(write, f) // new, or another version in the store
			case listed && !r.stamped:
				r.stamp, r.stamped = st, true // written by the last pass
				h.files[p] = r
			case listed && r.stamp != st, !listed && !l.Truncated:
				write = append(write, f) // changed or gone in the interpreter: the store's copy wins
			}
		}
		if len(remove) == 0 && len(write) == 0 {
			// Done — also when a truncated listing shows only the
			// container's own files: nothing else can be seen to remove.
			return nil
		}
		if pass == maxMirrorPasses {
			return fmt.Errorf("containers: %s still differs from the container's files after %d passes", DataDir, pass)
		}
		if len(remove) > 0 {
			if err := h.sess.RemoveFiles(ctx, remove); err != nil {
				return fmt.Errorf("containers: remove %d files not in the container from the interpreter: %w", len(remove), err)
			}
		}
		for _, f := range write {
			data, err := c.m.st.FileContent(ctx, c.meta.Owner, c.meta.ID, f.ID)
			if errors.Is(err, store.ErrNotFound) {
				continue // deleted meanwhile: the next pass removes it
			}
			if err != nil {
				return fmt.Errorf("containers: read %s: %w", f.Path, err)
			}
			if err := h.sess.WriteFile(ctx, f.Path, data); err != nil {
				return fmt.Errorf("containers: copy %s (%d bytes) into the interpreter: %w", f.Path, len(data), err)
			}
			h.files[f.Path] = syncedFile{id: f.ID, rev: f.Revision}
		}
	}
}

// collect stores what the run created or changed under /mnt/data and
// deletes from the store what it deleted. It changes nothing when the
// interpreter did not survive the run (gen is the one that ran): its files
// went with it, and are not the code's deletions. note is one line for the
// model about what could not be kept, or ""; dirty is set when the
// interpreter may hold files the store does not (what was not kept).
func (c *container) collect(ctx context.Context, h *held, gen uint64) (changed []File, note string, dirty bool) {
	m := c.m
	l, err := h.sess.ListFiles(ctx, DataDir)
	if h.sess.Generation() != gen {
		return nil, "", false
	}
	if err != nil {
		return nil, "the files the code wrote could not be listed: " + err.Error(), true
	}
	have := make(map[string]fileStamp, len(l.Files))
	touched := l.Truncated || len(l.Files) != len(h.files)
	for _, fi := range l.Files {
		st := stampOf(fi)
		have[fi.Path] = st
		if r, ok := h.files[fi.Path]; !ok || !r.stamped || r.stamp != st {
			touched = true
		}
	}
	if !touched {
		return nil, "", false // the code wrote and deleted nothing in /mnt/data
	}
	stored, err := c.allFiles(ctx)
	if err != nil {
		return nil, "the files the code wrote could not be stored: " + err.Error(), true
	}
	byPath := make(map[string]store.File, len(stored))
	for _, f := range stored {
		byPath[f.Path] = f
	}
	var nk notKept

	// What the code deleted: recorded files the interpreter no longer has.
	// A truncated listing may just not show them; those are asked for.
	for _, p := range slices.Sorted(maps.Keys(h.files)) {
		r := h.files[p]
		if _, ok := have[p]; ok {
			continue
		}
		if l.Truncated && c.exists(ctx, h, p) {
			continue
		}
		if h.sess.Generation() != gen {
			return nil, "", false
		}
		delete(h.files, p)
		// Only the version the interpreter had: one the API put there
		// during the run is newer than the code's deletion.
		if f, ok := byPath[p]; ok && f.ID == r.id && f.Revision == r.rev {
			if err := m.st.DeleteFile(ctx, c.meta.Owner, c.meta.ID, f.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
				nk.add(p, "the code deleted it, but the deletion could not be stored: "+err.Error())
				continue
			}
			delete(byPath, p)
		}
	}

	// What the code created or changed.
	filesFull := "" // why no new file fits, once one did not
	for _, fi := range l.Files {
		p := fi.Path
		r, known := h.files[p]
		if known && r.stamped && r.stamp == have[p] {
			continue
		}
		if _, inStore := byPath[p]; filesFull != "" && !inStore {
			nk.add(p, filesFull)
			continue // a new file cannot fit: not read at all
		}
		data, err := h.sess.ReadFile(ctx, p, min(m.cfg.MaxFileBytes, sandbox.MaxFileBytes))
		if h.sess.Generation() != gen {
			return changed, nk.note(), false
		}
		if err != nil {
			nk.add(p, keepReason(err))
			continue
		}
		f, err := m.st.PutFile(ctx, store.File{
			ID: idgen.New("cfile_"), Owner: c.meta.Owner, ContainerID: c.meta.ID, Path: p,
			Filename: path.Base(p), CreatedAt: m.cfg.Now().Unix(), Source: "assistant",
		}, data)
		if err != nil {
			var qe *store.QuotaError
			if errors.As(err, &qe) && qe.Limit == store.LimitContainerFiles {
				filesFull = keepReason(err)
			}
			nk.add(p, keepReason(err))
			continue
		}
		byPath[p] = f
		h.files[p] = syncedFile{id: f.ID, rev: f.Revision, stamp: have[p], stamped: true}
		changed = append(changed, toRef(f))
	}
	nk.truncated = l.Truncated
	return changed, nk.note(), nk.n > 0 || nk.truncated
}

// exists asks the interpreter whether a regular file is at p (true when it
// cannot tell: nothing is deleted on a guess).
func (c *container) exists(ctx context.Context, h *held, p string) bool {
	_, err := h.sess.ReadFile(ctx, p, 0)
	return !errors.Is(err, sandbox.ErrNotExist)
}

// storeImage keeps a run's image as a container file named like OpenAI's
// (cfile_<id>.png). The code has its own figure; the file reaches
// /mnt/data with the next mirror, as every container file does.
func (c *container) storeImage(ctx context.Context, im sandbox.Image) (store.File, error) {
	id := idgen.New("cfile_")
	ext := ".png"
	if sub, ok := strings.CutPrefix(im.MediaType, "image/"); ok && sub != "" && !strings.ContainsAny(sub, "/+;") {
		ext = "." + sub
	}
	name := id + ext
	return c.m.st.PutFile(ctx, store.File{
		ID: id, Owner: c.meta.Owner, ContainerID: c.meta.ID, Path: path.Join(DataDir, name),
		Filename: name, CreatedAt: c.m.cfg.Now().Unix(), Source: "assistant",
	}, im.Data)
}

func stampOf(fi sandbox.FileInfo) fileStamp {
	return fileStamp{size: fi.Size, mod: fi.ModTime.UnixNano()}
}

// lost drops h after its interpreter ended (a timeout, a crash, a
// cancelled request): the session would go on in a fresh interpreter,
// which the next checkpoint would write over the container's state. The
// next run restores the container's last checkpoint instead (and says it
// is older than the run that ended it). The lease stays this server's.
// Without checkpoints there is nothing to restore: h goes on, fresh.
func (c *container) lost(h *held) {
	if c.m.cfg.Checkpoints == nil {
		return
	}
	c.drop(h)
	c.dropped = true
}

// fail drops an interpreter whose session broke.
func (c *container) fail(h *held) {
	c.m.lose(h)
	c.h = nil
}

// Close implements Container.
func (c *container) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	if c.h != nil {
		c.m.release(c.h)
		c.h = nil
	}
	c.m.unclaim(c.meta.ID)
	return nil
}
