package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/redis"
	"github.com/codeinterp/codeinterp/internal/store/redis/redistest"
	"github.com/codeinterp/codeinterp/internal/store/storetest"
)

// TestBackgroundConformance runs the shared Background suite on one real
// redis-server, each store under a key prefix of its own.
func TestBackgroundConformance(t *testing.T) {
	url := redistest.Start(t)
	var n atomic.Int64
	storetest.RunBackground(t, func(t *testing.T, now func() time.Time) store.Background {
		b, err := redis.NewBackground(context.Background(), url, now, redis.WithPrefix(fmt.Sprintf("b%d:", n.Add(1))))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	})
}

// TestBackgroundSkewedClocks: replicas whose clocks disagree (one 30 s
// ahead, one 30 s behind) agree on which runs are live: liveness is
// Redis' clock, not theirs (issue 38 row 5).
func TestBackgroundSkewedClocks(t *testing.T) {
	ctx := context.Background()
	url := redistest.Start(t)
	open := func(skew time.Duration) *redis.Background {
		b, err := redis.NewBackground(ctx, url, func() time.Time { return time.Now().Add(skew) }, redis.WithPrefix("skew:"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	right, ahead, behind := open(0), open(30*time.Second), open(-30*time.Second)
	for _, c := range []struct {
		name           string
		runner, reader *redis.Background
	}{
		{"ahead reads", right, ahead}, {"behind runs", behind, right},
		{"ahead runs", ahead, behind}, {"behind reads", right, behind},
	} {
		id := "resp_" + strings.ReplaceAll(c.name, " ", "_")
		if err := c.runner.Begin(ctx, "o", id, 1, 0, 2*time.Second, time.Minute); err != nil {
			t.Fatalf("%s: Begin: %v", c.name, err)
		}
		if ok, err := c.reader.Running(ctx, "o", id); !ok || err != nil {
			t.Fatalf("%s: a live run is not running to the other replica: %v, %v", c.name, ok, err)
		}
		if ok, err := c.runner.Renew(ctx, "o", id, 2*time.Second); !ok || err != nil {
			t.Fatalf("%s: Renew: %v, %v", c.name, ok, err)
		}
		if ok, err := c.reader.Renew(ctx, "o", id, 2*time.Second); !ok || err != nil {
			t.Fatalf("%s: Renew from the other replica: %v, %v", c.name, ok, err)
		}
		// Not renewed, it lapses within its ttl for both, whatever their clocks.
		deadline := time.Now().Add(10 * time.Second)
		for {
			r1, _ := c.runner.Running(ctx, "o", id)
			r2, _ := c.reader.Running(ctx, "o", id)
			if !r1 && !r2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: a run not renewed still runs (runner %v, reader %v)", c.name, r1, r2)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err := c.reader.Begin(ctx, "o", id+"_2", 1, 0, 2*time.Second, time.Minute); err != nil {
			t.Fatalf("%s: the lapsed run's slot: %v", c.name, err)
		}
		_ = c.reader.End(ctx, "o", id+"_2")
	}
}

// TestBackgroundWaitingReaders: readers waiting for events (a resumed
// stream each) do not take the connections every other call needs: with
// more of them waiting than a client's default pool holds, Renew still
// answers at once (issue 38 row 5).
func TestBackgroundWaitingReaders(t *testing.T) {
	ctx := context.Background()
	b, err := redis.NewBackground(ctx, redistest.Start(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	for _, id := range []string{"resp_wait", "resp_live"} {
		if err := b.Begin(ctx, "o", id, 0, 0, time.Minute, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, _ = b.Events(ctx, "o", "resp_wait", -1, 3*time.Second)
		}()
	}
	time.Sleep(300 * time.Millisecond) // they are waiting
	for range 3 {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		ok, err := b.Renew(rctx, "o", "resp_live", time.Minute)
		cancel()
		if !ok || err != nil {
			t.Fatalf("Renew with readers waiting: %v, %v", ok, err)
		}
	}
}

// TestBackgroundReadersSetting: WithReaders (responses.max_resumed_streams)
// sizes the waiting readers' pool: with 4, four readers wait and a fifth
// finds no connection (an error, not a wait in the queue), while every
// other call still has its own.
func TestBackgroundReadersSetting(t *testing.T) {
	ctx := context.Background()
	b, err := redis.NewBackground(ctx, redistest.Start(t), nil, redis.WithReaders(4))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	if err := b.Begin(ctx, "o", "resp_wait", 0, 0, time.Minute, time.Hour); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := b.Events(ctx, "o", "resp_wait", -1, store.BackgroundWait)
			errs <- err
		}()
	}
	time.Sleep(300 * time.Millisecond) // they are waiting
	if _, _, err := b.Events(ctx, "o", "resp_wait", -1, store.BackgroundWait); err == nil {
		t.Fatal("a fifth waiting reader got a connection of a pool of 4")
	}
	if ok, err := b.Renew(ctx, "o", "resp_wait", time.Minute); !ok || err != nil {
		t.Fatalf("Renew with the readers' pool full: %v, %v", ok, err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a reader within the pool: %v", err)
		}
	}
}

// TestBackgroundAllBytesBound is issue 38 row 5's "events trimmed by the
// bound" on Redis: the logs of every owner, written through two replicas'
// stores, are bounded together (store.BackgroundAllBytes, lowered here);
// past it the log of the run that ended longest ago is forgotten first —
// its reader is told so (store.ErrEventsTrimmed) — and running logs are
// kept: when only they are left, an append past the bound is refused.
func TestBackgroundAllBytesBound(t *testing.T) {
	ctx := context.Background()
	url := redistest.Start(t)
	open := func() *redis.Background {
		b, err := redis.NewBackground(ctx, url, nil, redis.WithPrefix("bound:"), redis.WithBackgroundBytes(3000))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	stores := []*redis.Background{open(), open()}
	event := []byte(`"` + strings.Repeat("e", 998) + `"`)
	for i := range 4 {
		b, owner, id := stores[i%2], fmt.Sprintf("o%d", i%2), fmt.Sprintf("resp_%d", i)
		if err := b.Begin(ctx, owner, id, 0, 0, time.Minute, time.Hour); err != nil {
			t.Fatal(err)
		}
		if err := b.AppendEvent(ctx, owner, id, 0, event); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if i < 3 {
			if err := b.End(ctx, owner, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	// 4000 bytes: resp_0, which ended first, is forgotten, on either replica.
	for _, b := range stores {
		if _, _, err := b.Events(ctx, "o0", "resp_0", -1, 0); !errors.Is(err, store.ErrEventsTrimmed) {
			t.Fatalf("the oldest ended log: %v, want ErrEventsTrimmed", err)
		}
	}
	for i := 1; i < 4; i++ {
		owner, id := fmt.Sprintf("o%d", i%2), fmt.Sprintf("resp_%d", i)
		if ev, _, err := stores[0].Events(ctx, owner, id, -1, 0); err != nil || len(ev) != 1 {
			t.Fatalf("%s: %d events, %v", id, len(ev), err)
		}
	}
	// Running logs are never forgotten: two more running ones make the
	// two ended logs go, and then an append past the bound is refused.
	for i := 4; i < 7; i++ {
		if err := stores[0].Begin(ctx, "o0", fmt.Sprintf("resp_%d", i), 0, 0, time.Minute, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	for i := 4; i < 6; i++ {
		if err := stores[i%2].AppendEvent(ctx, "o0", fmt.Sprintf("resp_%d", i), 0, event); err != nil {
			t.Fatal(err)
		}
	}
	var q *store.QuotaError
	if err := stores[1].AppendEvent(ctx, "o0", "resp_6", 0, event); !errors.As(err, &q) || q.Limit != store.LimitBackgroundEvents {
		t.Fatalf("an append past the bound with only running logs left: %v, want a QuotaError", err)
	}
	for i := 1; i < 6; i++ {
		owner, id := fmt.Sprintf("o%d", i%2), fmt.Sprintf("resp_%d", i)
		if i >= 4 {
			owner = "o0"
		}
		ev, _, err := stores[1].Events(ctx, owner, id, -1, 0)
		switch {
		case i < 3 && !errors.Is(err, store.ErrEventsTrimmed):
			t.Fatalf("ended %s: %v, want ErrEventsTrimmed", id, err)
		case i >= 3 && (err != nil || len(ev) != 1):
			t.Fatalf("running %s: %d events, %v", id, len(ev), err)
		}
	}
}
