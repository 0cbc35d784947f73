package memory

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/internal/storeutil"
)

// PutFile implements store.Store. It does not touch the container: callers
// that count an upload as use call TouchContainer.
func (s *Store) PutFile(ctx context.Context, f store.File, data []byte) (store.File, error) {
	if err := ctx.Err(); err != nil {
		return store.File{}, err
	}
	now := s.now()
	f, err := storeutil.PrepareFile(f, data, s.limits, now)
	if err != nil {
		return store.File{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.owner(f.Owner, f.ContainerID == "")
	if o != nil {
		s.reapOwner(o, now)
	}
	if f.ContainerID == "" {
		return s.putAPIFile(o, f, data, now)
	}
	c, err := s.liveContainer(o, f.ContainerID, now)
	if err != nil {
		return store.File{}, err
	}
	var old *file
	if id, ok := c.byPath[f.Path]; ok {
		old = c.files[id]
		f.ID, f.CreatedAt = old.f.ID, old.f.CreatedAt // a replacement keeps its identity
	} else if c.files[f.ID] != nil {
		return store.File{}, fmt.Errorf("store: file id %s is taken in container %s", f.ID, c.c.ID)
	} else if err := c.conflict(f.Path); err != nil {
		return store.File{}, err
	}
	var oldBytes int64
	if old != nil {
		oldBytes = old.f.Bytes
	}
	delta := f.Bytes - oldBytes
	switch {
	case s.limits.ContainerBytes > 0 && c.bytes+delta > s.limits.ContainerBytes:
		return store.File{}, &store.QuotaError{Limit: store.LimitContainerBytes, Max: s.limits.ContainerBytes}
	case old == nil && s.limits.ContainerFiles > 0 && len(c.files) >= s.limits.ContainerFiles:
		return store.File{}, &store.QuotaError{Limit: store.LimitContainerFiles, Max: int64(s.limits.ContainerFiles)}
	case s.limits.OwnerBytes > 0 && o.bytes+delta > s.limits.OwnerBytes:
		return store.File{}, &store.QuotaError{Limit: store.LimitOwnerBytes, Max: s.limits.OwnerBytes}
	}
	c.files[f.ID] = &file{f: f, data: clone(data)}
	c.byPath[f.Path] = f.ID
	c.bytes += delta
	o.bytes += delta
	return f, nil
}

// conflict reports a file of c in the way of a new file at p: one at a
// parent's place, or one below p.
func (c *container) conflict(p string) error {
	for _, d := range storeutil.Parents(p) {
		if _, ok := c.byPath[d]; ok {
			return &store.PathConflictError{Path: p, Other: d}
		}
	}
	for other := range c.byPath {
		if strings.HasPrefix(other, p+"/") {
			return &store.PathConflictError{Path: p, Other: other}
		}
	}
	return nil
}

func (s *Store) putAPIFile(o *owner, f store.File, data []byte, now time.Time) (store.File, error) {
	old := o.files[f.ID]
	var oldBytes int64
	if old != nil {
		oldBytes = old.f.Bytes
	}
	delta := f.Bytes - oldBytes
	switch {
	case old == nil && s.limits.OwnerFiles > 0 && len(o.files) >= s.limits.OwnerFiles:
		return store.File{}, &store.QuotaError{Limit: store.LimitOwnerFiles, Max: int64(s.limits.OwnerFiles)}
	case s.limits.OwnerBytes > 0 && o.bytes+delta > s.limits.OwnerBytes:
		return store.File{}, &store.QuotaError{Limit: store.LimitOwnerBytes, Max: s.limits.OwnerBytes}
	}
	if storeutil.FileExpired(f, now) {
		// Born expired: nothing to keep (an old version is replaced by nothing).
		if old != nil {
			o.bytes -= oldBytes
			delete(o.files, f.ID)
		}
		return f, nil
	}
	o.files[f.ID] = &file{f: f, data: clone(data)}
	o.bytes += delta
	return f, nil
}

// file finds owner's file id in containerID ("" for the Files API).
func (s *Store) file(owner, containerID, id string) (*file, error) {
	now := s.now()
	o := s.owner(owner, false)
	if containerID == "" {
		if o != nil {
			if f := o.files[id]; f != nil {
				if !storeutil.FileExpired(f.f, now) {
					return f, nil
				}
				o.bytes -= f.f.Bytes
				delete(o.files, id)
			}
		}
		return nil, fmt.Errorf("file %s: %w", id, store.ErrNotFound)
	}
	c, err := s.liveContainer(o, containerID, now)
	if err != nil {
		return nil, err
	}
	if f := c.files[id]; f != nil {
		return f, nil
	}
	return nil, fmt.Errorf("file %s: %w", id, store.ErrNotFound)
}

// GetFile implements store.Store. A file of an expired container is
// ErrExpired (the container is remembered, its files are gone).
func (s *Store) GetFile(ctx context.Context, owner, containerID, id string) (store.File, error) {
	if err := ctx.Err(); err != nil {
		return store.File{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f, err := s.file(owner, containerID, id)
	if err != nil {
		return store.File{}, err
	}
	return f.f, nil
}

// FileContent implements store.Store; the caller owns the returned slice.
func (s *Store) FileContent(ctx context.Context, owner, containerID, id string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f, err := s.file(owner, containerID, id)
	if err != nil {
		return nil, err
	}
	return clone(f.data), nil
}

// ListFiles implements store.Store (ErrExpired for an expired container).
func (s *Store) ListFiles(ctx context.Context, owner, containerID string, o store.ListOptions) ([]store.File, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	o, err := o.Normalize()
	if err != nil {
		return nil, false, err
	}
	o.Name = "" // a containers-only filter
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	ow := s.owner(owner, false)
	var files map[string]*file
	if containerID == "" {
		if ow == nil {
			return nil, false, nil
		}
		s.reapOwner(ow, now)
		files = ow.files
	} else {
		c, err := s.liveContainer(ow, containerID, now)
		if err != nil {
			return nil, false, err
		}
		files = c.files
	}
	all := make([]*file, 0, len(files))
	for _, f := range files {
		all = append(all, f)
	}
	page, more := paginate(all, func(f *file) (int64, string) { return f.f.CreatedAt, f.f.ID },
		func(*file) bool { return true }, o)
	out := make([]store.File, len(page))
	for i, f := range page {
		out[i] = f.f
	}
	return out, more, nil
}

// DeleteFile implements store.Store.
func (s *Store) DeleteFile(ctx context.Context, owner, containerID, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f, err := s.file(owner, containerID, id)
	if err != nil {
		return err
	}
	o := s.owners[owner]
	o.bytes -= f.f.Bytes
	if containerID == "" {
		delete(o.files, id)
		return nil
	}
	c := o.containers[containerID]
	c.bytes -= f.f.Bytes
	delete(c.files, id)
	delete(c.byPath, f.f.Path)
	return nil
}
