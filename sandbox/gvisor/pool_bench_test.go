package gvisor_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	sbx "github.com/codeinterp/codeinterp/sandbox"
	"github.com/codeinterp/codeinterp/sandbox/pool"
	"github.com/codeinterp/codeinterp/sandbox/sandboxtest"
)

// These benchmarks go through the pool (sandbox.Provider), as the server
// does; their names say "GVisor" so that docs/benchmarks.md tells them from
// the WASM provider's.

// waitWarm waits (timer stopped) until the pool has a warm sandbox.
func waitWarm(b *testing.B, p *pool.Pool) {
	deadline := time.Now().Add(2 * time.Minute)
	for p.Capacity().Warm < 1 {
		if time.Now().After(deadline) {
			b.Fatal("no warm sandbox after 2 minutes")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func reportMedian(b *testing.B, took []time.Duration) {
	if len(took) == 0 {
		return
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2])/float64(time.Millisecond), "ms-p50")
}

// BenchmarkGVisorWarmPrint25 times print(25) from the call to the result in
// a fresh session that took a pre-warmed sandbox.
func BenchmarkGVisorWarmPrint25(b *testing.B) {
	p := sandboxtest.NewGVisor(b, func(c *pool.Config) { c.WarmWorkers = 1 })
	ctx := context.Background()
	b.StopTimer()
	var took []time.Duration
	for i := 0; i < b.N; i++ {
		waitWarm(b, p)
		s, err := p.Open(ctx, sbx.SessionOptions{})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		t0 := time.Now()
		r, err := s.Run(ctx, "print(25)")
		took = append(took, time.Since(t0))
		b.StopTimer()
		if err != nil || r.Stdout != "25\n" {
			b.Fatalf("%+v %v", r, err)
		}
		s.Close()
	}
	reportMedian(b, took)
}

// BenchmarkGVisorColdSession opens a session with no warm sandbox and runs
// print(25): runsc, the sentry, CPython and the heavy imports all start.
func BenchmarkGVisorColdSession(b *testing.B) {
	p := sandboxtest.NewGVisor(b, func(c *pool.Config) { c.WarmWorkers = 0 })
	ctx := context.Background()
	var took []time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		s, err := p.Open(ctx, sbx.SessionOptions{})
		if err != nil {
			b.Fatal(err)
		}
		r, err := s.Run(ctx, "print(25)")
		took = append(took, time.Since(t0))
		if err != nil || r.Stdout != "25\n" {
			b.Fatalf("%+v %v", r, err)
		}
		b.StopTimer()
		s.Close()
		b.StartTimer()
	}
	reportMedian(b, took)
}

// BenchmarkGVisorSessionThroughput opens, uses and closes sessions back to
// back as fast as the pool can start sandboxes; it reports sessions/s.
func BenchmarkGVisorSessionThroughput(b *testing.B) {
	p := sandboxtest.NewGVisor(b, func(c *pool.Config) { c.WarmWorkers = 2 })
	waitWarm(b, p)
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		s, err := p.Open(ctx, sbx.SessionOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if r, err := s.Run(ctx, "print(25)"); err != nil || r.Outcome != sbx.OutcomeCompleted {
			b.Fatalf("%+v %v", r, err)
		}
		s.Close()
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "sessions/s")
}

// BenchmarkGVisorPandasPlot runs plotScript (a pandas groupby and a
// matplotlib PNG) in a warm session; BenchmarkNativePandasPlot is the same
// script in a warm native /usr/bin/python3.
func BenchmarkGVisorPandasPlot(b *testing.B) {
	p := sandboxtest.NewGVisor(b, func(c *pool.Config) { c.WarmWorkers = 1 })
	waitWarm(b, p)
	ctx := context.Background()
	s, err := p.Open(ctx, sbx.SessionOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	run := func() {
		r, err := s.Run(ctx, plotScript)
		if err != nil || r.Outcome != sbx.OutcomeCompleted || !strings.Contains(r.Stdout, "7 True") {
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
	reportMedian(b, took)
}
