package wasm_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/sandbox"
	"github.com/codeinterp/codeinterp/sandbox/pool"
	"github.com/codeinterp/codeinterp/sandbox/sandboxtest"
)

// waitWarm waits (timer stopped) until the pool has a warm interpreter.
func waitWarm(b *testing.B, p *pool.Pool) {
	deadline := time.Now().Add(30 * time.Second)
	for p.Capacity().Warm < 1 {
		if time.Now().After(deadline) {
			b.Fatal("no warm interpreter after 30s")
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkWarmPrint25 times print(25) from the call to the result, in a
// fresh session that took a pre-warmed interpreter.
func BenchmarkWarmPrint25(b *testing.B) {
	p := sandboxtest.New(b, func(c *pool.Config) { c.WarmWorkers = 1 })
	ctx := context.Background()
	b.StopTimer()
	var took []time.Duration
	defer func() { reportMedian(b, took) }()
	for i := 0; i < b.N; i++ {
		waitWarm(b, p)
		s, err := p.Open(ctx, sandbox.SessionOptions{})
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
}

// BenchmarkColdPrint25 is the same with no warm interpreter: the session
// starts its worker (process, cgroup, cached module, CPython start-up).
func BenchmarkColdPrint25(b *testing.B) {
	p := sandboxtest.New(b, func(c *pool.Config) { c.WarmWorkers = 0 })
	ctx := context.Background()
	var took []time.Duration
	defer func() { reportMedian(b, took) }()
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
}

// BenchmarkSessionThroughput opens, uses and closes sessions back to back,
// as fast as the pool can supply interpreters; it reports sessions/s.
func BenchmarkSessionThroughput(b *testing.B) {
	p := sandboxtest.New(b, func(c *pool.Config) { c.WarmWorkers = 2 })
	ctx := context.Background()
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

// BenchmarkWorkerPeakRSS reports the peak resident set of a worker process
// after start-up and print(25) (VmHWM), and after the product's promised
// imports.
func BenchmarkWorkerPeakRSS(b *testing.B) {
	p := sandboxtest.New(b, func(c *pool.Config) { c.WarmWorkers = 0 })
	ctx := context.Background()
	var hwm, hwmImports float64
	for i := 0; i < b.N; i++ {
		s, err := p.Open(ctx, sandbox.SessionOptions{})
		if err != nil {
			b.Fatal(err)
		}
		pids := p.WorkerPIDs()
		if len(pids) != 1 {
			b.Fatalf("workers %v", pids)
		}
		if _, err := s.Run(ctx, "print(25)"); err != nil {
			b.Fatal(err)
		}
		hwm = max(hwm, vmHWM(b, pids[0]))
		if _, err := s.Run(ctx, "import json, re, math, decimal, fractions, statistics, datetime, collections, itertools, hashlib, random, csv, sqlite3, zlib, bz2, lzma"); err != nil {
			b.Fatal(err)
		}
		hwmImports = max(hwmImports, vmHWM(b, pids[0]))
		s.Close()
	}
	b.ReportMetric(hwm, "MiB-peak-rss")
	b.ReportMetric(hwmImports, "MiB-peak-rss-imports")
}

func vmHWM(b *testing.B, pid int) float64 {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	b.Fatal("no VmHWM")
	return 0
}

// BenchmarkNativePython3Subprocess is the yardstick: the host's own CPython
// started as a subprocess for print(25).
func BenchmarkNativePython3Subprocess(b *testing.B) {
	py, err := exec.LookPath("python3")
	if err != nil {
		b.Fatal("python3 is needed on the host for the comparison benchmark")
	}
	var took []time.Duration
	defer func() { reportMedian(b, took) }()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		out, err := exec.Command(py, "-c", "print(25)").Output()
		took = append(took, time.Since(t0))
		if err != nil || string(out) != "25\n" {
			b.Fatalf("%q %v", out, err)
		}
	}
}

// reportMedian adds the median of the timed iterations: the targets are
// medians, and the mean hides them behind a few slow outliers on a shared
// machine.
func reportMedian(b *testing.B, took []time.Duration) {
	if len(took) == 0 {
		return
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2])/float64(time.Millisecond), "ms-p50")
}
