package redislease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/codeinterp/codeinterp/internal/cluster"
)

// Leases implements cluster.Leases over a Redis.
type Leases struct {
	rdb    goredis.UniversalClient
	own    bool
	prefix string
}

// DefaultPrefix is the keys' prefix: codeinterp:lease:<key>, and
// codeinterp:lease-seq for the tokens.
const DefaultPrefix = "codeinterp:"

// Dial connects to the Redis at url (redis:// or rediss://) and checks it
// answers.
func Dial(ctx context.Context, url string) (*Leases, error) {
	o, err := goredis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redislease: url: %w", err)
	}
	rdb := goredis.NewClient(o)
	l, err := New(ctx, rdb, DefaultPrefix)
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	l.own = true
	return l, nil
}

// New returns the leases over rdb, whose keys start with prefix.
func New(ctx context.Context, rdb goredis.UniversalClient, prefix string) (*Leases, error) {
	if err := rdb.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("redislease: ping: %w", err)
	}
	return &Leases{rdb: rdb, prefix: prefix}, nil
}

// Close closes the client Dial made.
func (l *Leases) Close() error {
	if l.own {
		return l.rdb.Close()
	}
	return nil
}

func (l *Leases) key(k string) string { return l.prefix + "lease:" + k }
func (l *Leases) seq() string         { return l.prefix + "lease-seq" }

// The scripts run when Redis is full (allow-oom): deploy/ runs Redis
// with maxmemory and noeviction, which refuses writes once full, and a
// lease that cannot be taken or renewed stops every run of its container
// (fencing fails closed). A lease is a few hundred bytes; what a full
// Redis holds beyond maxmemory for them is bounded by the containers in
// use. The flags need Redis 7.

// take: KEYS lease, seq; ARGV holder, addr, prev token, ttl ms. The
// counter never expires, and a counter the store lost (a restart without
// persistence, a flush) starts again from the store's clock in
// microseconds: tokens only grow, across the store's restarts too (as
// long as fewer than a million leases a second are taken, and the store's
// clock does not go back).
var take = goredis.NewScript(`#!lua flags=allow-oom
local cur = redis.call('HMGET', KEYS[1], 'token', 'holder', 'addr')
if cur[1] then
  if cur[2] == ARGV[1] then
    redis.call('HSET', KEYS[1], 'addr', ARGV[2])
    redis.call('PEXPIRE', KEYS[1], ARGV[4])
    return {cur[1], cur[2], ARGV[2]}
  end
  if cur[1] ~= ARGV[3] then
    return {cur[1], cur[2], cur[3]}
  end
end
if redis.call('EXISTS', KEYS[2]) == 0 then
  local now = redis.call('TIME')
  redis.call('SET', KEYS[2], now[1] .. string.format('%06d', tonumber(now[2])))
end
redis.call('INCR', KEYS[2])
-- As a string: Lua's numbers are doubles, which print in exponent form.
local t = redis.call('GET', KEYS[2])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'token', t, 'holder', ARGV[1], 'addr', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {t, ARGV[1], ARGV[2]}
`)

// renew: KEYS lease; ARGV holder, token, ttl ms.
var renew = goredis.NewScript(`#!lua flags=allow-oom
local cur = redis.call('HMGET', KEYS[1], 'token', 'holder', 'addr')
if not cur[1] then
  return {}
end
if cur[1] == ARGV[2] and cur[2] == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return {cur[1], cur[2], cur[3]}
`)

// release: KEYS lease; ARGV holder, token.
var release = goredis.NewScript(`#!lua flags=allow-oom
local cur = redis.call('HMGET', KEYS[1], 'token', 'holder')
if cur[1] == ARGV[2] and cur[2] == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// Take implements cluster.Leases.
func (l *Leases) Take(ctx context.Context, key string, self cluster.Lease, prev uint64, ttl time.Duration) (cluster.Lease, error) {
	if self.Holder == "" {
		return cluster.Lease{}, errors.New("redislease: take: no holder")
	}
	v, err := take.Run(ctx, l.rdb, []string{l.key(key), l.seq()}, self.Holder, self.Addr, strconv.FormatUint(prev, 10), max(ttl.Milliseconds(), 1)).StringSlice()
	if err != nil {
		return cluster.Lease{}, fmt.Errorf("redislease: take %s: %w", key, err)
	}
	return parse(v)
}

// Renew implements cluster.Leases.
func (l *Leases) Renew(ctx context.Context, key, holder string, token uint64, ttl time.Duration) (cluster.Lease, bool, error) {
	v, err := renew.Run(ctx, l.rdb, []string{l.key(key)}, holder, strconv.FormatUint(token, 10), max(ttl.Milliseconds(), 1)).StringSlice()
	if err != nil {
		return cluster.Lease{}, false, fmt.Errorf("redislease: renew %s: %w", key, err)
	}
	if len(v) == 0 {
		return cluster.Lease{}, false, nil
	}
	le, err := parse(v)
	return le, err == nil, err
}

// Get implements cluster.Leases.
func (l *Leases) Get(ctx context.Context, key string) (cluster.Lease, bool, error) {
	v, err := l.rdb.HMGet(ctx, l.key(key), "token", "holder", "addr").Result()
	if err != nil {
		return cluster.Lease{}, false, fmt.Errorf("redislease: get %s: %w", key, err)
	}
	if v[0] == nil {
		return cluster.Lease{}, false, nil
	}
	s := make([]string, 3)
	for i, x := range v {
		s[i], _ = x.(string)
	}
	le, err := parse(s)
	return le, err == nil, err
}

// Release implements cluster.Leases.
func (l *Leases) Release(ctx context.Context, key, holder string, token uint64) error {
	if err := release.Run(ctx, l.rdb, []string{l.key(key)}, holder, strconv.FormatUint(token, 10)).Err(); err != nil {
		return fmt.Errorf("redislease: release %s: %w", key, err)
	}
	return nil
}

func parse(v []string) (cluster.Lease, error) {
	if len(v) != 3 {
		return cluster.Lease{}, fmt.Errorf("redislease: a lease of %d fields", len(v))
	}
	t, err := strconv.ParseUint(v[0], 10, 64)
	if err != nil {
		return cluster.Lease{}, fmt.Errorf("redislease: token %q: %w", v[0], err)
	}
	return cluster.Lease{Token: t, Holder: v[1], Addr: v[2]}, nil
}
