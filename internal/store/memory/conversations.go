package memory

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/internal/storeutil"
)

// Conversations is the in-process store.Conversations, the default beside
// Store and Responses: right for one replica (another replica does not see
// its conversations; use store/redis for several).
//
// One mutex guards maps keyed by owner, so another owner's conversations
// are never looked at. A conversation keeps its items in append order with
// an index by item id, so a lookup, a page's start and a delete find their
// item without a scan. Conversations do not expire (OpenAI keeps them
// until they are deleted): ConversationLimits bound each conversation's
// items and bytes and each owner's conversations, so what one owner can
// hold is bounded by Conversations × Bytes. Stored items are never changed
// in place, so reads copy them outside the lock.
type Conversations struct {
	limits store.ConversationLimits
	now    func() time.Time

	mu     sync.Mutex
	owners map[string]map[string]*conversation // owner → conversation id → conversation
}

var _ store.Conversations = (*Conversations)(nil)

// conversation is one conversation with its items.
type conversation struct {
	c     store.Conversation // a private copy; Metadata is replaced, never changed in place
	items []*convItem        // in append order: seq ascending
	byID  map[string]*convItem
	bytes int64  // the items' Size, what ConversationLimits.Bytes bounds
	seq   uint64 // the last seq given to an item
}

// convItem is one stored item: a private copy, never modified, and its
// place in the append order (seq increases with every append, so a binary
// search finds its index in items).
type convItem struct {
	it   store.ConversationItem
	size int64
	seq  uint64
}

// NewConversations returns an empty store bounded by l. now is the clock
// that gives a new conversation's CreatedAt when it has none; nil means
// time.Now.
func NewConversations(l store.ConversationLimits, now func() time.Time) *Conversations {
	if now == nil {
		now = time.Now
	}
	return &Conversations{limits: l, now: now, owners: map[string]map[string]*conversation{}}
}

// PutConversation implements store.Conversations: it only creates. An id
// the owner has already is store.ErrExists whatever else (its
// conversation is not looked at further, nor changed). A new
// conversation's first items are checked as an append to an empty
// conversation would be (DuplicateItemError for an id repeated among
// them, QuotaError for ConversationLimits.Items and Bytes), and past the
// owner's ConversationLimits.Conversations it is a QuotaError; then
// nothing is stored.
func (s *Conversations) PutConversation(ctx context.Context, c store.Conversation, items []store.ConversationItem) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := storeutil.CheckConversation(c, items); err != nil {
		return err
	}
	if c.CreatedAt == 0 {
		c.CreatedAt = s.now().Unix()
	}
	c.Metadata = slices.Clone(c.Metadata)
	stored := cloneConvItems(items) // outside the lock; wasted only on a refusal
	s.mu.Lock()
	defer s.mu.Unlock()
	convs := s.owners[c.Owner]
	if convs[c.ID] != nil {
		return fmt.Errorf("conversation %s: %w", c.ID, store.ErrExists)
	}
	if s.limits.Conversations > 0 && len(convs) >= s.limits.Conversations {
		return &store.QuotaError{Limit: store.LimitConversations, Max: int64(s.limits.Conversations)}
	}
	cv := &conversation{c: c, byID: map[string]*convItem{}}
	if err := s.appendLocked(cv, stored); err != nil {
		return err
	}
	if convs == nil {
		convs = map[string]*conversation{}
		s.owners[c.Owner] = convs
	}
	convs[c.ID] = cv
	return nil
}

// appendLocked appends items (private copies) to cv, all or none: a
// duplicate id (already in cv, or twice in items) or a bound exceeded
// changes nothing.
func (s *Conversations) appendLocked(cv *conversation, items []store.ConversationItem) error {
	seen := make(map[string]bool, len(items))
	var add int64
	for _, it := range items {
		if seen[it.ID] || cv.byID[it.ID] != nil {
			return &store.DuplicateItemError{ID: it.ID}
		}
		seen[it.ID] = true
		add += it.Size()
	}
	if s.limits.Items > 0 && len(cv.items)+len(items) > s.limits.Items {
		return &store.QuotaError{Limit: store.LimitConversationItems, Max: int64(s.limits.Items)}
	}
	if s.limits.Bytes > 0 && cv.bytes+add > s.limits.Bytes {
		return &store.QuotaError{Limit: store.LimitConversationBytes, Max: s.limits.Bytes}
	}
	for _, it := range items {
		cv.seq++
		e := &convItem{it: it, size: it.Size(), seq: cv.seq}
		cv.items = append(cv.items, e)
		cv.byID[it.ID] = e
	}
	cv.bytes += add
	return nil
}

// lookup returns owner's conversation id, or nil (an invalid id is never
// stored, so it is nil too).
func (s *Conversations) lookup(owner, id string) *conversation {
	return s.owners[owner][id]
}

func convNotFound(id string) error { return fmt.Errorf("conversation %s: %w", id, store.ErrNotFound) }

func itemNotFound(id, itemID string) error {
	return fmt.Errorf("conversation %s: item %s: %w", id, itemID, store.ErrNotFound)
}

// GetConversation implements store.Conversations.
func (s *Conversations) GetConversation(ctx context.Context, owner, id string) (store.Conversation, error) {
	if err := ctx.Err(); err != nil {
		return store.Conversation{}, err
	}
	s.mu.Lock()
	cv := s.lookup(owner, id)
	var c store.Conversation
	if cv != nil {
		c = cv.c
	}
	s.mu.Unlock()
	if cv == nil {
		return store.Conversation{}, convNotFound(id)
	}
	c.Metadata = slices.Clone(c.Metadata)
	return c, nil
}

// UpdateConversation implements store.Conversations: the metadata is
// replaced under the lock, on the conversation found there, so an update
// after (or racing) a delete finds nothing and creates nothing.
func (s *Conversations) UpdateConversation(ctx context.Context, owner, id string, metadata json.RawMessage) (store.Conversation, error) {
	if err := ctx.Err(); err != nil {
		return store.Conversation{}, err
	}
	md := slices.Clone(metadata) // outside the lock
	s.mu.Lock()
	cv := s.lookup(owner, id)
	var c store.Conversation
	if cv != nil {
		cv.c.Metadata = md // replaced, not changed in place: readers' copies stay valid
		c = cv.c
	}
	s.mu.Unlock()
	if cv == nil {
		return store.Conversation{}, convNotFound(id)
	}
	c.Metadata = slices.Clone(c.Metadata)
	return c, nil
}

// DeleteConversation implements store.Conversations; the owner's
// conversation count goes down with it.
func (s *Conversations) DeleteConversation(ctx context.Context, owner, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	convs := s.owners[owner]
	if convs[id] == nil {
		return convNotFound(id)
	}
	delete(convs, id)
	if len(convs) == 0 {
		delete(s.owners, owner) // an owner who deleted everything holds nothing
	}
	return nil
}

// AppendItems implements store.Conversations: all or none, under the
// lock, so concurrent appends land whole and each exactly once.
func (s *Conversations) AppendItems(ctx context.Context, owner, id string, items []store.ConversationItem) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := storeutil.CheckItemIDs(id, items); err != nil {
		return err
	}
	stored := cloneConvItems(items)
	s.mu.Lock()
	defer s.mu.Unlock()
	cv := s.lookup(owner, id)
	if cv == nil {
		return convNotFound(id)
	}
	return s.appendLocked(cv, stored)
}

// Items implements store.Conversations.
func (s *Conversations) Items(ctx context.Context, owner, id string) ([]store.ConversationItem, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	cv := s.lookup(owner, id)
	var all []*convItem
	if cv != nil {
		all = slices.Clone(cv.items)
	}
	s.mu.Unlock()
	if cv == nil {
		return nil, convNotFound(id)
	}
	return copyOut(all), nil
}

// ListItems implements store.Conversations.
func (s *Conversations) ListItems(ctx context.Context, owner, id string, o store.ListOptions) ([]store.ConversationItem, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	o, err := o.Normalize()
	if err != nil {
		return nil, false, err
	}
	s.mu.Lock()
	cv := s.lookup(owner, id)
	if cv == nil {
		s.mu.Unlock()
		return nil, false, convNotFound(id)
	}
	page, more := cv.page(o)
	s.mu.Unlock()
	return copyOut(page), more, nil
}

// page is one page of cv's items in o's order (o normalized), and whether
// more follow.
func (cv *conversation) page(o store.ListOptions) ([]*convItem, bool) {
	n := len(cv.items)
	if o.Order == "asc" {
		start := 0
		if o.After != "" {
			i, ok := cv.index(o.After)
			if !ok {
				return nil, false // unknown after: an empty page
			}
			start = i + 1
		}
		end := min(start+o.Limit, n)
		return slices.Clone(cv.items[start:end]), end < n
	}
	start := n - 1 // the newest
	if o.After != "" {
		i, ok := cv.index(o.After)
		if !ok {
			return nil, false
		}
		start = i - 1
	}
	var page []*convItem
	for i := start; i >= 0 && len(page) < o.Limit; i-- {
		page = append(page, cv.items[i])
	}
	return page, start-len(page) >= 0
}

// index is the position of item itemID in cv.items.
func (cv *conversation) index(itemID string) (int, bool) {
	e := cv.byID[itemID]
	if e == nil {
		return 0, false
	}
	i := sort.Search(len(cv.items), func(i int) bool { return cv.items[i].seq >= e.seq })
	return i, i < len(cv.items) && cv.items[i] == e
}

// GetItem implements store.Conversations.
func (s *Conversations) GetItem(ctx context.Context, owner, id, itemID string) (store.ConversationItem, error) {
	if err := ctx.Err(); err != nil {
		return store.ConversationItem{}, err
	}
	s.mu.Lock()
	cv := s.lookup(owner, id)
	var e *convItem
	if cv != nil {
		e = cv.byID[itemID]
	}
	s.mu.Unlock()
	switch {
	case cv == nil:
		return store.ConversationItem{}, convNotFound(id)
	case e == nil:
		return store.ConversationItem{}, itemNotFound(id, itemID)
	}
	return cloneConvItem(e.it), nil
}

// DeleteItem implements store.Conversations; the item's bytes and its
// place under ConversationLimits.Items are free again, and its id may be
// appended anew.
func (s *Conversations) DeleteItem(ctx context.Context, owner, id, itemID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cv := s.lookup(owner, id)
	if cv == nil {
		return convNotFound(id)
	}
	i, ok := cv.index(itemID)
	if !ok {
		return itemNotFound(id, itemID)
	}
	e := cv.items[i]
	cv.items = slices.Delete(cv.items, i, i+1)
	delete(cv.byID, itemID)
	cv.bytes -= e.size
	return nil
}

// copyOut copies stored items for a caller.
func copyOut(in []*convItem) []store.ConversationItem {
	out := make([]store.ConversationItem, len(in))
	for i, e := range in {
		out[i] = cloneConvItem(e.it)
	}
	return out
}

// cloneConvItems copies every slice of items, so that neither a caller's
// later changes to what it stored nor changes to what it read reach the
// store.
func cloneConvItems(items []store.ConversationItem) []store.ConversationItem {
	out := make([]store.ConversationItem, len(items))
	for i, it := range items {
		out[i] = cloneConvItem(it)
	}
	return out
}

func cloneConvItem(it store.ConversationItem) store.ConversationItem {
	it.Item = slices.Clone(it.Item)
	it.Model = cloneRaws(it.Model)
	return it
}

// Close releases nothing — the store holds no goroutine or connection —
// and exists so that a process closes all its stores alike.
func (s *Conversations) Close() error { return nil }
