package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/internal/storeutil"
)

// Conversations is the Redis store.Conversations, for several replicas:
// any of them can read a conversation, or continue it, that another one
// wrote. It is safe for concurrent use, and any number of Conversations
// (and Stores and Responses) may share one Redis.
//
// Keys sit under the owner's prefix, P{owner}: (as Store's do; see the
// package doc), so an owner's keys share one Cluster slot and a lookup
// under another owner builds another key:
//
//	conv:<id>       hash  rec (id, owner, created_at as JSON), md (the metadata, raw; absent: null),
//	                      seq (the last item's sequence number), bytes (the items' Size)
//	convorder:<id>  zset  item id → sequence number: the append order
//	convitems:<id>  hash  item id → "<Size>:<item as JSON, its raw messages base64>"
//	convs           set   the owner's conversation ids (ConversationLimits.Conversations)
//
// No key has a TTL: OpenAI keeps conversations until they are deleted, not
// for the 30 days of stored responses. The metadata is kept as its raw
// bytes and the item's raw messages as base64, because encoding/json
// would compact them and escape <, > and &: both come back byte for byte,
// as the in-process store gives them.
//
// Every write is one Lua script that checks and writes atomically on the
// Redis server, so two replicas cannot both squeeze past a bound or both
// append one item id: create (only if the conversation does not exist,
// with the first items and the owner's conversation count), update the
// metadata (only if it does exist, so an update racing a delete never
// re-creates it), append (duplicates, Items and Bytes, all or none),
// delete an item (its bytes freed) and delete a conversation. What can
// grow memory — create, append, and an update that writes metadata — is
// refused as a whole at maxmemory (a *store.QuotaError for
// store.LimitStoreMemory); the deletes, and an update that clears the
// metadata, are allowed then, so a full Redis can still be emptied. Reads are one no-writes script each — a ZRANGE of
// the order and an HMGET of the items, one consistent view that also
// runs at maxmemory — except GetConversation and GetItem, which are a
// single command.
type Conversations struct {
	conn
	limits store.ConversationLimits

	create, appendItems, deleteItem, deleteConv, read *goredis.Script
	// update writes metadata (refused at maxmemory); clear removes it
	// (allowed then): one script body, two flags.
	update, clear *goredis.Script
}

var _ store.Conversations = (*Conversations)(nil)

// NewConversations connects to the Redis at url (as New does) and checks
// it answers PING. l bounds each conversation and each owner's count of
// them; now gives a new conversation's CreatedAt when it has none (tests),
// nil means time.Now.
func NewConversations(ctx context.Context, url string, l store.ConversationLimits, now func() time.Time, opts ...Option) (*Conversations, error) {
	return dial(ctx, url, func(ctx context.Context, rdb goredis.UniversalClient) (*Conversations, error) {
		return NewConversationsClient(ctx, rdb, l, now, opts...)
	})
}

// NewConversationsClient is NewConversations over a client the caller
// made (and closes: Close leaves it open) — a Store's, for one connection
// pool.
func NewConversationsClient(ctx context.Context, rdb goredis.UniversalClient, l store.ConversationLimits, now func() time.Time, opts ...Option) (*Conversations, error) {
	c, err := newConn(ctx, rdb, now, opts)
	if err != nil {
		return nil, err
	}
	return &Conversations{
		conn: c, limits: l,
		create:      goredis.NewScript("#!lua\n" + convPrelude + createConversationScript),
		appendItems: goredis.NewScript("#!lua\n" + convPrelude + appendItemsScript),
		deleteItem:  goredis.NewScript("#!lua flags=allow-oom\n" + convPrelude + deleteItemScript),
		deleteConv:  goredis.NewScript("#!lua flags=allow-oom\n" + convPrelude + deleteConversationScript),
		update:      goredis.NewScript("#!lua\n" + convPrelude + updateConversationScript),
		clear:       goredis.NewScript("#!lua flags=allow-oom\n" + convPrelude + updateConversationScript),
		read:        goredis.NewScript("#!lua flags=no-writes\n" + convPrelude + readItemsScript),
	}, nil
}

// The scripts get KEYS[1] = conv:<id>, KEYS[2] = convorder:<id>,
// KEYS[3] = convitems:<id>, KEYS[4] = convs (all in the owner's slot) and
// ARGV[1] = the conversation id.
const convPrelude = `
local ck, ok, ik, sk, id = KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1]
-- the owner's key prefix: ck is kp .. 'conv:' .. id
local kp = string.sub(ck, 1, #ck - #id - 5)

local function int(x) return string.format('%.0f', x) end

-- check reads the n items given as ARGV triples (id, Size, record) from
-- ARGV[first] on: a duplicate (of the conversation's or within them) is
-- {'duplicate', id}; else the items would make the conversation past
-- maxi items or maxb bytes (0: no bound) is a quota reply; else nil and
-- the conversation's new byte count.
local function check(first, n, maxi, maxb)
  local seen = {}
  local add = 0
  for i = 0, n - 1 do
    local iid = ARGV[first + 3 * i]
    if seen[iid] or redis.call('HEXISTS', ik, iid) == 1 then return {'duplicate', iid} end
    seen[iid] = true
    add = add + tonumber(ARGV[first + 3 * i + 1])
  end
  if maxi > 0 and redis.call('ZCARD', ok) + n > maxi then
    return {'quota', 'conversation_items', int(maxi)}
  end
  local bytes = (tonumber(redis.call('HGET', ck, 'bytes')) or 0) + add
  if maxb > 0 and bytes > maxb then
    return {'quota', 'conversation_bytes', int(maxb)}
  end
  return nil, bytes
end

-- put appends the n checked items from ARGV[first] on, after seq.
local function put(first, n, seq)
  for i = 0, n - 1 do
    local iid = ARGV[first + 3 * i]
    seq = seq + 1
    redis.call('ZADD', ok, int(seq), iid)
    redis.call('HSET', ik, iid, ARGV[first + 3 * i + 2])
  end
  return seq
end
`

// createConversationScript creates a conversation that does not exist:
// ARGV[2] = the record, [3] = the metadata, [4] = "1" when there is
// metadata ("0": null), [5] = max items, [6] = max bytes, [7] = max
// conversations of the owner, [8] = the number of first items, [9…]
// their triples. The answer is {'created'}, {'exists'} (nothing changed),
// a quota or a duplicate reply.
const createConversationScript = `
if redis.call('EXISTS', ck) == 1 then return {'exists'} end
local maxc = tonumber(ARGV[7])
if maxc > 0 and redis.call('SISMEMBER', sk, id) == 0 and redis.call('SCARD', sk) >= maxc then
  -- At the bound: entries whose conversation is gone (a key an evicting
  -- maxmemory policy dropped) do not count. Only here, so that a create
  -- below the bound stays O(1); the owner's entries are bounded by it.
  for _, c in ipairs(redis.call('SMEMBERS', sk)) do
    if redis.call('EXISTS', kp .. 'conv:' .. c) == 0 then redis.call('SREM', sk, c) end
  end
  if redis.call('SCARD', sk) >= maxc then return {'quota', 'owner_conversations', ARGV[7]} end
end
local n = tonumber(ARGV[8])
-- A conversation that does not exist has no items: these keys are gone
-- with it (a delete removes them), but make sure.
redis.call('DEL', ok, ik)
local bad, bytes = check(9, n, tonumber(ARGV[5]), tonumber(ARGV[6]))
if bad then return bad end
local seq = put(9, n, 0)
redis.call('HSET', ck, 'rec', ARGV[2], 'seq', int(seq), 'bytes', int(bytes))
if ARGV[4] == '1' then redis.call('HSET', ck, 'md', ARGV[3]) end
redis.call('SADD', sk, id)
return {'created'}
`

// updateConversationScript replaces the metadata of a conversation that
// exists — its conv: hash with a record of this id and owner —, and
// creates nothing: ARGV[2] = the owner, [3] = the metadata, [4] = "1"
// when there is metadata ("0": null, the md field removed). The answer is
// {'ok', record} or {'notfound'}.
const updateConversationScript = `
local rec = redis.call('HGET', ck, 'rec')
if not rec then return {'notfound'} end
local good, r = pcall(cjson.decode, rec)
if not good or type(r) ~= 'table' or r.id ~= id or r.owner ~= ARGV[2] then
  return {'notfound'} -- not what this key should hold (as GetConversation)
end
if ARGV[4] == '1' then redis.call('HSET', ck, 'md', ARGV[3]) else redis.call('HDEL', ck, 'md') end
return {'ok', rec}
`

// appendItemsScript appends items, all or none: ARGV[2] = max items,
// [3] = max bytes, [4] = their number, [5…] their triples.
const appendItemsScript = `
local seq = redis.call('HGET', ck, 'seq')
if not seq then return {'notfound'} end
local n = tonumber(ARGV[4])
local bad, bytes = check(5, n, tonumber(ARGV[2]), tonumber(ARGV[3]))
if bad then return bad end
seq = put(5, n, tonumber(seq))
redis.call('HSET', ck, 'seq', int(seq), 'bytes', int(bytes))
return {'ok'}
`

// deleteItemScript removes item ARGV[2] and frees its bytes.
const deleteItemScript = `
if redis.call('EXISTS', ck) == 0 then return {'notfound'} end
local v = redis.call('HGET', ik, ARGV[2])
if not v then return {'noitem'} end
local size = tonumber(string.match(v, '^(%d+):')) or 0
redis.call('HDEL', ik, ARGV[2])
redis.call('ZREM', ok, ARGV[2])
redis.call('HINCRBY', ck, 'bytes', int(-size))
return {'ok'}
`

// deleteConversationScript removes a conversation, its items and its
// place in the owner's count (UNLINK: a large conversation's memory is
// freed in the background).
const deleteConversationScript = `
local existed = redis.call('EXISTS', ck) == 1
redis.call('UNLINK', ck, ok, ik)
redis.call('SREM', sk, id)
if not existed then return {'notfound'} end
return {'ok'}
`

// readItemsScript reads items in one consistent view: ARGV[2] = "all"
// (every item, oldest first), "asc" or "desc"; [3] = the item id the page
// starts after ("" none); [4] = how many at most. The answer is
// {'notfound'} or {'ok', record…} (an unknown after gives no records).
const readItemsScript = `
if redis.call('EXISTS', ck) == 0 then return {'notfound'} end
local mode, after, count = ARGV[2], ARGV[3], tonumber(ARGV[4])
local ids
if mode == 'all' then
  ids = redis.call('ZRANGE', ok, 0, -1)
elseif after ~= '' then
  local sc = redis.call('ZSCORE', ok, after)
  if not sc then return {'ok'} end
  if mode == 'asc' then
    ids = redis.call('ZRANGE', ok, '(' .. sc, '+inf', 'BYSCORE', 'LIMIT', 0, count)
  else
    ids = redis.call('ZRANGE', ok, '(' .. sc, '-inf', 'BYSCORE', 'REV', 'LIMIT', 0, count)
  end
elseif mode == 'asc' then
  ids = redis.call('ZRANGE', ok, 0, count - 1)
else
  ids = redis.call('ZRANGE', ok, 0, count - 1, 'REV')
end
local out = {'ok'}
-- HMGET in chunks: unpack has a bound on its results.
for i = 1, #ids, 1000 do
  local vals = redis.call('HMGET', ik, unpack(ids, i, math.min(i + 999, #ids)))
  for _, v in ipairs(vals) do out[#out + 1] = v end
end
return out
`

// convKeys are the keys the scripts declare, in their order.
func (s *Conversations) convKeys(owner, id string) []string {
	kp := ownerPrefix(s.prefix, owner)
	return []string{kp + "conv:" + id, kp + "convorder:" + id, kp + "convitems:" + id, kp + "convs"}
}

// convRecord is a conversation's rec field: what never changes after the
// create (the metadata is a field of its own).
type convRecord struct {
	ID        string `json:"id"`
	Owner     string `json:"owner"`
	CreatedAt int64  `json:"created_at"`
}

// itemRecord is a store.ConversationItem as Redis keeps it: its raw
// messages as []byte (base64 in JSON), so that they come back byte for
// byte.
type itemRecord struct {
	ID    string   `json:"id"`
	Item  []byte   `json:"item"`
	Model [][]byte `json:"model,omitempty"`
}

// encodeItem is an item's convitems value: its Size (which the delete
// script frees), a colon, its record.
func encodeItem(it store.ConversationItem) (string, error) {
	b, err := json.Marshal(itemRecord{ID: it.ID, Item: it.Item, Model: toBytes(it.Model)})
	if err != nil {
		return "", fmt.Errorf("store/redis: item %s: %w", it.ID, err)
	}
	return strconv.FormatInt(it.Size(), 10) + ":" + string(b), nil
}

func decodeItem(v string) (store.ConversationItem, error) {
	_, rec, ok := strings.Cut(v, ":")
	var r itemRecord
	if !ok {
		return store.ConversationItem{}, errors.New("store/redis: conversation item record without its size")
	}
	if err := json.Unmarshal([]byte(rec), &r); err != nil {
		return store.ConversationItem{}, fmt.Errorf("store/redis: conversation item record: %w", err)
	}
	return store.ConversationItem{ID: r.ID, Item: r.Item, Model: toRaw(r.Model)}, nil
}

// itemArgs are the scripts' triples for items: id, Size, record; an item
// id a store cannot hold is refused (storeutil.CheckItemIDs).
func itemArgs(cid string, items []store.ConversationItem) ([]any, error) {
	if err := storeutil.CheckItemIDs(cid, items); err != nil {
		return nil, err
	}
	args := make([]any, 0, 3*len(items))
	for _, it := range items {
		v, err := encodeItem(it)
		if err != nil {
			return nil, err
		}
		args = append(args, it.ID, it.Size(), v)
	}
	return args, nil
}

// run runs a conversation script and maps its reply: quota and duplicate
// replies to their errors; the rest is for the caller.
func (s *Conversations) run(ctx context.Context, sc *goredis.Script, owner, id string, args ...any) ([]string, error) {
	res, err := sc.Run(ctx, s.rdb, s.convKeys(owner, id), append([]any{id}, args...)...).StringSlice()
	if err != nil {
		return nil, wrap(ctx, s.rdb, err)
	}
	if len(res) == 0 {
		return nil, errors.New("store/redis: empty script reply")
	}
	switch {
	case res[0] == "quota" && len(res) == 3:
		max, _ := strconv.ParseInt(res[2], 10, 64)
		return res, &store.QuotaError{Limit: res[1], Max: max}
	case res[0] == "duplicate" && len(res) == 2:
		return res, &store.DuplicateItemError{ID: res[1]}
	}
	return res, nil
}

// PutConversation implements store.Conversations in one script that only
// creates: an id the owner has already is store.ErrExists, and nothing
// changes. A new conversation's first items are checked as an append to
// an empty conversation would be, and against the owner's
// ConversationLimits.Conversations.
func (s *Conversations) PutConversation(ctx context.Context, c store.Conversation, items []store.ConversationItem) error {
	if err := storeutil.CheckConversation(c, items); err != nil {
		return err
	}
	args, err := itemArgs(c.ID, items)
	if err != nil {
		return err
	}
	if c.CreatedAt == 0 {
		c.CreatedAt = s.now().Unix()
	}
	rec, err := json.Marshal(convRecord{ID: c.ID, Owner: c.Owner, CreatedAt: c.CreatedAt})
	if err != nil {
		return fmt.Errorf("store/redis: conversation %s: %w", c.ID, err)
	}
	hasMeta := "0"
	if c.Metadata != nil {
		hasMeta = "1"
	}
	res, err := s.run(ctx, s.create, c.Owner, c.ID, append([]any{
		rec, []byte(c.Metadata), hasMeta, s.limits.Items, s.limits.Bytes, s.limits.Conversations, len(items),
	}, args...)...)
	if err != nil {
		return err
	}
	switch res[0] {
	case "created":
		return nil
	case "exists":
		return fmt.Errorf("conversation %s: %w", c.ID, store.ErrExists)
	}
	return fmt.Errorf("store/redis: conversation %s: unexpected script reply %q", c.ID, res[0])
}

// UpdateConversation implements store.Conversations in one script that
// writes only to a conversation that exists. Writing metadata is refused
// at maxmemory (a *store.QuotaError for store.LimitStoreMemory); clearing
// it is allowed then.
func (s *Conversations) UpdateConversation(ctx context.Context, owner, id string, metadata json.RawMessage) (store.Conversation, error) {
	if !store.ValidID(id) {
		return store.Conversation{}, convNotFound(id)
	}
	sc, hasMeta := s.clear, "0"
	if metadata != nil {
		sc, hasMeta = s.update, "1"
	}
	res, err := s.run(ctx, sc, owner, id, owner, []byte(metadata), hasMeta)
	if err != nil {
		return store.Conversation{}, err
	}
	switch {
	case res[0] == "notfound":
		return store.Conversation{}, convNotFound(id)
	case res[0] != "ok" || len(res) != 2:
		return store.Conversation{}, fmt.Errorf("store/redis: conversation %s: unexpected script reply %q", id, res)
	}
	var r convRecord
	if err := json.Unmarshal([]byte(res[1]), &r); err != nil {
		return store.Conversation{}, fmt.Errorf("store/redis: conversation record: %w", err)
	}
	c := store.Conversation{ID: r.ID, Owner: r.Owner, CreatedAt: r.CreatedAt}
	if metadata != nil {
		c.Metadata = slices.Clone(metadata)
	}
	return c, nil
}

// GetConversation implements store.Conversations with one HMGET.
func (s *Conversations) GetConversation(ctx context.Context, owner, id string) (store.Conversation, error) {
	if !store.ValidID(id) {
		return store.Conversation{}, convNotFound(id)
	}
	v, err := s.rdb.HMGet(ctx, s.convKeys(owner, id)[0], "rec", "md").Result()
	if err != nil {
		return store.Conversation{}, wrap(ctx, s.rdb, err)
	}
	rec, ok := v[0].(string)
	if !ok {
		return store.Conversation{}, convNotFound(id)
	}
	var r convRecord
	if err := json.Unmarshal([]byte(rec), &r); err != nil {
		return store.Conversation{}, fmt.Errorf("store/redis: conversation record: %w", err)
	}
	if r.ID != id || r.Owner != owner {
		return store.Conversation{}, convNotFound(id) // not what this key should hold
	}
	c := store.Conversation{ID: r.ID, Owner: r.Owner, CreatedAt: r.CreatedAt}
	if md, ok := v[1].(string); ok {
		c.Metadata = json.RawMessage(md)
	}
	return c, nil
}

func convNotFound(id string) error { return fmt.Errorf("conversation %s: %w", id, store.ErrNotFound) }

func itemNotFound(id, itemID string) error {
	return fmt.Errorf("conversation %s: item %s: %w", id, itemID, store.ErrNotFound)
}

// DeleteConversation implements store.Conversations.
func (s *Conversations) DeleteConversation(ctx context.Context, owner, id string) error {
	if !store.ValidID(id) {
		return convNotFound(id)
	}
	res, err := s.run(ctx, s.deleteConv, owner, id)
	if err != nil {
		return err
	}
	return convStatus(res, id, "")
}

// convStatus maps the replies every script may give.
func convStatus(res []string, id, itemID string) error {
	switch res[0] {
	case "ok":
		return nil
	case "notfound":
		return convNotFound(id)
	case "noitem":
		return itemNotFound(id, itemID)
	}
	return fmt.Errorf("store/redis: conversation %s: unexpected script reply %q", id, res[0])
}

// AppendItems implements store.Conversations in one script, all or none.
func (s *Conversations) AppendItems(ctx context.Context, owner, id string, items []store.ConversationItem) error {
	args, err := itemArgs(id, items)
	if err != nil {
		return err
	}
	if !store.ValidID(id) {
		return convNotFound(id)
	}
	res, err := s.run(ctx, s.appendItems, owner, id, append([]any{s.limits.Items, s.limits.Bytes, len(items)}, args...)...)
	if err != nil {
		return err
	}
	return convStatus(res, id, "")
}

// readItems runs the read script and decodes its records.
func (s *Conversations) readItems(ctx context.Context, owner, id, mode, after string, count int) ([]store.ConversationItem, error) {
	if !store.ValidID(id) {
		return nil, convNotFound(id)
	}
	res, err := s.read.Run(ctx, s.rdb, s.convKeys(owner, id)[:3], id, mode, after, count).Slice()
	if err != nil {
		return nil, wrap(ctx, s.rdb, err)
	}
	if len(res) == 0 {
		return nil, errors.New("store/redis: empty script reply")
	}
	if st, _ := res[0].(string); st != "ok" {
		if st == "notfound" {
			return nil, convNotFound(id)
		}
		return nil, fmt.Errorf("store/redis: conversation %s: unexpected script reply %v", id, res[0])
	}
	out := make([]store.ConversationItem, 0, len(res)-1)
	for _, v := range res[1:] {
		str, ok := v.(string)
		if !ok {
			// The order and the items change together in every script;
			// an entry without its item is a key someone else removed.
			continue
		}
		it, err := decodeItem(str)
		if err != nil {
			return nil, err
		}
		out = append(out, it)
	}
	return out, nil
}

// Items implements store.Conversations: one script, one consistent view.
func (s *Conversations) Items(ctx context.Context, owner, id string) ([]store.ConversationItem, error) {
	return s.readItems(ctx, owner, id, "all", "", 0)
}

// ListItems implements store.Conversations: one script reads the page and
// one item more, to tell whether more follow.
func (s *Conversations) ListItems(ctx context.Context, owner, id string, o store.ListOptions) ([]store.ConversationItem, bool, error) {
	o, err := o.Normalize()
	if err != nil {
		return nil, false, err
	}
	if o.After != "" && !store.ValidID(o.After) {
		// Never an item's id: an empty page, of a conversation that must
		// still exist.
		if _, err := s.GetConversation(ctx, owner, id); err != nil {
			return nil, false, err
		}
		return nil, false, nil
	}
	page, err := s.readItems(ctx, owner, id, o.Order, o.After, o.Limit+1)
	if err != nil {
		return nil, false, err
	}
	if len(page) > o.Limit {
		return page[:o.Limit], true, nil
	}
	return page, false, nil
}

// GetItem implements store.Conversations with one HGET (an item exists
// only while its conversation does: they are deleted together).
func (s *Conversations) GetItem(ctx context.Context, owner, id, itemID string) (store.ConversationItem, error) {
	if !store.ValidID(id) {
		return store.ConversationItem{}, convNotFound(id)
	}
	if !store.ValidID(itemID) {
		return store.ConversationItem{}, itemNotFound(id, itemID)
	}
	v, err := s.rdb.HGet(ctx, s.convKeys(owner, id)[2], itemID).Result()
	switch {
	case errors.Is(err, goredis.Nil):
		return store.ConversationItem{}, itemNotFound(id, itemID)
	case err != nil:
		return store.ConversationItem{}, wrap(ctx, s.rdb, err)
	}
	return decodeItem(v)
}

// DeleteItem implements store.Conversations in one script; the item's
// bytes and its place under ConversationLimits.Items are free again.
func (s *Conversations) DeleteItem(ctx context.Context, owner, id, itemID string) error {
	if !store.ValidID(id) {
		return convNotFound(id)
	}
	if !store.ValidID(itemID) {
		return itemNotFound(id, itemID)
	}
	res, err := s.run(ctx, s.deleteItem, owner, id, itemID)
	if err != nil {
		return err
	}
	return convStatus(res, id, itemID)
}
