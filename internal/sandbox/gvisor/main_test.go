package gvisor_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/internal/sandbox/cgroup"
	"github.com/codeinterp/codeinterp/internal/sandbox/gvisor"
	"github.com/codeinterp/codeinterp/internal/sandbox/internal/wire"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
)

// launchArg turns the test binary into the launcher, as the server's hidden
// command does (sandboxtest.Main routes it).
const launchArg = sandboxtest.LauncherArg

func TestMain(m *testing.M) { sandboxtest.Main(m) }

// testLimits are small limits for a 2-core machine.
func testLimits() pool.Limits {
	return pool.Limits{
		SourceBytes:         256 << 10,
		RunTimeout:          20 * time.Second,
		GuestMemoryBytes:    512 << 20,
		MaxGuestMemoryBytes: 1 << 30,
		WorkerOverheadBytes: gvisor.RecommendedOverheadBytes,
		StdoutBytes:         64 << 10,
		StderrBytes:         64 << 10,
		ScratchBytes:        32 << 20,
		Pids:                gvisor.RecommendedPids,
		CPUs:                1,
	}
}

// env is one prepared Kind and a real cgroup driver, shared by a test's
// interpreters.
type env struct {
	kind     *gvisor.Kind
	driver   cgroup.Driver
	stateDir string
	seq      atomic.Int64
}

// newEnv prepares a real Kind. It fails, never skips, when runsc, python3,
// root or cgroups are missing.
// modes are the two ways a sandbox starts: restored from a checkpoint (the
// default) and cold (sandbox.snapshot: false). The hostile corpus runs in
// both.
var modes = []struct {
	name string
	cold bool
}{{"restored", false}, {"cold", true}}

// platforms are the runsc platforms the hostile corpus runs on: systrap
// (the default) and ptrace (where a host's seccomp profile forbids
// systrap). kvm cannot run here (no nested virtualisation).
var platforms = []string{"systrap", "ptrace"}

// newEnv prepares a kind; mutate adjusts its configuration.
func newEnv(tb testing.TB, mutate ...func(*gvisor.Config)) *env {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Fatal("gvisor tests need root (runsc, cgroups); run them as root as CI does")
	}
	self, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	d, err := cgroup.Open("auto", "/codeinterp-gvisor-test")
	if err != nil {
		tb.Fatalf("gvisor tests need working cgroups: %v", err)
	}
	cfg := gvisor.Config{
		LauncherCommand: []string{self, launchArg},
		StateDir:        tb.TempDir() + "/state",
		Limits:          testLimits(),
	}
	sandboxtest.ApplyGVisorEnv(tb, &cfg)
	for _, m := range mutate {
		m(&cfg)
	}
	k, err := gvisor.New(cfg, zaptest.NewLogger(tb))
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := k.Prepare(ctx); err != nil {
		tb.Fatalf("gvisor is not usable here: %v", err)
	}
	tb.Cleanup(func() {
		if err := k.Close(); err != nil {
			tb.Error(err)
		}
	})
	return &env{kind: k, driver: d, stateDir: cfg.StateDir}
}

// sandbox is a started interpreter and its cgroup.
type sandbox struct {
	tb    testing.TB
	id    string
	it    pool.Interpreter
	group cgroup.Group
	runs  uint64
	once  sync.Once
}

func (e *env) start(tb testing.TB, mutate ...func(*pool.StartOptions)) *sandbox {
	tb.Helper()
	id := fmt.Sprintf("t%d-%d", os.Getpid(), e.seq.Add(1))
	l := testLimits()
	o := pool.StartOptions{ID: id, MemoryBytes: l.GuestMemoryBytes, Limits: l}
	for _, m := range mutate {
		m(&o)
	}
	g, err := e.driver.New(id, cgroup.Limits{MemoryBytes: o.MemoryBytes + l.WorkerOverheadBytes, Pids: l.Pids, CPUs: l.CPUs})
	if err != nil {
		tb.Fatal(err)
	}
	o.Group = g
	o.Confine = func(pid int) error {
		if err := g.Add(pid); err != nil {
			return err
		}
		return g.Verify(pid)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	it, err := e.kind.Start(ctx, o)
	if err != nil {
		_ = g.Delete()
		tb.Fatalf("start: %v", err)
	}
	s := &sandbox{tb: tb, id: id, it: it, group: g}
	tb.Cleanup(s.close)
	return s
}

func (s *sandbox) close() { s.once.Do(s.doClose) }

func (s *sandbox) doClose() {
	s.it.Kill()
	select {
	case <-s.it.Exited():
	default:
		s.tb.Error("Exited not closed after Kill")
	}
	if pids, err := s.group.Procs(); err != nil || len(pids) != 0 {
		s.tb.Errorf("after Kill the cgroup still holds %v (%v)", pids, err)
	}
	if err := s.group.Delete(); err != nil {
		s.tb.Errorf("delete cgroup: %v", err)
	}
}

// run runs code with the given timeout (0: 20 s) and fails on a Run error.
func (s *sandbox) run(code string, timeout time.Duration) *wire.Result {
	s.tb.Helper()
	r, err := s.tryRun(code, timeout)
	if err != nil {
		s.tb.Fatalf("run %q: %v", short(code), err)
	}
	return r
}

func (s *sandbox) tryRun(code string, timeout time.Duration) (*wire.Result, error) {
	if timeout == 0 {
		timeout = 20 * time.Second
	}
	s.runs++
	ctx, cancel := context.WithTimeout(context.Background(), timeout+30*time.Second)
	defer cancel()
	return s.it.Run(ctx, s.runs, []byte(code), timeout)
}

func short(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

func describe(r *wire.Result) string {
	return fmt.Sprintf("status=%s gone=%v detail=%q stdout=%q (+%d) stderr=%q (+%d)", r.Status, r.InterpreterGone,
		r.Detail, tail(string(r.Stdout)), r.StdoutDropped, tail(string(r.Stderr)), r.StderrDropped)
}

func tail(s string) string {
	if len(s) > 400 {
		return "…" + s[len(s)-400:]
	}
	return s
}

// expectOK runs code and checks it completed with stdout containing want.
func (s *sandbox) expectOK(code, want string) *wire.Result {
	s.tb.Helper()
	r := s.run(code, 0)
	if r.Status != wire.StatusOK || !strings.Contains(string(r.Stdout), want) {
		s.tb.Fatalf("%q: %s; want ok with %q", short(code), describe(r), want)
	}
	return r
}
