package wasm_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/sandbox"
	"github.com/codeinterp/codeinterp/sandbox/pool"
	"github.com/codeinterp/codeinterp/sandbox/sandboxtest"
)

// BenchmarkWarmPrint25 times print(25) from the call to the result, in a
// fresh session that took a pre-warmed interpreter.
func BenchmarkWarmPrint25(b *testing.B) {
	sandboxtest.BenchWarmPrint25(b, sandboxtest.New(b, func(c *pool.Config) { c.WarmWorkers = 1 }))
}

// BenchmarkColdPrint25 is the same with no warm interpreter: the session
// starts its worker (process, cgroup, cached module, CPython start-up).
func BenchmarkColdPrint25(b *testing.B) {
	sandboxtest.BenchColdPrint25(b, sandboxtest.New(b, func(c *pool.Config) { c.WarmWorkers = 0 }))
}

// BenchmarkSessionThroughput opens, uses and closes sessions back to back,
// as fast as the pool can supply interpreters; it reports sessions/s.
func BenchmarkSessionThroughput(b *testing.B) {
	sandboxtest.BenchSessionThroughput(b, sandboxtest.New(b, func(c *pool.Config) { c.WarmWorkers = 2 }))
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

// nativePython is the yardstick's binary: Debian's own CPython, named, since
// a python3 found on PATH may be a shim (pyenv's adds ~100 ms of start-up).
const nativePython = "/usr/bin/python3"

// BenchmarkNativePython3Subprocess is the yardstick: /usr/bin/python3
// started as a subprocess for print(25).
func BenchmarkNativePython3Subprocess(b *testing.B) {
	py := nativePython
	if _, err := os.Stat(py); err != nil {
		b.Fatalf("%s is needed on the host for the comparison benchmark: %v", py, err)
	}
	var took []time.Duration
	defer func() { sandboxtest.ReportMedian(b, took) }()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		out, err := exec.Command(py, "-c", "print(25)").Output()
		took = append(took, time.Since(t0))
		if err != nil || string(out) != "25\n" {
			b.Fatalf("%q %v", out, err)
		}
	}
}
