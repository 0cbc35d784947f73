package redis

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/codeinterp/codeinterp/internal/store"
)

// Usage is the Redis store.Usage, shared by every replica. Keys:
//
//	P{owner}:usage:m:<unix minute start>  hash  s (sessions), s:<memory> (sessions by memory_limit), r (runs), ms (run milliseconds), eb (egress bytes); TTL UsageMinutesKept
//	P{owner}:usage:h:<unix hour start>    hash  the same per hour; TTL UsageHoursKept
//	<prefix>usage:owners                  zset  owners, scored by their last usage (Unix seconds)
//
// An Add is one pipeline of HINCRBYs (atomic per key: replicas adding at
// once lose nothing).
type Usage struct {
	conn
}

var _ store.Usage = (*Usage)(nil)

// NewUsageClient is a Usage over a client the caller made (and closes).
func NewUsageClient(ctx context.Context, rdb goredis.UniversalClient, now func() time.Time, opts ...Option) (*Usage, error) {
	c, err := newConn(ctx, rdb, now, opts)
	if err != nil {
		return nil, err
	}
	return &Usage{conn: c}, nil
}

// NewUsage connects to the Redis at url (as New does).
func NewUsage(ctx context.Context, url string, now func() time.Time, opts ...Option) (*Usage, error) {
	return dial(ctx, url, func(ctx context.Context, rdb goredis.UniversalClient) (*Usage, error) {
		return NewUsageClient(ctx, rdb, now, opts...)
	})
}

func granuleKey(kp, kind string, t time.Time, g time.Duration) string {
	s := int64(g / time.Second)
	return kp + "usage:" + kind + ":" + strconv.FormatInt(t.Unix()/s*s, 10)
}

// Add implements store.Usage.
func (u *Usage) Add(ctx context.Context, owner string, at time.Time, d store.UsageDelta) error {
	kp := ownerPrefix(u.prefix, owner)
	p := u.rdb.TxPipeline()
	for _, g := range []struct {
		kind string
		size time.Duration
		keep time.Duration
	}{{"m", time.Minute, store.UsageMinutesKept}, {"h", time.Hour, store.UsageHoursKept}} {
		k := granuleKey(kp, g.kind, at, g.size)
		if d.Sessions != 0 {
			p.HIncrBy(ctx, k, "s", d.Sessions)
		}
		for tier, n := range d.SessionsByMemory {
			p.HIncrBy(ctx, k, "s:"+tier, n)
		}
		if d.Runs != 0 {
			p.HIncrBy(ctx, k, "r", d.Runs)
		}
		if d.RunMillis != 0 {
			p.HIncrBy(ctx, k, "ms", d.RunMillis)
		}
		if d.EgressBytes != 0 {
			p.HIncrBy(ctx, k, "eb", d.EgressBytes)
		}
		p.Expire(ctx, k, g.keep)
	}
	p.ZAdd(ctx, u.prefix+"usage:owners", goredis.Z{Score: float64(u.now().Unix()), Member: owner})
	_, err := p.Exec(ctx)
	return u.wrapErr(ctx, err)
}

func (u *Usage) wrapErr(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	return wrap(ctx, u.rdb, err)
}

// read sums owner's granules g in [from, to) into buckets of width.
func (u *Usage) read(ctx context.Context, owner string, from, to time.Time, width time.Duration) (map[int64]store.UsageDelta, error) {
	g := store.UsageGranule(width)
	kind := "h"
	if g == time.Minute {
		kind = "m"
	}
	kp := ownerPrefix(u.prefix, owner)
	start := time.Unix(from.Unix()/int64(g/time.Second)*int64(g/time.Second), 0)
	var keys []string
	var starts []int64
	for t := start; t.Before(to); t = t.Add(g) {
		if len(keys) > 50000 {
			return nil, fmt.Errorf("store/redis: usage: the range %s–%s is too long", from, to)
		}
		keys = append(keys, granuleKey(kp, kind, t, g))
		starts = append(starts, t.Unix())
	}
	p := u.rdb.Pipeline()
	cmds := make([]*goredis.MapStringStringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = p.HGetAll(ctx, k)
	}
	if _, err := p.Exec(ctx); err != nil && err != goredis.Nil {
		return nil, u.wrapErr(ctx, err)
	}
	ws := int64(width / time.Second)
	out := map[int64]store.UsageDelta{}
	for i, c := range cmds {
		h := c.Val()
		if len(h) == 0 {
			continue
		}
		var d store.UsageDelta
		for f, v := range h {
			n, _ := strconv.ParseInt(v, 10, 64)
			switch {
			case f == "s":
				d.Sessions = n
			case f == "r":
				d.Runs = n
			case f == "ms":
				d.RunMillis = n
			case f == "eb":
				d.EgressBytes = n
			case strings.HasPrefix(f, "s:"):
				if d.SessionsByMemory == nil {
					d.SessionsByMemory = map[string]int64{}
				}
				d.SessionsByMemory[f[2:]] = n
			}
		}
		b := starts[i] / ws * ws
		if b >= from.Unix() && b < to.Unix() {
			out[b] = out[b].Plus(d)
		}
	}
	return out, nil
}

// Buckets implements store.Usage.
func (u *Usage) Buckets(ctx context.Context, owner string, from, to time.Time, width time.Duration) ([]store.UsageBucket, error) {
	sums, err := u.read(ctx, owner, from, to, width)
	if err != nil {
		return nil, err
	}
	out := make([]store.UsageBucket, 0, len(sums))
	for b, d := range sums {
		out = append(out, store.UsageBucket{Start: time.Unix(b, 0).UTC(), UsageDelta: d})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out, nil
}

// Owners implements store.Usage.
func (u *Usage) Owners(ctx context.Context, from, to time.Time) (map[string]store.UsageDelta, error) {
	owners, err := u.rdb.ZRangeByScore(ctx, u.prefix+"usage:owners", &goredis.ZRangeBy{Min: strconv.FormatInt(from.Unix(), 10), Max: "+inf"}).Result()
	if err != nil {
		return nil, u.wrapErr(ctx, err)
	}
	out := map[string]store.UsageDelta{}
	for _, o := range owners {
		sums, err := u.read(ctx, o, from, to, time.Hour)
		if err != nil {
			return nil, err
		}
		var total store.UsageDelta
		for _, d := range sums {
			total = total.Plus(d)
		}
		if total.Sessions != 0 || total.Runs != 0 || total.EgressBytes != 0 {
			out[o] = total
		}
	}
	return out, nil
}
