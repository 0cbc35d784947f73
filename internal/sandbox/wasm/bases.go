package wasm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/checkpoint"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/worker"
)

// Bases keeps the snapshots that session checkpoints were taken over
// (checkpoint.Keeper). A checkpoint is a delta against its snapshot, and
// the snapshot on disk is replaced at every start and rotation and is
// each replica's own: restoring elsewhere or later needs the base back.
type Bases interface {
	PutBase(ctx context.Context, id string, meta, image []byte) error
	// GetBase returns an error for a base it does not have or that fails
	// its check. Such a definite answer matches checkpoint.ErrNone (it
	// has none) or checkpoint.ErrRefused (it fails its check), as
	// checkpoint.Keeper's errors do, or sandbox.ErrNoCheckpoint (for
	// another implementation): a restore over that base is then refused
	// for good (sandbox.ErrNoCheckpoint) and the checkpoint may be
	// dropped. Any other error (the store unreachable, a timeout, ctx)
	// is taken as transient: the restore fails with it, and the
	// checkpoint is kept for a later try.
	GetBase(ctx context.Context, id string) (meta, image []byte, err error)
}

// definiteAbsence reports whether a GetBase error says the base is not
// there, or fails its check, for good (see Bases). The package checkpoint
// is imported for its two errors alone: it imports nothing of sandbox, so
// there is no cycle, and no adapter at the wiring can be forgotten.
func definiteAbsence(err error) bool {
	return errors.Is(err, checkpoint.ErrNone) || errors.Is(err, checkpoint.ErrRefused) || errors.Is(err, sandbox.ErrNoCheckpoint)
}

// A snapshot is kept in Bases as soon as it is taken (at start and at
// each rotation, publishBase), in the background, so that the first
// checkpoint taken over it — on a replica started seconds before — does
// not wait for an upload of tens of MB before it can be stored (issue 37,
// row 7: a checkpoint is durable within checkpoints.after + 1 s of a
// response). keepBase, before a checkpoint is handed out, only waits for
// that upload if it is still under way, and tries again if it failed.

// baseUpload is one upload of a snapshot to Bases.
type baseUpload struct {
	done chan struct{} // closed once err is set
	err  error
}

// baseState is what the kind knows of one snapshot directory's base.
type baseState struct {
	stored   time.Time   // when the last upload that succeeded began (zero: none did)
	inflight *baseUpload // the upload under way, nil if none
}

// publishBase starts keeping the snapshot in dir in Bases in the
// background, unless it is kept already or being kept. The snapshots
// call it for each snapshot they take or reuse (snapshots.onUse).
func (k *Kind) publishBase(dir string) {
	if k.cfg.Bases == nil || dir == "" {
		return
	}
	k.publishMu.Lock()
	defer k.publishMu.Unlock()
	// Forget the snapshots pruned since (a rotation removes the old ones).
	for d, st := range k.published {
		if st.inflight == nil && d != dir {
			if _, err := os.Stat(d); errors.Is(err, fs.ErrNotExist) {
				delete(k.published, d)
			}
		}
	}
	st := k.baseStateLocked(dir)
	if st.inflight == nil && (st.stored.IsZero() || time.Since(st.stored) >= baseRefresh) {
		k.uploadLocked(dir, st)
	}
}

// keepBase makes sure the snapshot in dir is in Bases before a checkpoint
// taken over it is handed out, so that the checkpoint restores anywhere,
// later. Normally the upload publishBase started at start or rotation has
// long finished and this costs nothing; while it is still under way it is
// waited for (never a second one started beside it); when it failed (or
// there was none: a base fetched from Bases, an older snapshot) it is
// tried again, once per call, and waited for. A base stored once is
// written again every baseRefresh while checkpoints are taken over it, in
// the background: it is in the store meanwhile. ctx bounds the wait
// only; the upload goes on for the next checkpoint.
func (k *Kind) keepBase(ctx context.Context, dir string) {
	if k.cfg.Bases == nil || dir == "" {
		return
	}
	for try := 0; try < 2; try++ {
		k.publishMu.Lock()
		st := k.baseStateLocked(dir)
		if !st.stored.IsZero() {
			if time.Since(st.stored) >= baseRefresh && st.inflight == nil {
				k.uploadLocked(dir, st)
			}
			k.publishMu.Unlock()
			return
		}
		u := st.inflight
		if u == nil {
			u = k.uploadLocked(dir, st)
		}
		k.publishMu.Unlock()
		select {
		case <-u.done:
		case <-ctx.Done():
			return
		}
		if u.err == nil {
			return
		}
	}
}

// fetchedBase records that the snapshot in dir was just fetched from
// Bases: it is there, so a checkpoint taken over it need not wait for an
// upload; one is started in the background all the same, since when the
// store last wrote it is not known here (its expiry counts from then).
func (k *Kind) fetchedBase(dir string) {
	k.publishMu.Lock()
	defer k.publishMu.Unlock()
	st := k.baseStateLocked(dir)
	if st.stored.IsZero() {
		st.stored = time.Now().Add(-baseRefresh) // in the store; to be written again
	}
	if st.inflight == nil {
		k.uploadLocked(dir, st)
	}
}

// baseStateLocked returns dir's entry, made if missing. Callers hold
// publishMu.
func (k *Kind) baseStateLocked(dir string) *baseState {
	if k.published == nil {
		k.published = map[string]*baseState{}
	}
	st := k.published[dir]
	if st == nil {
		st = &baseState{}
		k.published[dir] = st
	}
	return st
}

// uploadLocked starts an upload of dir's snapshot in the background,
// bounded by baseUploadTimeout and the kind's life. Callers hold
// publishMu.
func (k *Kind) uploadLocked(dir string, st *baseState) *baseUpload {
	u := &baseUpload{done: make(chan struct{})}
	if k.ctx.Err() != nil {
		u.err = k.ctx.Err()
		close(u.done)
		return u
	}
	st.inflight = u
	began := time.Now()
	k.uploads.Add(1)
	go func() {
		defer k.uploads.Done()
		ctx, cancel := context.WithTimeout(k.ctx, baseUploadTimeout)
		err := k.publish(ctx, dir)
		cancel()
		k.publishMu.Lock()
		u.err = err
		if err == nil {
			st.stored = began
		}
		st.inflight = nil
		close(u.done)
		k.publishMu.Unlock()
	}()
	return u
}

// baseUploadTimeout bounds one upload of a snapshot (tens of MB).
const baseUploadTimeout = 5 * time.Minute

// baseRefresh is how often a base still in use is written again, so that
// the checkpoint store's expiry (checkpoint.Keeper.Sweep) never takes the
// base of a checkpoint it keeps.
const baseRefresh = 24 * time.Hour

// publish keeps the snapshot in dir in Bases.
func (k *Kind) publish(ctx context.Context, dir string) error {
	meta, err := os.ReadFile(filepath.Join(dir, worker.SnapshotMetaFile))
	if err == nil {
		var image []byte
		if image, err = os.ReadFile(filepath.Join(dir, worker.SnapshotImageFile)); err == nil {
			var m *worker.SnapshotMeta
			if m, err = worker.ReadSnapshotMeta(dir); err == nil {
				start := time.Now()
				err = k.cfg.Bases.PutBase(ctx, worker.SnapshotID(m), meta, image)
				k.log.Info("wasm snapshot kept for checkpoints", zap.String("dir", dir), zap.Duration("took", time.Since(start)), zap.Error(err))
			}
		}
	}
	if err != nil {
		k.log.Warn("keeping the wasm snapshot for checkpoints failed: checkpoints of its sessions restore only while it is on this disk",
			zap.String("dir", dir), zap.Error(err))
	}
	return err
}

// restoreDir returns the snapshot directory a session state was taken
// over: the current snapshot, an older one still on disk, or one fetched
// from Bases into basesDir. Its error wraps sandbox.ErrNoCheckpoint only
// when the state cannot be restored here for good (it names no snapshot;
// the snapshot is gone and Bases definitely does not have it, or has one
// that fails its check or is of another runtime); a failure to fetch or
// write the base is returned as it is.
func (k *Kind) restoreDir(ctx context.Context, state []byte) (string, error) {
	id, err := worker.StateSnapshot(state)
	if err != nil {
		return "", fmt.Errorf("%w: %v", sandbox.ErrNoCheckpoint, err)
	}
	idOf := func(dir string) string {
		m, err := worker.ReadSnapshotMeta(dir)
		if err != nil {
			return ""
		}
		return worker.SnapshotID(m)
	}
	if dir := k.countSession(); idOf(dir) == id {
		return dir, nil
	}
	ents, _ := os.ReadDir(k.snaps.root)
	for _, e := range ents {
		if dir := filepath.Join(k.snaps.root, e.Name()); idOf(dir) == id {
			return dir, nil
		}
	}
	h := sha256.Sum256([]byte(id))
	dir := filepath.Join(k.basesDir(), hex.EncodeToString(h[:12]))
	if idOf(dir) == id {
		now := time.Now()
		_ = os.Chtimes(dir, now, now) // in use: not pruned
		return dir, nil
	}
	if k.cfg.Bases == nil {
		return "", fmt.Errorf("%w: the snapshot the state was taken over is no longer on this server", sandbox.ErrNoCheckpoint)
	}
	if err := k.fetchBase(ctx, id, dir); err != nil {
		return "", fmt.Errorf("wasm: the snapshot the state was taken over: %w", err)
	}
	return dir, nil
}

// basesDir holds snapshots fetched from Bases, beside the snapshots this
// server takes (which a rotation prunes).
func (k *Kind) basesDir() string { return k.snaps.root + ".bases" }

// fetchBase writes the base id into dir: its image and metadata from
// Bases, and the stripped module of the current snapshot, which every
// snapshot of this runtime shares (checked against the metadata's hash).
// A base Bases definitely does not have, or that fails a check (its
// metadata, its id, its module), is an error wrapping
// sandbox.ErrNoCheckpoint; any other failure (Bases' transient errors,
// this disk) is not.
func (k *Kind) fetchBase(ctx context.Context, id, dir string) error {
	metaJSON, image, err := k.cfg.Bases.GetBase(ctx, id)
	if err != nil {
		if definiteAbsence(err) {
			return fmt.Errorf("%w: no usable base %s: %v", sandbox.ErrNoCheckpoint, id, err)
		}
		return fmt.Errorf("fetching the base %s: %w", id, err)
	}
	var meta worker.SnapshotMeta
	if err := json.Unmarshal(metaJSON, &meta); err != nil {
		return fmt.Errorf("%w: base metadata: %v", sandbox.ErrNoCheckpoint, err)
	}
	if worker.SnapshotID(&meta) != id || int64(len(image)) != int64(meta.Pages)*wasmPageSize {
		return fmt.Errorf("%w: the base does not match its id", sandbox.ErrNoCheckpoint)
	}
	module := filepath.Join(k.snaps.Current(), worker.SnapshotModuleFile)
	if err := checkModule(module, meta.Module); err != nil {
		return err
	}
	k.pruneBases()
	if err := os.MkdirAll(k.basesDir(), 0o700); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(k.basesDir(), ".fetch-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := os.Link(module, filepath.Join(tmp, worker.SnapshotModuleFile)); err != nil {
		if err := copyFile(module, filepath.Join(tmp, worker.SnapshotModuleFile)); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, worker.SnapshotImageFile), image, 0o600); err != nil {
		return err
	}
	// The metadata last: its presence marks a whole snapshot.
	if err := os.WriteFile(filepath.Join(tmp, worker.SnapshotMetaFile), metaJSON, 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil && !errors.Is(err, os.ErrExist) {
		// Another start fetched the same base meanwhile: use that one.
		if _, serr := os.Stat(filepath.Join(dir, worker.SnapshotMetaFile)); serr != nil {
			return err
		}
	}
	k.log.Info("fetched the wasm snapshot a checkpoint was taken over", zap.String("dir", dir))
	k.fetchedBase(dir)
	return nil
}

// wasmPageSize is the WebAssembly page size (an image is whole pages).
const wasmPageSize = 64 << 10

// basesKeep is how long a fetched base stays unused on disk.
const basesKeep = 24 * time.Hour

// pruneBases removes fetched bases unused for basesKeep (a worker holds
// open what it restores from, so removal never disturbs one).
func (k *Kind) pruneBases() {
	ents, _ := os.ReadDir(k.basesDir())
	for _, e := range ents {
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > basesKeep {
			_ = os.RemoveAll(filepath.Join(k.basesDir(), e.Name()))
		}
	}
}

func checkModule(path, want string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("%w: the base was taken from another runtime (module %s, this server's %s)", sandbox.ErrNoCheckpoint, want, got)
	}
	return nil
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o600)
}
