package memory

import (
	"container/heap"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/internal/storeutil"
)

// Responses is the in-process store.Responses, the default beside Store:
// right for one replica (another replica cannot continue a response this
// one made; use store/redis for several).
//
// One mutex guards maps keyed by owner, so another owner's responses are
// never looked at. Expiry is exact against the injected clock: every call
// first forgets what has expired (a heap ordered by ExpiresAt makes that
// free when nothing has), so there is no sweeper goroutine and nothing to
// close. ResponseLimits.Count and Bytes bound the whole store: a put that
// would exceed them forgets the oldest responses (by CreatedAt, then by
// when they were stored) until it fits. A stored record is never changed
// in place — a put replaces it whole — so reads copy it outside the lock.
type Responses struct {
	limits store.ResponseLimits
	// maxBytes is the per-response bound in force: ResponseBytes, or Bytes
	// when that is smaller (no eviction could make room for more).
	maxBytes int64
	now      func() time.Time

	mu       sync.Mutex
	owners   map[string]*responseOwner // by owner hash: isolation by construction
	byAge    responseQueue             // every response, oldest first: what Count and Bytes forget
	byExpiry responseQueue             // responses with an ExpiresAt, soonest first
	seq      uint64                    // order of puts, for ties of CreatedAt
	count    int
	bytes    int64
}

var _ store.Responses = (*Responses)(nil)

// responseOwner is everything one owner has stored.
type responseOwner struct {
	responses map[string]*storedResponse
	items     map[string]string // item id → response id (FindItem)
}

// storedResponse is one response with its place in the queues.
type storedResponse struct {
	r    store.Response // a private copy, never modified
	size int64
	seq  uint64
	// age and exp are the indexes in byAge and byExpiry (-1: not there).
	age, exp int
}

// NewResponses returns an empty store bounded by l. now is the clock
// (tests); nil means time.Now.
func NewResponses(l store.ResponseLimits, now func() time.Time) *Responses {
	if now == nil {
		now = time.Now
	}
	maxBytes := l.ResponseBytes
	if l.Bytes > 0 && (maxBytes <= 0 || l.Bytes < maxBytes) {
		maxBytes = l.Bytes
	}
	return &Responses{
		limits:   l,
		maxBytes: maxBytes,
		now:      now,
		owners:   map[string]*responseOwner{},
		byAge: responseQueue{
			less: func(a, b *storedResponse) bool {
				if !a.r.CreatedAt.Equal(b.r.CreatedAt) {
					return a.r.CreatedAt.Before(b.r.CreatedAt)
				}
				return a.seq < b.seq
			},
			pos: func(e *storedResponse) *int { return &e.age },
		},
		byExpiry: responseQueue{
			less: func(a, b *storedResponse) bool {
				if !a.r.ExpiresAt.Equal(b.r.ExpiresAt) {
					return a.r.ExpiresAt.Before(b.r.ExpiresAt)
				}
				return a.seq < b.seq
			},
			pos: func(e *storedResponse) *int { return &e.exp },
		},
	}
}

// PutResponse implements store.Responses. A response larger than
// ResponseBytes — or than Bytes, which no eviction could make room for —
// is a QuotaError for LimitResponseBytes. A response that has already
// expired replaces the stored one by nothing.
func (s *Responses) PutResponse(ctx context.Context, r store.Response) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.now()
	r, err := storeutil.PrepareResponse(r, s.limits, s.maxBytes, now)
	if err != nil {
		return err
	}
	r = cloneResponse(r) // the caller keeps its slices
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(now)
	if o := s.owners[r.Owner]; o != nil {
		if old := o.responses[r.ID]; old != nil {
			s.remove(old)
		}
	}
	if storeutil.ResponseExpired(r, now) {
		return nil
	}
	e := &storedResponse{r: r, size: r.Size(), age: -1, exp: -1}
	for s.byAge.Len() > 0 && (s.limits.Count > 0 && s.count+1 > s.limits.Count ||
		s.limits.Bytes > 0 && s.bytes+e.size > s.limits.Bytes) {
		s.remove(s.byAge.items[0])
	}
	o := s.owners[r.Owner]
	if o == nil {
		o = &responseOwner{responses: map[string]*storedResponse{}, items: map[string]string{}}
		s.owners[r.Owner] = o
	}
	s.seq++
	e.seq = s.seq
	o.responses[r.ID] = e
	for _, id := range storeutil.ItemIDs(r) {
		o.items[id] = r.ID
	}
	heap.Push(&s.byAge, e)
	if !r.ExpiresAt.IsZero() {
		heap.Push(&s.byExpiry, e)
	}
	s.count++
	s.bytes += e.size
	return nil
}

// GetResponse implements store.Responses.
func (s *Responses) GetResponse(ctx context.Context, owner, id string) (store.Response, error) {
	if err := ctx.Err(); err != nil {
		return store.Response{}, err
	}
	s.mu.Lock()
	e := s.lookup(owner, id)
	s.mu.Unlock()
	if e == nil {
		return store.Response{}, fmt.Errorf("response %s: %w", id, store.ErrNotFound)
	}
	return cloneResponse(e.r), nil
}

// GetResponses implements store.Responses.
func (s *Responses) GetResponses(ctx context.Context, owner string, ids []string) ([]store.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	found := make([]store.Response, len(ids))
	s.mu.Lock()
	for i, id := range ids {
		e := s.lookup(owner, id)
		if e == nil {
			s.mu.Unlock()
			return nil, fmt.Errorf("response %s: %w", id, store.ErrNotFound)
		}
		found[i] = e.r
	}
	s.mu.Unlock()
	for i := range found {
		found[i] = cloneResponse(found[i])
	}
	return found, nil
}

// FindItem implements store.Responses.
func (s *Responses) FindItem(ctx context.Context, owner, itemID string) (store.Response, error) {
	if err := ctx.Err(); err != nil {
		return store.Response{}, err
	}
	s.mu.Lock()
	var e *storedResponse
	if o := s.owner(owner); o != nil && store.ValidID(itemID) {
		if id, ok := o.items[itemID]; ok {
			e = o.responses[id]
		}
	}
	s.mu.Unlock()
	if e == nil {
		return store.Response{}, fmt.Errorf("item %s: %w", itemID, store.ErrNotFound)
	}
	return cloneResponse(e.r), nil
}

// DeleteResponse implements store.Responses.
func (s *Responses) DeleteResponse(ctx context.Context, owner, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.lookup(owner, id)
	if e == nil {
		return fmt.Errorf("response %s: %w", id, store.ErrNotFound)
	}
	s.remove(e)
	return nil
}

// Usage reports how many responses the store holds and their bytes
// (Response.Size), what Count and Bytes bound: for tests, and a gauge for
// operators.
func (s *Responses) Usage() (count int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(s.now())
	return s.count, s.bytes
}

// owner forgets what has expired and returns name's responses, nil when
// it has none.
func (s *Responses) owner(name string) *responseOwner {
	s.sweep(s.now())
	return s.owners[name]
}

// lookup returns owner's live response id, or nil.
func (s *Responses) lookup(owner, id string) *storedResponse {
	o := s.owner(owner)
	if o == nil || !store.ValidID(id) {
		return nil
	}
	return o.responses[id]
}

// sweep forgets every response that has expired at now: the soonest
// expiries are the heap's top, so its work is what it forgets.
func (s *Responses) sweep(now time.Time) {
	for s.byExpiry.Len() > 0 && storeutil.ResponseExpired(s.byExpiry.items[0].r, now) {
		s.remove(s.byExpiry.items[0])
	}
}

// remove forgets e: its record, the item index entries that still point
// to it (another response may have taken an item id over), its places in
// the queues and its share of the totals.
func (s *Responses) remove(e *storedResponse) {
	o := s.owners[e.r.Owner]
	delete(o.responses, e.r.ID)
	for _, id := range storeutil.ItemIDs(e.r) {
		if o.items[id] == e.r.ID {
			delete(o.items, id)
		}
	}
	if len(o.responses) == 0 {
		delete(s.owners, e.r.Owner)
	}
	heap.Remove(&s.byAge, e.age)
	if e.exp >= 0 {
		heap.Remove(&s.byExpiry, e.exp)
	}
	s.count--
	s.bytes -= e.size
}

// cloneResponse copies every slice of r, so that neither a caller's later
// changes to what it put nor changes to what it got reach the store.
func cloneResponse(r store.Response) store.Response {
	r.History = slices.Clone(r.History)
	r.Object = slices.Clone(r.Object)
	r.Input = cloneRaws(r.Input)
	r.ModelInput = cloneRaws(r.ModelInput)
	r.Pending = cloneRaws(r.Pending)
	if r.Items != nil {
		items := make([]store.ResponseItem, len(r.Items))
		for i, it := range r.Items {
			items[i] = store.ResponseItem{ID: it.ID, Model: cloneRaws(it.Model)}
		}
		r.Items = items
	}
	return r
}

func cloneRaws[S ~[]E, E ~[]byte](in S) S {
	if in == nil {
		return nil
	}
	out := make(S, len(in))
	for i, m := range in {
		out[i] = slices.Clone(m)
	}
	return out
}

// responseQueue is a heap of responses that keeps each one's index in it
// up to date (pos), so any response can be removed in O(log n).
type responseQueue struct {
	items []*storedResponse
	less  func(a, b *storedResponse) bool
	pos   func(*storedResponse) *int
}

func (q *responseQueue) Len() int           { return len(q.items) }
func (q *responseQueue) Less(i, j int) bool { return q.less(q.items[i], q.items[j]) }

func (q *responseQueue) Swap(i, j int) {
	q.items[i], q.items[j] = q.items[j], q.items[i]
	*q.pos(q.items[i]) = i
	*q.pos(q.items[j]) = j
}

func (q *responseQueue) Push(x any) {
	e := x.(*storedResponse)
	*q.pos(e) = len(q.items)
	q.items = append(q.items, e)
}

func (q *responseQueue) Pop() any {
	n := len(q.items) - 1
	e := q.items[n]
	q.items[n] = nil
	q.items = q.items[:n]
	*q.pos(e) = -1
	return e
}

// Close releases nothing — the store holds no goroutine or connection —
// and exists so that a process closes all its stores alike.
func (s *Responses) Close() error { return nil }
