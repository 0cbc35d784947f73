package memory

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/codeinterp/codeinterp/internal/store"
)

// Usage is the in-process store.Usage: per owner, a map of minute and of
// hour counters; what is older than it is kept for is forgotten on Add.
type Usage struct {
	now func() time.Time

	mu     sync.Mutex
	owners map[string]*ownerUsage
}

var _ store.Usage = (*Usage)(nil)

type ownerUsage struct {
	minutes, hours map[int64]store.UsageDelta // by the granule's start, Unix seconds
}

// NewUsage returns an empty Usage; now is the clock (nil: time.Now).
func NewUsage(now func() time.Time) *Usage {
	if now == nil {
		now = time.Now
	}
	return &Usage{now: now, owners: map[string]*ownerUsage{}}
}

// Close implements io.Closer; there is nothing to release.
func (u *Usage) Close() error { return nil }

func floor(t time.Time, g time.Duration) int64 {
	return t.Unix() / int64(g/time.Second) * int64(g/time.Second)
}

// Add implements store.Usage.
func (u *Usage) Add(_ context.Context, owner string, at time.Time, d store.UsageDelta) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	o := u.owners[owner]
	if o == nil {
		o = &ownerUsage{minutes: map[int64]store.UsageDelta{}, hours: map[int64]store.UsageDelta{}}
		u.owners[owner] = o
	}
	m, h := floor(at, time.Minute), floor(at, time.Hour)
	o.minutes[m] = o.minutes[m].Plus(d)
	o.hours[h] = o.hours[h].Plus(d)
	now := u.now()
	for k := range o.minutes {
		if k < now.Add(-store.UsageMinutesKept).Unix() {
			delete(o.minutes, k)
		}
	}
	for k := range o.hours {
		if k < now.Add(-store.UsageHoursKept).Unix() {
			delete(o.hours, k)
		}
	}
	return nil
}

// Buckets implements store.Usage.
func (u *Usage) Buckets(_ context.Context, owner string, from, to time.Time, width time.Duration) ([]store.UsageBucket, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	o := u.owners[owner]
	if o == nil {
		return nil, nil
	}
	src := o.hours
	if store.UsageGranule(width) == time.Minute {
		src = o.minutes
	}
	sums := map[int64]store.UsageDelta{}
	for k, d := range src {
		b := floor(time.Unix(k, 0), width)
		if b >= from.Unix() && b < to.Unix() {
			sums[b] = sums[b].Plus(d)
		}
	}
	out := make([]store.UsageBucket, 0, len(sums))
	for b, d := range sums {
		out = append(out, store.UsageBucket{Start: time.Unix(b, 0).UTC(), UsageDelta: d})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out, nil
}

// Owners implements store.Usage.
func (u *Usage) Owners(_ context.Context, from, to time.Time) (map[string]store.UsageDelta, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := map[string]store.UsageDelta{}
	for name, o := range u.owners {
		for k, d := range o.hours {
			if k >= from.Unix() && k < to.Unix() {
				out[name] = out[name].Plus(d)
			}
		}
	}
	return out, nil
}
