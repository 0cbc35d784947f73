package cluster_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/codeinterp/codeinterp/internal/cluster"
	"github.com/codeinterp/codeinterp/internal/cluster/redislease"
	"github.com/codeinterp/codeinterp/internal/store/redis/redistest"
)

const secret = "a-secret-every-replica-shares"

// replica is one Node serving forwarded runs on a loopback port.
type replica struct {
	node *cluster.Node
	srv  *grpc.Server
	mu   sync.Mutex
	ran  []string // the payloads its handler ran
	lost chan string
}

func startReplica(t *testing.T, url, sec string, ttl time.Duration) *replica {
	t.Helper()
	leases, err := redislease.Dial(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{lost: make(chan string, 8)}
	r.node, err = cluster.NewNode(cluster.Config{
		Addr: lis.Addr().String(), Secret: sec, Leases: leases, TTL: ttl,
		Handler: func(_ context.Context, key string, _ uint64, payload []byte) ([]byte, error) {
			r.mu.Lock()
			r.ran = append(r.ran, key+":"+string(payload))
			r.mu.Unlock()
			return []byte("ran " + string(payload)), nil
		},
		OnLost: func(key string) { r.lost <- key },
	})
	if err != nil {
		t.Fatal(err)
	}
	r.srv = r.node.NewServer()
	go func() { _ = r.srv.Serve(lis) }()
	ctx, cancel := context.WithCancel(context.Background())
	go r.node.Renew(ctx)
	t.Cleanup(func() { cancel(); r.srv.Stop(); _ = r.node.Close(); _ = leases.Close() })
	return r
}

func (r *replica) runs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ran...)
}

func claim(t *testing.T, n *cluster.Node, key string) (cluster.Lease, bool) {
	t.Helper()
	l, mine, err := n.Claim(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return l, mine
}

// TestForwardToHolder: the first replica to claim a container holds it;
// the other's claim names it, and a run forwarded there runs there.
func TestForwardToHolder(t *testing.T) {
	url := redistest.Start(t)
	a, b := startReplica(t, url, secret, 10*time.Second), startReplica(t, url, secret, 10*time.Second)
	if _, mine := claim(t, a.node, "cntr_1"); !mine {
		t.Fatal("the first claim of a free container did not make A its holder")
	}
	l, mine := claim(t, b.node, "cntr_1")
	if mine || l.Holder != a.node.ID() || l.Addr != a.node.Addr() {
		t.Fatalf("B's claim: %+v mine=%v, want A's lease", l, mine)
	}
	out, err := b.node.Forward(context.Background(), "cntr_1", l, []byte("x += 1"))
	if err != nil || string(out) != "ran x += 1" {
		t.Fatalf("forwarded run: %q, %v", out, err)
	}
	if got := a.runs(); len(got) != 1 || got[0] != "cntr_1:x += 1" {
		t.Fatalf("A ran %q", got)
	}
}

// TestForwardRefusals is the hostile side: a forged secret, a lease A no
// longer holds, a key A never held, another process at A's address.
func TestForwardRefusals(t *testing.T) {
	url := redistest.Start(t)
	a := startReplica(t, url, secret, 10*time.Second)
	forger := startReplica(t, url, "not-the-secret-of-the-cluster", 10*time.Second)
	b := startReplica(t, url, secret, 10*time.Second)
	claim(t, a.node, "cntr_1")
	l, _ := claim(t, b.node, "cntr_1")

	if _, err := forger.node.Forward(context.Background(), "cntr_1", l, []byte("forged")); err == nil ||
		errors.Is(err, cluster.ErrGone) || !strings.Contains(err.Error(), "Unauthenticated") {
		t.Fatalf("a run with a forged secret: %v, want Unauthenticated", err)
	}
	stale := l
	stale.Token--
	if _, err := b.node.Forward(context.Background(), "cntr_1", stale, []byte("stale")); !errors.Is(err, cluster.ErrGone) {
		t.Fatalf("a run for an older lease: %v, want ErrGone", err)
	}
	other := l
	other.Holder = "a-restarted-process"
	if _, err := b.node.Forward(context.Background(), "cntr_1", other, []byte("restarted")); !errors.Is(err, cluster.ErrGone) {
		t.Fatalf("a run for another process at A's address: %v, want ErrGone", err)
	}
	if _, err := b.node.Forward(context.Background(), "cntr_never", l, []byte("never")); !errors.Is(err, cluster.ErrGone) {
		t.Fatalf("a run for a container A does not hold: %v, want ErrGone", err)
	}
	if got := a.runs(); len(got) != 0 {
		t.Fatalf("A ran refused runs: %q", got)
	}
}

// TestTakeOverFromGoneHolder: a holder that stopped answering is gone;
// the replica that finds so takes the lease with a larger token, and the
// old holder, when it renews, learns it lost the container (fencing).
func TestTakeOverFromGoneHolder(t *testing.T) {
	url := redistest.Start(t)
	a, b := startReplica(t, url, secret, 600*time.Millisecond), startReplica(t, url, secret, 600*time.Millisecond)
	la, _ := claim(t, a.node, "cntr_1")
	a.srv.Stop() // A's process is alive (it renews) but unreachable
	_, err := b.node.Forward(context.Background(), "cntr_1", la, []byte("x"))
	if !errors.Is(err, cluster.ErrGone) {
		t.Fatalf("forwarding to an unreachable holder: %v, want ErrGone", err)
	}
	lb, mine, err := b.node.Steal(context.Background(), "cntr_1", la)
	if err != nil || !mine || lb.Token <= la.Token {
		t.Fatalf("B's takeover: %+v mine=%v %v", lb, mine, err)
	}
	select {
	case key := <-a.lost:
		if key != "cntr_1" {
			t.Fatalf("A lost %q", key)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("A was never told it lost the container")
	}
	if l, mine := claim(t, a.node, "cntr_1"); mine || l != lb {
		t.Fatalf("the fenced A's claim: %+v mine=%v, want B's lease", l, mine)
	}
	if a.node.Held() != 0 {
		t.Fatalf("A still counts %d leases", a.node.Held())
	}
}

// TestDrainingHolder: a draining holder refuses new runs as ErrDraining
// (the caller waits for the release), and its release frees the lease.
func TestDrainingHolder(t *testing.T) {
	url := redistest.Start(t)
	a, b := startReplica(t, url, secret, 10*time.Second), startReplica(t, url, secret, 10*time.Second)
	claim(t, a.node, "cntr_1")
	l, _ := claim(t, b.node, "cntr_1")
	a.node.Drain()
	if _, err := b.node.Forward(context.Background(), "cntr_1", l, []byte("x")); !errors.Is(err, cluster.ErrDraining) {
		t.Fatalf("a run to a draining holder: %v, want ErrDraining", err)
	}
	a.node.Release(context.Background(), "cntr_1")
	if _, mine := claim(t, b.node, "cntr_1"); !mine {
		t.Fatal("after the holder's release the container was not free")
	}
}

// TestLeasesSurviveRedisFlush: a Redis that lost its data (restarted
// without persistence) gets the holders' leases back at their next
// renewal; no one is told it lost a container no one else took.
func TestLeasesSurviveRedisFlush(t *testing.T) {
	url := redistest.Start(t)
	a := startReplica(t, url, secret, 300*time.Millisecond)
	b := startReplica(t, url, secret, 300*time.Millisecond)
	claim(t, a.node, "cntr_1")
	o, _ := goredis.ParseURL(url)
	rdb := goredis.NewClient(o)
	defer rdb.Close()
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	// (Until A renews, the container is free: a claim then would take
	// it, as it should; this test looks without claiming.)
	deadline := time.Now().Add(10 * time.Second)
	for rdb.Exists(context.Background(), "codeinterp:lease:cntr_1").Val() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("A did not take its lease back after the flush")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if l, mine := claim(t, b.node, "cntr_1"); mine || l.Holder != a.node.ID() {
		t.Fatalf("after A's renewal B's claim: %+v mine=%v, want A's lease", l, mine)
	}
	select {
	case key := <-a.lost:
		t.Fatalf("A was told it lost %q", key)
	default:
	}
}
