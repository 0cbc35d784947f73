package gvisor_test

import (
	"context"
	"fmt"
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

// BenchmarkGVisorOsStatAfterBurst runs statScript in a warm session right
// after a burst of new sessions (4 opened, used and closed back to back,
// so the pool is refilling its 2 warm sandboxes meanwhile) and again once
// the pool is full and quiet. Two pools side by side, iterations
// alternating between them: refills at the normal CPU weight (100) and at
// 25 (gvisor.Config.RefillCPUWeight). Per pool:
// after-over-quiet, the ratio of the medians (issue 41: do refills take the
// running session's core?), and burst-session, a burst's open-to-result
// (do low-weight refills starve the sessions that wait for them?).
func BenchmarkGVisorOsStatAfterBurst(b *testing.B) {
	ctx := context.Background()
	type side struct {
		name                string
		p                   *pool.Pool
		s                   sbx.Session
		after, quiet, burst []time.Duration
	}
	run := func(sess sbx.Session, script, want string) time.Duration {
		t0 := time.Now()
		r, err := sess.Run(ctx, script)
		if err != nil || r.Outcome != sbx.OutcomeCompleted || !strings.Contains(r.Stdout, want) {
			b.Fatalf("%+v %v", r, err)
		}
		return time.Since(t0)
	}
	waitFull := func(p *pool.Pool) {
		deadline := time.Now().Add(2 * time.Minute)
		for p.Capacity().Warm < 2 {
			if time.Now().After(deadline) {
				b.Fatal("the warm pool did not fill in 2 minutes")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	var sides []*side
	for _, w := range []uint64{100, 25} {
		p := sandboxtest.NewGVisorWith(b, func(c *gvisor.Config) { c.RefillCPUWeight = w },
			func(c *pool.Config) { c.MaxSessions, c.WarmWorkers = 4, 2 })
		waitFull(p)
		s, err := p.Open(ctx, sbx.SessionOptions{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		run(s, statScript, "stat done")
		sides = append(sides, &side{name: fmt.Sprintf("weight-%d", w), p: p, s: s})
	}
	b.ResetTimer()
	for i := range b.N {
		for k := range sides {
			sd := sides[(i+k)%len(sides)]
			b.StopTimer()
			waitFull(sd.p)
			for range 4 {
				t0 := time.Now()
				o, err := sd.p.Open(ctx, sbx.SessionOptions{})
				if err != nil {
					b.Fatal(err)
				}
				run(o, "print(25)", "25")
				sd.burst = append(sd.burst, time.Since(t0))
				o.Close()
			}
			b.StartTimer()
			sd.after = append(sd.after, run(sd.s, statScript, "stat done"))
			b.StopTimer()
			waitFull(sd.p)
			b.StartTimer()
			sd.quiet = append(sd.quiet, run(sd.s, statScript, "stat done"))
		}
	}
	b.StopTimer()
	for _, sd := range sides {
		a, q := sandboxtest.MedianMillis(sd.after), sandboxtest.MedianMillis(sd.quiet)
		b.ReportMetric(a, sd.name+"-after-burst-ms-p50")
		b.ReportMetric(q, sd.name+"-quiet-ms-p50")
		b.ReportMetric(a/q, sd.name+"-after-over-quiet")
		b.ReportMetric(sandboxtest.MedianMillis(sd.burst), sd.name+"-burst-session-ms-p50")
	}
}
