package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/store"
)

// BackgroundFactory makes an empty store.Background whose clock is now,
// released by the factory's cleanup.
type BackgroundFactory func(t *testing.T, now func() time.Time) store.Background

// RunBackground runs the store.Background conformance suite.
func RunBackground(t *testing.T, newStore BackgroundFactory) {
	tests := []struct {
		name string
		run  func(t *testing.T, f BackgroundFactory)
	}{
		{"Events", testBackgroundEvents},
		{"WaitForEvents", testBackgroundWait},
		{"Bounds", testBackgroundBounds},
		{"Lapse", testBackgroundLapse},
		{"OwnerScoping", testBackgroundOwners},
		{"Cancel", testBackgroundCancel},
		{"Keep", testBackgroundKeep},
		{"Paging", testBackgroundPaging},
		{"Settle", testBackgroundSettle},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newStore) })
	}
}

const bgTTL, bgKeep = time.Minute, time.Hour

func begin(t *testing.T, b store.Background, owner, id string) {
	t.Helper()
	if err := b.Begin(context.Background(), owner, id, 0, 0, bgTTL, bgKeep); err != nil {
		t.Fatalf("Begin %s: %v", id, err)
	}
}

func appendEvents(t *testing.T, b store.Background, owner, id string, from, to int64) {
	t.Helper()
	for seq := from; seq < to; seq++ {
		if err := b.AppendEvent(context.Background(), owner, id, seq, []byte(fmt.Sprintf(`{"sequence_number":%d}`, seq))); err != nil {
			t.Fatalf("AppendEvent %d: %v", seq, err)
		}
	}
}

func wantEvents(t *testing.T, got []store.Event, from, to int64) {
	t.Helper()
	if int64(len(got)) != to-from {
		t.Fatalf("%d events, want %d..%d", len(got), from, to-1)
	}
	for k, e := range got {
		want := from + int64(k)
		if e.Seq != want || string(e.Data) != fmt.Sprintf(`{"sequence_number":%d}`, want) {
			t.Fatalf("event %d = %d %s, want %d", k, e.Seq, e.Data, want)
		}
	}
}

func testBackgroundEvents(t *testing.T, f BackgroundFactory) {
	ctx := context.Background()
	b := f(t, time.Now)
	begin(t, b, "o", "resp_a")
	appendEvents(t, b, "o", "resp_a", 0, 5)
	for _, after := range []int64{-1, 0, 3} {
		ev, done, err := b.Events(ctx, "o", "resp_a", after, 0)
		if err != nil || done {
			t.Fatalf("after %d: done %v, %v", after, done, err)
		}
		wantEvents(t, ev, after+1, 5)
	}
	if ev, done, err := b.Events(ctx, "o", "resp_a", 4, 0); err != nil || done || len(ev) != 0 {
		t.Fatalf("after the last, running: %d events, done %v, %v", len(ev), done, err)
	}
	if err := b.AppendEvent(ctx, "o", "resp_a", 7, []byte("{}")); err == nil {
		t.Fatal("an event out of order was appended")
	}
	if ok, err := b.Running(ctx, "o", "resp_a"); !ok || err != nil {
		t.Fatalf("Running = %v, %v", ok, err)
	}
	if err := b.End(ctx, "o", "resp_a"); err != nil {
		t.Fatal(err)
	}
	if err := b.End(ctx, "o", "resp_a"); err != nil {
		t.Fatalf("End again: %v", err)
	}
	ev, done, err := b.Events(ctx, "o", "resp_a", 2, time.Second)
	if err != nil || !done {
		t.Fatalf("after End: done %v, %v", done, err)
	}
	wantEvents(t, ev, 3, 5)
	if ev, done, _ := b.Events(ctx, "o", "resp_a", 4, time.Second); !done || len(ev) != 0 {
		t.Fatalf("after End, nothing left: %d events, done %v", len(ev), done)
	}
	if ok, _ := b.Running(ctx, "o", "resp_a"); ok {
		t.Fatal("Running after End")
	}
	if err := b.AppendEvent(ctx, "o", "resp_a", 5, []byte("{}")); err == nil {
		t.Fatal("an event was appended after End")
	}
}

// testBackgroundWait: a reader waiting for the next event gets it when it
// is appended, and the end when the run ends; a wait with nothing new
// returns empty, not done.
func testBackgroundWait(t *testing.T, f BackgroundFactory) {
	ctx := context.Background()
	b := f(t, time.Now)
	begin(t, b, "o", "resp_w")
	if ev, done, err := b.Events(ctx, "o", "resp_w", -1, 50*time.Millisecond); err != nil || done || len(ev) != 0 {
		t.Fatalf("nothing yet: %d events, done %v, %v", len(ev), done, err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	var got []store.Event
	var gotErr error
	go func() {
		defer wg.Done()
		got, _, gotErr = b.Events(ctx, "o", "resp_w", -1, 20*time.Second)
	}()
	time.Sleep(100 * time.Millisecond)
	appendEvents(t, b, "o", "resp_w", 0, 1)
	wg.Wait()
	if gotErr != nil {
		t.Fatal(gotErr)
	}
	wantEvents(t, got, 0, 1)
	wg.Add(1)
	var done bool
	go func() {
		defer wg.Done()
		_, done, gotErr = b.Events(ctx, "o", "resp_w", 0, 20*time.Second)
	}()
	time.Sleep(100 * time.Millisecond)
	if err := b.End(ctx, "o", "resp_w"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	// The end is said by this call or, when it was waiting on the log, by
	// the next one.
	if !done {
		_, done, gotErr = b.Events(ctx, "o", "resp_w", 0, time.Second)
	}
	if gotErr != nil || !done {
		t.Fatalf("the end: done %v, %v", done, gotErr)
	}
}

func testBackgroundBounds(t *testing.T, f BackgroundFactory) {
	ctx := context.Background()
	b := f(t, time.Now)
	quota := func(err error, limit string) {
		t.Helper()
		var q *store.QuotaError
		if !errors.As(err, &q) || q.Limit != limit {
			t.Fatalf("error %v, want a QuotaError for %s", err, limit)
		}
	}
	for i := range 2 {
		if err := b.Begin(ctx, "a", fmt.Sprintf("resp_a%d", i), 2, 3, bgTTL, bgKeep); err != nil {
			t.Fatal(err)
		}
	}
	quota(b.Begin(ctx, "a", "resp_a2", 2, 3, bgTTL, bgKeep), store.LimitBackgroundPerOwner)
	if err := b.Begin(ctx, "b", "resp_b0", 2, 3, bgTTL, bgKeep); err != nil {
		t.Fatalf("another owner: %v", err)
	}
	quota(b.Begin(ctx, "c", "resp_c0", 2, 3, bgTTL, bgKeep), store.LimitBackgroundTotal)
	if err := b.End(ctx, "a", "resp_a0"); err != nil {
		t.Fatal(err)
	}
	if err := b.Begin(ctx, "a", "resp_a2", 2, 3, bgTTL, bgKeep); err != nil {
		t.Fatalf("a slot freed by End: %v", err)
	}
	if err := b.Begin(ctx, "a", "resp_a1", 0, 0, bgTTL, bgKeep); err == nil {
		t.Fatal("the same id begun twice")
	}
}

// testBackgroundLapse: a run whose runner died (no renewal within its
// ttl) is no longer running — its slot is free and readers are told the
// end — and cannot be renewed back. Real time: a shared store keeps
// liveness by its own clock, not the replica's.
func testBackgroundLapse(t *testing.T, f BackgroundFactory) {
	ctx := context.Background()
	const ttl = 2 * time.Second
	b := f(t, time.Now)
	if err := b.Begin(ctx, "o", "resp_l", 1, 0, ttl, bgKeep); err != nil {
		t.Fatal(err)
	}
	appendEvents(t, b, "o", "resp_l", 0, 2)
	time.Sleep(ttl / 2)
	renewed := time.Now()
	if ok, err := b.Renew(ctx, "o", "resp_l", ttl); !ok || err != nil {
		t.Fatalf("Renew while running: %v, %v", ok, err)
	}
	time.Sleep(ttl * 3 / 4) // within the renewed ttl, past the first
	if ok, _ := b.Running(ctx, "o", "resp_l"); !ok && time.Since(renewed) < ttl {
		t.Fatal("not running within the renewed ttl")
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ok, _ := b.Running(ctx, "o", "resp_l")
		if !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("still running after its ttl lapsed")
		}
	}
	if time.Since(renewed) < ttl-100*time.Millisecond {
		t.Fatalf("lapsed %v after its renewal, within its ttl %v", time.Since(renewed), ttl)
	}
	if ok, _ := b.Renew(ctx, "o", "resp_l", ttl); ok {
		t.Fatal("a lapsed run was renewed")
	}
	ev, done, err := b.Events(ctx, "o", "resp_l", -1, time.Second)
	if err != nil || !done {
		t.Fatalf("a lapsed run's log: done %v, %v", done, err)
	}
	wantEvents(t, ev, 0, 2)
	if err := b.Begin(ctx, "o", "resp_l2", 1, 0, ttl, bgKeep); err != nil {
		t.Fatalf("the lapsed run's slot: %v", err)
	}
}

func testBackgroundOwners(t *testing.T, f BackgroundFactory) {
	ctx := context.Background()
	b := f(t, time.Now)
	begin(t, b, "alice", "resp_x")
	appendEvents(t, b, "alice", "resp_x", 0, 1)
	if _, _, err := b.Events(ctx, "mallory", "resp_x", -1, 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another owner's events: %v, want ErrNotFound", err)
	}
	if err := b.Cancel(ctx, "mallory", "resp_x"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another owner's cancel: %v, want ErrNotFound", err)
	}
	if err := b.AppendEvent(ctx, "mallory", "resp_x", 1, []byte("{}")); err == nil {
		t.Fatal("another owner appended")
	}
	if ok, _ := b.Cancelled(ctx, "alice", "resp_x"); ok {
		t.Fatal("another owner's cancel reached the run")
	}
	if _, _, err := b.Events(ctx, "alice", "resp_unknown", -1, 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an unknown id: %v, want ErrNotFound", err)
	}
}

func testBackgroundCancel(t *testing.T, f BackgroundFactory) {
	ctx := context.Background()
	b := f(t, time.Now)
	begin(t, b, "o", "resp_c")
	if ok, err := b.Cancelled(ctx, "o", "resp_c"); ok || err != nil {
		t.Fatalf("Cancelled before: %v, %v", ok, err)
	}
	for range 2 {
		if err := b.Cancel(ctx, "o", "resp_c"); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := b.Cancelled(ctx, "o", "resp_c"); !ok || err != nil {
		t.Fatalf("Cancelled after: %v, %v", ok, err)
	}
}

// testBackgroundKeep: an ended run's log is kept for keep, then forgotten
// (real time: Redis expires keys by its own clock).
func testBackgroundKeep(t *testing.T, f BackgroundFactory) {
	ctx := context.Background()
	b := f(t, time.Now)
	if err := b.Begin(ctx, "o", "resp_k", 0, 0, bgTTL, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	appendEvents(t, b, "o", "resp_k", 0, 1)
	if err := b.End(ctx, "o", "resp_k"); err != nil {
		t.Fatal(err)
	}
	if ev, _, err := b.Events(ctx, "o", "resp_k", -1, 0); err != nil || len(ev) != 1 {
		t.Fatalf("just ended: %d events, %v", len(ev), err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, _, err := b.Events(ctx, "o", "resp_k", -1, 0)
		if errors.Is(err, store.ErrNotFound) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log was kept past keep: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// testBackgroundPaging: a long log is read a page at a time, running or
// ended; the end is said only with its last page.
func testBackgroundPaging(t *testing.T, f BackgroundFactory) {
	ctx := context.Background()
	b := f(t, time.Now)
	begin(t, b, "o", "resp_p")
	n := int64(2*store.BackgroundEventsPage + 10)
	appendEvents(t, b, "o", "resp_p", 0, n)
	read := func(wantDone bool) {
		t.Helper()
		after := int64(-1)
		for after < n-1 {
			ev, done, err := b.Events(ctx, "o", "resp_p", after, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(ev) == 0 || len(ev) > store.BackgroundEventsPage {
				t.Fatalf("after %d: %d events, want 1..%d", after, len(ev), store.BackgroundEventsPage)
			}
			wantEvents(t, ev, after+1, after+1+int64(len(ev)))
			after = ev[len(ev)-1].Seq
			if last := after == n-1; done && !last {
				t.Fatalf("done after %d of %d events", after+1, n)
			} else if last && wantDone && !done {
				// The end may also be said by the next call.
				if ev, done, err := b.Events(ctx, "o", "resp_p", after, time.Second); err != nil || !done || len(ev) != 0 {
					t.Fatalf("the end: %d events, done %v, %v", len(ev), done, err)
				}
			}
		}
	}
	read(false)
	if err := b.End(ctx, "o", "resp_p"); err != nil {
		t.Fatal(err)
	}
	read(true)
}

// testBackgroundSettle: a cancel racing the run's completion — many
// times — settles one end, the same for both, and later calls keep it.
func testBackgroundSettle(t *testing.T, f BackgroundFactory) {
	ctx := context.Background()
	b := f(t, time.Now)
	if _, err := b.Settle(ctx, "o", "resp_none", "completed"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Settle of no run: %v, want ErrNotFound", err)
	}
	wins := map[string]int{}
	for i := range 200 {
		id := fmt.Sprintf("resp_s%d", i)
		begin(t, b, "o", id)
		var got [2]string
		var errs [2]error
		var wg sync.WaitGroup
		for k, status := range []string{"completed", "cancelled"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[k], errs[k] = b.Settle(ctx, "o", id, status)
			}()
		}
		wg.Wait()
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("Settle: %v, %v", errs[0], errs[1])
		}
		if got[0] != got[1] || (got[0] != "completed" && got[0] != "cancelled") {
			t.Fatalf("%s: the run settled %q and %q", id, got[0], got[1])
		}
		if err := b.End(ctx, "o", id); err != nil {
			t.Fatal(err)
		}
		if again, err := b.Settle(ctx, "o", id, "failed"); again != got[0] || err != nil {
			t.Fatalf("%s: settled %q, then %q, %v", id, got[0], again, err)
		}
		wins[got[0]]++
	}
	t.Logf("winners: %v", wins)
}
