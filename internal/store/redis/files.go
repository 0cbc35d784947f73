package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/internal/storeutil"
)

// fileRecord is what one HMGET of a file hash returns.
type fileRecord struct {
	f    store.File
	data []byte
}

// getFile reads owner's file id in containerID ("" for the Files API),
// with its bytes when withData, checking the container (in the same
// MULTI, so the answer is one consistent view).
func (s *Store) getFile(ctx context.Context, owner, containerID, id string, withData bool) (fileRecord, error) {
	notFound := fmt.Errorf("file %s: %w", id, store.ErrNotFound)
	if !store.ValidID(id) {
		return fileRecord{}, notFound
	}
	if containerID != "" && !store.ValidID(containerID) {
		return fileRecord{}, fmt.Errorf("container %s: %w", containerID, store.ErrNotFound)
	}
	kp := s.ownerPrefix(owner)
	ck, data := "", "0"
	if containerID != "" {
		ck = kp + "c:" + containerID
	}
	if withData {
		data = "1"
	}
	// The one declared key routes the call to the owner's slot.
	v, err := s.scripts.readFile.Run(ctx, s.rdb, []string{kp + "live"}, ck, kp+"f:"+id, data).Slice()
	if err != nil {
		return fileRecord{}, s.wrap(ctx, err)
	}
	if len(v) != 5 {
		return fileRecord{}, fmt.Errorf("store/redis: read reply of %d values", len(v))
	}
	now := s.now()
	if containerID != "" {
		c, err := s.container(v[0], v[1], containerID)
		if err != nil {
			return fileRecord{}, err
		}
		if c.Expired(now) {
			return fileRecord{}, fmt.Errorf("container %s: %w", containerID, store.ErrExpired)
		}
	}
	meta, ok := v[2].(string)
	if !ok || v[3] != containerID {
		return fileRecord{}, notFound
	}
	var r fileRecord
	if err := json.Unmarshal([]byte(meta), &r.f); err != nil {
		return fileRecord{}, fmt.Errorf("store/redis: file record: %w", err)
	}
	if containerID == "" && storeutil.FileExpired(r.f, now) {
		return fileRecord{}, notFound
	}
	if withData {
		d, _ := v[4].(string)
		r.data = []byte(d)
	}
	return r, nil
}

// PutFile implements store.Store. It does not touch the container: callers
// that count an upload as use call TouchContainer.
func (s *Store) PutFile(ctx context.Context, f store.File, data []byte) (store.File, error) {
	now := s.now()
	f, err := storeutil.PrepareFile(f, data, s.limits, now)
	if err != nil {
		return store.File{}, err
	}
	if f.ContainerID == "" {
		return s.putAPIFile(ctx, f, data, now)
	}
	kp := s.ownerPrefix(f.Owner)
	for range putRetries {
		// A replacement keeps the id and creation time of the file at its
		// path; the script checks the path still holds what was read here.
		g := f
		cur, err := s.rdb.HGet(ctx, kp+"cp:"+f.ContainerID, f.Path).Result()
		switch {
		case errors.Is(err, goredis.Nil):
			cur = ""
		case err != nil:
			return store.File{}, s.wrap(ctx, err)
		default:
			old, err := s.rdb.HGet(ctx, kp+"f:"+cur, "meta").Result()
			if err != nil && !errors.Is(err, goredis.Nil) {
				return store.File{}, s.wrap(ctx, err)
			}
			var of store.File
			if json.Unmarshal([]byte(old), &of) == nil {
				g.CreatedAt = of.CreatedAt
			}
			g.ID = cur
		}
		meta, err := json.Marshal(g)
		if err != nil {
			return store.File{}, fmt.Errorf("store/redis: %w", err)
		}
		res, err := s.run(ctx, s.scripts.putContainerFile, f.Owner, now,
			f.ContainerID, g.ID, g.Path, meta, data, g.Bytes, member(g.CreatedAt, g.ID), cur,
			s.limits.ContainerBytes, s.limits.ContainerFiles, s.limits.OwnerBytes, storeutil.DataDir)
		if err != nil {
			return store.File{}, err
		}
		switch {
		case res[0] == "retry":
			continue
		case res[0] == "conflict" && len(res) == 2:
			return store.File{}, &store.PathConflictError{Path: g.Path, Other: res[1]}
		}
		if err := status(res, "container "+f.ContainerID); err != nil {
			return store.File{}, err
		}
		return g, nil
	}
	return store.File{}, fmt.Errorf("store/redis: file %s: too many concurrent writers", f.Path)
}

func (s *Store) putAPIFile(ctx context.Context, f store.File, data []byte, now time.Time) (store.File, error) {
	meta, err := json.Marshal(f)
	if err != nil {
		return store.File{}, fmt.Errorf("store/redis: %w", err)
	}
	var exp int64
	if f.ExpiresAt != 0 {
		exp = f.ExpiresAt * 1000
	}
	res, err := s.run(ctx, s.scripts.putAPIFile, f.Owner, now,
		f.ID, meta, data, f.Bytes, member(f.CreatedAt, f.ID), padded(f.CreatedAt), exp,
		s.limits.OwnerFiles, s.limits.OwnerBytes)
	if err != nil {
		return store.File{}, err
	}
	if err := status(res, "file "+f.ID); err != nil {
		return store.File{}, err
	}
	return f, nil
}

// GetFile implements store.Store. A file of an expired container is
// ErrExpired (the container is remembered, its files are gone).
func (s *Store) GetFile(ctx context.Context, owner, containerID, id string) (store.File, error) {
	r, err := s.getFile(ctx, owner, containerID, id, false)
	return r.f, err
}

// FileContent implements store.Store.
func (s *Store) FileContent(ctx context.Context, owner, containerID, id string) ([]byte, error) {
	r, err := s.getFile(ctx, owner, containerID, id, true)
	return r.data, err
}

// ListFiles implements store.Store (ErrExpired for an expired container).
func (s *Store) ListFiles(ctx context.Context, owner, containerID string, o store.ListOptions) ([]store.File, bool, error) {
	o, err := o.Normalize()
	if err != nil {
		return nil, false, err
	}
	kp := s.ownerPrefix(owner)
	index := kp + "files"
	if containerID != "" {
		c, err := s.GetContainer(ctx, owner, containerID)
		if err != nil {
			return nil, false, err
		}
		if c.Expired(s.now()) {
			return nil, false, fmt.Errorf("container %s: %w", containerID, store.ErrExpired)
		}
		index = kp + "cl:" + containerID
	}
	after := ""
	if o.After != "" {
		if !store.ValidID(o.After) {
			return nil, false, nil
		}
		v, err := s.rdb.HMGet(ctx, kp+"f:"+o.After, "m", "cid").Result()
		if err != nil {
			return nil, false, s.wrap(ctx, err)
		}
		m, ok := v[0].(string)
		if !ok || v[1] != containerID {
			return nil, false, nil // unknown after: an empty page
		}
		after = m
	}
	now := s.now()
	var page []store.File
	more, err := s.scan(ctx, index, o, after, func(members []string) (int, error) {
		cmds, err := s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for _, m := range members {
				p.HGet(ctx, kp+"f:"+idOf(m), "meta")
			}
			return nil
		})
		if err != nil && !errors.Is(err, goredis.Nil) {
			return 0, s.wrap(ctx, err)
		}
		n := 0
		for _, cmd := range cmds {
			meta, err := cmd.(*goredis.StringCmd).Result()
			if err != nil {
				continue // vanished (expired) between the index and the read
			}
			var f store.File
			if err := json.Unmarshal([]byte(meta), &f); err != nil {
				return 0, fmt.Errorf("store/redis: file record: %w", err)
			}
			if containerID == "" && storeutil.FileExpired(f, now) {
				continue
			}
			if len(page) <= o.Limit {
				page = append(page, f)
			}
			n++
		}
		return n, nil
	})
	if err != nil {
		return nil, false, err
	}
	page, more = onePage(page, more, o.Limit)
	return page, more, nil
}

// DeleteFile implements store.Store.
func (s *Store) DeleteFile(ctx context.Context, owner, containerID, id string) error {
	if !store.ValidID(id) || (containerID != "" && !store.ValidID(containerID)) {
		return fmt.Errorf("file %s: %w", id, store.ErrNotFound)
	}
	res, err := s.run(ctx, s.scripts.deleteFile, owner, s.now(), containerID, id)
	if err != nil {
		return err
	}
	return status(res, "file "+id)
}
