package gvisor_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/sandbox/cgroup"
	"github.com/codeinterp/codeinterp/sandbox/pool"
)

// TestLifecycle covers what the pool relies on besides Run: a Confine
// failure leaves nothing running, a background start runs niced until
// Foreground, cancellation ends Run promptly, Kill is idempotent and
// concurrent, and two sandboxes do not share randomness.
func TestLifecycle(t *testing.T) {
	e := newEnv(t)
	if env := e.kind.Environment(); env.Provider != "gvisor" || !strings.HasPrefix(env.PythonVersion, "3.") || !env.Images || len(env.Packages) == 0 {
		t.Errorf("Environment() = %+v", env)
	}

	t.Run("confine failure", func(t *testing.T) {
		var pid int
		_, err := e.kind.Start(context.Background(), pool.StartOptions{
			ID: "confine-fails", MemoryBytes: 256 << 20, Limits: testLimits(),
			Confine: func(p int) error { pid = p; return errors.New("no cgroup for you") },
		})
		if err == nil || !strings.Contains(err.Error(), "no cgroup for you") {
			t.Fatalf("Start with a failing Confine: %v", err)
		}
		if pid == 0 {
			t.Fatal("Confine was never called")
		}
		if err := syscall.Kill(pid, 0); err == nil {
			t.Fatalf("the launcher (pid %d) is still running after a Confine failure", pid)
		}
	})

	a, b := e.start(t), e.start(t, func(o *pool.StartOptions) { o.Background = true })
	t.Run("background start is niced until Foreground", func(t *testing.T) {
		if n := niceOf(t, b.group); n != 10 {
			t.Errorf("background sandbox nice = %d, want 10", n)
		}
		b.it.Foreground()
		if n := niceOf(t, b.group); n != 0 {
			t.Errorf("after Foreground nice = %d, want 0", n)
		}
	})
	t.Run("randomness differs", func(t *testing.T) {
		code := "import os\nos.urandom(16).hex()"
		ra, rb := a.run(code, 0), b.run(code, 0)
		if string(ra.Stdout) == string(rb.Stdout) || len(ra.Stdout) < 32 {
			t.Fatalf("two sandboxes drew %q and %q", ra.Stdout, rb.Stdout)
		}
	})
	t.Run("cancellation", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(300*time.Millisecond, cancel)
		started := time.Now()
		_, err := a.it.Run(ctx, 99, []byte("import time\ntime.sleep(30)"), 20*time.Second)
		if !errors.Is(err, context.Canceled) || time.Since(started) > 5*time.Second {
			t.Fatalf("cancelled Run: %v after %v", err, time.Since(started))
		}
	})
	t.Run("kill is idempotent and concurrent", func(t *testing.T) {
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() { defer wg.Done(); a.it.Kill() }()
		}
		wg.Wait()
		<-a.it.Exited()
		if _, err := a.tryRun("1", time.Second); err == nil {
			t.Fatal("Run after Kill succeeded")
		}
		b.expectOK("print('b unaffected')", "b unaffected")
	})
}

// niceOf returns the nice value of the sandbox's sentry threads (all must
// agree).
func niceOf(t *testing.T, g cgroup.Group) int {
	t.Helper()
	pids, err := g.Procs()
	if err != nil || len(pids) == 0 {
		t.Fatalf("procs: %v %v", pids, err)
	}
	nice := map[int]bool{}
	for _, pid := range pids {
		tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
		for _, task := range tasks {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + task.Name() + "/stat")
			if err != nil {
				continue
			}
			f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
			n, _ := strconv.Atoi(f[16]) // field 19 of stat, counted after the comm
			nice[n] = true
		}
	}
	if len(nice) != 1 {
		t.Fatalf("threads disagree on nice: %v", nice)
	}
	for n := range nice {
		return n
	}
	return 0
}
