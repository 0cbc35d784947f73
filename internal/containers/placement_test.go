package containers_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/codeinterp/codeinterp/internal/checkpoint/checkpointtest"
	"github.com/codeinterp/codeinterp/internal/cluster"
	"github.com/codeinterp/codeinterp/internal/cluster/redislease"
	"github.com/codeinterp/codeinterp/internal/containers"
	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
	"github.com/codeinterp/codeinterp/internal/store/redis/redistest"
)

// replica is one server of a cluster: a Manager with its own sandbox, on
// the store every replica shares, with a cluster.Node over a real Redis
// and the forwarding service on a loopback port.
type replica struct {
	m     *containers.Manager
	node  *cluster.Node
	srv   *grpc.Server
	renew context.CancelFunc
}

func startReplica(t testing.TB, f *fixture, redisURL string, k containers.Checkpoints, after time.Duration) *replica {
	t.Helper()
	return startReplicaOn(t, "wasm", f, redisURL, k, after)
}

// startReplicaOn is startReplica with the provider's sandbox.
func startReplicaOn(t testing.TB, provider string, f *fixture, redisURL string, k containers.Checkpoints, after time.Duration, edit ...func(*containers.Config)) *replica {
	t.Helper()
	leases, err := redislease.Dial(context.Background(), redisURL)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{}
	r.node, err = cluster.NewNode(cluster.Config{
		Addr: lis.Addr().String(), Secret: "the-replicas-shared-secret", Leases: leases, TTL: time.Second,
		Handler: func(ctx context.Context, key string, token uint64, payload []byte, progress func([]byte)) ([]byte, error) {
			return r.m.ServeForwarded(ctx, key, token, payload, progress)
		},
		OnLost: func(key string) { r.m.Fenced(key) },
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := containers.Config{Now: f.clock.now, Checkpoints: k, CheckpointAfter: after, Placement: r.node}
	for _, e := range edit {
		e(&cfg)
	}
	r.m = containers.New(cfg, f.st, sandboxtest.NewProvider(t, provider), nil)
	r.srv = r.node.NewServer()
	go func() { _ = r.srv.Serve(lis) }()
	ctx, cancel := context.WithCancel(context.Background())
	r.renew = cancel
	go r.node.Renew(ctx)
	t.Cleanup(func() { r.srv.Stop(); _ = r.m.Close(); cancel(); _ = r.node.Close(); _ = leases.Close() })
	return r
}

// TestRunsGoToTheHolder is issue 28's table on two replicas: the next
// turn on the other replica, back, and concurrent runs through both reach
// the one interpreter (one x, nothing lost, no reset).
func TestRunsGoToTheHolder(t *testing.T) {
	f := newFixture(t)
	url := redistest.Start(t)
	a, b := startReplica(t, f, url, nil, 0), startReplica(t, f, url, nil, 0)

	ca := open(t, a.m, containers.Spec{Owner: "o"})
	run(t, ca, "x = 41")
	ca.Close()
	cb := open(t, b.m, containers.Spec{Owner: "o", ID: ca.ID()})
	r := run(t, cb, "x += 1\nprint(x)")
	cb.Close()
	if strings.TrimSpace(r.Stdout) != "42" || r.Reset {
		t.Fatalf("the next turn on replica B: %q reset=%v, want 42 from A's interpreter", r.Stdout, r.Reset)
	}
	if a.m.Held() != 1 || b.m.Held() != 0 {
		t.Fatalf("interpreters held: A %d, B %d; want only A's", a.m.Held(), b.m.Held())
	}
	ca2 := open(t, a.m, containers.Spec{Owner: "o", ID: ca.ID()})
	if r := run(t, ca2, "print(x)"); strings.TrimSpace(r.Stdout) != "42" {
		t.Fatalf("back on A: %q, want 42", r.Stdout)
	}
	ca2.Close()

	// Concurrent runs through both replicas serialise at the holder.
	const each = 6
	var wg sync.WaitGroup
	errs := make(chan error, 2*each)
	for _, rep := range []*replica{a, b} {
		for range each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := rep.m.Open(context.Background(), containers.Spec{Owner: "o", ID: ca.ID()})
				if err != nil {
					errs <- err
					return
				}
				defer c.Close()
				r, err := c.Run(context.Background(), "x += 1")
				if err == nil && (r.Outcome != "completed" || r.Reset) {
					err = fmt.Errorf("a concurrent run: %+v", r)
				}
				if err != nil {
					errs <- err
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	cb2 := open(t, b.m, containers.Spec{Owner: "o", ID: ca.ID()})
	defer cb2.Close()
	if r := run(t, cb2, "print(x)"); strings.TrimSpace(r.Stdout) != fmt.Sprint(42+2*each) {
		t.Fatalf("after %d concurrent increments through two replicas: %q, want %d", 2*each, r.Stdout, 42+2*each)
	}
	if b.m.Held() != 0 {
		t.Fatalf("B opened %d interpreters of a container A holds", b.m.Held())
	}
}

// TestTakeOverAndFencing: the holder stops answering (a partition, or a
// process that hangs); the next run elsewhere takes the container over
// and restores its last checkpoint. The old holder, when it comes back,
// learns it lost the lease: its interpreter is dropped, never run again,
// and its runs go to the new holder.
func TestTakeOverAndFencing(t *testing.T) {
	f := newFixture(t)
	url := redistest.Start(t)
	root, key := t.TempDir(), newKey(t)
	a := startReplica(t, f, url, keeper(t, root, key), 20*time.Millisecond)
	b := startReplica(t, f, url, keeper(t, root, key), 20*time.Millisecond)

	ca := open(t, a.m, containers.Spec{Owner: "o"})
	run(t, ca, "x = 41")
	ca.Close()
	waitFor(t, "A's idle checkpoint", func() bool { return checkpointed(root, ca.ID()) })
	// A is cut off: it neither answers nor renews.
	a.srv.Stop()
	a.renew()

	cb := open(t, b.m, containers.Spec{Owner: "o", ID: ca.ID()})
	r := run(t, cb, "x += 1\nprint(x)")
	cb.Close()
	if strings.TrimSpace(r.Stdout) != "42" || r.Reset {
		t.Fatalf("on B after A was cut off: %q reset=%v, want 42 restored from A's checkpoint", r.Stdout, r.Reset)
	}
	if b.m.Held() != 1 {
		t.Fatalf("B holds %d interpreters, want the container's", b.m.Held())
	}
	// A comes back: its next run learns from the lease that B holds the
	// container, drops its own interpreter and goes to B.
	ca2 := open(t, a.m, containers.Spec{Owner: "o", ID: ca.ID()})
	defer ca2.Close()
	if r := run(t, ca2, "print(x)"); strings.TrimSpace(r.Stdout) != "42" {
		t.Fatalf("a run through the fenced A: %q, want B's 42", r.Stdout)
	}
	if a.m.Held() != 0 {
		t.Fatalf("the fenced A still holds %d interpreters", a.m.Held())
	}
}

// TestDrainHandsOver: a replica that stops (SIGTERM) checkpoints what it
// holds and releases it; a run arriving meanwhile elsewhere waits for
// that and restores the state.
func TestDrainHandsOver(t *testing.T) {
	f := newFixture(t)
	url := redistest.Start(t)
	root, key := t.TempDir(), newKey(t)
	a := startReplica(t, f, url, keeper(t, root, key), 0)
	b := startReplica(t, f, url, keeper(t, root, key), 0)
	ca := open(t, a.m, containers.Spec{Owner: "o"})
	run(t, ca, "import statistics\nvalues = [1, 2, 3, 10]")
	ca.Close()

	a.node.Drain()
	done := make(chan containers.RunResult, 1)
	go func() {
		cb := open(t, b.m, containers.Spec{Owner: "o", ID: ca.ID()})
		defer cb.Close()
		done <- run(t, cb, "print(statistics.mean(values))")
	}()
	time.Sleep(100 * time.Millisecond) // B is waiting for A's release
	_ = a.m.Close()
	select {
	case r := <-done:
		if strings.TrimSpace(r.Stdout) != "4" || r.Reset {
			t.Fatalf("on B after A's drain: %q reset=%v, want 4 and no reset", r.Stdout, r.Reset)
		}
	case <-time.After(time.Minute):
		t.Fatal("the run on B never finished")
	}
}

// checkpointed reports whether root holds a checkpoint of cid.
func checkpointed(root, cid string) bool {
	_, running, ok := checkpointtest.Head(root, cid)
	return ok && !running && len(checkpointtest.States(root, cid)) == 1
}

// TestGVisorContainerAcrossReplicas is the same on the gVisor provider: a
// turn on the other replica runs in the holder's sandbox; when the holder
// drains, its sandbox is checkpointed (runsc checkpoint) and the next
// turn restores it on the other replica — variables, imports, the working
// directory and /tmp.
func TestGVisorContainerAcrossReplicas(t *testing.T) {
	f := newFixture(t)
	url := redistest.Start(t)
	root, key := t.TempDir(), newKey(t)
	a := startReplicaOn(t, "gvisor", f, url, keeper(t, root, key), 0)
	b := startReplicaOn(t, "gvisor", f, url, keeper(t, root, key), 0)
	ca := open(t, a.m, containers.Spec{Owner: "o"})
	run(t, ca, "import pandas as pd, os\ndf = pd.DataFrame({'v': range(1000)})\nos.chdir('/tmp')\nopen('note.txt', 'w').write('kept')")
	ca.Close()
	cb := open(t, b.m, containers.Spec{Owner: "o", ID: ca.ID()})
	if r := run(t, cb, "print(int(df.v.sum()))"); strings.TrimSpace(r.Stdout) != "499500" || r.Reset {
		t.Fatalf("a turn on B while A holds the sandbox: %q reset=%v", r.Stdout, r.Reset)
	}
	cb.Close()
	if b.m.Held() != 0 {
		t.Fatalf("B opened %d sandboxes of a container A holds", b.m.Held())
	}
	_ = a.m.Close() // SIGTERM: checkpointed and released
	cb2 := open(t, b.m, containers.Spec{Owner: "o", ID: ca.ID()})
	defer cb2.Close()
	r := run(t, cb2, "print(int(df.v.sum()), os.getcwd(), open('note.txt').read())")
	if strings.TrimSpace(r.Stdout) != "499500 /tmp kept" || r.Reset {
		t.Fatalf("on B after A's drain: %q reset=%v (stderr %q), want the sandbox restored", r.Stdout, r.Reset, r.Stderr)
	}
}
