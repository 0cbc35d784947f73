package memory_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/memory"
	"github.com/codeinterp/codeinterp/internal/store/storetest"
)

func TestResponsesConformance(t *testing.T) {
	storetest.RunResponses(t, func(t *testing.T, l store.ResponseLimits, now func() time.Time) store.Responses {
		return memory.NewResponses(l, now)
	})
}

// sized is owner's response id of n bytes (Response.Size), created at
// created, with one item (its id counted in n).
func sized(owner, id string, n int, created time.Time) store.Response {
	item := "msg_" + id
	return store.Response{
		ID: id, Owner: owner, CreatedAt: created,
		Object: json.RawMessage(`"` + strings.Repeat("x", n-len(item)-2) + `"`),
		Items:  []store.ResponseItem{{ID: item}},
	}
}

type responsesEnv struct {
	t     *testing.T
	s     *memory.Responses
	clock *storetest.Clock
	ctx   context.Context
}

func newResponsesEnv(t *testing.T, l store.ResponseLimits) *responsesEnv {
	c := storetest.NewClock(storetest.Start())
	return &responsesEnv{t: t, s: memory.NewResponses(l, c.Now), clock: c, ctx: context.Background()}
}

func (e *responsesEnv) put(r store.Response) {
	e.t.Helper()
	if err := e.s.PutResponse(e.ctx, r); err != nil {
		e.t.Fatalf("PutResponse %s: %v", r.ID, err)
	}
}

// have checks exactly the ids among all are stored (for owner), and
// their items found.
func (e *responsesEnv) have(owner string, all []string, want ...string) {
	e.t.Helper()
	keep := map[string]bool{}
	for _, id := range want {
		keep[id] = true
	}
	for _, id := range all {
		_, err := e.s.GetResponse(e.ctx, owner, id)
		_, ierr := e.s.FindItem(e.ctx, owner, "msg_"+id)
		switch {
		case keep[id] && (err != nil || ierr != nil):
			e.t.Errorf("%s: %v, its item: %v; want it kept", id, err, ierr)
		case !keep[id] && (!errors.Is(err, store.ErrNotFound) || !errors.Is(ierr, store.ErrNotFound)):
			e.t.Errorf("%s: %v, its item: %v; want it forgotten", id, err, ierr)
		}
	}
}

func (e *responsesEnv) usage(count int, bytes int64) {
	e.t.Helper()
	if c, b := e.s.Usage(); c != count || b != bytes {
		e.t.Errorf("Usage() = %d, %d; want %d, %d", c, b, count, bytes)
	}
}

// TestResponsesCountEvictsOldest: at Count, a put forgets the oldest by
// CreatedAt — not the first stored — and ties go by when they were stored;
// a replacement is not a new response, and evicted items go with theirs.
func TestResponsesCountEvictsOldest(t *testing.T) {
	l := store.DefaultResponseLimits()
	l.Count = 3
	e := newResponsesEnv(t, l)
	t0 := e.clock.Now()
	e.put(sized("o_a", "resp_mid", 50, t0.Add(-2*time.Minute)))
	e.put(sized("o_b", "resp_old", 50, t0.Add(-3*time.Minute))) // another owner's counts too
	e.put(sized("o_a", "resp_new", 50, t0))
	e.usage(3, 150)
	e.put(sized("o_a", "resp_mid", 60, t0.Add(-2*time.Minute))) // a replacement: nothing evicted
	e.usage(3, 160)
	e.have("o_b", []string{"resp_old"}, "resp_old")

	e.put(sized("o_a", "resp_4", 50, t0))
	e.have("o_b", []string{"resp_old"})
	e.have("o_a", []string{"resp_mid", "resp_new", "resp_4"}, "resp_mid", "resp_new", "resp_4")
	e.put(sized("o_a", "resp_5", 50, t0))
	e.have("o_a", []string{"resp_mid", "resp_new", "resp_4", "resp_5"}, "resp_new", "resp_4", "resp_5")
	// resp_new, resp_4 and resp_5 share a CreatedAt: the first stored goes.
	e.put(sized("o_a", "resp_6", 50, t0.Add(time.Minute)))
	e.have("o_a", []string{"resp_new", "resp_4", "resp_5", "resp_6"}, "resp_4", "resp_5", "resp_6")
	e.usage(3, 150)
}

// TestResponsesBytesEvictsOldest: at Bytes, a put forgets the oldest until
// the new response fits; one larger than Bytes is refused and forgets
// nothing.
func TestResponsesBytesEvictsOldest(t *testing.T) {
	l := store.DefaultResponseLimits()
	l.Bytes = 250
	e := newResponsesEnv(t, l)
	t0 := e.clock.Now()
	all := []string{"resp_1", "resp_2", "resp_3", "resp_4"}
	e.put(sized("o_a", "resp_1", 100, t0))
	e.put(sized("o_a", "resp_2", 100, t0.Add(time.Second)))
	e.usage(2, 200)
	e.put(sized("o_a", "resp_3", 50, t0.Add(2*time.Second))) // exactly 250: fits
	e.have("o_a", all, "resp_1", "resp_2", "resp_3")
	e.put(sized("o_a", "resp_4", 150, t0.Add(3*time.Second))) // must forget resp_1 and resp_2
	e.have("o_a", all, "resp_3", "resp_4")
	e.usage(2, 200)

	err := e.s.PutResponse(e.ctx, sized("o_a", "resp_huge", 251, t0))
	var q *store.QuotaError
	if !errors.As(err, &q) || q.Limit != store.LimitResponseBytes || q.Max != 250 {
		t.Errorf("a response larger than Bytes: %v; want a QuotaError for %s of 250", err, store.LimitResponseBytes)
	}
	e.have("o_a", append(all, "resp_huge"), "resp_3", "resp_4")
	e.usage(2, 200)
}

// TestResponsesExpiredGoFirst: what has expired is forgotten before a
// put evicts anything live, and frees the totals without a put.
func TestResponsesExpiredGoFirst(t *testing.T) {
	l := store.DefaultResponseLimits()
	l.Count = 2
	l.TTL = time.Hour
	e := newResponsesEnv(t, l)
	t0 := e.clock.Now()
	short := sized("o_a", "resp_short", 40, t0)
	short.ExpiresAt = t0.Add(time.Minute)
	e.put(short)
	e.put(sized("o_a", "resp_long", 40, t0.Add(-time.Second))) // older, but lives longer
	e.clock.Advance(time.Minute)
	// Without forgetting resp_short first, this put would evict resp_long
	// (the oldest).
	e.put(sized("o_a", "resp_next", 40, t0))
	e.have("o_a", []string{"resp_short", "resp_long", "resp_next"}, "resp_long", "resp_next")
	e.usage(2, 80)
	e.clock.Advance(time.Hour)
	e.usage(0, 0)
}

// TestResponsesDeleteFreesTotals: deleting, replacing and expiring keep
// Usage exact, so the bounds hold what is really there.
func TestResponsesDeleteFreesTotals(t *testing.T) {
	e := newResponsesEnv(t, store.DefaultResponseLimits())
	t0 := e.clock.Now()
	for i := range 5 {
		e.put(sized("o_a", fmt.Sprintf("resp_%d", i), 30+i, t0))
	}
	e.usage(5, 30+31+32+33+34)
	if err := e.s.DeleteResponse(e.ctx, "o_a", "resp_2"); err != nil {
		t.Fatal(err)
	}
	e.put(sized("o_a", "resp_4", 12, t0))
	e.usage(4, 30+31+33+12)
	for _, id := range []string{"resp_0", "resp_1", "resp_3", "resp_4"} {
		if err := e.s.DeleteResponse(e.ctx, "o_a", id); err != nil {
			t.Fatal(err)
		}
	}
	e.usage(0, 0)
}
