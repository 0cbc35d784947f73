package memory

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/codeinterp/codeinterp/internal/store"
)

// Background is the in-process store.Background: right for one replica
// (another replica neither sees its events nor can cancel its runs). One
// mutex guards it; a reader waiting for events waits on a channel that
// every append and End closes and replaces. A run that stops being renewed
// counts as ended (its slot is free, its log finished); a log is forgotten
// keep after it ended — a run is settled when it is asked for, all of them
// on Begin — so nothing needs closing.
// All logs together hold at most MaxBackgroundBytes: past it the logs of
// runs that ended longest ago are forgotten first (their streams can no
// longer be resumed; their records stay in Responses).
type Background struct {
	now func() time.Time

	mu       sync.Mutex
	runs     map[bgKey]*bgRun
	ended    []bgKey // ended runs, in the order they ended
	bytes    int64   // of every log held
	maxBytes int64   // MaxBackgroundBytes (tests lower it)
}

// MaxBackgroundBytes bounds the events one in-process Background holds.
const MaxBackgroundBytes = store.BackgroundAllBytes

var _ store.Background = (*Background)(nil)

type bgKey struct{ owner, id string }

type bgRun struct {
	events    []store.Event
	bytes     int64
	cancel    bool
	ended     bool
	expires   time.Time // running until then, unless ended
	keep      time.Duration
	forgetAt  time.Time     // set once ended (or lapsed)
	changed   chan struct{} // closed on every append and on End
	truncated bool          // an append was refused: the log stops there
	trimmed   bool          // its events were forgotten by the bytes bound
	settled   string        // Settle's winner, "" before
}

// NewBackground returns an empty Background; now is the clock (nil:
// time.Now).
func NewBackground(now func() time.Time) *Background {
	if now == nil {
		now = time.Now
	}
	return &Background{now: now, runs: map[bgKey]*bgRun{}, maxBytes: MaxBackgroundBytes}
}

// sweepLocked settles every run that lapsed, forgets logs past their keep
// and, past the bytes bound, the oldest ended ones: on Begin (which counts
// every run anyway) and on an append past the bound.
func (b *Background) sweepLocked(now time.Time) {
	for k, r := range b.runs {
		if !r.ended && now.After(r.expires) {
			b.endLocked(k, r, now)
		}
		if r.ended && now.After(r.forgetAt) {
			b.bytes -= r.bytes
			delete(b.runs, k)
		}
	}
	// Past the bound, the logs that ended longest ago go first.
	for b.bytes > b.maxBytes && len(b.ended) > 0 {
		k := b.ended[0]
		b.ended = b.ended[1:]
		if r, ok := b.runs[k]; ok && r.ended {
			// Its record stays until its keep is over: a reader is told
			// the events are gone, not that there never were any.
			b.bytes -= r.bytes
			r.bytes, r.events, r.trimmed = 0, nil, true
		}
	}
	if len(b.ended) > 2*len(b.runs)+64 {
		// Drop the keys of runs already forgotten.
		kept := b.ended[:0]
		for _, k := range b.ended {
			if r, ok := b.runs[k]; ok && r.ended && !r.trimmed {
				kept = append(kept, k)
			}
		}
		b.ended = kept
	}
}

func (b *Background) endLocked(k bgKey, r *bgRun, now time.Time) {
	if r.ended {
		return
	}
	b.ended = append(b.ended, k)
	r.ended = true
	r.forgetAt = now.Add(r.keep)
	close(r.changed)
	r.changed = make(chan struct{})
}

// Begin implements store.Background.
func (b *Background) Begin(_ context.Context, owner, id string, perOwner, total int, ttl, keep time.Duration) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	b.sweepLocked(now)
	k := bgKey{owner, id}
	if _, ok := b.runs[k]; ok {
		return fmt.Errorf("background %s: already begun", id)
	}
	mine, all := 0, 0
	for k2, r := range b.runs {
		if r.ended {
			continue
		}
		all++
		if k2.owner == owner {
			mine++
		}
	}
	switch {
	case total > 0 && all >= total:
		return &store.QuotaError{Limit: store.LimitBackgroundTotal, Max: int64(total)}
	case perOwner > 0 && mine >= perOwner:
		return &store.QuotaError{Limit: store.LimitBackgroundPerOwner, Max: int64(perOwner)}
	}
	b.runs[k] = &bgRun{expires: now.Add(ttl), keep: keep, changed: make(chan struct{})}
	return nil
}

// run returns the (owner, id) run, nil when there is none, settling it
// alone (a lapse, its keep over): the calls a run's watchers make often
// (Cancelled, Renew, Events) cost one lookup, not a sweep of every run.
func (b *Background) run(owner, id string) *bgRun {
	k := bgKey{owner, id}
	r := b.runs[k]
	if r == nil {
		return nil
	}
	now := b.now()
	if !r.ended && now.After(r.expires) {
		b.endLocked(k, r, now)
	}
	if r.ended && now.After(r.forgetAt) {
		b.bytes -= r.bytes
		delete(b.runs, k)
		return nil
	}
	return r
}

// Renew implements store.Background.
func (b *Background) Renew(_ context.Context, owner, id string, ttl time.Duration) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.run(owner, id)
	if r == nil || r.ended {
		return false, nil
	}
	r.expires = b.now().Add(ttl)
	return true, nil
}

// End implements store.Background.
func (b *Background) End(_ context.Context, owner, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r := b.run(owner, id); r != nil {
		b.endLocked(bgKey{owner, id}, r, b.now())
	}
	return nil
}

// Running implements store.Background.
func (b *Background) Running(_ context.Context, owner, id string) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.run(owner, id)
	return r != nil && !r.ended, nil
}

// AppendEvent implements store.Background.
func (b *Background) AppendEvent(_ context.Context, owner, id string, seq int64, event []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.run(owner, id)
	switch {
	case r == nil:
		return fmt.Errorf("background %s: %w", id, store.ErrNotFound)
	case r.ended:
		return fmt.Errorf("background %s: ended", id)
	case r.truncated || r.bytes+int64(len(event)) > store.BackgroundEventBytes:
		r.truncated = true
		return &store.QuotaError{Limit: store.LimitBackgroundEvents, Max: store.BackgroundEventBytes}
	case seq != int64(len(r.events)):
		return fmt.Errorf("background %s: event %d out of order (next is %d)", id, seq, len(r.events))
	}
	r.events = append(r.events, store.Event{Seq: seq, Data: clone(event)})
	r.bytes += int64(len(event))
	b.bytes += int64(len(event))
	if b.bytes > b.maxBytes {
		b.sweepLocked(b.now())
	}
	close(r.changed)
	r.changed = make(chan struct{})
	return nil
}

// Events implements store.Background.
func (b *Background) Events(ctx context.Context, owner, id string, after int64, wait time.Duration) ([]store.Event, bool, error) {
	deadline := time.NewTimer(min(wait, store.BackgroundWait))
	defer deadline.Stop()
	for {
		b.mu.Lock()
		r := b.run(owner, id)
		if r == nil {
			b.mu.Unlock()
			return nil, false, fmt.Errorf("background %s: %w", id, store.ErrNotFound)
		}
		if r.trimmed {
			b.mu.Unlock()
			return nil, false, fmt.Errorf("background %s: %w", id, store.ErrEventsTrimmed)
		}
		from := max(after+1, 0)
		if from < int64(len(r.events)) {
			to := min(from+store.BackgroundEventsPage, int64(len(r.events)))
			out := append([]store.Event(nil), r.events[from:to]...)
			done := r.ended && to == int64(len(r.events))
			b.mu.Unlock()
			return out, done, nil
		}
		if r.ended {
			b.mu.Unlock()
			return nil, true, nil
		}
		changed := r.changed
		b.mu.Unlock()
		select {
		case <-changed:
		case <-deadline.C:
			return nil, false, nil
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
}

// Cancel implements store.Background.
func (b *Background) Cancel(_ context.Context, owner, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.run(owner, id)
	if r == nil {
		return fmt.Errorf("background %s: %w", id, store.ErrNotFound)
	}
	r.cancel = true
	return nil
}

// Cancelled implements store.Background.
func (b *Background) Cancelled(_ context.Context, owner, id string) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.run(owner, id)
	return r != nil && r.cancel, nil
}

// Settle implements store.Background.
func (b *Background) Settle(_ context.Context, owner, id, status string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.run(owner, id)
	if r == nil {
		return "", fmt.Errorf("background %s: %w", id, store.ErrNotFound)
	}
	if r.settled == "" {
		r.settled = status
	}
	return r.settled, nil
}

// Close implements io.Closer; there is nothing to release.
func (b *Background) Close() error { return nil }
