package redislease_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/cluster"
	"github.com/codeinterp/codeinterp/internal/cluster/redislease"
	"github.com/codeinterp/codeinterp/internal/store/redis/redistest"
)

func dial(t *testing.T, url string) *redislease.Leases {
	t.Helper()
	l, err := redislease.Dial(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// TestLeaseTable walks one key through what replicas do to it: take,
// renew, refuse a second holder, steal only from the token seen, release
// only with the holder's own token, expire.
func TestLeaseTable(t *testing.T) {
	ctx := context.Background()
	l := dial(t, redistest.Start(t))
	a := cluster.Lease{Holder: "A", Addr: "10.0.0.1:9003"}
	b := cluster.Lease{Holder: "B", Addr: "10.0.0.2:9003"}
	const ttl = time.Minute

	la, err := l.Take(ctx, "cntr_1", a, 0, ttl)
	if err != nil || la.Holder != "A" || la.Addr != a.Addr || la.Token == 0 {
		t.Fatalf("take of a free key: %+v, %v", la, err)
	}
	if again, _ := l.Take(ctx, "cntr_1", a, 0, ttl); again != la {
		t.Fatalf("A taking its own key again: %+v, want the same lease %+v", again, la)
	}
	if got, _ := l.Take(ctx, "cntr_1", b, 0, ttl); got != la {
		t.Fatalf("B taking A's key: %+v, want A's lease %+v", got, la)
	}
	if got, _ := l.Take(ctx, "cntr_1", b, la.Token+1, ttl); got != la {
		t.Fatalf("B stealing with a token it did not see: %+v, want A's lease", got)
	}
	if got, ok, _ := l.Renew(ctx, "cntr_1", "B", la.Token, ttl); !ok || got != la {
		t.Fatalf("B renewing A's lease: %+v %v, want A's lease unchanged", got, ok)
	}
	lb, err := l.Take(ctx, "cntr_1", b, la.Token, ttl)
	if err != nil || lb.Holder != "B" || lb.Token <= la.Token {
		t.Fatalf("B stealing from the token it saw: %+v, %v; want B with a larger token than %d", lb, err, la.Token)
	}
	if got, _, _ := l.Renew(ctx, "cntr_1", "A", la.Token, ttl); got != lb {
		t.Fatalf("the fenced A renewing: %+v, want B's lease", got)
	}
	if err := l.Release(ctx, "cntr_1", "A", la.Token); err != nil {
		t.Fatal(err)
	}
	if got, ok, _ := l.Get(ctx, "cntr_1"); !ok || got != lb {
		t.Fatalf("after the fenced A's release: %+v %v, want B's lease kept", got, ok)
	}
	if err := l.Release(ctx, "cntr_1", "B", lb.Token); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := l.Get(ctx, "cntr_1"); ok {
		t.Fatal("B's release left the lease")
	}
	// Tokens keep growing across keys and holders.
	lc, _ := l.Take(ctx, "cntr_2", a, 0, 50*time.Millisecond)
	if lc.Token <= lb.Token {
		t.Fatalf("token %d after %d", lc.Token, lb.Token)
	}
	time.Sleep(150 * time.Millisecond)
	if _, ok, _ := l.Get(ctx, "cntr_2"); ok {
		t.Fatal("an unrenewed lease did not expire")
	}
	if got, ok, err := l.Renew(ctx, "cntr_2", "A", lc.Token, ttl); ok || err != nil {
		t.Fatalf("renewing an expired lease: %+v %v %v, want none", got, ok, err)
	}
}

// TestLeasesWhenRedisIsFull: deploy/ runs Redis with maxmemory under
// noeviction, which refuses writes once full. Leases must still be taken,
// renewed and released then — a container whose lease cannot be had
// cannot run at all — while an ordinary write is refused.
func TestLeasesWhenRedisIsFull(t *testing.T) {
	ctx := context.Background()
	srv := redistest.StartServer(t, "--maxmemory-policy", "noeviction")
	l := dial(t, srv.URL)
	la, err := l.Take(ctx, "cntr_held", cluster.Lease{Holder: "A", Addr: "a:1"}, 0, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	srv.RefuseWrites(t, true) // checks an ordinary write is refused
	if got, ok, err := l.Renew(ctx, "cntr_held", "A", la.Token, time.Minute); err != nil || !ok || got != la {
		t.Fatalf("renewing on a full Redis: %+v %v %v", got, ok, err)
	}
	lb, err := l.Take(ctx, "cntr_new", cluster.Lease{Holder: "B", Addr: "b:1"}, 0, time.Minute)
	if err != nil || lb.Holder != "B" || lb.Token <= la.Token {
		t.Fatalf("a new lease on a full Redis: %+v, %v", lb, err)
	}
	if err := l.Release(ctx, "cntr_new", "B", lb.Token); err != nil {
		t.Fatalf("releasing on a full Redis: %v", err)
	}
	if _, ok, err := l.Get(ctx, "cntr_new"); ok || err != nil {
		t.Fatalf("after the release on a full Redis: %v %v", ok, err)
	}
}

// TestTokensNeverRepeat: a Redis restarted without persistence has lost
// the token counter; the tokens given after it are still larger than every
// token given before (the counter restarts from the store's clock), so a
// checkpoint store that recorded an old holder's token refuses it, and a
// new holder's is never mistaken for an old one.
func TestTokensNeverRepeat(t *testing.T) {
	ctx := context.Background()
	srv := redistest.StartServer(t)
	l := dial(t, srv.URL)
	var last uint64
	for i := range 5 {
		le, err := l.Take(ctx, "cntr_"+strconv.Itoa(i), cluster.Lease{Holder: "A", Addr: "a:1"}, 0, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		last = max(last, le.Token)
	}
	srv.Restart(t)
	if _, ok, err := l.Get(ctx, "cntr_0"); err != nil || ok {
		t.Fatalf("after a restart without persistence the lease is still there (%v, %v): the test restarts nothing", ok, err)
	}
	le, err := l.Take(ctx, "cntr_0", cluster.Lease{Holder: "B", Addr: "b:1"}, 0, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if le.Token <= last {
		t.Fatalf("the first token after a restart is %d, not above the %d given before it", le.Token, last)
	}
}
