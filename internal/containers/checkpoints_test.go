package containers_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/checkpoint"
	"github.com/codeinterp/codeinterp/internal/checkpoint/checkpointtest"
	"github.com/codeinterp/codeinterp/internal/containers"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/memory"
)

// keeper is a checkpoint store in root with key, as every replica of one
// deployment has it (a shared volume, one Secret).
func keeper(t *testing.T, root string, key []byte) *checkpoint.Keeper {
	return checkpointtest.Keeper(t, root, key, "wasm/test", 64<<20)
}

func newKey(t *testing.T) []byte { return checkpointtest.Key(t) }

func managerWith(t *testing.T, f *fixture, k containers.Checkpoints, after time.Duration, opts ...func(*pool.Config)) *containers.Manager {
	t.Helper()
	m := containers.New(containers.Config{Now: f.clock.now, Checkpoints: k, CheckpointAfter: after}, f.st, sandboxtest.New(t, opts...), nil)
	t.Cleanup(func() { m.Close() })
	return m
}

// TestCheckpointOnEviction: an idle interpreter closed to make room is
// checkpointed first; the container's next run restores its variables,
// and the model is not told they were reset.
func TestCheckpointOnEviction(t *testing.T) {
	f := newFixture(t)
	m := managerWith(t, f, keeper(t, t.TempDir(), newKey(t)), 0, func(c *pool.Config) { c.MaxSessions, c.WarmWorkers, c.QueueWait = 1, 0, 30*time.Second })
	a := open(t, m, containers.Spec{Owner: "o"})
	run(t, a, "x = 41\nopen('/tmp/scratch.txt', 'w').write('tmp kept')\nopen('/mnt/data/keep.txt', 'w').write('kept')")
	a.Close()
	b := open(t, m, containers.Spec{Owner: "o"})
	run(t, b, "print('b')")
	b.Close()
	a2 := open(t, m, containers.Spec{Owner: "o", ID: a.ID()})
	r := run(t, a2, "print(x + 1, open('/tmp/scratch.txt').read(), open('/mnt/data/keep.txt').read())")
	if strings.TrimSpace(r.Stdout) != "42 tmp kept kept" || r.Reset {
		t.Fatalf("after eviction with checkpoints: %q reset=%v, want the variables, /tmp, the file and no reset", r.Stdout, r.Reset)
	}
}

// TestCheckpointAcrossRestart: a server that stops (SIGTERM: Close
// checkpoints what it holds) and one killed (-9) after its background
// checkpoint both leave the container's state to the next server on the
// same store.
func TestCheckpointAcrossRestart(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after time.Duration
		stop  func(m *containers.Manager)
	}{
		{"drained", 0, func(m *containers.Manager) { m.Close() }},
		// kill -9: nothing runs on the way down; the background
		// checkpoint taken once the container went idle is what is left.
		{"killed after the idle checkpoint", 50 * time.Millisecond, func(*containers.Manager) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			root, key := t.TempDir(), newKey(t)
			first := managerWith(t, f, keeper(t, root, key), tc.after)
			a := open(t, first, containers.Spec{Owner: "o"})
			run(t, a, "import statistics\nvalues = [1, 2, 3, 10]")
			a.Close()
			if tc.after > 0 {
				waitFor(t, "the idle checkpoint", func() bool {
					return checkpointed(root, a.ID())
				})
			}
			tc.stop(first)
			next := managerWith(t, f, keeper(t, root, key), 0)
			a2 := open(t, next, containers.Spec{Owner: "o", ID: a.ID()})
			r := run(t, a2, "print(statistics.mean(values))")
			if strings.TrimSpace(r.Stdout) != "4" || r.Reset {
				t.Fatalf("on the next server: %q reset=%v, want 4 and no reset", r.Stdout, r.Reset)
			}
		})
	}
}

// TestCheckpointRefusedMeansReset: a checkpoint that fails its check
// (tampered), one that cannot be taken (a file held open) and a store
// that is gone all end in a fresh interpreter, and the model is told.
func TestCheckpointRefusedMeansReset(t *testing.T) {
	f := newFixture(t)
	root, key := t.TempDir(), newKey(t)
	first := managerWith(t, f, keeper(t, root, key), 0)

	tampered := open(t, first, containers.Spec{Owner: "o"})
	run(t, tampered, "x = 1")
	held := open(t, first, containers.Spec{Owner: "o"})
	run(t, held, "x = 2\nf = open('/tmp/held', 'w')")
	tampered.Close()
	held.Close()
	first.Close()
	files := checkpointtest.States(root, tampered.ID())
	if len(files) != 1 {
		t.Fatalf("no checkpoint of %s after Close: %v", tampered.ID(), files)
	}
	data, _ := os.ReadFile(files[0])
	data[len(data)-3] ^= 1
	if err := os.WriteFile(files[0], data, 0o600); err != nil {
		t.Fatal(err)
	}
	if held := checkpointtest.States(root, held.ID()); len(held) != 0 {
		t.Fatalf("a session holding an open file was checkpointed: %v", held)
	}
	next := managerWith(t, f, keeper(t, root, key), 0)
	for _, id := range []string{tampered.ID(), held.ID()} {
		c := open(t, next, containers.Spec{Owner: "o", ID: id})
		r := run(t, c, "print('x' in globals())")
		if strings.TrimSpace(r.Stdout) != "False" || !r.Reset {
			t.Fatalf("%s: %q reset=%v, want a fresh interpreter and the reset note", id, r.Stdout, r.Reset)
		}
	}
	// The store went away (its directory is gone and cannot be made): a
	// new container runs, but one whose checkpoint cannot be read is
	// refused (retryable) rather than started fresh over its state.
	gone := filepath.Join(t.TempDir(), "gone")
	k := keeper(t, gone, key)
	if err := os.RemoveAll(gone); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gone, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	broken := managerWith(t, f, k, 0)
	c := open(t, broken, containers.Spec{Owner: "o"})
	run(t, c, "y = 3")
	c.Close()
	broken.Close()
	again := managerWith(t, f, k, 0)
	c2 := open(t, again, containers.Spec{Owner: "o", ID: c.ID()})
	if r, err := c2.Run(context.Background(), "print('y' in globals())"); !errors.Is(err, containers.ErrUnavailable) {
		t.Fatalf("with the store down: %q %v, want ErrUnavailable", r.Stdout, err)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within a minute", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStaleHolderReplaced: replica A holds a container's interpreter; its
// next turn ran on replica B (restored from A's checkpoint) and B
// checkpointed. Back on A, the interpreter A still holds is older than the
// container: A replaces it with B's state instead of running on it.
func TestStaleHolderReplaced(t *testing.T) {
	f := newFixture(t)
	root, key := t.TempDir(), newKey(t)
	a := managerWith(t, f, keeper(t, root, key), 20*time.Millisecond)
	b := managerWith(t, f, keeper(t, root, key), 20*time.Millisecond)
	k := keeper(t, root, key)
	ca := open(t, a, containers.Spec{Owner: "o"})
	run(t, ca, "x = 1")
	ca.Close()
	waitHead := func(old string) string {
		var tok string
		waitFor(t, "a new checkpoint", func() bool {
			tok, _, _ = k.Head(context.Background(), "o", ca.ID())
			return tok != "" && tok != old
		})
		return tok
	}
	first := waitHead("")
	cb := open(t, b, containers.Spec{Owner: "o", ID: ca.ID()})
	if r := run(t, cb, "x += 1\nprint(x)"); strings.TrimSpace(r.Stdout) != "2" || r.Reset {
		t.Fatalf("on B: %q reset=%v, want 2 from A's checkpoint", r.Stdout, r.Reset)
	}
	cb.Close()
	waitHead(first)
	ca2 := open(t, a, containers.Spec{Owner: "o", ID: ca.ID()})
	if r := run(t, ca2, "print(x)"); strings.TrimSpace(r.Stdout) != "2" || r.Reset {
		t.Fatalf("back on A: %q reset=%v, want 2 (B's state), not A's stale 1", r.Stdout, r.Reset)
	}
}

// TestRestoredBehind: the holder ran code on the state of its checkpoint
// and died before it checkpointed again. The next server restores that
// checkpoint and the model is told the state is older than its last
// calls — not that it is fresh (it is not), and not nothing (it lost a
// turn).
func TestRestoredBehind(t *testing.T) {
	f := newFixture(t)
	root, key := t.TempDir(), newKey(t)
	first := managerWith(t, f, keeper(t, root, key), 0)
	c := open(t, first, containers.Spec{Owner: "o"})
	run(t, c, "x = 1")
	c.Close()
	first.Close() // checkpointed x = 1

	second := managerWith(t, f, keeper(t, root, key), 0)
	c2 := open(t, second, containers.Spec{Owner: "o", ID: c.ID()})
	if r := run(t, c2, "x = 2"); r.Reset || r.Behind {
		t.Fatalf("restored from a clean checkpoint: reset=%v behind=%v", r.Reset, r.Behind)
	}
	// second is killed now (-9): nothing runs on its way down.

	third := managerWith(t, f, keeper(t, root, key), 0)
	c3 := open(t, third, containers.Spec{Owner: "o", ID: c.ID()})
	r := run(t, c3, "print(x)")
	if strings.TrimSpace(r.Stdout) != "1" || !r.Behind || r.Reset {
		t.Fatalf("after the holder died: %q behind=%v reset=%v, want 1 and behind", r.Stdout, r.Behind, r.Reset)
	}
	if r := run(t, c3, "print(x)"); r.Behind {
		t.Fatal("the note is said again on the next run")
	}
}

// TestRestoreExpired: with RestoreExpired a container used after its
// expiry comes back with its files and its variables (the store kept its
// files ExpiredKeep, the checkpoint store its state), and the model is not
// told anything was reset; past ExpiredKeep it stays expired, as without
// the option.
func TestRestoreExpired(t *testing.T) {
	clk := &clock{t: time.Now()}
	l := store.DefaultLimits()
	l.ExpiredKeep, l.ExpiredMemory = 24*time.Hour, 48*time.Hour
	st := memory.New(l, clk.now)
	t.Cleanup(func() { st.Close() })
	root, key := t.TempDir(), newKey(t)
	newManager := func() *containers.Manager {
		m := containers.New(containers.Config{Now: clk.now, Checkpoints: keeper(t, root, key), RestoreExpired: true}, st, sandboxtest.New(t), nil)
		t.Cleanup(func() { m.Close() })
		return m
	}
	first := newManager()
	a := open(t, first, containers.Spec{Owner: "o"})
	run(t, a, "x = 41\nopen('/mnt/data/keep.txt', 'w').write('kept')")
	a.Close()
	first.Close() // its interpreter is checkpointed
	clk.add(2 * time.Hour)

	next := newManager()
	a2 := open(t, next, containers.Spec{Owner: "o", ID: a.ID()})
	r := run(t, a2, "print(x + 1, open('/mnt/data/keep.txt').read())")
	a2.Close()
	if strings.TrimSpace(r.Stdout) != "42 kept" || r.Reset {
		t.Fatalf("an expired container used again: %q reset=%v, want its variables and files", r.Stdout, r.Reset)
	}
	got, err := st.GetContainer(context.Background(), "o", a.ID())
	if err != nil || got.Expired(clk.now()) {
		t.Fatalf("after the revival: %+v %v, want it live", got, err)
	}
	clk.add(20*time.Minute + 25*time.Hour)
	if _, err := next.Open(context.Background(), containers.Spec{Owner: "o", ID: a.ID()}); !errors.Is(err, containers.ErrExpired) {
		t.Fatalf("past ExpiredKeep: %v, want ErrExpired", err)
	}
}

// TestCheckpointUnderConstantUse: a container whose runs never pause
// (three responses keep one queued behind another) is checkpointed
// anyway, about CheckpointAfter after its first run: the background
// checkpoint takes the run lock from the run that ends, ahead of the
// queue, which a lock that hands itself to its waiters would otherwise
// never let it have. A kill -9 then loses only the runs since.
func TestCheckpointUnderConstantUse(t *testing.T) {
	f := newFixture(t)
	root, key := t.TempDir(), newKey(t)
	k := keeper(t, root, key)
	m := managerWith(t, f, k, 20*time.Millisecond)
	first := open(t, m, containers.Spec{Owner: "o"})
	run(t, first, "n = 0")
	stop := make(chan struct{})
	errs := make(chan error, 3)
	for range 3 {
		c := open(t, m, containers.Spec{Owner: "o", ID: first.ID()})
		go func() {
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				if _, err := c.Run(context.Background(), "import time\ntime.sleep(0.005)\nn += 1"); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	waitFor(t, "a checkpoint while the container is in constant use", func() bool {
		tok, _, _ := k.Head(context.Background(), "o", first.ID())
		return tok != ""
	})
	close(stop)
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// m is killed (-9) now: the next server restores what was written
	// while the runs went on.
	next := managerWith(t, f, keeper(t, root, key), 0)
	c := open(t, next, containers.Spec{Owner: "o", ID: first.ID()})
	r := run(t, c, "print(n)")
	if n, err := strconv.Atoi(strings.TrimSpace(r.Stdout)); err != nil || n < 1 || r.Reset {
		t.Fatalf("restored while in constant use: %q reset=%v, want a count of the runs before the checkpoint", r.Stdout, r.Reset)
	}
}
