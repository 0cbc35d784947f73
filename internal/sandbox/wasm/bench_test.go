package wasm_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
	"github.com/codeinterp/codeinterp/internal/sandbox/wasm"
)

// BenchmarkWarmPrint25 times print(25) from the call to the result, in a
// fresh session that took a pre-warmed interpreter.
func BenchmarkWarmPrint25(b *testing.B) {
	sandboxtest.BenchWarmPrint25(b, sandboxtest.New(b, func(c *pool.Config) { c.WarmWorkers = 1 }))
}

// BenchmarkWarmPrint25SecondCall is the same as a session's second call.
func BenchmarkWarmPrint25SecondCall(b *testing.B) {
	sandboxtest.BenchWarmPrint25SecondCall(b, sandboxtest.New(b, func(c *pool.Config) { c.WarmWorkers = 1 }))
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

// benchPool is a pool with the production sizes (8 sessions, 2 warm
// interpreters unless warm says otherwise), starting sessions cold
// (python.wasm's _start, today's path before snapshots) or from the
// snapshot, with perWorker sessions per worker process.
func benchPool(b *testing.B, cold bool, perWorker, warm int) *pool.Pool {
	cfg := sandboxtest.Config(b)
	d := pool.DefaultConfig()
	cfg.MaxSessions = d.MaxSessions
	cfg.WarmWorkers = warm
	cfg.SessionsPerWorker = perWorker
	cfg.ColdStart = cold
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, err := wasm.New(ctx, cfg, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	return p
}

// startModes are the ways a session can start, side by side: the baseline
// is python.wasm started cold in a new worker process (the path before
// snapshots), then the snapshot restored in a new worker process per
// session (the default), then restored in a worker that serves 8 sessions
// of one owner in turn.
var startModes = []struct {
	name      string
	cold      bool
	perWorker int
	owner     string
}{
	{"baseline-python.wasm-cold-start", true, 1, ""},
	{"snapshot-1-per-worker", false, 1, ""},
	{"snapshot-8-per-worker", false, 8, "bench-owner"},
}

// BenchmarkColdSession: open a session while no interpreter is warm and
// run print(25), in each start mode (median in ms-p50).
func BenchmarkColdSession(b *testing.B) {
	for _, m := range startModes {
		b.Run(m.name, func(b *testing.B) {
			sandboxtest.BenchColdSession(b, benchPool(b, m.cold, m.perWorker, 0), m.owner, "print(25)", "25\n")
		})
	}
}

// BenchmarkFreshSessions: sessions/s, each a fresh interpreter running
// print(25), from 4 clients at once, with the default 2 warm interpreters,
// in each start mode, and with 64 sessions per worker to show where the
// worker process's start-up stops mattering.
func BenchmarkFreshSessions(b *testing.B) {
	modes := append(startModes[:len(startModes):len(startModes)], struct {
		name      string
		cold      bool
		perWorker int
		owner     string
	}{"snapshot-64-per-worker", false, 64, "bench-owner"})
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			sandboxtest.BenchFreshSessions(b, benchPool(b, m.cold, m.perWorker, 2), m.owner, 4)
		})
	}
}

// BenchmarkSympySession: a cold session (snapshot, new worker) whose first
// program imports sympy, mpmath and networkx, against one that only prints:
// they are imported in the snapshot, so the session pays nothing for them.
func BenchmarkSympySession(b *testing.B) {
	for _, c := range []struct{ name, code, want string }{
		{"plain-print25", "print(25)", "25\n"},
		{"import-sympy", "import sympy, mpmath, networkx; print(25)", "25\n"},
	} {
		b.Run(c.name, func(b *testing.B) {
			sandboxtest.BenchColdSession(b, benchPool(b, false, 1, 0), "", c.code, c.want)
		})
	}
}

// BenchmarkSympyImportColdStart is the baseline for SympySession: a cold
// python.wasm session (no snapshot) that imports sympy itself. It takes
// seconds per iteration: make bench runs it 3 times, apart.
func BenchmarkSympyImportColdStart(b *testing.B) {
	if b.N > 5 {
		b.Skip("seconds per iteration: run with -benchtime 3x (make bench does)")
	}
	sandboxtest.BenchColdSession(b, benchPool(b, true, 1, 0), "", "import sympy, mpmath, networkx; print(25)", "25\n")
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

// BenchmarkSessionCheckpoint: a session holding ~10 MB of Python objects
// (a 100 000-row list of dicts and a 1 MB string), checkpointed between
// runs (time: checkpoint-ms-p50, size: checkpoint-MiB), and a new session
// restored from that state to the first result of print(len(rows))
// (restore-ms-p50). Issue 28's targets: ≤ 20 ms and ≤ 4 MB, ≤ 30 ms.
func BenchmarkSessionCheckpoint(b *testing.B) {
	p := sandboxtest.New(b)
	ctx := context.Background()
	s, err := p.Open(ctx, sandbox.SessionOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	r, err := s.Run(ctx, "rows = [{'id': i, 'name': 'row-%d' % i, 'v': i * 0.5} for i in range(100000)]\n"+
		"blob = 'x' * (1 << 20)\nimport tracemalloc\nprint(len(rows))")
	if err != nil || r.Outcome != sandbox.OutcomeCompleted {
		b.Fatalf("%+v %v", r, err)
	}
	var takes, restores []time.Duration
	var size int
	for b.Loop() {
		start := time.Now()
		state, err := s.Checkpoint(ctx)
		if err != nil {
			b.Fatal(err)
		}
		takes = append(takes, time.Since(start))
		size = len(state)
		start = time.Now()
		rs, err := p.Open(ctx, sandbox.SessionOptions{Restore: state})
		if err != nil {
			b.Fatal(err)
		}
		r, err := rs.Run(ctx, "print(len(rows), len(blob))")
		restores = append(restores, time.Since(start))
		if err != nil || r.Stdout != "100000 1048576\n" {
			b.Fatalf("restored: %+v %v", r, err)
		}
		rs.Close()
	}
	b.ReportMetric(sandboxtest.MedianMillis(takes), "checkpoint-ms-p50")
	b.ReportMetric(float64(size)/(1<<20), "checkpoint-MiB")
	b.ReportMetric(sandboxtest.MedianMillis(restores), "restore-ms-p50")
}

// startCPUWorkerEnv, when set, is the worker command (split at spaces)
// BenchmarkInterpreterStartCPU measures instead of cmd/wasm-worker built
// from this source: another build's wasm-worker, or a server binary with
// its worker command ("extproc __sandbox-worker"), for a side-by-side run
// (docs/benchmark-notes.md, issue 41). It runs its own precompile and
// snapshot steps into the benchmark's own cache, so builds never share
// compiled code.
const startCPUWorkerEnv = "CODEINTERP_BENCH_WASM_WORKER"

// BenchmarkInterpreterStartCPU: the CPU time (user + system, all its
// threads) one worker process spends from its exec to ready — the
// compiled module loaded, the snapshot restored, the kernel waiting for
// its first program — per new interpreter, in the default start mode
// (snapshot, one session per worker) with the production worker binary
// (cmd/wasm-worker, built for the run). Wall time depends on what else
// the machine runs; this is what a start costs the machine: on two cores,
// 1000 / cpu-ms-p50 / 2 starts a second at most. Issue 41's target: ≤ 25 ms.
func BenchmarkInterpreterStartCPU(b *testing.B) {
	command := strings.Fields(os.Getenv(startCPUWorkerEnv))
	if len(command) == 0 {
		dir := b.TempDir()
		out, err := exec.Command("go", "build", "-o", dir+"/", "../../../cmd/wasm-worker").CombinedOutput()
		if err != nil {
			b.Fatalf("go build ./cmd/wasm-worker: %v\n%s", err, out)
		}
		command = []string{filepath.Join(dir, "wasm-worker")}
	}
	cfg := sandboxtest.Config(b)
	cfg.WorkerCommand = command
	cfg.CacheDir = b.TempDir()
	cfg.ReuseSnapshot = false
	cfg.WarmWorkers = 0
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p, err := wasm.New(ctx, cfg, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	var cpu []time.Duration
	for b.Loop() {
		s, err := p.Open(ctx, sandbox.SessionOptions{})
		if err != nil {
			b.Fatal(err)
		}
		pids := p.WorkerPIDs()
		if len(pids) != 1 {
			b.Fatalf("workers %v, want the session's one", pids)
		}
		cpu = append(cpu, processCPU(b, pids[0]))
		if r, err := s.Run(ctx, "print(25)"); err != nil || r.Stdout != "25\n" {
			b.Fatalf("%+v %v", r, err)
		}
		s.Close()
		for p.Capacity().InUse > 0 {
			time.Sleep(100 * time.Microsecond)
		}
	}
	slices.Sort(cpu)
	b.ReportMetric(sandboxtest.MedianMillis(cpu), "cpu-ms-p50")
	b.ReportMetric(float64(cpu[len(cpu)*9/10])/float64(time.Millisecond), "cpu-ms-p90")
}

// processCPU is the CPU time pid's threads have run so far, to the
// nanosecond: the sum of their /proc/PID/task/TID/schedstat run times
// (/proc/PID/stat counts in 10 ms ticks). A thread that already exited is
// not counted; a worker's Go runtime keeps its threads.
func processCPU(b *testing.B, pid int) time.Duration {
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		b.Fatal(err)
	}
	var sum time.Duration
	for _, t := range tasks {
		data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + t.Name() + "/schedstat")
		if err != nil {
			b.Fatalf("schedstat (the kernel needs CONFIG_SCHED_INFO): %v", err)
		}
		f := strings.Fields(string(data))
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			b.Fatalf("schedstat %q: %v", data, err)
		}
		sum += time.Duration(ns)
	}
	return sum
}

// BenchmarkSmallCheckpointCPU: what one checkpoint of a new container
// that ran one cell (print(25)) costs its worker process in CPU (all its
// threads, schedstat), its wall time and its size — the checkpoint every
// new container gets once, in the background (issue 41: back-to-back new
// containers with checkpoints on cost that much more than off). Each
// round is a new interpreter, as each new container is. cpu-ms-p50
// includes what the worker does after its answer.
func BenchmarkSmallCheckpointCPU(b *testing.B) {
	cfg := sandboxtest.Config(b)
	cfg.WarmWorkers = 0 // the session's worker is the only one: its pid
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p, err := wasm.New(ctx, cfg, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	var cpu, wall []time.Duration
	var size int
	for b.Loop() {
		s, err := p.Open(ctx, sandbox.SessionOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if r, err := s.Run(ctx, "print(25)"); err != nil || r.Stdout != "25\n" {
			b.Fatalf("%+v %v", r, err)
		}
		pids := p.WorkerPIDs()
		if len(pids) != 1 {
			b.Fatalf("workers %v, want the session's one", pids)
		}
		before, start := processCPU(b, pids[0]), time.Now()
		state, err := s.Checkpoint(ctx)
		if err != nil {
			b.Fatal(err)
		}
		wall = append(wall, time.Since(start))
		// What the worker does after its answer (freeing the state's
		// memory) is the checkpoint's too: counted once it is idle.
		time.Sleep(20 * time.Millisecond)
		cpu = append(cpu, processCPU(b, pids[0])-before)
		size = len(state)
		s.Close()
		for p.Capacity().InUse > 0 {
			time.Sleep(100 * time.Microsecond)
		}
	}
	b.ReportMetric(sandboxtest.MedianMillis(cpu), "cpu-ms-p50")
	b.ReportMetric(sandboxtest.MedianMillis(wall), "wall-ms-p50")
	b.ReportMetric(float64(size)/1024, "state-KiB")
}
