// Package sandboxtest gives tests of any package a real sandbox: the
// production pool, real CPython-WASI under wazero, real worker processes in
// real cgroups. It never substitutes a fake and never skips: when the
// runtime, root or cgroups are missing the test fails and says which.
//
// A package that uses it routes its test binary's worker mode through Main:
//
//	func TestMain(m *testing.M) { sandboxtest.Main(m) }
package sandboxtest

import (
	"context"
	"os"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/sandbox/pool"
	"github.com/codeinterp/codeinterp/sandbox/worker"
)

// workerArg is the argument that turns a test binary into a worker.
const workerArg = "__sandboxtest-worker"

// Main runs the tests, or the worker when the binary was started as one.
func Main(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == workerArg {
		os.Exit(worker.Main(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// Config returns the pool configuration New uses, for tests that start the
// pool themselves: the built runtime, this test binary as the worker, small
// sizes for a 2-core machine, and real cgroup isolation.
func Config(tb testing.TB) pool.Config {
	tb.Helper()
	dir, err := pool.DefaultRuntimeDir()
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
	cfg := pool.DefaultConfig()
	cfg.RuntimeDir = dir
	cfg.WorkerCommand = []string{self, workerArg}
	cfg.MaxSessions = 4
	cfg.WarmWorkers = 1
	cfg.QueueWait = 5 * time.Second
	cfg.Limits.RunTimeout = 20 * time.Second
	cfg.Isolation.CgroupParent = "/codeinterp-test"
	return cfg
}

// New starts a real pool with Config, changed by the options, and closes it
// when the test ends.
func New(tb testing.TB, opts ...func(*pool.Config)) *pool.Pool {
	tb.Helper()
	cfg := Config(tb)
	for _, o := range opts {
		o(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := pool.New(ctx, cfg, zaptest.NewLogger(tb))
	if err != nil {
		tb.Fatalf("sandboxtest: starting the sandbox pool: %v", err)
	}
	tb.Cleanup(func() { p.Close() })
	return p
}
