package wasm_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
	"github.com/codeinterp/codeinterp/internal/sandbox/wasm"
)

// hostilePool has small limits so that every hostile program trips one fast.
func hostilePool(t *testing.T) *pool.Pool {
	return sandboxtest.New(t, func(c *pool.Config) {
		c.Limits.RunTimeout = 1500 * time.Millisecond
		c.Limits.StdoutBytes = 4 << 10
		c.Limits.StderrBytes = 4 << 10
		c.Limits.SourceBytes = 8 << 10
		c.Limits.GuestMemoryBytes = 128 << 20
		c.Limits.ScratchBytes = 1 << 20
	})
}

// TestHostileWASMSpecifics runs the attacks that only make sense against
// the WASM guest (its mounts, its environment, wasm stack limits and
// threads); the corpus every provider passes is sandboxtest.RunHostile.
func TestHostileWASMSpecifics(t *testing.T) {
	p := hostilePool(t)
	cases := []struct {
		name  string
		code  string
		want  []sandbox.Outcome
		check func(t *testing.T, r sandbox.Result)
	}{
		{name: "list the root", code: "import os\nprint(sorted(os.listdir('/')))", want: []sandbox.Outcome{sandbox.OutcomeCompleted, sandbox.OutcomeError},
			check: all(stdoutLacks("etc"), stdoutLacks("proc"), stdoutLacks("root"))},
		{name: "escape the stdlib mount with ..", code: "print(open('/usr/local/lib/../../../etc/hostname').read())", want: []sandbox.Outcome{sandbox.OutcomeError}},
		{name: "write into the stdlib", code: "open('/usr/local/lib/python3.13/os.py', 'a').write('pwned = 1')", want: []sandbox.Outcome{sandbox.OutcomeError}},
		{name: "environment", code: "import os\nprint(sorted(os.environ))", want: []sandbox.Outcome{sandbox.OutcomeCompleted},
			check: func(t *testing.T, r sandbox.Result) {
				// A restored interpreter needs no PYTHONHOME: its start-up
				// happened in the snapshot step, which cleared environ.
				if strings.TrimSpace(r.Stdout) != "[]" {
					t.Errorf("guest environment is %s, want it empty", r.Stdout)
				}
			}},
		{name: "deep recursion", code: "import sys\nsys.setrecursionlimit(10**6)\ndef f(n):\n    return f(n + 1)\nf(0)", want: []sandbox.Outcome{sandbox.OutcomeError, sandbox.OutcomeCrashed, sandbox.OutcomeMemoryLimit, sandbox.OutcomeTimeout}},
		{name: "deep C recursion", code: "import sys\nsys.setrecursionlimit(10**6)\nx = []\nfor _ in range(200000):\n    x = [x]\nrepr(x)", want: []sandbox.Outcome{sandbox.OutcomeError, sandbox.OutcomeCrashed, sandbox.OutcomeTimeout}},
		{name: "threads", code: "import threading\nthreading.Thread(target=print).start()", want: []sandbox.Outcome{sandbox.OutcomeError},
			check: stderrHas("thread")},
		{name: "fill the scratch space", code: "f = open('/tmp/big', 'wb')\nwhile True:\n    f.write(b'x' * 65536)\n    f.flush()", want: []sandbox.Outcome{sandbox.OutcomeError},
			// wazero v1.12 cannot carry ENOSPC to the guest: memfs reports
			// EIO, and the worker says what it means.
			check: all(stderrHas("OSError"), stderrHas("are full (1 MiB"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := open(t, p)
			r, err := s.Run(context.Background(), c.code)
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			ok := false
			for _, w := range c.want {
				ok = ok || r.Outcome == w
			}
			if !ok {
				t.Fatalf("outcome %s (%s), want one of %v\nstdout %.300q\nstderr %.500q", r.Outcome, r.Detail, c.want, r.Stdout, r.Stderr)
			}
			if c.check != nil {
				c.check(t, r)
			}
			// The same session (possibly on a fresh interpreter) still works.
			after := run(t, s, "print(6 * 7)")
			if after.Outcome != sandbox.OutcomeCompleted || strings.TrimSpace(after.Stdout) != "42" {
				t.Fatalf("session unusable after %q: %+v", c.name, after)
			}
		})
	}
}

func stderrHas(s string) func(*testing.T, sandbox.Result) {
	return func(t *testing.T, r sandbox.Result) {
		if !strings.Contains(r.Stderr, s) {
			t.Errorf("stderr lacks %q: %.500q", s, r.Stderr)
		}
	}
}

func stdoutLacks(s string) func(*testing.T, sandbox.Result) {
	return func(t *testing.T, r sandbox.Result) {
		if strings.Contains(r.Stdout, s) {
			t.Errorf("stdout reveals %q: %.500q", s, r.Stdout)
		}
	}
}

func all(fs ...func(*testing.T, sandbox.Result)) func(*testing.T, sandbox.Result) {
	return func(t *testing.T, r sandbox.Result) {
		for _, f := range fs {
			f(t, r)
		}
	}
}

// TestCapacity: MaxSessions sessions open at once; one more fails with
// ErrCapacity after the queue wait; closing one frees a slot.
func TestCapacity(t *testing.T) {
	p := sandboxtest.New(t, func(c *pool.Config) {
		c.MaxSessions, c.WarmWorkers, c.QueueWait = 2, 1, 200*time.Millisecond
	})
	a, b := open(t, p), open(t, p)
	_ = b
	if c := p.Capacity(); c.InUse != 2 || c.Max != 2 {
		t.Fatalf("capacity %+v, want 2 of 2 in use", c)
	}
	_, err := p.Open(context.Background(), sandbox.SessionOptions{})
	if !errors.Is(err, sandbox.ErrCapacity) {
		t.Fatalf("third session: %v, want ErrCapacity", err)
	}
	before := map[int]bool{}
	for _, pid := range p.WorkerPIDs() {
		before[pid] = true
	}
	a.Close()
	// Close returns at once; the slot comes back only once the worker is
	// reaped. So when InUse drops, one of the workers must be gone.
	for p.Capacity().InUse == 2 {
		time.Sleep(time.Millisecond)
	}
	gone := 0
	for pid := range before {
		if syscall.Kill(pid, 0) != nil {
			gone++
		}
	}
	if gone == 0 {
		t.Fatalf("a slot was released while every worker of the closed session still existed")
	}
	c := open(t, p)
	if r := run(t, c, "print('in')"); strings.TrimSpace(r.Stdout) != "in" {
		t.Fatalf("session after a slot freed: %+v", r)
	}
}

// TestCapacityWaitsInQueue: an Open waiting for capacity gets the slot that
// a closing session frees within the queue wait.
func TestCapacityWaitsInQueue(t *testing.T) {
	p := sandboxtest.New(t, func(c *pool.Config) {
		c.MaxSessions, c.WarmWorkers, c.QueueWait = 1, 1, 30*time.Second
	})
	a := open(t, p)
	got := make(chan error, 1)
	go func() {
		s, err := p.Open(context.Background(), sandbox.SessionOptions{})
		if err == nil {
			s.Close()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("Open returned (%v) while no capacity was free", err)
	case <-time.After(200 * time.Millisecond):
	}
	a.Close()
	if err := <-got; err != nil {
		t.Fatalf("queued Open: %v", err)
	}
}

// TestCancelKillsWorkerBeforeReleasing: cancelling a run returns only once
// the worker process is reaped; then its capacity frees.
func TestCancelKillsWorkerBeforeReleasing(t *testing.T) {
	p := sandboxtest.New(t, func(c *pool.Config) { c.MaxSessions, c.WarmWorkers = 1, 0 })
	s := open(t, p)
	pids := p.WorkerPIDs()
	if len(pids) != 1 {
		t.Fatalf("want exactly one worker, have %v", pids)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		time.Sleep(300 * time.Millisecond)
		cancel()
	}()
	r, err := s.Run(ctx, "while True:\n    pass")
	if err != nil || r.Outcome != sandbox.OutcomeCancelled {
		t.Fatalf("run: %+v, %v; want cancelled", r, err)
	}
	if err := syscall.Kill(pids[0], 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("worker %d still exists after the cancelled run returned (kill -0: %v)", pids[0], err)
	}
	if _, err := p.Open(context.Background(), sandbox.SessionOptions{}); !errors.Is(err, sandbox.ErrCapacity) {
		t.Fatalf("slot released before the session was closed: %v", err)
	}
	s.Close()
	if r := run(t, open(t, p), "print(1)"); r.Outcome != sandbox.OutcomeCompleted {
		t.Fatalf("after cancel: %+v", r)
	}
}

// TestOOMKilledWorkerIsReportedAndReplaced gives the worker's cgroup less
// room than the guest may use, so the kernel's OOM killer ends the worker.
//
// It starts sessions cold: a restored session's snapshot pages are page
// cache shared with the snapshot step (charged there), so its guest meets
// its own wasm memory limit long before the cgroup, and the OOM killer
// never gets a turn.
func TestOOMKilledWorkerIsReportedAndReplaced(t *testing.T) {
	cfg := sandboxtest.Config(t)
	cfg.ColdStart = true
	cfg.Limits.GuestMemoryBytes = 256 << 20
	cfg.Limits.WorkerOverheadBytes = 16 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := wasm.New(ctx, cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	s := open(t, p)
	run(t, s, "kept = 1")
	// Within every limit of the guest's own (linear memory 256 MiB, scratch
	// 32 MiB) but not within the cgroup's 272 MiB, whatever the worker's
	// own footprint: 28 MiB of scratch files (held in the worker's heap),
	// then 240 MiB of linear memory.
	r := run(t, s, "with open('/tmp/f', 'wb') as f:\n    for _ in range(28):\n        f.write(bytes(2**20))\n"+
		"chunks = []\nfor _ in range(24):\n    chunks.append(bytearray(10 * 2**20))")
	if r.Outcome != sandbox.OutcomeMemoryLimit || !strings.Contains(r.Detail, "killed") {
		t.Fatalf("outcome %s (%s), want memory_limit from the OOM killer", r.Outcome, r.Detail)
	}
	after := run(t, s, "print('kept' in globals())")
	if after.Outcome != sandbox.OutcomeCompleted || strings.TrimSpace(after.Stdout) != "False" || !after.StateLost {
		t.Fatalf("after the OOM kill: %+v; want a fresh interpreter that reports lost state", after)
	}
}

// TestSessionMemoryOption: a session may ask for a different guest memory,
// within the operator's maximum.
func TestSessionMemoryOption(t *testing.T) {
	p := sandboxtest.New(t)
	cfg := sandboxtest.Config(t)
	_, err := p.Open(context.Background(), sandbox.SessionOptions{MemoryBytes: cfg.Limits.MaxGuestMemoryBytes * 2})
	var le *sandbox.LimitError
	if !errors.As(err, &le) {
		t.Fatalf("oversized session memory: %v, want *LimitError", err)
	}
	s, err := p.Open(context.Background(), sandbox.SessionOptions{MemoryBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := run(t, s, "x = bytearray(100 * 2**20)")
	if r.Outcome != sandbox.OutcomeMemoryLimit {
		t.Fatalf("100 MiB in a 64 MiB session: %+v", r)
	}
}
