// Package sandboxtest gives tests of any package a real sandbox: the
// production pool over either provider — real CPython-WASI under wazero in
// real worker processes, or Debian's CPython in real gVisor sandboxes — in
// real cgroups. It never substitutes a fake and never skips: when the
// runtime, runsc, root or cgroups are missing the test fails and says which.
// It also holds the hostile corpus every provider must pass (RunHostile).
//
// A package that uses it routes its test binary's worker mode through Main:
//
//	func TestMain(m *testing.M) { sandboxtest.Main(m) }
package sandboxtest

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/internal/sandbox/gvisor"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
	"github.com/codeinterp/codeinterp/internal/sandbox/wasm"
	"github.com/codeinterp/codeinterp/internal/sandbox/worker"
)

// workerArg is the argument that turns a test binary into a worker.
const workerArg = "__sandboxtest-worker"

// LauncherArg turns a test binary run through Main into the gVisor
// launcher (gvisor.LaunchMain), for tests that configure a gvisor.Kind
// themselves: LauncherCommand = {os.Executable(), LauncherArg}.
const LauncherArg = "__sandboxtest-gvisor-launch"

// Main runs the tests, or the worker or launcher when the binary was
// started as one. The tests run with a canary variable in their
// environment that no guest may see (the hostile corpus checks). Each
// setup runs before the tests (never in a worker or launcher), and the
// function it returns after them.
func Main(m *testing.M, setup ...func() (cleanup func())) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case workerArg:
			os.Exit(worker.Main(os.Args[2:]))
		case LauncherArg:
			os.Exit(gvisor.LaunchMain(os.Args[2:]))
		}
	}
	os.Setenv(CanaryEnv, canaryValue)
	var cleanups []func()
	for _, s := range setup {
		cleanups = append(cleanups, s())
	}
	code := m.Run()
	for _, c := range cleanups {
		c()
	}
	os.Exit(code)
}

// Providers names the sandbox providers, for tests that run on each.
func Providers() []string { return []string{"wasm", "gvisor"} }

// NewProvider starts a real pool of the named provider ("wasm" or
// "gvisor") with the options applied to its shared settings.
func NewProvider(tb testing.TB, provider string, opts ...func(*pool.Config)) *pool.Pool {
	tb.Helper()
	switch provider {
	case "wasm":
		return New(tb, opts...)
	case "gvisor":
		return NewGVisor(tb, opts...)
	}
	tb.Fatalf("sandboxtest: unknown provider %q", provider)
	return nil
}

// GVisorConfig returns the configuration NewGVisor uses: runsc from PATH
// with the ptrace platform, this test binary as the launcher, the limits
// recommended for the kind scaled down for a 2-core machine, and real
// cgroup isolation.
func GVisorConfig(tb testing.TB) (pool.Config, gvisor.Config) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Fatalf("sandboxtest: tests of the gVisor sandbox need root (runsc, cgroups); run them as root as CI does")
	}
	self, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	pc := pool.DefaultConfig()
	pc.MaxSessions = 3
	pc.WarmWorkers = 1
	pc.QueueWait = 30 * time.Second
	pc.Limits.RunTimeout = 30 * time.Second
	pc.Limits.GuestMemoryBytes = 512 << 20
	pc.Limits.MaxGuestMemoryBytes = 1 << 30
	pc.Limits.WorkerOverheadBytes = gvisor.RecommendedOverheadBytes
	// runsc, its gofer, the sentry and the ptrace stubs are all host
	// threads in the cgroup: the WASM worker's 64 is too few.
	pc.Limits.Pids = gvisor.RecommendedPids
	pc.Limits.WorkerOverheadCPUs = gvisor.RecommendedOverheadCPUs
	pc.Isolation.CgroupParent = "/codeinterp-test"
	gc := gvisor.Config{LauncherCommand: []string{self, LauncherArg}, StateDir: tb.TempDir()}
	ApplyGVisorEnv(tb, &gc)
	return pc, gc
}

// ApplyGVisorEnv applies GVisorEnv, if set, to gc.
func ApplyGVisorEnv(tb testing.TB, gc *gvisor.Config) {
	tb.Helper()
	v := os.Getenv(GVisorEnv)
	if v == "" {
		return
	}
	// A side-by-side measurement on another platform, or a baseline on
	// another runsc (make bench).
	platform, runsc, _ := strings.Cut(v, ",")
	gc.Platform = platform
	if runsc != "" {
		gc.RunscPath, gc.RunscVersion = runsc, gvisor.AnyRunscVersion
	}
	tb.Logf("sandboxtest: %s=%q: platform %s, runsc %q", GVisorEnv, v, platform, runsc)
}

// GVisorEnv, when set, is "PLATFORM" or "PLATFORM,RUNSC": the gVisor
// pools of GVisorConfig run on that platform (and that runsc, whatever its
// version) instead of the defaults. make bench uses it to measure ptrace
// beside systrap, and Debian's runsc as a baseline, in one run.
const GVisorEnv = "CODEINTERP_TEST_GVISOR"

// NewGVisor starts a real pool of gVisor sandboxes with GVisorConfig,
// changed by the options, and closes it when the test ends.
func NewGVisor(tb testing.TB, opts ...func(*pool.Config)) *pool.Pool {
	tb.Helper()
	return NewGVisorWith(tb, nil, opts...)
}

// NewGVisorWith is NewGVisor with the kind's configuration changed by kind
// too (nil: none), e.g. ColdStart.
func NewGVisorWith(tb testing.TB, kind func(*gvisor.Config), opts ...func(*pool.Config)) *pool.Pool {
	tb.Helper()
	pc, gc := GVisorConfig(tb)
	for _, o := range opts {
		o(&pc)
	}
	gc.Limits = pc.Limits // the first checkpoint is taken for them
	if kind != nil {
		kind(&gc)
	}
	k, err := gvisor.New(gc, zaptest.NewLogger(tb))
	if err != nil {
		tb.Fatalf("sandboxtest: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, err := pool.New(ctx, pc, k, zaptest.NewLogger(tb))
	if err != nil {
		tb.Fatalf("sandboxtest: starting the gVisor pool (install runsc and the python3-* packages: make setup): %v", err)
	}
	tb.Cleanup(func() { p.Close() })
	return p
}

// Config returns the pool configuration New uses, for tests that start the
// pool themselves: the built runtime, this test binary as the worker, small
// sizes for a 2-core machine, and real cgroup isolation.
func Config(tb testing.TB) wasm.Config {
	tb.Helper()
	dir, err := wasm.DefaultRuntimeDir()
	if err != nil {
		tb.Fatalf("sandboxtest: the CPython-WASI runtime is required (run `make runtime`): %v", err)
	}
	if os.Geteuid() != 0 {
		tb.Fatalf("sandboxtest: tests of the real sandbox need root (cgroups, privilege drop); run them as root as CI does")
	}
	self, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	cfg := wasm.DefaultConfig()
	cfg.RuntimeDir = dir
	cfg.WorkerCommand = []string{self, workerArg}
	cfg.MaxSessions = 4
	cfg.WarmWorkers = 1
	cfg.QueueWait = 5 * time.Second
	cfg.Limits.RunTimeout = 20 * time.Second
	cfg.Isolation.CgroupParent = "/codeinterp-test"
	// Every test pool would otherwise take its own snapshot (seconds of
	// CPU each): share the newest. Tests of rotation take their own.
	cfg.ReuseSnapshot = true
	return cfg
}

// New starts a real pool with Config, its shared settings changed by the
// options, and closes it when the test ends.
func New(tb testing.TB, opts ...func(*pool.Config)) *pool.Pool {
	tb.Helper()
	cfg := Config(tb)
	for _, o := range opts {
		o(&cfg.Config)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := wasm.New(ctx, cfg, zaptest.NewLogger(tb))
	if err != nil {
		tb.Fatalf("sandboxtest: starting the sandbox pool: %v", err)
	}
	tb.Cleanup(func() { p.Close() })
	return p
}
