// Package dir is a blob.Store in a directory: the default, for one host
// or for a volume every replica mounts (ReadWriteMany).
package dir

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/codeinterp/codeinterp/internal/checkpoint/blob"
)

// Store keeps each blob in a file under its root, made 0700 (directories)
// and 0600 (files).
type Store struct {
	root string
}

var _ blob.Store = (*Store)(nil)

// New returns a Store rooted at root, which it makes when missing.
func New(root string) (*Store, error) {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("blob dir: %w", err)
	}
	return &Store{root: root}, nil
}

// path is key's file: its segments as directories, the last with a '~'
// that no key may hold, so that the blob "a/b" and the blob "a/b/c" (a
// file and a directory, both named b otherwise) live side by side, as
// they do in object storage.
func (s *Store) path(key string) string {
	return filepath.Join(s.root, filepath.FromSlash(key)) + fileSuffix
}

const fileSuffix = "~"

// Put writes data to a temporary file beside key's, syncs it, renames it
// over key's and syncs the directory: after a crash the key holds the
// previous blob or this one, whole.
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	if err := blob.CheckKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	p := s.path(key)
	tmp, err := stage(p, data)
	if err != nil {
		return err
	}
	defer os.Remove(tmp) // after a successful rename: nothing
	return publish(tmp, p)
}

// stage writes data to a synced temporary file in p's directory (made
// when missing) and returns its name.
func stage(p string, data []byte) (string, error) {
	dir := filepath.Dir(p)
	var tmp *os.File
	for attempt := 0; ; attempt++ {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", fmt.Errorf("blob dir: %w", err)
		}
		var err error
		if tmp, err = os.CreateTemp(dir, ".put-*"); err == nil {
			break
		}
		// A sweep removes the directories it empties: one may go
		// between MkdirAll and CreateTemp.
		if !errors.Is(err, fs.ErrNotExist) || attempt >= 5 {
			return "", fmt.Errorf("blob dir: %w", err)
		}
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return "", fmt.Errorf("blob dir: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return "", fmt.Errorf("blob dir: %w", err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("blob dir: %w", err)
	}
	return tmp.Name(), nil
}

// publish renames tmp over p and syncs the directory.
func publish(tmp, p string) error {
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("blob dir: %w", err)
	}
	dir := filepath.Dir(p)
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("blob dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("blob dir: sync %s: %w", dir, err)
	}
	return nil
}

// Get reads key's blob, at most max bytes of it.
func (s *Store) Get(ctx context.Context, key string, max int64) ([]byte, error) {
	b, _, err := s.get(ctx, key, max, false)
	return b, err
}

// GetVersion reads key's blob, at most max bytes of it, and its version:
// a hash of its content.
func (s *Store) GetVersion(ctx context.Context, key string, max int64) ([]byte, string, error) {
	return s.get(ctx, key, max, true)
}

func (s *Store) get(ctx context.Context, key string, max int64, withVersion bool) ([]byte, string, error) {
	if err := blob.CheckKey(key); err != nil {
		return nil, "", err
	}
	if max <= 0 {
		return nil, "", fmt.Errorf("blob dir: get %s: a bound of %d bytes", key, max)
	}
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	// One open file: a Put renames another file over the name, never
	// into this one, so what is read is one whole blob.
	f, err := os.Open(s.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", fmt.Errorf("%w: %s", blob.ErrNotFound, key)
	}
	if err != nil {
		return nil, "", fmt.Errorf("blob dir: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, "", fmt.Errorf("blob dir: %w", err)
	}
	if fi.Size() > max {
		return nil, "", fmt.Errorf("%w: %s is %d bytes, the bound %d", blob.ErrTooLarge, key, fi.Size(), max)
	}
	var buf bytes.Buffer
	buf.Grow(int(fi.Size()) + 1)
	if _, err := buf.ReadFrom(io.LimitReader(f, max+1)); err != nil {
		return nil, "", fmt.Errorf("blob dir: %w", err)
	}
	if int64(buf.Len()) > max {
		return nil, "", fmt.Errorf("%w: %s is above the bound %d", blob.ErrTooLarge, key, max)
	}
	b := buf.Bytes()
	if !withVersion {
		return b, "", nil
	}
	return b, version(b), nil
}

var _ blob.Conditional = (*Store)(nil)

// version names a blob's content: two blobs with the same version are
// the same bytes.
func version(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:16])
}

// fileVersion is the version of p's content, "" when p does not exist.
func fileVersion(p string) (string, error) {
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("blob dir: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("blob dir: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)[:16]), nil
}

// PutIf stages data as Put does, then, holding an exclusive lock on the
// key's lock file (flock: other processes and other replicas on a shared
// volume take it too), compares the key's version with ifMatch and
// renames the staged file over the key only if they agree.
func (s *Store) PutIf(ctx context.Context, key string, data []byte, ifMatch string) (string, error) {
	if err := blob.CheckKey(key); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	p := s.path(key)
	tmp, err := stage(p, data)
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp) // after a successful rename: nothing
	unlock, err := lock(ctx, p+lockSuffix)
	if err != nil {
		return "", err
	}
	defer unlock()
	cur, err := fileVersion(p)
	if err != nil {
		return "", err
	}
	if cur != ifMatch {
		if cur == "" {
			return "", fmt.Errorf("%w: %s has no blob, the write was on version %s", blob.ErrPrecondition, key, ifMatch)
		}
		return "", fmt.Errorf("%w: %s is version %s, the write was on %q", blob.ErrPrecondition, key, cur, ifMatch)
	}
	if err := publish(tmp, p); err != nil {
		return "", err
	}
	return version(data), nil
}

// lockSuffix names a key's lock file: "name~lock" beside the key's
// "name~", a name no key maps to and that Sweep does not count as a blob.
const lockSuffix = "lock"

// lock takes an exclusive flock on the lock file p, made when missing,
// polling so that ctx bounds the wait. The file may be removed by a
// DeletePrefix or a Sweep while this waits (they hold the lock to remove
// it): a lock on a file no longer at p locks nothing, so then it starts
// over on the new one.
func lock(ctx context.Context, p string) (unlock func(), err error) {
	for attempt := 0; ; attempt++ {
		if attempt >= 100 {
			return nil, fmt.Errorf("blob dir: lock %s: replaced %d times while waiting for it", p, attempt)
		}
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
		if errors.Is(err, fs.ErrNotExist) {
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				return nil, fmt.Errorf("blob dir: %w", err)
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("blob dir: %w", err)
		}
		if err := flock(ctx, f, true); err != nil {
			f.Close()
			return nil, err
		}
		if same, err := stillAt(f, p); err != nil || !same {
			f.Close()
			if err != nil {
				return nil, err
			}
			continue
		}
		return func() { f.Close() }, nil // closing the file releases its lock
	}
}

// flock takes an exclusive lock on f: waiting (polling, within ctx) when
// wait, else failing at once with errBusy.
func flock(ctx context.Context, f *os.File, wait bool) error {
	delay := 200 * time.Microsecond
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EINTR):
			continue
		case !errors.Is(err, syscall.EWOULDBLOCK):
			return fmt.Errorf("blob dir: lock %s: %w", f.Name(), err)
		case !wait:
			return errBusy
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, 10*time.Millisecond)
	}
}

var errBusy = errors.New("blob dir: lock held")

// stillAt reports whether the open file f is the file at p.
func stillAt(f *os.File, p string) (bool, error) {
	a, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("blob dir: %w", err)
	}
	b, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("blob dir: %w", err)
	}
	return os.SameFile(a, b), nil
}

// Delete removes key's file.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := blob.CheckKey(key); err != nil {
		return err
	}
	if err := os.Remove(s.path(key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("blob dir: %w", err)
	}
	return nil
}

// DeletePrefix removes the directory prefix names, with everything in it.
func (s *Store) DeletePrefix(ctx context.Context, prefix string) error {
	if err := blob.CheckPrefix(prefix); err != nil {
		return err
	}
	p := filepath.Join(s.root, filepath.FromSlash(prefix[:len(prefix)-1]))
	// The lock of every key written with PutIf under p is held while p
	// goes: a PutIf waiting for one starts over on a new lock file once
	// they are released, after the delete, never during it.
	var held []func()
	defer func() {
		for _, unlock := range held {
			unlock()
		}
	}()
	err := filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(q, fileSuffix+lockSuffix) {
			return nil
		}
		unlock, err := lock(ctx, q)
		if err != nil {
			return err
		}
		held = append(held, unlock)
		return nil
	})
	if err != nil {
		return err
	}
	if err := os.RemoveAll(p); err != nil {
		return fmt.Errorf("blob dir: %w", err)
	}
	return nil
}

var _ blob.Sweeper = (*Store)(nil)

// Sweep removes the blob files under prefix modified before cutoff, and
// the directories that leaves empty.
func (s *Store) Sweep(ctx context.Context, prefix string, cutoff time.Time, skip func(string) bool) (int, error) {
	if err := blob.CheckPrefix(prefix); err != nil {
		return 0, err
	}
	base := filepath.Join(s.root, filepath.FromSlash(prefix[:len(prefix)-1]))
	n := 0
	var dirs []string
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
			return nil
		}
		if keyFile, ok := strings.CutSuffix(p, fileSuffix+lockSuffix); ok {
			removeLock(p, keyFile+fileSuffix, cutoff)
			return nil
		}
		name, ok := strings.CutSuffix(p, fileSuffix)
		if !ok {
			return nil // a temporary file of a Put under way
		}
		rel, err := filepath.Rel(s.root, name)
		if err != nil {
			return err
		}
		if skip != nil && skip(filepath.ToSlash(rel)) {
			return nil
		}
		info, err := d.Info()
		if err != nil || !info.ModTime().Before(cutoff) {
			return nil
		}
		if err := os.Remove(p); err == nil {
			n++
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = os.Remove(dirs[i]) // only empty ones go
	}
	return n, err
}

// removeLock removes the lock file p of keyFile when it is older than
// cutoff and keyFile is gone (deleted, or swept just before: a lock file
// sorts after its key's), holding the lock so that no PutIf is under way
// (one waiting for it then starts over on a new file).
func removeLock(p, keyFile string, cutoff time.Time) {
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.ModTime().Before(cutoff) {
		return
	}
	if flock(context.Background(), f, false) != nil {
		return // in use
	}
	if same, err := stillAt(f, p); err != nil || !same {
		return
	}
	if _, err := os.Lstat(keyFile); !errors.Is(err, fs.ErrNotExist) {
		return
	}
	_ = os.Remove(p)
}
