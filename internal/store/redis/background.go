package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/codeinterp/codeinterp/internal/store"
)

// Background is the Redis store.Background, for several replicas: a
// background response made on one is polled, resumed and cancelled
// through any. Keys sit under the owner's prefix P{owner}: (one Cluster
// slot per owner), except the server-wide count:
//
//	bg:<id>     hash    exp (running until, Unix ms; 0 ended), cancel, n (next sequence number), bytes, keep (ms), settled (Settle's winner)
//	bgev:<id>   stream  the events, entry id 0-<sequence_number+1>, field d
//	bgrun       zset    the owner's running ids, scored by exp
//	<prefix>bgall  zset "<owner prefix><id>" of every owner, scored by exp
//	<prefix>bglogs   zset "<owner prefix><id>" of every log, scored by when its keys expire (ms)
//	<prefix>bglogsz  hash "<owner prefix><id>" → "bytes:ended" (ended 0 or 1)
//	<prefix>bglogbytes string the sum of bglogsz's bytes
//
// The logs of every owner are bounded together (WithBackgroundBytes,
// store.BackgroundAllBytes): an append reserves its bytes in the
// server-wide accounting first (bgAccountScript, which forgets the
// entries of logs whose keys expired by then, so the sum follows the
// TTLs), and past the bound the logs of runs that ended longest ago are
// forgotten — their streams deleted, their hashes marked trimmed, so a
// reader is told (store.ErrEventsTrimmed) — or, with only running logs
// left, the append is refused. Renew and End move a log's expiry there as
// they move its keys'.
//
// Each change of a run is one Lua script in the owner's slot; the
// server-wide count is its own key (another slot), admitted before and
// released after. A run that is not renewed lapses: it counts as ended
// from its exp on, for its slot and for readers. Keys outlive the end by
// keep (their TTL). Readers wait with XREAD BLOCK.
//
// Every deadline is set and checked by Redis' clock (TIME, inside the
// scripts): replicas whose clocks disagree still agree on which runs are
// live. The clock a Background is given is not used for liveness.
type Background struct {
	conn
	// readers is the client of the reads that wait (XREAD BLOCK): its own
	// pool, so that waiting readers never hold a connection Renew or any
	// other call needs. NewBackground makes it; over a caller's client it
	// is that client.
	readers                                                 goredis.UniversalClient
	ownReaders                                              bool
	begin, renew, end, appendEv, globalBegin, state, settle *goredis.Script
	account, trim                                           *goredis.Script
	// maxBytes bounds the logs of every owner together.
	maxBytes int64
}

var _ store.Background = (*Background)(nil)

// NewBackgroundClient is a Background over a client the caller made (and
// closes); now is the clock (nil: time.Now).
func NewBackgroundClient(ctx context.Context, rdb goredis.UniversalClient, now func() time.Time, opts ...Option) (*Background, error) {
	c, err := newConn(ctx, rdb, now, opts)
	if err != nil {
		return nil, err
	}
	maxBytes := apply(opts).bgBytes
	if maxBytes <= 0 {
		maxBytes = store.BackgroundAllBytes
	}
	return &Background{
		conn:        c,
		maxBytes:    maxBytes,
		account:     goredis.NewScript("#!lua flags=allow-oom\n" + bgAccountScript),
		trim:        goredis.NewScript("#!lua flags=allow-oom\n" + bgTrimScript),
		readers:     rdb,
		begin:       goredis.NewScript(bgBeginScript),
		renew:       goredis.NewScript(bgRenewScript),
		end:         goredis.NewScript("#!lua flags=allow-oom\n" + bgEndScript),
		appendEv:    goredis.NewScript(bgAppendScript),
		globalBegin: goredis.NewScript(bgGlobalBeginScript),
		state:       goredis.NewScript(bgStateScript),
		settle:      goredis.NewScript("#!lua flags=allow-oom\n" + bgSettleScript),
	}, nil
}

// NewBackground connects to the Redis at url (as New does), with a
// second pool of store.BackgroundReaders connections (WithReaders) for
// the reads that wait.
func NewBackground(ctx context.Context, url string, now func() time.Time, opts ...Option) (*Background, error) {
	b, err := dial(ctx, url, func(ctx context.Context, rdb goredis.UniversalClient) (*Background, error) {
		return NewBackgroundClient(ctx, rdb, now, opts...)
	})
	if err != nil {
		return nil, err
	}
	o, err := goredis.ParseURL(url)
	if err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("store/redis: url: %w", err)
	}
	o.PoolSize, o.MinIdleConns, o.MaxIdleConns = store.BackgroundReaders, 0, 8
	if n := apply(opts).readers; n > 0 {
		o.PoolSize = n
	}
	// A reader finds no connection free only past the API's bound on
	// streams: it gives up soon rather than queue.
	o.PoolTimeout = time.Second
	b.readers, b.ownReaders = goredis.NewClient(o), true
	return b, nil
}

// Close implements io.Closer: the pools the store made are closed.
func (b *Background) Close() error {
	err := b.conn.Close()
	if b.ownReaders {
		err = errors.Join(err, b.readers.Close())
	}
	return err
}

// bgNow is Redis' clock in Unix ms, as the scripts read it: the one
// clock of every replica.
const bgNow = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// KEYS: 1 hash, 2 stream, 3 owner zset. ARGV: 1 (unused), 2 per owner, 3
// ttl ms, 4 keep ms, 5 id.
const bgBeginScript = bgNow + `
local per, ttl, keep, id = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
if redis.call('EXISTS', KEYS[1]) == 1 then return 'exists' end
if per > 0 and redis.call('ZCARD', KEYS[3]) >= per then return 'quota' end
local exp = now + ttl
redis.call('HSET', KEYS[1], 'exp', exp, 'cancel', 0, 'n', 0, 'bytes', 0, 'keep', keep)
redis.call('PEXPIRE', KEYS[1], ttl + keep)
redis.call('ZADD', KEYS[3], exp, id)
return 'ok'
`

// KEYS: 1 the server-wide zset. ARGV: 1 (unused), 2 total, 3 ttl ms, 4
// member.
const bgGlobalBeginScript = bgNow + `
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if tonumber(ARGV[2]) > 0 and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 'quota' end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[4])
return 'ok'
`

// KEYS: 1 hash. ARGV: 1 status. The first status set wins (field
// settled); returns the winner, or false for no run.
const bgSettleScript = `
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local won = redis.call('HGET', KEYS[1], 'settled')
if won then return won end
redis.call('HSET', KEYS[1], 'settled', ARGV[1])
return ARGV[1]
`

// KEYS: 1 hash. Returns {exists, running, cancel, trimmed}.
const bgStateScript = bgNow + `
local v = redis.call('HMGET', KEYS[1], 'exp', 'cancel', 'trimmed')
if not v[1] then return {0, 0, 0, 0} end
local running = 0
if tonumber(v[1]) > now then running = 1 end
local cancel = 0
if v[2] == '1' then cancel = 1 end
local trimmed = 0
if v[3] == '1' then trimmed = 1 end
return {1, running, cancel, trimmed}
`

// KEYS: 1 bglogs, 2 bglogsz, 3 bglogbytes. ARGV: 1 member, 2 bytes to
// add (negative: give back), 3 life ms (its keys expire then; -1: as
// before), 4 "1": the run ended, 5 the bound, 6 "1": a new log. Returns
// {status, forgotten members...}; status "ok" or "quota" (nothing added).
const bgAccountScript = bgNow + `
local member, delta, life, ended, max = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4] == '1', tonumber(ARGV[5])
local total = tonumber(redis.call('GET', KEYS[3]) or '0')
local function parse(v)
  local b, e = string.match(v, '^(-?%d+):(%d)$')
  return tonumber(b), e == '1'
end
local function forget(m)
  local v = redis.call('HGET', KEYS[2], m)
  if v then total = total - parse(v) redis.call('HDEL', KEYS[2], m) end
  redis.call('ZREM', KEYS[1], m)
end
-- Logs whose keys expired are no longer held.
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 256)) do forget(m) end
local cur = redis.call('HGET', KEYS[2], member)
if not cur and ARGV[6] ~= '1' then
  redis.call('SET', KEYS[3], total)
  return {'ok'}
end
local bytes, wasEnded = 0, false
if cur then bytes, wasEnded = parse(cur) end
local out = {'ok'}
if delta > 0 and total + delta > max then
  -- The logs of runs that ended longest ago go first (the lowest expiry
  -- among ended ones); running logs stay.
  local start = 0
  while total + delta > max do
    local batch = redis.call('ZRANGE', KEYS[1], start, start + 63)
    if #batch == 0 then break end
    for _, m in ipairs(batch) do
      local v = redis.call('HGET', KEYS[2], m)
      local e = false
      if v then local _, ee = parse(v) e = ee end
      if m ~= member and e then
        forget(m)
        out[#out + 1] = m
        if total + delta <= max then break end
      else
        start = start + 1
      end
    end
  end
  if total + delta > max then
    out[1] = 'quota'
    redis.call('SET', KEYS[3], total)
    return out
  end
end
if ended then wasEnded = true end
local flag = '0'
if wasEnded then flag = '1' end
redis.call('HSET', KEYS[2], member, string.format('%.0f', math.max(bytes + delta, 0)) .. ':' .. flag)
if life >= 0 then redis.call('ZADD', KEYS[1], now + life, member) end
total = math.max(total + delta, 0)
redis.call('SET', KEYS[3], string.format('%.0f', total))
return out
`

// KEYS: 1 hash, 2 stream: a log the bound forgot.
const bgTrimScript = `
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'trimmed', 1) end
redis.call('DEL', KEYS[2])
return 1
`

// KEYS: 1 hash, 2 stream, 3 owner zset. ARGV: 1 (unused), 2 ttl ms, 3
// id. Returns {the new deadline, keep ms}, {0, 0} when not running.
const bgRenewScript = bgNow + `
local ttl = tonumber(ARGV[2])
local exp = tonumber(redis.call('HGET', KEYS[1], 'exp') or '0')
if exp <= now then return {0, 0} end
local keep = tonumber(redis.call('HGET', KEYS[1], 'keep'))
redis.call('HSET', KEYS[1], 'exp', now + ttl)
redis.call('PEXPIRE', KEYS[1], ttl + keep)
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('PEXPIRE', KEYS[2], ttl + keep) end
redis.call('ZADD', KEYS[3], now + ttl, ARGV[3])
return {now + ttl, keep}
`

// KEYS: 1 hash, 2 stream, 3 owner zset. ARGV: 1 id. Returns keep (ms),
// -1 for no run.
const bgEndScript = `
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local keep = tonumber(redis.call('HGET', KEYS[1], 'keep'))
if tonumber(redis.call('HGET', KEYS[1], 'exp')) ~= 0 then
  -- The end, as an entry after the last event, wakes the readers
  -- blocked on the stream.
  redis.call('XADD', KEYS[2], '0-' .. (tonumber(redis.call('HGET', KEYS[1], 'n')) + 1), 'e', 1)
end
redis.call('HSET', KEYS[1], 'exp', 0)
redis.call('PEXPIRE', KEYS[1], keep)
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('PEXPIRE', KEYS[2], keep) end
redis.call('ZREM', KEYS[3], ARGV[1])
return keep
`

// KEYS: 1 hash, 2 stream. ARGV: 1 (unused), 2 seq, 3 event, 4 max bytes.
const bgAppendScript = bgNow + `
local seq, max = tonumber(ARGV[2]), tonumber(ARGV[4])
if redis.call('EXISTS', KEYS[1]) == 0 then return 'missing' end
local exp = tonumber(redis.call('HGET', KEYS[1], 'exp'))
if exp <= now then return 'ended' end
local n = tonumber(redis.call('HGET', KEYS[1], 'n'))
if redis.call('HGET', KEYS[1], 'full') == '1' then return 'quota' end
if seq ~= n then return 'order:' .. n end
local bytes = tonumber(redis.call('HGET', KEYS[1], 'bytes')) + string.len(ARGV[3])
if bytes > max then redis.call('HSET', KEYS[1], 'full', 1) return 'quota' end
redis.call('XADD', KEYS[2], '0-' .. (seq + 1), 'd', ARGV[3])
redis.call('HSET', KEYS[1], 'n', n + 1, 'bytes', bytes)
redis.call('PEXPIRE', KEYS[2], redis.call('PTTL', KEYS[1]))
return 'ok'
`

func (b *Background) keys(owner, id string) []string {
	kp := b.ownerPrefix(owner)
	return []string{kp + "bg:" + id, kp + "bgev:" + id, kp + "bgrun"}
}

func (b *Background) ownerPrefix(owner string) string { return ownerPrefix(b.prefix, owner) }

// Begin implements store.Background.
func (b *Background) Begin(ctx context.Context, owner, id string, perOwner, total int, ttl, keep time.Duration) error {
	member := b.ownerPrefix(owner) + id
	all := b.prefix + "bgall"
	res, err := b.globalBegin.Run(ctx, b.rdb, []string{all}, 0, total, ms(ttl), member).Text()
	if err != nil {
		return b.wrap(ctx, err)
	}
	if res == "quota" {
		return &store.QuotaError{Limit: store.LimitBackgroundTotal, Max: int64(total)}
	}
	res, err = b.begin.Run(ctx, b.rdb, b.keys(owner, id), 0, perOwner, ms(ttl), ms(keep), id).Text()
	if err == nil && res == "ok" {
		// Its log's entry in the server-wide bound, or no run: a log
		// outside the account would escape the bound.
		if _, err := b.accountLog(ctx, member, 0, ttl+keep, false, true); err != nil {
			_ = b.End(context.WithoutCancel(ctx), owner, id)
			return err
		}
		return nil
	}
	_ = b.rdb.ZRem(ctx, all, member).Err()
	switch {
	case err != nil:
		return b.wrap(ctx, err)
	case res == "quota":
		return &store.QuotaError{Limit: store.LimitBackgroundPerOwner, Max: int64(perOwner)}
	}
	return fmt.Errorf("background %s: already begun", id)
}

// Renew implements store.Background.
func (b *Background) Renew(ctx context.Context, owner, id string, ttl time.Duration) (bool, error) {
	v, err := b.renew.Run(ctx, b.rdb, b.keys(owner, id), 0, ms(ttl), id).Int64Slice()
	if err != nil {
		return false, b.wrap(ctx, err)
	}
	if len(v) != 2 {
		return false, fmt.Errorf("store/redis: background %s: unexpected renewal %v", id, v)
	}
	exp, keep := v[0], v[1]
	if exp != 0 {
		member := b.ownerPrefix(owner) + id
		_ = b.rdb.ZAdd(ctx, b.prefix+"bgall", goredis.Z{Score: float64(exp), Member: member}).Err()
		// Its keys live ttl+keep more: so does its entry in the bound.
		_, _ = b.accountLog(ctx, member, 0, ttl+time.Duration(keep)*time.Millisecond, false, false)
	}
	return exp != 0, nil
}

// End implements store.Background.
func (b *Background) End(ctx context.Context, owner, id string) error {
	keep, err := b.end.Run(ctx, b.rdb, b.keys(owner, id), id).Int64()
	if err != nil {
		return b.wrap(ctx, err)
	}
	member := b.ownerPrefix(owner) + id
	if keep >= 0 {
		if _, err := b.accountLog(ctx, member, 0, time.Duration(keep)*time.Millisecond, true, false); err != nil {
			return err
		}
	}
	return b.wrap(ctx, b.rdb.ZRem(ctx, b.prefix+"bgall", member).Err())
}

// accountLog changes the log member's entry in the server-wide bound
// (bgAccountScript): delta bytes, its keys' life from now (-1: as
// before), ended, fresh (a new log). ok is false when delta does not fit
// (nothing added). The logs it forgot to make room are trimmed here.
func (b *Background) accountLog(ctx context.Context, member string, delta int64, life time.Duration, ended, fresh bool) (ok bool, err error) {
	lifeMS := int64(-1)
	if life >= 0 {
		lifeMS = ms(life)
	}
	flag := func(v bool) string {
		if v {
			return "1"
		}
		return "0"
	}
	all := []string{b.prefix + "bglogs", b.prefix + "bglogsz", b.prefix + "bglogbytes"}
	out, err := b.account.Run(ctx, b.rdb, all, member, delta, lifeMS, flag(ended), b.maxBytes, flag(fresh)).StringSlice()
	if err != nil {
		return false, b.wrap(ctx, err)
	}
	if len(out) == 0 {
		return false, fmt.Errorf("store/redis: background %s: unexpected accounting %v", member, out)
	}
	for _, m := range out[1:] {
		// Accounted as forgotten already: a trim that fails leaves
		// its keys until their TTL.
		i := strings.LastIndex(m, "}:")
		if i < 0 {
			continue
		}
		kp, id := m[:i+2], m[i+2:]
		_ = b.trim.Run(ctx, b.rdb, []string{kp + "bg:" + id, kp + "bgev:" + id}).Err()
	}
	return out[0] == "ok", nil
}

// readState reads the run's hash: exists, running, cancel and trimmed.
func (b *Background) readState(ctx context.Context, owner, id string) (exists, running, cancel bool, err error) {
	exists, running, cancel, _, err = b.readFullState(ctx, owner, id)
	return exists, running, cancel, err
}

func (b *Background) readFullState(ctx context.Context, owner, id string) (exists, running, cancel, trimmed bool, err error) {
	v, err := b.state.Run(ctx, b.rdb, b.keys(owner, id)[:1]).Int64Slice()
	if err != nil {
		return false, false, false, false, b.wrap(ctx, err)
	}
	if len(v) != 4 {
		return false, false, false, false, fmt.Errorf("store/redis: background %s: unexpected state %v", id, v)
	}
	return v[0] == 1, v[1] == 1, v[2] == 1, v[3] == 1, nil
}

// Running implements store.Background.
func (b *Background) Running(ctx context.Context, owner, id string) (bool, error) {
	_, running, _, err := b.readState(ctx, owner, id)
	return running, err
}

// AppendEvent implements store.Background.
func (b *Background) AppendEvent(ctx context.Context, owner, id string, seq int64, event []byte) error {
	k := b.keys(owner, id)
	member := b.ownerPrefix(owner) + id
	// The bytes are reserved in the server-wide bound first, given back
	// if the log refuses them.
	fits, err := b.accountLog(ctx, member, int64(len(event)), -1, false, false)
	if err != nil {
		return err
	}
	if !fits {
		return &store.QuotaError{Limit: store.LimitBackgroundEvents, Max: b.maxBytes}
	}
	res, err := b.appendEv.Run(ctx, b.rdb, k[:2], 0, seq, event, store.BackgroundEventBytes).Text()
	if err != nil || res != "ok" {
		_, _ = b.accountLog(context.WithoutCancel(ctx), member, -int64(len(event)), -1, false, false)
	}
	switch {
	case err != nil:
		return b.wrap(ctx, err)
	case res == "ok":
		return nil
	case res == "missing":
		return fmt.Errorf("background %s: %w", id, store.ErrNotFound)
	case res == "quota":
		return &store.QuotaError{Limit: store.LimitBackgroundEvents, Max: store.BackgroundEventBytes}
	}
	return fmt.Errorf("background %s: event %d refused: %s", id, seq, res)
}

// Events implements store.Background.
func (b *Background) Events(ctx context.Context, owner, id string, after int64, wait time.Duration) ([]store.Event, bool, error) {
	k := b.keys(owner, id)
	from := max(after+1, 0)
	// read turns entries into events; end reports the end's entry.
	read := func(msgs []goredis.XMessage) (out []store.Event, end bool) {
		for _, m := range msgs {
			d, ok := m.Values["d"].(string)
			if !ok {
				return out, true
			}
			out = append(out, store.Event{Seq: entrySeq(m.ID) - 1, Data: []byte(d)})
		}
		return out, false
	}
	// The state first: an event appended after it is read below, and the
	// end is then said by the next call.
	exists, running, _, trimmed, err := b.readFullState(ctx, owner, id)
	if err != nil {
		return nil, false, err
	}
	if !exists {
		return nil, false, fmt.Errorf("background %s: %w", id, store.ErrNotFound)
	}
	if trimmed {
		return nil, false, fmt.Errorf("background %s: %w", id, store.ErrEventsTrimmed)
	}
	// A page, and one entry more: the end's, when it follows the page.
	msgs, err := b.rdb.XRangeN(ctx, k[1], "0-"+strconv.FormatInt(from+1, 10), "+", store.BackgroundEventsPage+1).Result()
	if err != nil {
		return nil, false, b.wrap(ctx, err)
	}
	if len(msgs) > 0 || !running {
		more, endNext := len(msgs) > store.BackgroundEventsPage, false
		if more {
			_, isEvent := msgs[store.BackgroundEventsPage].Values["d"]
			more, endNext = isEvent, !isEvent
			msgs = msgs[:store.BackgroundEventsPage]
		}
		ev, end := read(msgs)
		return ev, end || endNext || (!running && !more), nil
	}
	if wait < time.Millisecond {
		return nil, false, nil
	}
	wait = min(wait, store.BackgroundWait)
	streams, err := b.readers.XRead(ctx, &goredis.XReadArgs{Streams: []string{k[1], "0-" + strconv.FormatInt(from, 10)}, Count: store.BackgroundEventsPage, Block: wait}).Result()
	switch {
	case errors.Is(err, goredis.Nil):
		return nil, false, nil
	case err != nil:
		return nil, false, b.wrap(ctx, err)
	}
	var out []store.Event
	var end bool
	for _, s := range streams {
		ev, e := read(s.Messages)
		out, end = append(out, ev...), end || e
	}
	return out, end, nil
}

// entrySeq is the sequence part of a stream entry id "ms-seq".
func entrySeq(id string) int64 {
	_, seq, _ := strings.Cut(id, "-")
	n, _ := strconv.ParseInt(seq, 10, 64)
	return n
}

// Cancel implements store.Background.
func (b *Background) Cancel(ctx context.Context, owner, id string) error {
	exists, _, _, err := b.readState(ctx, owner, id)
	if err != nil {
		return err
	}
	if !exists {
		return fmt.Errorf("background %s: %w", id, store.ErrNotFound)
	}
	return b.wrap(ctx, b.rdb.HSet(ctx, b.keys(owner, id)[0], "cancel", 1).Err())
}

// Settle implements store.Background.
func (b *Background) Settle(ctx context.Context, owner, id, status string) (string, error) {
	won, err := b.settle.Run(ctx, b.rdb, b.keys(owner, id)[:1], status).Text()
	switch {
	case errors.Is(err, goredis.Nil):
		return "", fmt.Errorf("background %s: %w", id, store.ErrNotFound)
	case err != nil:
		return "", b.wrap(ctx, err)
	}
	return won, nil
}

// Cancelled implements store.Background.
func (b *Background) Cancelled(ctx context.Context, owner, id string) (bool, error) {
	_, _, cancel, err := b.readState(ctx, owner, id)
	return cancel, err
}

func (b *Background) wrap(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	return wrap(ctx, b.rdb, err)
}
