package gvisor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	sbx "github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/gvisor"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
)

// These benchmarks go through the pool (sandbox.Provider), as the server
// does; their names say "GVisor" so that docs/benchmarks.md tells them from
// the WASM provider's.

// BenchmarkGVisorWarmPrint25 times print(25) from the call to the result in
// a fresh session that took a pre-warmed sandbox.
func BenchmarkGVisorWarmPrint25(b *testing.B) {
	sandboxtest.BenchWarmPrint25(b, sandboxtest.NewGVisor(b, func(c *pool.Config) { c.WarmWorkers = 1 }))
}

// BenchmarkGVisorWarmPrint25SecondCall is the same as a session's second
// call.
func BenchmarkGVisorWarmPrint25SecondCall(b *testing.B) {
	sandboxtest.BenchWarmPrint25SecondCall(b, sandboxtest.NewGVisor(b, func(c *pool.Config) { c.WarmWorkers = 1 }))
}

// BenchmarkGVisorColdSession opens a session with no warm sandbox and runs
// print(25): a sandbox is restored from the checkpoint (runsc restore, the
// kernel's begin frame). BenchmarkGVisorColdSessionNoSnapshot is the same
// with sandbox.snapshot: false: runsc, the sentry, CPython and the heavy
// imports all start.
func BenchmarkGVisorColdSession(b *testing.B) {
	sandboxtest.BenchColdPrint25(b, sandboxtest.NewGVisor(b, func(c *pool.Config) { c.WarmWorkers = 0 }))
}

func BenchmarkGVisorColdSessionNoSnapshot(b *testing.B) {
	sandboxtest.BenchColdPrint25(b, sandboxtest.NewGVisorWith(b, coldStart, func(c *pool.Config) { c.WarmWorkers = 0 }))
}

// BenchmarkGVisorSessionThroughput opens, uses and closes sessions back to
// back as fast as the pool can start sandboxes (restored from the
// checkpoint); it reports sessions/s. The NoSnapshot variant starts each
// cold.
func BenchmarkGVisorSessionThroughput(b *testing.B) {
	sandboxtest.BenchSessionThroughput(b, sandboxtest.NewGVisor(b, func(c *pool.Config) { c.WarmWorkers = 2 }))
}

func BenchmarkGVisorSessionThroughputNoSnapshot(b *testing.B) {
	sandboxtest.BenchSessionThroughput(b, sandboxtest.NewGVisorWith(b, coldStart, func(c *pool.Config) { c.WarmWorkers = 2 }))
}

func coldStart(c *gvisor.Config) { c.ColdStart = true }

// BenchmarkGVisorPandasPlot runs plotScript (a pandas groupby and a
// matplotlib PNG) in a warm session; BenchmarkNativePandasPlot is the same
// script in a warm native /usr/bin/python3.
func BenchmarkGVisorPandasPlot(b *testing.B) { benchWarmScript(b, plotScript, "7 True") }

// BenchmarkGVisorOsStat runs statScript (2000 os.stat calls) in a warm
// session; BenchmarkNativeOsStat is its yardstick.
func BenchmarkGVisorOsStat(b *testing.B) { benchWarmScript(b, statScript, "stat done") }

// benchWarmScript runs script once per iteration in one warm session and
// reports the median.
func benchWarmScript(b *testing.B, script, want string) {
	p := sandboxtest.NewGVisor(b, func(c *pool.Config) { c.WarmWorkers = 1 })
	sandboxtest.WaitWarm(b, p)
	ctx := context.Background()
	s, err := p.Open(ctx, sbx.SessionOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	run := func() {
		r, err := s.Run(ctx, script)
		if err != nil || r.Outcome != sbx.OutcomeCompleted || !strings.Contains(r.Stdout, want) {
			b.Fatalf("%+v %v", r, err)
		}
	}
	run() // first use of the code paths, as in the native yardstick
	var took []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		run()
		took = append(took, time.Since(t0))
	}
	sandboxtest.ReportMedian(b, took)
}
