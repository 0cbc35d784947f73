package gvisor_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/sandbox/cgroup"
	"github.com/codeinterp/codeinterp/internal/sandbox/gvisor"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
)

// TestLifecycle covers what the pool relies on besides Run: a Confine
// failure leaves nothing running, a background start is not niced,
// cancellation ends Run promptly, Kill is idempotent and concurrent, and
// two sandboxes do not share randomness.
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
	t.Run("background start is not niced", func(t *testing.T) {
		// systrap's sentry runs its stub threads at its own nice + 1,
		// fixed when it starts: a niced start would leave every stub
		// thread made later niced for good.
		b.it.Foreground()
		b.run("import threading\nt = threading.Thread(target=sum, args=(range(10),)); t.start(); t.join()", 0)
		for n := range nicesOf(t, b.group) {
			if n != 0 && n != 1 {
				t.Errorf("a thread of the background sandbox has nice %d, want 0 (sentry, gofer) or 1 (stubs)", n)
			}
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
		// Well before the run's own 20 s timeout (the cell sleeps 30 s):
		// the cancel, not the timeout, ended it.
		if !errors.Is(err, context.Canceled) || time.Since(started) > 15*time.Second {
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
	t.Run("nothing left after kill", func(t *testing.T) {
		// runsc bind-mounts an empty network namespace at
		// <root>/null-netns and leaves it when the sandbox ends: Kill
		// unmounts it before removing the interpreter's directory (else
		// EBUSY, and a mount and a directory leaked per sandbox).
		dir := filepath.Join(e.stateDir, "i-"+a.id)
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the killed sandbox's directory %s: %v, want it removed", dir, err)
		}
		mounts, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(mounts), "\n") {
			if strings.Contains(l, dir+"/") {
				t.Errorf("a mount of the killed sandbox is left: %s", l)
			}
		}
	})
}

// niceOf returns the nice value of the sandbox's sentry threads (all must
// agree).
// nicesOf is the set of nice values of the threads in g.
func nicesOf(t *testing.T, g cgroup.Group) map[int]bool {
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
	return nice
}

// TestRestoredSessionsIndependent: sessions restored from one checkpoint
// start from the same memory, so every generator the image had seeded
// would repeat across them unless the kernel reseeds it; the clock must be
// the host's, not the image's. The shared str hash seed proves that the
// sessions compared really came from one image (cold sandboxes differ in
// it too).
func TestRestoredSessionsIndependent(t *testing.T) {
	const probe = `import random, uuid, tempfile, secrets, time, numpy
print(random.random(), numpy.random.random(), numpy.random.default_rng().random(),
      uuid.uuid4().hex, next(tempfile._get_candidate_names()), secrets.token_hex(8),
      hash('codeinterp'), repr(time.time()))`
	type draw struct {
		fields []string
		clock  time.Duration // guest time minus host time
	}
	sample := func(t *testing.T, e *env) []draw {
		var out []draw
		for range 3 {
			s := e.start(t)
			before := time.Now()
			r := s.expectOK(probe, "")
			f := strings.Fields(string(r.Stdout))
			if len(f) != 8 {
				t.Fatalf("probe printed %q", r.Stdout)
			}
			sec, err := strconv.ParseFloat(f[7], 64)
			if err != nil {
				t.Fatal(err)
			}
			guest := time.Unix(0, int64(sec*1e9))
			out = append(out, draw{f[:7], guest.Sub(before)})
			s.close()
		}
		return out
	}
	names := []string{"random", "numpy legacy", "numpy default_rng", "uuid4", "tempfile name", "secrets", "str hash"}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			e := newEnv(t, func(c *gvisor.Config) { c.ColdStart = m.cold })
			// A clock restored with the image would stay behind by at
			// least the time since the checkpoint: make that seconds.
			time.Sleep(3 * time.Second)
			draws := sample(t, e)
			for i, name := range names {
				seen := map[string]bool{}
				for _, d := range draws {
					seen[d.fields[i]] = true
				}
				shared := name == "str hash" && !m.cold
				if shared && len(seen) != 1 {
					t.Errorf("%s: sessions of one checkpoint differ (%v): were they restored from one image?", name, seen)
				}
				if !shared && len(seen) != len(draws) {
					t.Errorf("%s: %d sessions drew only %d distinct values: %v", name, len(draws), len(seen), seen)
				}
			}
			for _, d := range draws {
				// The guest read its clock after the host's before: a
				// restored clock would be the checkpoint's, seconds or more
				// in the past.
				if d.clock < -time.Second || d.clock > time.Minute {
					t.Errorf("the sandbox's clock is %v off the host's", d.clock)
				}
			}
		})
	}
}
