package containers

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/interceptor"
	"github.com/codeinterp/codeinterp/sandbox"
	"github.com/codeinterp/codeinterp/store"
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
}

func (c *container) ID() string { return c.meta.ID }

// Files lists the container's files from the store.
func (c *container) Files(ctx context.Context) ([]interceptor.ContainerFile, error) {
	files, err := c.allFiles(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]interceptor.ContainerFile, 0, len(files))
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

func toRef(f store.File) interceptor.ContainerFile {
	return interceptor.ContainerFile{ID: f.ID, Path: f.Path, Filename: f.Filename, Bytes: f.Bytes}
}

// Run implements interceptor.Container.
func (c *container) Run(ctx context.Context, code string) (interceptor.RunResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return interceptor.RunResult{}, sandbox.ErrClosed
	}
	m := c.m
	if _, err := m.st.TouchContainer(ctx, c.meta.Owner, c.meta.ID, m.cfg.Now()); err != nil {
		if errors.Is(err, store.ErrExpired) || errors.Is(err, store.ErrNotFound) {
			m.drop(c.meta.ID)
			return interceptor.RunResult{}, fmt.Errorf("%w: %s", interceptor.ErrContainerExpired, c.meta.ID)
		}
		return interceptor.RunResult{}, fmt.Errorf("containers: %w", err)
	}
	if c.h == nil {
		h, opened, err := m.acquire(ctx, c.meta.Owner, c.meta.ID, c.memory)
		if err != nil {
			return interceptor.RunResult{}, err
		}
		c.h, c.opened = h, opened
	}
	h := c.h
	h.runMu.Lock()
	defer h.runMu.Unlock()

	// A fresh interpreter (this response's first, or one that replaced a
	// lost one) gets every file of the container first.
	if err := c.syncIn(ctx, h); err != nil {
		c.fail(h)
		return interceptor.RunResult{}, err
	}
	// A container that existed before this response, whose interpreter
	// this server did not hold (another replica ran it, or it was closed
	// to make room), starts with its files but without its variables.
	reset := !c.ran && !c.fresh && c.opened
	gen := h.sess.Generation()
	res, err := h.sess.Run(ctx, code)
	if err != nil {
		c.fail(h)
		return interceptor.RunResult{}, err
	}
	c.ran = true
	out := interceptor.RunResult{Result: res, Reset: reset || res.StateLost}
	if h.sess.Generation() == gen {
		changed, err := c.syncOut(ctx, h)
		if err != nil {
			m.log.Warn("storing the files a run wrote failed", zap.String("container_id", c.meta.ID), zap.Error(err))
			out.Stderr += "\n[" + err.Error() + "]\n"
		}
		out.Changed = changed
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

// syncIn writes the store's files into a fresh interpreter.
func (c *container) syncIn(ctx context.Context, h *held) error {
	// ListFiles starts an interpreter if the session lost its own, so the
	// generation read after it is the one that will run the code.
	if _, err := h.sess.ListFiles(ctx, DataDir); err != nil {
		return fmt.Errorf("containers: %w", err)
	}
	gen := h.sess.Generation()
	if h.synced == gen {
		return nil
	}
	files, err := c.allFiles(ctx)
	if err != nil {
		return err
	}
	for _, f := range files {
		data, err := c.m.st.FileContent(ctx, c.meta.Owner, c.meta.ID, f.ID)
		if err != nil {
			return fmt.Errorf("containers: read %s: %w", f.Path, err)
		}
		if err := h.sess.WriteFile(ctx, f.Path, data); err != nil {
			return fmt.Errorf("containers: copy %s into the interpreter: %w", f.Path, err)
		}
	}
	seen, err := stamps(ctx, h.sess)
	if err != nil {
		return err
	}
	h.seen, h.synced = seen, gen
	return nil
}

// syncOut stores what the run created or changed under /mnt/data.
func (c *container) syncOut(ctx context.Context, h *held) ([]interceptor.ContainerFile, error) {
	now, err := stamps(ctx, h.sess)
	if err != nil {
		return nil, err
	}
	var paths []string
	for p, st := range now {
		if old, ok := h.seen[p]; !ok || old != st {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	var changed []interceptor.ContainerFile
	var errs []error
	for _, p := range paths {
		data, err := h.sess.ReadFile(ctx, p, c.m.cfg.MaxFileBytes)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s was not kept: %w", p, err))
			delete(now, p) // try again after the next run
			continue
		}
		f, err := c.m.st.PutFile(ctx, store.File{
			ID: store.NewID("cfile_"), Owner: c.meta.Owner, ContainerID: c.meta.ID, Path: p,
			Filename: path.Base(p), CreatedAt: c.m.cfg.Now().Unix(), Source: "assistant",
		}, data)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s was not kept: %w", p, err))
			delete(now, p)
			continue
		}
		changed = append(changed, toRef(f))
	}
	h.seen = now
	return changed, errors.Join(errs...)
}

// storeImage keeps a run's image as a container file named like OpenAI's
// (cfile_<id>.png). It is not written into the interpreter: the code has
// its own figure, and the file is copied in with the others when a fresh
// interpreter starts.
func (c *container) storeImage(ctx context.Context, im sandbox.Image) (store.File, error) {
	id := store.NewID("cfile_")
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

// stamps lists /mnt/data with each file's size and modification time.
func stamps(ctx context.Context, s sandbox.Session) (map[string]fileStamp, error) {
	l, err := s.ListFiles(ctx, DataDir)
	if err != nil {
		return nil, fmt.Errorf("containers: list %s: %w", DataDir, err)
	}
	out := make(map[string]fileStamp, len(l.Files))
	for _, fi := range l.Files {
		out[fi.Path] = fileStamp{size: fi.Size, mod: fi.ModTime}
	}
	return out, nil
}

// fail drops an interpreter whose session broke.
func (c *container) fail(h *held) {
	c.m.lose(h)
	c.h = nil
}

// Close implements interceptor.Container.
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
