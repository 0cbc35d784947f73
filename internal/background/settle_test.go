package background

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/processor"
	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/redis"
	"github.com/codeinterp/codeinterp/internal/store/redis/redistest"
)

// redisStores are the background and response stores of one replica on
// a real Redis.
func redisStores(t *testing.T, url string) (*redis.Background, *redis.Responses) {
	t.Helper()
	ctx := context.Background()
	bs, err := redis.NewBackground(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := redis.NewResponses(ctx, url, store.DefaultResponseLimits(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bs.Close(); _ = rs.Close() })
	return bs, rs
}

// TestCompletionAfterASettledCancel is issue 38 row 5's race on Redis,
// the losing side: a cancel on another replica settled the run
// "cancelled" (its wait for the run's end timed out) just before the
// interceptor stores the completed response. The interceptor's write goes
// through Settle (Settled, as the server wires it): it lost, so the record
// never says completed — not even for a moment before the runner stores
// the winner — and ends cancelled.
func TestCompletionAfterASettledCancel(t *testing.T) {
	ctx := context.Background()
	url := redistest.Start(t)
	bs, raw := redisStores(t, url)
	_, other := redisStores(t, url) // the cancelling replica's
	rs := Settled(raw, bs)
	r, err := New(Config{Store: bs, Responses: rs, Poll: time.Millisecond}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(time.Second)
	for i := range 20 {
		id := fmt.Sprintf("resp_settledfirst%d", i)
		var seen []string
		ex := &fakeExchange{id: id, owner: "o", rs: rs}
		ex.beforeComplete = func() {
			if err := bs.Cancel(ctx, "o", id); err != nil {
				t.Error(err)
			}
			if won, err := bs.Settle(ctx, "o", id, "cancelled"); err != nil || won != "cancelled" {
				t.Errorf("the cancel's settle: %q %v", won, err)
			}
		}
		ex.onComplete = func() {
			rec, err := other.GetResponse(ctx, "o", id)
			if err != nil {
				t.Error(err)
				return
			}
			seen = append(seen, gjson.GetBytes(rec.Object, "status").Str)
		}
		if _, err := r.Start(ctx, processor.Caller{Owner: "o"}, ex, struct {
			fakeUpstream
			processor.StreamUpstream
		}{}, noReservation{}); err != nil {
			t.Fatal(err)
		}
		waitEnded(t, bs, id)
		rec, err := other.GetResponse(ctx, "o", id)
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, gjson.GetBytes(rec.Object, "status").Str)
		for _, s := range seen {
			if s == "completed" {
				t.Fatalf("%s: the record said completed after the cancel settled the run (statuses seen %v)", id, seen)
			}
		}
		if got := seen[len(seen)-1]; got != "cancelled" {
			t.Fatalf("%s: the record ends %q, want cancelled", id, got)
		}
	}
}

// TestCancelRacingCompletionRedis is TestCancelRacingCompletion on Redis,
// two replicas' stores: whatever the moment the cancel lands, the stored
// status is the settled one.
func TestCancelRacingCompletionRedis(t *testing.T) {
	ctx := context.Background()
	url := redistest.Start(t)
	bs, raw := redisStores(t, url)
	obs, _ := redisStores(t, url) // the cancelling replica's
	rs := Settled(raw, bs)
	r, err := New(Config{Store: bs, Responses: rs, Poll: time.Millisecond}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(time.Second)
	wins := map[string]int{}
	for i := range 60 {
		id := fmt.Sprintf("resp_racer%d", i)
		cancel := func() { _ = obs.Cancel(ctx, "o", id) }
		ex := &fakeExchange{id: id, owner: "o", rs: rs, onComplete: func() {}}
		switch i % 3 {
		case 0:
			ex.onComplete = cancel // after the response was stored
		case 1:
			ex.beforeComplete = cancel // as it is being stored
		default:
			ex.beforeComplete = func() { cancel(); _, _ = obs.Settle(ctx, "o", id, "cancelled") }
		}
		if _, err := r.Start(ctx, processor.Caller{Owner: "o"}, ex, struct {
			fakeUpstream
			processor.StreamUpstream
		}{}, noReservation{}); err != nil {
			t.Fatal(err)
		}
		waitEnded(t, bs, id)
		won, err := obs.Settle(ctx, "o", id, "probe")
		if err != nil {
			t.Fatal(err)
		}
		rec, err := raw.GetResponse(ctx, "o", id)
		if err != nil {
			t.Fatal(err)
		}
		if got := gjson.GetBytes(rec.Object, "status").Str; got != won {
			t.Fatalf("%s: stored %q, settled %q", id, got, won)
		}
		wins[won]++
	}
	t.Logf("winners: %v", wins)
}

// TestSettledWrites: Settled passes every write but a background
// response's end that lost to another end.
func TestSettledWrites(t *testing.T) {
	ctx := context.Background()
	bs, raw := redisStores(t, redistest.Start(t))
	rs := Settled(raw, bs)
	put := func(id, obj string) store.Response {
		t.Helper()
		if err := rs.PutResponse(ctx, store.Response{ID: id, Owner: "o", CreatedAt: time.Now(), Object: []byte(obj)}); err != nil {
			t.Fatal(err)
		}
		rec, err := raw.GetResponse(ctx, "o", id)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Fatal(err)
		}
		return rec
	}
	status := func(rec store.Response) string { return gjson.GetBytes(rec.Object, "status").Str }
	if rec := put("resp_plain", `{"status":"completed"}`); status(rec) != "completed" {
		t.Fatalf("a foreground response: %q", status(rec))
	}
	if rec := put("resp_norun", `{"status":"completed","background":true}`); status(rec) != "completed" {
		t.Fatalf("a background response whose run is forgotten: %q", status(rec))
	}
	if err := bs.Begin(ctx, "o", "resp_bg", 0, 0, time.Minute, time.Hour); err != nil {
		t.Fatal(err)
	}
	if rec := put("resp_bg", `{"status":"in_progress","background":true}`); status(rec) != "in_progress" {
		t.Fatalf("a running response: %q", status(rec))
	}
	if won, _ := bs.Settle(ctx, "o", "resp_bg", "failed"); won != "failed" {
		t.Fatal(won)
	}
	if rec := put("resp_bg", `{"status":"completed","background":true}`); status(rec) != "in_progress" {
		t.Fatalf("an end that lost was stored: %q", status(rec))
	}
	if rec := put("resp_bg", `{"status":"failed","background":true}`); status(rec) != "failed" {
		t.Fatalf("the winner's end: %q", status(rec))
	}
}

// waitEnded waits for the run id to end.
func waitEnded(t *testing.T, bs store.Background, id string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if ok, _ := bs.Running(context.Background(), "o", id); !ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still running", id)
		}
	}
}
