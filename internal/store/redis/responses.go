package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/internal/storeutil"
)

// Responses is the Redis store.Responses, for several replicas: any of
// them can continue, reference or read back a response another made. It
// is safe for concurrent use, and any number of Responses (and Stores)
// may share one Redis.
//
// Keys sit under the owner's prefix, P{owner}: (as Store's do; see the
// package doc), so an owner's keys share one Cluster slot and a lookup
// under another owner builds another key:
//
//	resp:<id>        string  the record: Response as JSON, its raw messages base64
//	respidx:<id>     hash    exp (ExpiresAt, Unix ms; 0 never), items (the indexed item ids)
//	respitem:<item>  string  the id of the response that holds the item
//
// Every key of a response has its TTL, ExpiresAt as the store's clock
// sees it (no TTL when it never expires). Expiry is the store's decision,
// taken against its clock; the TTL frees the memory. The raw messages are
// base64 because encoding/json would compact them and escape <, > and &:
// a response comes back byte for byte, as the in-process store gives it.
//
// A put and a delete are each one Lua script: record, its index hash and
// the item keys change together, and the item keys the previous version
// had and this one lacks go (an item key is deleted only while it still
// names this response). A put is refused as a whole at maxmemory, as
// Store's writes are (a *store.QuotaError for store.LimitStoreMemory); a
// delete is allowed then. ResponseLimits.Count and Bytes do not apply: a
// shared Redis relies on the TTLs and its own maxmemory.
type Responses struct {
	conn
	limits      store.ResponseLimits
	put, delete *goredis.Script
}

var _ store.Responses = (*Responses)(nil)

// NewResponses connects to the Redis at url (as New does) and checks it
// answers PING. l bounds each response; now is the clock (tests), nil
// means time.Now.
func NewResponses(ctx context.Context, url string, l store.ResponseLimits, now func() time.Time, opts ...Option) (*Responses, error) {
	return dial(ctx, url, func(ctx context.Context, rdb goredis.UniversalClient) (*Responses, error) {
		return NewResponsesClient(ctx, rdb, l, now, opts...)
	})
}

// NewResponsesClient is NewResponses over a client the caller made (and
// closes: Close leaves it open) — a Store's, for one connection pool.
func NewResponsesClient(ctx context.Context, rdb goredis.UniversalClient, l store.ResponseLimits, now func() time.Time, opts ...Option) (*Responses, error) {
	c, err := newConn(ctx, rdb, now, opts)
	if err != nil {
		return nil, err
	}
	return &Responses{
		conn: c, limits: l,
		put:    goredis.NewScript("#!lua\n" + responsePrelude + putResponseScript),
		delete: goredis.NewScript("#!lua flags=allow-oom\n" + responsePrelude + deleteResponseScript),
	}, nil
}

// The scripts get KEYS[1] = the record key, KEYS[2] = the index hash key,
// ARGV[1] = the owner's key prefix, ARGV[2] = now (Unix ms, the store's
// clock), ARGV[3] = the response id. The item keys they touch are built
// from the prefix, in the owner's slot.
const responsePrelude = `
local rk, mk, kp, now, id = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2]), ARGV[3]

-- unindex deletes item's key while it names this response.
local function unindex(item)
  local k = kp .. 'respitem:' .. item
  if redis.call('GET', k) == id then redis.call('DEL', k) end
end
`

// putResponseScript stores a response: ARGV[4] = the record, [5] = its
// ExpiresAt (Unix ms, 0 never), [6] = its TTL (ms, 0 none), [7] = its
// indexed item ids, space-separated (ValidIDs hold no spaces).
const putResponseScript = `
local rec, exp, ttl, items = ARGV[4], ARGV[5], tonumber(ARGV[6]), ARGV[7]
local keep = {}
for it in string.gmatch(items, '%S+') do keep[it] = true end
local old = redis.call('HGET', mk, 'items')
if old then
  for it in string.gmatch(old, '%S+') do
    if not keep[it] then unindex(it) end
  end
end
redis.call('SET', rk, rec)
redis.call('DEL', mk)
redis.call('HSET', mk, 'exp', exp, 'items', items)
for it in string.gmatch(items, '%S+') do redis.call('SET', kp .. 'respitem:' .. it, id) end
if ttl > 0 then
  redis.call('PEXPIRE', rk, ttl)
  redis.call('PEXPIRE', mk, ttl)
  for it in string.gmatch(items, '%S+') do redis.call('PEXPIRE', kp .. 'respitem:' .. it, ttl) end
end
return 'ok'
`

// deleteResponseScript removes a response and the item keys that name
// it; the answer is "notfound" when there was none, or it had expired at
// now (its keys go all the same).
const deleteResponseScript = `
local m = redis.call('HMGET', mk, 'exp', 'items')
local present = redis.call('EXISTS', rk) == 1
if m[2] then
  for it in string.gmatch(m[2], '%S+') do unindex(it) end
end
redis.call('DEL', rk, mk)
if not present then return 'notfound' end
if m[1] then
  local exp = tonumber(m[1])
  if exp ~= 0 and exp <= now then return 'notfound' end
end
return 'ok'
`

// record is a Response as Redis keeps it: its raw messages as []byte
// (base64 in JSON), so that they come back byte for byte.
type record struct {
	ID             string       `json:"id"`
	Owner          string       `json:"owner"`
	CreatedAt      time.Time    `json:"created_at"`
	ExpiresAt      time.Time    `json:"expires_at"`
	Previous       string       `json:"previous,omitempty"`
	History        []string     `json:"history,omitempty"`
	UpstreamID     string       `json:"upstream_id,omitempty"`
	UpstreamStored bool         `json:"upstream_stored,omitempty"`
	ContainerID    string       `json:"container_id,omitempty"`
	Object         []byte       `json:"object"`
	Input          [][]byte     `json:"input"`
	ModelInput     [][]byte     `json:"model_input"`
	Pending        [][]byte     `json:"pending,omitempty"`
	Items          []recordItem `json:"items"`
}

// recordItem is a store.ResponseItem as Redis keeps it.
type recordItem struct {
	ID    string   `json:"id,omitempty"`
	Model [][]byte `json:"model"`
}

func encodeResponse(r store.Response) ([]byte, error) {
	rec := record{
		ID: r.ID, Owner: r.Owner, CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt,
		Previous: r.Previous, History: r.History, UpstreamID: r.UpstreamID, UpstreamStored: r.UpstreamStored,
		ContainerID: r.ContainerID, Object: r.Object, Input: toBytes(r.Input), ModelInput: toBytes(r.ModelInput),
		Pending: toBytes(r.Pending),
	}
	if r.Items != nil {
		rec.Items = make([]recordItem, len(r.Items))
		for i, it := range r.Items {
			rec.Items[i] = recordItem{ID: it.ID, Model: toBytes(it.Model)}
		}
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("store/redis: response %s: %w", r.ID, err)
	}
	return b, nil
}

func decodeResponse(b []byte) (store.Response, error) {
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		return store.Response{}, fmt.Errorf("store/redis: response record: %w", err)
	}
	r := store.Response{
		ID: rec.ID, Owner: rec.Owner, CreatedAt: rec.CreatedAt, ExpiresAt: rec.ExpiresAt,
		Previous: rec.Previous, History: rec.History, UpstreamID: rec.UpstreamID, UpstreamStored: rec.UpstreamStored,
		ContainerID: rec.ContainerID, Object: rec.Object, Input: toRaw(rec.Input), ModelInput: toRaw(rec.ModelInput),
		Pending: toRaw(rec.Pending),
	}
	if rec.Items != nil {
		r.Items = make([]store.ResponseItem, len(rec.Items))
		for i, it := range rec.Items {
			r.Items[i] = store.ResponseItem{ID: it.ID, Model: toRaw(it.Model)}
		}
	}
	return r, nil
}

func toBytes(in []json.RawMessage) [][]byte {
	if in == nil {
		return nil
	}
	out := make([][]byte, len(in))
	for i, m := range in {
		out[i] = m
	}
	return out
}

func toRaw(in [][]byte) []json.RawMessage {
	if in == nil {
		return nil
	}
	out := make([]json.RawMessage, len(in))
	for i, b := range in {
		out[i] = b
	}
	return out
}

func (s *Responses) keys(owner, id string) []string {
	kp := ownerPrefix(s.prefix, owner)
	return []string{kp + "resp:" + id, kp + "respidx:" + id}
}

// PutResponse implements store.Responses. A response that has already
// expired replaces the stored one by nothing.
func (s *Responses) PutResponse(ctx context.Context, r store.Response) error {
	now := s.now()
	r, err := storeutil.PrepareResponse(r, s.limits, s.limits.ResponseBytes, now)
	if err != nil {
		return err
	}
	if storeutil.ResponseExpired(r, now) {
		err := s.DeleteResponse(ctx, r.Owner, r.ID)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		return err
	}
	rec, err := encodeResponse(r)
	if err != nil {
		return err
	}
	var exp, ttl int64
	if !r.ExpiresAt.IsZero() {
		exp = r.ExpiresAt.UnixMilli()
		ttl = max(r.ExpiresAt.Sub(now).Milliseconds(), 1)
	}
	res, err := s.put.Run(ctx, s.rdb, s.keys(r.Owner, r.ID),
		ownerPrefix(s.prefix, r.Owner), now.UnixMilli(), r.ID, rec, exp, ttl, strings.Join(storeutil.ItemIDs(r), " ")).Text()
	if err != nil {
		return wrap(ctx, s.rdb, err)
	}
	if res != "ok" {
		return fmt.Errorf("store/redis: response %s: unexpected script reply %q", r.ID, res)
	}
	return nil
}

// live decodes a record GET or MGET returned for owner's id: not found
// when there is none, it has expired, or it is not what the key should
// hold.
func (s *Responses) live(v any, owner, id string, now time.Time) (store.Response, error) {
	str, ok := v.(string)
	if !ok {
		return store.Response{}, fmt.Errorf("response %s: %w", id, store.ErrNotFound)
	}
	r, err := decodeResponse([]byte(str))
	if err != nil {
		return store.Response{}, err
	}
	if r.ID != id || r.Owner != owner || storeutil.ResponseExpired(r, now) {
		return store.Response{}, fmt.Errorf("response %s: %w", id, store.ErrNotFound)
	}
	return r, nil
}

// get reads owner's response id.
func (s *Responses) get(ctx context.Context, owner, id string) (store.Response, error) {
	if !store.ValidID(id) {
		return store.Response{}, fmt.Errorf("response %s: %w", id, store.ErrNotFound)
	}
	v, err := s.rdb.Get(ctx, s.keys(owner, id)[0]).Result()
	switch {
	case errors.Is(err, goredis.Nil):
		return store.Response{}, fmt.Errorf("response %s: %w", id, store.ErrNotFound)
	case err != nil:
		return store.Response{}, wrap(ctx, s.rdb, err)
	}
	return s.live(v, owner, id, s.now())
}

// GetResponse implements store.Responses.
func (s *Responses) GetResponse(ctx context.Context, owner, id string) (store.Response, error) {
	return s.get(ctx, owner, id)
}

// GetResponses implements store.Responses with one MGET (all of an
// owner's keys are in one slot).
func (s *Responses) GetResponses(ctx context.Context, owner string, ids []string) ([]store.Response, error) {
	out := make([]store.Response, 0, len(ids))
	var keys []string
	for _, id := range ids {
		if store.ValidID(id) {
			keys = append(keys, s.keys(owner, id)[0])
		}
	}
	var vals []any
	if len(keys) > 0 {
		var err error
		if vals, err = s.rdb.MGet(ctx, keys...).Result(); err != nil {
			return nil, wrap(ctx, s.rdb, err)
		}
		if len(vals) != len(keys) {
			return nil, fmt.Errorf("store/redis: MGET of %d keys answered %d values", len(keys), len(vals))
		}
	}
	now := s.now()
	for _, id := range ids {
		if !store.ValidID(id) {
			return nil, fmt.Errorf("response %s: %w", id, store.ErrNotFound)
		}
		r, err := s.live(vals[0], owner, id, now)
		if err != nil {
			return nil, err
		}
		vals = vals[1:]
		out = append(out, r)
	}
	return out, nil
}

// FindItem implements store.Responses: the item's key names the
// response, whose record must still hold the item (a response replaced
// or deleted since is not found).
func (s *Responses) FindItem(ctx context.Context, owner, itemID string) (store.Response, error) {
	notFound := fmt.Errorf("item %s: %w", itemID, store.ErrNotFound)
	if !store.ValidID(itemID) {
		return store.Response{}, notFound
	}
	id, err := s.rdb.Get(ctx, ownerPrefix(s.prefix, owner)+"respitem:"+itemID).Result()
	switch {
	case errors.Is(err, goredis.Nil):
		return store.Response{}, notFound
	case err != nil:
		return store.Response{}, wrap(ctx, s.rdb, err)
	}
	r, err := s.get(ctx, owner, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && !r.HasItem(itemID) {
		return store.Response{}, notFound
	}
	return r, err
}

// DeleteResponse implements store.Responses.
func (s *Responses) DeleteResponse(ctx context.Context, owner, id string) error {
	if !store.ValidID(id) {
		return fmt.Errorf("response %s: %w", id, store.ErrNotFound)
	}
	now := s.now()
	res, err := s.delete.Run(ctx, s.rdb, s.keys(owner, id), ownerPrefix(s.prefix, owner), now.UnixMilli(), id).Text()
	if err != nil {
		return wrap(ctx, s.rdb, err)
	}
	switch res {
	case "ok":
		return nil
	case "notfound":
		return fmt.Errorf("response %s: %w", id, store.ErrNotFound)
	}
	return fmt.Errorf("store/redis: response %s: unexpected script reply %q", id, res)
}
