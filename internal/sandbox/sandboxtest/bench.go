package sandboxtest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
)

// The benchmarks every provider runs the same way, so that
// docs/benchmarks.md compares them side by side. Each provider's package
// names its own Benchmark functions and calls these.

// WaitWarm waits (timer stopped) until p has a warm interpreter.
func WaitWarm(b *testing.B, p *pool.Pool) {
	b.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for p.Capacity().Warm < 1 {
		if time.Now().After(deadline) {
			b.Fatal("no warm interpreter after 2 minutes")
		}
		time.Sleep(time.Millisecond)
	}
}

// ReportMedian adds the median of the timed iterations as ms-p50: the
// targets are medians, and the mean hides them behind a few slow outliers
// on a shared machine.
func ReportMedian(b *testing.B, took []time.Duration) {
	if len(took) == 0 {
		return
	}
	b.ReportMetric(MedianMillis(took), "ms-p50")
}

// MedianMillis is the median of took in milliseconds (took is sorted).
func MedianMillis(took []time.Duration) float64 {
	slices.Sort(took)
	return float64(took[len(took)/2]) / float64(time.Millisecond)
}

// BenchWarmPrint25 times print(25) from the call to the result, in a fresh
// session that took a pre-warmed interpreter (p needs WarmWorkers ≥ 1).
func BenchWarmPrint25(b *testing.B, p *pool.Pool) { benchWarmPrint25(b, p, false) }

// BenchWarmPrint25SecondCall times print(25) from the call to the result
// as the second call of a session that took a pre-warmed interpreter: the
// steady state of a conversation's code calls, beside BenchWarmPrint25's
// first call.
func BenchWarmPrint25SecondCall(b *testing.B, p *pool.Pool) { benchWarmPrint25(b, p, true) }

func benchWarmPrint25(b *testing.B, p *pool.Pool, second bool) {
	ctx := context.Background()
	b.StopTimer()
	var took []time.Duration
	for i := 0; i < b.N; i++ {
		WaitWarm(b, p)
		s, err := p.Open(ctx, sandbox.SessionOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if second {
			if r, err := s.Run(ctx, "print(24)"); err != nil || r.Stdout != "24\n" {
				b.Fatalf("%+v %v", r, err)
			}
			// The first run started the warm pool's refill; a
			// conversation's next call comes after a model turn (seconds),
			// by when it is done.
			WaitWarm(b, p)
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
	ReportMedian(b, took)
}

// BenchColdPrint25 opens a session with no warm interpreter and runs
// print(25) (p needs WarmWorkers = 0): the whole interpreter start-up.
func BenchColdPrint25(b *testing.B, p *pool.Pool) {
	ctx := context.Background()
	var took []time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		s, err := p.Open(ctx, sandbox.SessionOptions{})
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
	ReportMedian(b, took)
}

// BenchSessionThroughput opens, uses and closes sessions back to back as
// fast as p supplies interpreters; it reports sessions/s.
func BenchSessionThroughput(b *testing.B, p *pool.Pool) {
	WaitWarm(b, p)
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		s, err := p.Open(ctx, sandbox.SessionOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if r, err := s.Run(ctx, "print(25)"); err != nil || r.Outcome != sandbox.OutcomeCompleted {
			b.Fatalf("%+v %v", r, err)
		}
		s.Close()
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "sessions/s")
}

// BenchColdSession opens a session for owner while no session is open and
// runs code, b.N times: with WarmWorkers = 0 and one session per worker
// that is a worker start per session; with sessions_per_worker > 1 and an
// owner, every session after the first takes the owner's recycled worker
// (the previous session's close finishes, timer stopped, before the next
// open). It reports the median.
func BenchColdSession(b *testing.B, p *pool.Pool, owner, code, want string) {
	ctx := context.Background()
	var took []time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		s, err := p.Open(ctx, sandbox.SessionOptions{Owner: owner})
		if err != nil {
			b.Fatal(err)
		}
		r, err := s.Run(ctx, code)
		took = append(took, time.Since(t0))
		if err != nil || r.Stdout != want {
			b.Fatalf("%+v %v", r, err)
		}
		b.StopTimer()
		s.Close()
		for p.Capacity().InUse > 0 {
			time.Sleep(100 * time.Microsecond)
		}
		b.StartTimer()
	}
	ReportMedian(b, took)
}

// BenchFreshSessions has clients goroutines open a session for owner, run
// print(25) and close it, back to back, b.N sessions in all; it reports
// sessions/s. Each session is a fresh interpreter.
func BenchFreshSessions(b *testing.B, p *pool.Pool, owner string, clients int) {
	WaitWarm(b, p)
	ctx := context.Background()
	var mu sync.Mutex
	left := b.N
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if left == 0 {
					mu.Unlock()
					return
				}
				left--
				mu.Unlock()
				s, err := p.Open(ctx, sandbox.SessionOptions{Owner: owner})
				if err != nil {
					b.Error(err)
					return
				}
				if r, err := s.Run(ctx, "print(25)"); err != nil || r.Outcome != sandbox.OutcomeCompleted {
					b.Errorf("%+v %v", r, err)
				}
				s.Close()
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "sessions/s")
}
