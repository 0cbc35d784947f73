package memory

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/internal/storeutil"
)

// SweepInterval is how often the sweeper drops what has expired (between
// sweeps, every access still sees expiry exactly: it is evaluated lazily).
const SweepInterval = time.Minute

// Store is the in-process store. The zero value is not usable; call New.
type Store struct {
	limits store.Limits
	now    func() time.Time

	mu     sync.Mutex
	owners map[string]*owner // by owner hash: isolation by construction

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

var _ store.Store = (*Store)(nil)

// owner is everything one owner has, with the usage the quotas bound.
type owner struct {
	containers map[string]*container // live and remembered-expired
	files      map[string]*file      // Files API files
	bytes      int64                 // live containers' files + Files API files
	live       int                   // containers that have not expired
}

type container struct {
	c      store.Container
	files  map[string]*file  // by id
	byPath map[string]string // path → id
	bytes  int64
	// expired: it no longer counts against the owner's containers, and is
	// remembered for ExpiredMemory.
	expired bool
	// dropped: its files are gone (at expiry, or Limits.ExpiredKeep
	// after it).
	dropped bool
}

type file struct {
	f    store.File
	data []byte
}

// New returns an empty store bounded by limits. now is the clock (tests);
// nil means time.Now. A goroutine sweeps expired objects every
// SweepInterval until Close.
func New(limits store.Limits, now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	s := &Store{
		limits: limits,
		now:    now,
		owners: map[string]*owner{},
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	go s.sweeper()
	return s
}

// Close stops the sweeper. The store stays readable (it holds no outside
// resources); Close is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.stop)
		<-s.done
	})
	return nil
}

func (s *Store) sweeper() {
	defer close(s.done)
	t := time.NewTicker(SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Sweep()
		}
	}
}

// Sweep drops every expired object now (the sweeper calls it; tests may).
// Its work is one pass over the store, under the lock.
func (s *Store) Sweep() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for name, o := range s.owners {
		s.reapOwner(o, now)
		if len(o.containers) == 0 && len(o.files) == 0 {
			delete(s.owners, name)
		}
	}
}

// reapOwner applies expiry to all of o's objects.
func (s *Store) reapOwner(o *owner, now time.Time) {
	for _, c := range o.containers {
		s.reapContainer(o, c, now)
	}
	for id, f := range o.files {
		if storeutil.FileExpired(f.f, now) {
			o.bytes -= f.f.Bytes
			delete(o.files, id)
		}
	}
}

// reapContainer drops c's files if it has expired and forgets it once
// ExpiredMemory has passed; it reports whether c is still remembered.
func (s *Store) reapContainer(o *owner, c *container, now time.Time) bool {
	if !c.expired && c.c.Expired(now) {
		c.expired = true
		o.live--
	}
	forgotten := c.expired && storeutil.Forgotten(c.c, s.limits, now)
	if c.expired && !c.dropped && (forgotten || !now.Before(c.c.ExpiresAt().Add(s.limits.ExpiredKeep))) {
		o.bytes -= c.bytes
		c.files, c.byPath, c.bytes, c.dropped = nil, nil, 0, true
	}
	if forgotten {
		delete(o.containers, c.c.ID)
		return false
	}
	return true
}

// owner returns name's state, creating it when create is set (nil
// otherwise when there is none).
func (s *Store) owner(name string, create bool) *owner {
	o := s.owners[name]
	if o == nil && create {
		o = &owner{containers: map[string]*container{}, files: map[string]*file{}}
		s.owners[name] = o
	}
	return o
}

// container returns owner's remembered container id after applying expiry,
// or ErrNotFound.
func (s *Store) container(o *owner, id string, now time.Time) (*container, error) {
	if o == nil {
		return nil, fmt.Errorf("container %s: %w", id, store.ErrNotFound)
	}
	c := o.containers[id]
	if c == nil || !s.reapContainer(o, c, now) {
		return nil, fmt.Errorf("container %s: %w", id, store.ErrNotFound)
	}
	return c, nil
}

// liveContainer is container, but an expired one is ErrExpired.
func (s *Store) liveContainer(o *owner, id string, now time.Time) (*container, error) {
	c, err := s.container(o, id, now)
	if err != nil {
		return nil, err
	}
	if c.expired {
		return nil, fmt.Errorf("container %s: %w", id, store.ErrExpired)
	}
	return c, nil
}

// PutContainer implements store.Store.
func (s *Store) PutContainer(ctx context.Context, c store.Container) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.now()
	c, err := storeutil.CheckContainer(c, now)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.owner(c.Owner, true)
	s.reapOwner(o, now)
	old := o.containers[c.ID]
	expired := c.Expired(now)
	if (old == nil || old.expired) && !expired && s.limits.OwnerContainers > 0 && o.live >= s.limits.OwnerContainers {
		return &store.QuotaError{Limit: store.LimitOwnerContainers, Max: int64(s.limits.OwnerContainers)}
	}
	switch {
	case old != nil && !old.expired:
		// A replacement keeps the files, unless it is itself expired.
		old.c = c
		s.reapContainer(o, old, now)
	default:
		if old != nil {
			o.bytes -= old.bytes // an expired one's kept files go
		}
		nc := &container{c: c, files: map[string]*file{}, byPath: map[string]string{}}
		if expired {
			nc.files, nc.byPath, nc.expired, nc.dropped = nil, nil, true, true
		} else {
			o.live++
		}
		o.containers[c.ID] = nc
		s.reapContainer(o, nc, now)
	}
	return nil
}

// GetContainer implements store.Store.
func (s *Store) GetContainer(ctx context.Context, owner, id string) (store.Container, error) {
	if err := ctx.Err(); err != nil {
		return store.Container{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.container(s.owner(owner, false), id, s.now())
	if err != nil {
		return store.Container{}, err
	}
	return c.c, nil
}

// TouchContainer implements store.Store. The container's files need no
// refresh here: they live exactly as long as their container.
func (s *Store) TouchContainer(ctx context.Context, owner, id string, now time.Time) (store.Container, error) {
	return s.touch(ctx, owner, id, now, false)
}

// ListContainers implements store.Store.
func (s *Store) ListContainers(ctx context.Context, owner string, o store.ListOptions) ([]store.Container, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	o, err := o.Normalize()
	if err != nil {
		return nil, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ow := s.owner(owner, false)
	if ow == nil {
		return nil, false, nil
	}
	now := s.now()
	s.reapOwner(ow, now)
	all := make([]*container, 0, len(ow.containers))
	for _, c := range ow.containers {
		all = append(all, c)
	}
	// Expired containers stay in the ordering so an After that names one
	// still has a position; they are filtered out of the page.
	page, more := paginate(all, func(c *container) (int64, string) { return c.c.CreatedAt, c.c.ID },
		func(c *container) bool { return !c.expired && (o.Name == "" || c.c.Name == o.Name) }, o)
	out := make([]store.Container, len(page))
	for i, c := range page {
		out[i] = c.c
	}
	return out, more, nil
}

// DeleteContainer implements store.Store; an expired container that is
// still remembered can be deleted.
func (s *Store) DeleteContainer(ctx context.Context, owner, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.owner(owner, false)
	c, err := s.container(o, id, s.now())
	if err != nil {
		return err
	}
	if !c.expired {
		o.live--
	}
	o.bytes -= c.bytes
	delete(o.containers, id)
	return nil
}

// ReviveContainer implements store.Store.
func (s *Store) ReviveContainer(ctx context.Context, owner, id string, now time.Time) (store.Container, error) {
	return s.touch(ctx, owner, id, now, true)
}

// touch sets the container's last use to now; revive lets it bring an
// expired container whose files are kept back.
func (s *Store) touch(ctx context.Context, owner, id string, now time.Time, revive bool) (store.Container, error) {
	if err := ctx.Err(); err != nil {
		return store.Container{}, err
	}
	if now.IsZero() {
		now = s.now()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.owner(owner, false)
	c, err := s.container(o, id, now)
	if err != nil {
		return store.Container{}, err
	}
	if c.expired {
		if !revive || c.dropped {
			return store.Container{}, fmt.Errorf("container %s: %w", id, store.ErrExpired)
		}
		if s.limits.OwnerContainers > 0 && o.live >= s.limits.OwnerContainers {
			return store.Container{}, &store.QuotaError{Limit: store.LimitOwnerContainers, Max: int64(s.limits.OwnerContainers)}
		}
		c.expired = false
		o.live++
	}
	c.c.LastActiveAt = now.Unix()
	return c.c, nil
}

// paginate sorts items by key in o.Order and returns the visible ones
// strictly after o.After (an unknown After: an empty page), at most
// o.Limit of them, and whether more visible ones follow.
func paginate[T any](items []T, key func(T) (int64, string), visible func(T) bool, o store.ListOptions) ([]T, bool) {
	sort.Slice(items, func(i, j int) bool {
		ci, ii := key(items[i])
		cj, ij := key(items[j])
		if o.Order == "asc" {
			return storeutil.Less(ci, ii, cj, ij)
		}
		return storeutil.Less(cj, ij, ci, ii)
	})
	start := 0
	if o.After != "" {
		start = -1
		for i, it := range items {
			if _, id := key(it); id == o.After {
				start = i + 1
				break
			}
		}
		if start < 0 {
			return nil, false
		}
	}
	var page []T
	for _, it := range items[start:] {
		if !visible(it) {
			continue
		}
		if len(page) == o.Limit {
			return page, true
		}
		page = append(page, it)
	}
	return page, false
}

func clone(b []byte) []byte {
	out := make([]byte, len(b))
	copy(out, b)
	return out
}

// Owners reports how many owners the store holds anything for (tests, and
// a gauge for operators).
// OwnerBytes implements store.OwnerBytes.
func (s *Store) OwnerBytes(_ context.Context, owner string) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.owners[owner]
	if o == nil {
		return 0, nil
	}
	s.reapOwner(o, s.now())
	return o.bytes, nil
}

// Owners returns how many owners the store holds.
func (s *Store) Owners() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.owners)
}
