// Package dir is a blob.Store in a directory: the default, for one host
// or for a volume every replica mounts (ReadWriteMany).
package dir

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("blob dir: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".put-*")
	if err != nil {
		return fmt.Errorf("blob dir: %w", err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename: nothing
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("blob dir: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("blob dir: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("blob dir: %w", err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return fmt.Errorf("blob dir: %w", err)
	}
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

// Get reads key's blob.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	if err := blob.CheckKey(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(s.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", blob.ErrNotFound, key)
	}
	if err != nil {
		return nil, fmt.Errorf("blob dir: %w", err)
	}
	return b, nil
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
