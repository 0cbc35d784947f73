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
	"go.uber.org/zap"
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
	// hang is where a run of the payload "hang" waits (as a paused
	// holder's would) until the test ends.
	hang chan struct{}
	// pause stops its renewals, as a paused process's (SIGSTOP, a long
	// GC): its leases expire by the store's clock.
	pause func()
}

func startReplica(t *testing.T, url, sec string, ttl time.Duration) *replica {
	t.Helper()
	return startReplicaLog(t, url, sec, ttl, nil)
}

func startReplicaLog(t *testing.T, url, sec string, ttl time.Duration, log *zap.Logger) *replica {
	t.Helper()
	leases, err := redislease.Dial(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{lost: make(chan string, 8), hang: make(chan struct{})}
	r.node, err = cluster.NewNode(cluster.Config{
		Addr: lis.Addr().String(), Secret: sec, Leases: leases, TTL: ttl,
		Handler: func(_ context.Context, key string, _ uint64, payload []byte, _ func([]byte)) ([]byte, error) {
			if string(payload) == "hang" {
				<-r.hang
			}
			r.mu.Lock()
			r.ran = append(r.ran, key+":"+string(payload))
			r.mu.Unlock()
			return []byte("ran " + string(payload)), nil
		},
		OnLost: func(key string) { r.lost <- key },
		Log:    log,
	})
	if err != nil {
		t.Fatal(err)
	}
	r.srv = r.node.NewServer()
	go func() { _ = r.srv.Serve(lis) }()
	ctx, cancel := context.WithCancel(context.Background())
	renewed := make(chan struct{})
	go func() { r.node.Renew(ctx); close(renewed) }()
	r.pause = func() { cancel(); <-renewed }
	t.Cleanup(func() { close(r.hang); cancel(); r.srv.Stop(); _ = r.node.Close(); _ = leases.Close() })
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
	out, err := b.node.Forward(context.Background(), "cntr_1", l, []byte("x += 1"), nil)
	if err != nil || string(out) != "ran x += 1" {
		t.Fatalf("forwarded run: %q, %v", out, err)
	}
	if got := a.runs(); len(got) != 1 || got[0] != "cntr_1:x += 1" {
		t.Fatalf("A ran %q", got)
	}
}

// TestForwardRefusals is the hostile side: a replica with another
// secret (another cluster key: it cannot even connect), a lease A no
// longer holds, a key A never held, another process at A's address.
func TestForwardRefusals(t *testing.T) {
	url := redistest.Start(t)
	a := startReplica(t, url, secret, 10*time.Second)
	forger := startReplica(t, url, "not-the-secret-of-the-cluster", 10*time.Second)
	b := startReplica(t, url, secret, 10*time.Second)
	claim(t, a.node, "cntr_1")
	l, _ := claim(t, b.node, "cntr_1")

	if _, err := forger.node.Forward(context.Background(), "cntr_1", l, []byte("forged"), nil); !errors.Is(err, cluster.ErrUnreachable) ||
		errors.Is(err, cluster.ErrGone) || !strings.Contains(err.Error(), "different cluster key") {
		t.Fatalf("a run from a replica with another secret: %v, want ErrUnreachable (a different cluster key)", err)
	}
	stale := l
	stale.Token--
	if _, err := b.node.Forward(context.Background(), "cntr_1", stale, []byte("stale"), nil); !errors.Is(err, cluster.ErrMoved) {
		t.Fatalf("a run for an older lease: %v, want ErrMoved", err)
	}
	other := l
	other.Holder = "a-restarted-process"
	if _, err := b.node.Forward(context.Background(), "cntr_1", other, []byte("restarted"), nil); !errors.Is(err, cluster.ErrGone) {
		t.Fatalf("a run for another process at A's address: %v, want ErrGone", err)
	}
	if _, err := b.node.Forward(context.Background(), "cntr_never", l, []byte("never"), nil); !errors.Is(err, cluster.ErrMoved) {
		t.Fatalf("a run for a container A does not hold: %v, want ErrMoved", err)
	}
	if got := a.runs(); len(got) != 0 {
		t.Fatalf("A ran refused runs: %q", got)
	}
}

// TestUnreachableHolderKeepsItsLease: a holder that cannot be reached
// but is alive (its forwarding port unreachable, its renewals going on) is
// never taken from: a dial failure is no proof it is gone (a paused or
// slow process looks the same), and taking it would make two interpreters
// of one container.
func TestUnreachableHolderKeepsItsLease(t *testing.T) {
	url := redistest.Start(t)
	const ttl = 600 * time.Millisecond
	a, b := startReplica(t, url, secret, ttl), startReplica(t, url, secret, ttl)
	la, _ := claim(t, a.node, "cntr_1")
	a.srv.Stop()
	_, err := b.node.Forward(context.Background(), "cntr_1", la, []byte("x"), nil)
	if !errors.Is(err, cluster.ErrUnreachable) || errors.Is(err, cluster.ErrGone) {
		t.Fatalf("forwarding to an unreachable holder: %v, want ErrUnreachable (not ErrGone)", err)
	}
	deadline := time.Now().Add(3 * ttl)
	for time.Now().Before(deadline) {
		if l, mine := claim(t, b.node, "cntr_1"); mine || l != la {
			t.Fatalf("B's claim while A renews: %+v mine=%v, want A's lease %+v", l, mine, la)
		}
		time.Sleep(ttl / 4)
	}
	select {
	case key := <-a.lost:
		t.Fatalf("A, alive and renewing, was told it lost %q", key)
	default:
	}
}

// TestTakeOverAfterExpiry: a holder paused past its lease (no renewals)
// loses it by the store's clock; the next claim elsewhere takes it with a
// larger token, and the old holder, when it runs again, learns it lost
// the container (fencing) and never takes it back by renewing.
func TestTakeOverAfterExpiry(t *testing.T) {
	url := redistest.Start(t)
	const ttl = 600 * time.Millisecond
	a, b := startReplica(t, url, secret, ttl), startReplica(t, url, secret, ttl)
	la, _ := claim(t, a.node, "cntr_1")
	a.pause()
	if l, mine := claim(t, b.node, "cntr_1"); mine || l != la {
		t.Fatalf("B's claim before A's lease expired: %+v mine=%v", l, mine)
	}
	var lb cluster.Lease
	deadline := time.Now().Add(10 * ttl)
	for {
		l, mine := claim(t, b.node, "cntr_1")
		if mine {
			lb = l
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("B never took the lease of a holder that stopped renewing")
		}
		time.Sleep(ttl / 10)
	}
	if lb.Token <= la.Token {
		t.Fatalf("B's token %d is not above A's %d", lb.Token, la.Token)
	}
	// A wakes up: its renewal finds B's lease and gives A's up.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.node.Renew(ctx)
	select {
	case key := <-a.lost:
		if key != "cntr_1" {
			t.Fatalf("A lost %q", key)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("A was never told it lost the container")
	}
	if ok, err := a.node.Confirm(context.Background(), "cntr_1", la.Token); ok || err != nil {
		t.Fatalf("A confirming its old lease: %v %v, want false", ok, err)
	}
	if l, mine := claim(t, a.node, "cntr_1"); mine || l != lb {
		t.Fatalf("the fenced A's claim: %+v mine=%v, want B's lease", l, mine)
	}
	if a.node.Held() != 0 {
		t.Fatalf("A still counts %d leases", a.node.Held())
	}
}

// TestTakeOverFromRestartedHolder: another process answering at the
// holder's address proves the holder gone: Steal takes its lease at once
// (a compare-and-set on the token seen).
func TestTakeOverFromRestartedHolder(t *testing.T) {
	url := redistest.Start(t)
	a, b := startReplica(t, url, secret, 10*time.Second), startReplica(t, url, secret, 10*time.Second)
	la, _ := claim(t, a.node, "cntr_1")
	restarted := la
	restarted.Holder = "the-process-that-was-here-before"
	_, err := b.node.Forward(context.Background(), "cntr_1", restarted, []byte("x"), nil)
	if !errors.Is(err, cluster.ErrGone) {
		t.Fatalf("forwarding to another process at the holder's address: %v, want ErrGone", err)
	}
	// Steal is a compare-and-set: on a token that is not the lease's, it
	// changes nothing.
	if l, mine, err := b.node.Steal(context.Background(), "cntr_1", cluster.Lease{Token: la.Token - 1}); err != nil || mine || l != la {
		t.Fatalf("stealing with a token that is not the lease's: %+v mine=%v %v", l, mine, err)
	}
	lb, mine, err := b.node.Steal(context.Background(), "cntr_1", la)
	if err != nil || !mine || lb.Token <= la.Token {
		t.Fatalf("B's takeover: %+v mine=%v %v", lb, mine, err)
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
	if _, err := b.node.Forward(context.Background(), "cntr_1", l, []byte("x"), nil); !errors.Is(err, cluster.ErrDraining) {
		t.Fatalf("a run to a draining holder: %v, want ErrDraining", err)
	}
	a.node.Release(context.Background(), "cntr_1")
	if _, mine := claim(t, b.node, "cntr_1"); !mine {
		t.Fatal("after the holder's release the container was not free")
	}
}

// TestRedisFlushLosesLeases: a Redis that lost its data (restarted
// without persistence) has no lease for anyone. A holder's renewal never
// takes it back (another replica may have taken and run the container in
// the meantime): it is told it lost it, and the next claim — its own or
// another's — takes a new lease with a token above every one before.
func TestRedisFlushLosesLeases(t *testing.T) {
	srv := redistest.StartServer(t)
	const ttl = 300 * time.Millisecond
	a := startReplica(t, srv.URL, secret, ttl)
	b := startReplica(t, srv.URL, secret, ttl)
	la, _ := claim(t, a.node, "cntr_1")
	srv.Restart(t)
	select {
	case key := <-a.lost:
		if key != "cntr_1" {
			t.Fatalf("A lost %q", key)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("A was never told the store lost its lease")
	}
	o, _ := goredis.ParseURL(srv.URL)
	rdb := goredis.NewClient(o)
	defer rdb.Close()
	if n := rdb.Exists(context.Background(), "codeinterp:lease:cntr_1").Val(); n != 0 {
		t.Fatal("A's renewal took the lease back after the store lost it")
	}
	lb, mine, err := b.node.Claim(context.Background(), "cntr_1")
	if err != nil || !mine || lb.Token <= la.Token {
		t.Fatalf("B's claim after the restart: %+v mine=%v %v, want a token above %d", lb, mine, err, la.Token)
	}
}

// TestStoreDownFailsClosed: with the lease store unreachable, claims fail
// (nothing may run), a holder refuses forwarded runs with
// ErrStoreUnavailable, and a holder that cannot renew for a whole TTL is
// told it lost its leases.
func TestStoreDownFailsClosed(t *testing.T) {
	srv := redistest.StartServer(t)
	const ttl = 600 * time.Millisecond
	a := startReplica(t, srv.URL, secret, ttl)
	b := startReplica(t, srv.URL, secret, ttl)
	la, _ := claim(t, a.node, "cntr_1")
	// Only A loses the store: its own client is pointed nowhere by
	// stopping the server after B has its lease view.
	lb, _ := claim(t, b.node, "cntr_1")
	if lb != la {
		t.Fatalf("B's view %+v, want A's lease %+v", lb, la)
	}
	srv.Stop(t)
	if _, _, err := a.node.Claim(context.Background(), "cntr_1"); err == nil {
		t.Fatal("a claim with the store down succeeded")
	}
	if _, err := b.node.Forward(context.Background(), "cntr_1", la, []byte("x"), nil); !errors.Is(err, cluster.ErrStoreUnavailable) {
		t.Fatalf("a forwarded run to a holder that cannot reach the store: %v, want ErrStoreUnavailable", err)
	}
	if got := a.runs(); len(got) != 0 {
		t.Fatalf("A ran %q without confirming its lease", got)
	}
	select {
	case key := <-a.lost:
		if key != "cntr_1" {
			t.Fatalf("A lost %q", key)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("A, unable to renew for a whole TTL, was never told it lost its lease")
	}
}

// TestForwardToPausedHolder: a holder that stops answering in the middle
// of a forwarded run and stops renewing (a paused process) does not keep
// the caller waiting for as long as the connection lives: once its lease
// expires by the store's clock the call ends with ErrMoved (whatever the
// holder does with the run is void now), and the caller takes the
// container.
func TestForwardToPausedHolder(t *testing.T) {
	url := redistest.Start(t)
	const ttl = 900 * time.Millisecond
	a, b := startReplica(t, url, secret, ttl), startReplica(t, url, secret, ttl)
	la, _ := claim(t, a.node, "cntr_1")
	a.pause()
	start := time.Now()
	_, err := b.node.Forward(context.Background(), "cntr_1", la, []byte("hang"), nil)
	if !errors.Is(err, cluster.ErrMoved) {
		t.Fatalf("forwarding to a holder paused past its lease: %v, want ErrMoved", err)
	}
	t.Logf("the forwarded call ended %s after it was sent (lease %s)", time.Since(start), ttl)
	if _, mine := claim(t, b.node, "cntr_1"); !mine {
		t.Fatal("after the paused holder's lease expired the caller could not take the container")
	}
}
