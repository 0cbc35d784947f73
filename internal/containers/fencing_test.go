package containers_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/checkpoint"
	"github.com/codeinterp/codeinterp/internal/containers"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
	"github.com/codeinterp/codeinterp/internal/store/redis/redistest"
)

// These tests are issue 37's table at the Manager: the lease store down or
// full, a holder that loses its lease during a run, a client hanging up
// during an eviction, a checkpoint store that fails for a moment. Each
// fails closed: a run is refused (ErrUnavailable) rather than run twice or
// on a stale interpreter, and no state is dropped on a transient error.

// idleCheckpointed waits until the container's checkpoint is written and
// no run is marked on it since.
func idleCheckpointed(t *testing.T, k containers.Checkpoints, cid string) {
	t.Helper()
	waitFor(t, "the idle checkpoint", func() bool {
		tok, running, err := k.Head(context.Background(), "o", cid)
		return err == nil && tok != "" && !running
	})
}

// heldByA starts two replicas sharing Redis and a checkpoint store, and a
// container held by A whose x = 1 is checkpointed.
func heldByA(t *testing.T) (f *fixture, k *checkpoint.Keeper, a, b *replica, ca containers.Container) {
	t.Helper()
	f = newFixture(t)
	url := redistest.Start(t)
	k = keeper(t, t.TempDir(), newKey(t))
	a = startReplica(t, f, url, k, 20*time.Millisecond)
	b = startReplica(t, f, url, k, 20*time.Millisecond)
	ca = open(t, a.m, containers.Spec{Owner: "o"})
	run(t, ca, "x = 1")
	ca.Close()
	idleCheckpointed(t, k, ca.ID())
	return f, k, a, b, ca
}

func runErr(t *testing.T, m *containers.Manager, cid, code string) (containers.RunResult, error) {
	t.Helper()
	c, err := m.Open(context.Background(), containers.Spec{Owner: "o", ID: cid})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.Run(context.Background(), code)
}

// TestLeaseStoreDownRefusesRuns: with Redis down no run happens anywhere
// (a run here could be a second interpreter of a container another
// replica holds); the refusal is ErrUnavailable, and once Redis is back
// the container goes on from its checkpoint with nothing of the refused
// run in it.
func TestLeaseStoreDownRefusesRuns(t *testing.T) {
	f := newFixture(t)
	srv := redistest.StartServer(t)
	k := keeper(t, t.TempDir(), newKey(t))
	a := startReplica(t, f, srv.URL, k, 20*time.Millisecond)
	ca := open(t, a.m, containers.Spec{Owner: "o"})
	run(t, ca, "x = 1")
	ca.Close()
	idleCheckpointed(t, k, ca.ID())

	srv.Stop(t)
	if _, err := runErr(t, a.m, ca.ID(), "x += 100"); !errors.Is(err, containers.ErrUnavailable) {
		t.Fatalf("a run with the lease store down: %v, want ErrUnavailable", err)
	}
	srv.Restart(t)
	r, err := runErr(t, a.m, ca.ID(), "print(x)")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(r.Stdout) != "1" {
		t.Fatalf("after the store came back: %q (stderr %q), want x = 1: the refused run must not have run", r.Stdout, r.Stderr)
	}
}

// TestRunsOnAFullRedis: Redis at maxmemory under noeviction (what
// deploy/ ships) refuses ordinary writes; leases still work, so runs go
// on through both replicas, serialised at one holder.
func TestRunsOnAFullRedis(t *testing.T) {
	f := newFixture(t)
	srv := redistest.StartServer(t, "--maxmemory-policy", "noeviction")
	a, b := startReplica(t, f, srv.URL, nil, 0), startReplica(t, f, srv.URL, nil, 0)
	ca := open(t, a.m, containers.Spec{Owner: "o"})
	run(t, ca, "x = 0")
	ca.Close()
	srv.RefuseWrites(t, true) // checks an ordinary write is refused
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := runErr(t, []*replica{a, b}[i%2].m, ca.ID(), "x += 1"); err != nil {
				t.Errorf("a run on a full Redis: %v", err)
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	// A new container takes a new lease on the full Redis too.
	cb := open(t, b.m, containers.Spec{Owner: "o"})
	run(t, cb, "y = 1")
	cb.Close()
	r, err := runErr(t, b.m, ca.ID(), "print(x)")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(r.Stdout); got != strconv.Itoa(6-int(failed.Load())) {
		t.Fatalf("after 6 increments through two replicas on a full Redis: x = %s", got)
	}
	if a.m.Held()+b.m.Held() != 2 {
		t.Fatalf("interpreters held: A %d, B %d; want one per container", a.m.Held(), b.m.Held())
	}
}

// TestHolderFencedDuringRun: A runs a slow bump while it cannot renew its
// lease (a paused or cut-off process); the lease expires by the store's
// clock and B takes the container, restoring its checkpoint. A's run ends
// after that: it is reported as failed (ErrUnavailable), never as done,
// and its bump is in no interpreter. A run sent to A meanwhile runs on the
// container's state, once.
func TestHolderFencedDuringRun(t *testing.T) {
	_, _, a, b, ca := heldByA(t)

	slow := make(chan error, 1)
	go func() {
		r, err := runErr(t, a.m, ca.ID(), "import time\nx += 1000\ntime.sleep(2.5)\nprint(x)")
		if err == nil {
			err = fmt.Errorf("reported as done: %q", r.Stdout)
		}
		slow <- err
	}()
	time.Sleep(300 * time.Millisecond) // the slow run is under way
	a.renew()                          // A stops renewing: its lease (1 s) expires
	time.Sleep(1500 * time.Millisecond)
	r, err := runErr(t, b.m, ca.ID(), "x += 10\nprint(x)")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(r.Stdout) != "11" {
		t.Fatalf("B after A's lease expired: %q, want 11 (from the checkpoint, without A's run)", r.Stdout)
	}
	if err := <-slow; !errors.Is(err, containers.ErrUnavailable) {
		t.Fatalf("the run A finished after losing its lease: %v, want ErrUnavailable", err)
	}
	if a.m.Held() != 0 {
		t.Fatalf("the fenced A still holds %d interpreters", a.m.Held())
	}
	r, err = runErr(t, a.m, ca.ID(), "print(x)")
	if err != nil || strings.TrimSpace(r.Stdout) != "11" {
		t.Fatalf("through A afterwards: %q %v, want B's 11", r.Stdout, err)
	}
}

// TestEvictionIgnoresHangup: a request whose client hung up makes room by
// evicting another container's idle interpreter; that container's
// checkpoint is taken with the server's context, so its state survives.
func TestEvictionIgnoresHangup(t *testing.T) {
	f := newFixture(t)
	k := keeper(t, t.TempDir(), newKey(t))
	m := managerWith(t, f, k, 0, func(c *pool.Config) { c.MaxSessions, c.WarmWorkers, c.QueueWait = 1, 0, 30*time.Second })
	victim := open(t, m, containers.Spec{Owner: "o"})
	run(t, victim, "kept = 'the victim state'")
	victim.Close()

	other := open(t, m, containers.Spec{Owner: "o"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the client is gone
	_, _ = other.Run(ctx, "print(1)")
	other.Close()

	r, err := runErr(t, m, victim.ID(), "print(kept)")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(r.Stdout) != "the victim state" || r.Reset {
		t.Fatalf("the victim after an eviction by a request whose client hung up: %q reset=%v (stderr %q)", r.Stdout, r.Reset, r.Stderr)
	}
}

// flakyLoads fails the first n Loads as a store that is down would.
type flakyLoads struct {
	*checkpoint.Keeper
	n atomic.Int32
}

func (f *flakyLoads) Load(ctx context.Context, owner, cid string) ([]byte, string, error) {
	if f.n.Add(-1) >= 0 {
		return nil, "", errors.New("the checkpoint store timed out")
	}
	return f.Keeper.Load(ctx, owner, cid)
}

// TestCheckpointStoreHiccupKeepsState: a checkpoint that cannot be read
// for a moment is not a checkpoint that is gone: the run is refused
// (retryable), the checkpoint is kept, and the next run restores it.
// (Before, the run started a fresh interpreter, which soon checkpointed
// over the state.)
func TestCheckpointStoreHiccupKeepsState(t *testing.T) {
	f := newFixture(t)
	root, key := t.TempDir(), newKey(t)
	m := managerWith(t, f, keeper(t, root, key), 0)
	c := open(t, m, containers.Spec{Owner: "o"})
	run(t, c, "x = 7")
	c.Close()
	_ = m.Close() // checkpointed

	flaky := &flakyLoads{Keeper: keeper(t, root, key)}
	flaky.n.Store(1)
	m2 := managerWith(t, f, flaky, 0)
	if _, err := runErr(t, m2, c.ID(), "print(x)"); !errors.Is(err, containers.ErrUnavailable) {
		t.Fatalf("a run whose checkpoint cannot be read: %v, want ErrUnavailable", err)
	}
	r, err := runErr(t, m2, c.ID(), "print(x)")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(r.Stdout) != "7" || r.Reset {
		t.Fatalf("after the store came back: %q reset=%v, want 7 restored", r.Stdout, r.Reset)
	}
}

// TestRedisRestartMidConversation: Redis restarted without persistence
// loses every lease and the token counter. The holder is told it lost
// the lease (its interpreter is dropped: another replica may take the
// container now), the next turn restores the checkpoint on whichever
// replica gets it, and no token repeats: the checkpoint store, which
// recorded the old holder's token, accepts the new holder's writes and
// the conversation goes on with nothing lost.
func TestRedisRestartMidConversation(t *testing.T) {
	f := newFixture(t)
	srv := redistest.StartServer(t)
	k := keeper(t, t.TempDir(), newKey(t))
	a := startReplica(t, f, srv.URL, k, 20*time.Millisecond)
	b := startReplica(t, f, srv.URL, k, 20*time.Millisecond)
	ca := open(t, a.m, containers.Spec{Owner: "o"})
	run(t, ca, "x = 1")
	ca.Close()
	if r, err := runErr(t, b.m, ca.ID(), "x += 1\nprint(x)"); err != nil || strings.TrimSpace(r.Stdout) != "2" {
		t.Fatalf("before the restart: %q %v", r.Stdout, err)
	}
	idleCheckpointed(t, k, ca.ID())
	srv.Restart(t)
	waitFor(t, "A dropping the interpreter whose lease the store lost", func() bool { return a.m.Held() == 0 })
	for i, rep := range []*replica{b, a, b} {
		r, err := runErr(t, rep.m, ca.ID(), "x += 1\nprint(x)")
		if err != nil {
			t.Fatalf("turn %d after the restart: %v", i, err)
		}
		if got := strings.TrimSpace(r.Stdout); got != strconv.Itoa(3+i) {
			t.Fatalf("turn %d after the restart: x = %s (stderr %q), want %d", i, got, r.Stderr, 3+i)
		}
		idleCheckpointed(t, k, ca.ID())
	}
}

// TestCheckpointWhileBusy is the durability promise (row 7) for a
// container in constant use: its state reaches the store within about
// checkpoints.after of a response even though a new turn arrives before
// that every time (they used to put the checkpoint off for as long as
// the turns kept coming, and a kill -9 then lost all of them).
func TestCheckpointWhileBusy(t *testing.T) {
	f := newFixture(t)
	k := keeper(t, t.TempDir(), newKey(t))
	const after = 200 * time.Millisecond
	m := managerWith(t, f, k, after)
	c := open(t, m, containers.Spec{Owner: "o"})
	run(t, c, "n = 0")
	c.Close()
	start := time.Now()
	var saved time.Duration
	for i := 1; time.Since(start) < 3*time.Second; i++ {
		r, err := runErr(t, m, c.ID(), "n += 1\nprint(n)")
		if err != nil || strings.TrimSpace(r.Stdout) != strconv.Itoa(i) {
			t.Fatalf("turn %d: %q %v", i, r.Stdout, err)
		}
		if tok, _, err := k.Head(context.Background(), "o", c.ID()); err == nil && tok != "" && saved == 0 {
			saved = time.Since(start)
		}
		time.Sleep(after / 4)
	}
	if saved == 0 {
		t.Fatalf("no checkpoint in 3 s of turns every %s with checkpoints.after %s", after/4, after)
	}
	t.Logf("first checkpoint %s after the first turn (checkpoints.after %s)", saved, after)
}

// TestEndedInterpreterRestoresCheckpoint: a run that ends its interpreter
// (here: its request cancelled mid-run — a client hanging up, or the
// replica that forwarded it dying) does not leave the container in a
// fresh interpreter that would soon be checkpointed over its state: the
// next run restores the last checkpoint, and is told it is older than
// the call that ended.
func TestEndedInterpreterRestoresCheckpoint(t *testing.T) {
	f := newFixture(t)
	k := keeper(t, t.TempDir(), newKey(t))
	m := managerWith(t, f, k, 20*time.Millisecond)
	c := open(t, m, containers.Spec{Owner: "o"})
	run(t, c, "x = 1")
	c.Close()
	idleCheckpointed(t, k, c.ID())

	c2 := open(t, m, containers.Spec{Owner: "o", ID: c.ID()})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	r, err := c2.Run(ctx, "x = 2\nimport time\ntime.sleep(30)")
	c2.Close()
	if err == nil && r.Outcome != "cancelled" {
		t.Fatalf("the cancelled run: %+v", r)
	}
	r, err = runErr(t, m, c.ID(), "print(x)")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(r.Stdout) != "1" || !r.Behind {
		t.Fatalf("after a run that ended its interpreter: %q behind=%v reset=%v (stderr %q), want x = 1 from the checkpoint, said to be older", r.Stdout, r.Behind, r.Reset, r.Stderr)
	}
}
