package wasm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// keepBase keeps the snapshot in dir in Bases before the first checkpoint
// taken over it is handed out (later ones find it kept), so that such
// checkpoints restore anywhere, later. It costs the first checkpoint of
// each snapshot a compression and an upload of the image (tens of MB,
// under a second here); snapshots no checkpoint was taken over are never
// uploaded.
func (k *Kind) keepBase(ctx context.Context, dir string) {
	if k.cfg.Bases == nil || dir == "" {
		return
	}
	k.publishMu.Lock()
	if k.published == nil {
		k.published = map[string]time.Time{}
	}
	if last, ok := k.published[dir]; ok && time.Since(last) < baseRefresh {
		k.publishMu.Unlock()
		return
	}
	k.published[dir] = time.Now()
	k.publishMu.Unlock()
	if err := k.publish(ctx, dir); err != nil {
		k.publishMu.Lock()
		delete(k.published, dir) // the next checkpoint tries again
		k.publishMu.Unlock()
	}
}

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
