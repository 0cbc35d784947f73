package gvisor_test

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
)

// nativePython is the binary the native comparison runs.
const nativePython = "/usr/bin/python3"

const plotScript = `import pandas as pd, numpy as np
import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt, io
df = pd.DataFrame({'k': np.arange(10000) % 7, 'v': np.arange(10000.0)})
g = df.groupby('k')['v'].agg(['mean', 'sum'])
fig = plt.figure(figsize=(4, 3), dpi=50)
plt.plot(g.index, g['mean'])
buf = io.BytesIO()
fig.savefig(buf, format='png')
plt.close(fig)
print(len(g), buf.getbuffer().nbytes > 0)
`

// statScript is 2000 stat calls, one system call each: what a sandbox
// adds to every system call (BenchmarkGVisorOsStat ÷ BenchmarkNativeOsStat).
const statScript = `import os
for _ in range(2000):
    os.stat('/usr/bin/python3')
print('stat done')
`

// BenchmarkNativePandasPlot runs plotScript in a warm native
// /usr/bin/python3 (imports paid once, as in the warm sandbox): the
// yardstick of BenchmarkGVisorPandasPlot.
func BenchmarkNativePandasPlot(b *testing.B) { benchNative(b, plotScript, "7 True") }

// BenchmarkNativeOsStat runs statScript in a warm native /usr/bin/python3.
func BenchmarkNativeOsStat(b *testing.B) { benchNative(b, statScript, "stat done") }

// benchNative runs script once per iteration in one warm native
// /usr/bin/python3 (numpy, pandas and matplotlib imported first, as in
// the sandbox's kernel) and reports the median.
func benchNative(b *testing.B, script, want string) {
	cmd := exec.Command(nativePython, "-u", "-c", `
import sys
exec(compile("import pandas, numpy, matplotlib.pyplot", "w", "exec"))
code = open(sys.argv[1]).read()
for line in sys.stdin:
    exec(code, {"__name__": "__main__"})
    sys.stdout.flush()
`, writeTemp(b, script))
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatalf("native %s: %v", nativePython, err)
	}
	defer func() { in.Close(); _ = cmd.Wait() }()
	lines := bufio.NewReader(out)
	round := func() {
		if _, err := in.Write([]byte("go\n")); err != nil {
			b.Fatal(err)
		}
		line, err := lines.ReadString('\n')
		if err != nil || !strings.Contains(line, want) {
			b.Fatalf("native: %q %v", line, err)
		}
	}
	round()
	var took []time.Duration
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		round()
		took = append(took, time.Since(t0))
	}
	sandboxtest.ReportMedian(b, took)
}

func writeTemp(b *testing.B, s string) string {
	f := b.TempDir() + "/script.py"
	if err := os.WriteFile(f, []byte(s), 0o644); err != nil {
		b.Fatal(err)
	}
	return f
}

// BenchmarkGVisorSandboxStart starts a sandbox to ready (boot + heavy imports) and
// kills it, and reports the resident memory of the warm sandbox: the sum
// of its processes' RSS and the cgroup's memory usage.
//
// CPU-ms is the CPU its cgroup used from the start to ready (runsc, its
// gofer, the sentry and the stubs, the warm-up cells): what one restored
// sandbox costs the machine, so what a core can restore per second
// (issue 41: refills of the warm pool in a burst).
func BenchmarkGVisorSandboxStart(b *testing.B) {
	e := newEnv(b)
	var rss, usage int64
	var cpu time.Duration
	n := 0
	for b.Loop() {
		s := e.start(b)
		b.StopTimer()
		cpu += cgroupCPU(b, s)
		rss += groupRSS(b, s)
		usage += cgroupUsage(s)
		n++
		s.close()
		b.StartTimer()
	}
	b.ReportMetric(float64(rss)/float64(n)/(1<<20), "RSS-MiB")
	b.ReportMetric(float64(usage)/float64(n)/(1<<20), "cgroup-MiB")
	b.ReportMetric(float64(cpu)/float64(n)/float64(time.Millisecond), "CPU-ms")
}

// cgroupCPU is the CPU time the sandbox's processes have used: each
// process in its cgroup, with the children it reaped (/proc/PID/stat
// utime, stime, cutime, cstime). The pool's groups have no cpuacct of
// their own on a v1 host (cpu, memory and pids only), so the kernel's
// per-group figure is not there to read.
func cgroupCPU(b *testing.B, s *sandbox) time.Duration {
	pids, err := s.group.Procs()
	if err != nil || len(pids) == 0 {
		b.Fatalf("the sandbox's processes: %v %v", pids, err)
	}
	var ticks int64
	for _, pid := range pids {
		raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
		for _, k := range []int{11, 12, 13, 14} { // utime stime cutime cstime, counted after the comm
			n, _ := strconv.ParseInt(f[k], 10, 64)
			ticks += n
		}
	}
	const userHZ = 100
	return time.Duration(ticks) * time.Second / userHZ
}

// BenchmarkGVisorWarmSessionMemory reports the memory of a warm sandbox after a pandas and
// matplotlib run, as the cgroup and the processes' RSS see it.
func BenchmarkGVisorWarmSessionMemory(b *testing.B) {
	s := newEnv(b).start(b)
	s.expectOK(plotScript, "7 True")
	time.Sleep(100 * time.Millisecond)
	for b.Loop() {
		s.expectOK("print(25)", "25")
	}
	b.ReportMetric(float64(groupRSS(b, s))/(1<<20), "RSS-MiB")
	b.ReportMetric(float64(cgroupUsage(s))/(1<<20), "cgroup-MiB")
}

// groupRSS sums VmRSS over the sandbox's cgroup (runsc, gofer, sentry and
// its ptrace stubs). Shared pages are counted once per process, so this
// overstates.
func groupRSS(b *testing.B, s *sandbox) int64 {
	pids, err := s.group.Procs()
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	for _, pid := range pids {
		st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(st), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				total += kb << 10
			}
		}
	}
	return total
}

// cgroupUsage reads the group's memory usage (v1 or v2).
func cgroupUsage(s *sandbox) int64 {
	for _, f := range []string{
		"/sys/fs/cgroup/memory" + s.group.Path() + "/memory.usage_in_bytes",
		"/sys/fs/cgroup/unified" + s.group.Path() + "/memory.current",
		"/sys/fs/cgroup" + s.group.Path() + "/memory.current",
	} {
		if b, err := os.ReadFile(f); err == nil {
			n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			return n
		}
	}
	return 0
}
