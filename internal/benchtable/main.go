// Command benchtable turns `go test -bench` output (stdin) into the
// Markdown table of docs/benchmarks.md, with the date and the machine, and
// the ratios the project's targets are stated in.
//
//	go test -run '^$' -bench . ./... | go run ./internal/benchtable [-notes FILE] > docs/benchmarks.md
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
)

type row struct {
	name    string
	pkg     string
	iters   string
	metrics [][2]string // value, unit, in output order
}

func (r row) metric(unit string) (float64, bool) {
	for _, m := range r.metrics {
		if m[1] == unit {
			v, err := strconv.ParseFloat(m[0], 64)
			return v, err == nil
		}
	}
	return 0, false
}

// ratios are the comparisons the targets are written in: numerator over
// denominator, both the named metric of the named benchmarks.
var ratios = []struct{ label, num, den, unit string }{
	{"native /usr/bin/python3 subprocess ÷ warm WASM sandbox print(25) (median)", "NativePython3Subprocess", "WarmPrint25", "ms-p50"},
	{"cold ÷ warm sandbox print(25) (median)", "ColdPrint25", "WarmPrint25", "ms-p50"},
	{"gVisor pandas groupby + plot ÷ the same in native /usr/bin/python3 (median)", "GVisorPandasPlot", "NativePandasPlot", "ms-p50"},
	{"gVisor cold session ÷ warm print(25) (median)", "GVisorColdSession", "GVisorWarmPrint25", "ms-p50"},
	{"gVisor cold session: booted, snapshot: false (baseline) ÷ restored from the checkpoint (median)", "GVisorColdSessionNoSnapshot", "GVisorColdSession", "ms-p50"},
	{"gVisor fresh sessions/s: restored ÷ booted, snapshot: false (baseline)", "GVisorSessionThroughput", "GVisorSessionThroughputNoSnapshot", "sessions/s"},
	{"cold session: python.wasm cold start (baseline) ÷ restored from the snapshot, 1 session per worker (median)", "ColdSession/baseline-python.wasm-cold-start", "ColdSession/snapshot-1-per-worker", "ms-p50"},
	{"cold session: python.wasm cold start (baseline) ÷ restored, 8 sessions per worker (median)", "ColdSession/baseline-python.wasm-cold-start", "ColdSession/snapshot-8-per-worker", "ms-p50"},
	{"fresh sessions/s: restored, 1 per worker ÷ python.wasm cold start (baseline)", "FreshSessions/snapshot-1-per-worker", "FreshSessions/baseline-python.wasm-cold-start", "sessions/s"},
	{"fresh sessions/s: restored, 8 per worker ÷ python.wasm cold start (baseline)", "FreshSessions/snapshot-8-per-worker", "FreshSessions/baseline-python.wasm-cold-start", "sessions/s"},
	{"sympy session: python.wasm cold start importing sympy (baseline) ÷ restored session with sympy imported (median)", "SympyImportColdStart", "SympySession/import-sympy", "ms-p50"},
	{"warm print(25) in a container, no files (mirror + collect) ÷ in a bare session (baseline)", "WarmRun/container-0files", "WarmRun/session", "ns/op"},
	{"warm print(25) in a container with 50 files ÷ in a bare session (baseline)", "WarmRun/container-50files", "WarmRun/session", "ns/op"},
	{"hosted shell: echo 25 in a warm gVisor container ÷ a print(25) cell in it (baseline; issue 39: ≤ 1.5×)", "GVisorShell/command", "GVisorShell/cell", "ns/op"},
	{"Anthropic code execution: echo 25 in a warm gVisor container through /v1/messages ÷ the same through /v1/responses' shell (baseline; issue 40: ≤ 1.1×)", "MessagesBash/messages", "MessagesBash/responses-shell", "ns/op"},
	{"request handling: turn 21 of a 20-turn conversation, expanded from the store ÷ turn 1 (baseline)", "History/turn21-expand", "History/turn1", "ns/op"},
	{"request handling: turn 21 mapped to the model server's id ÷ turn 1 (baseline)", "History/turn21-upstream", "History/turn1", "ns/op"},
	// The platform and the runsc, side by side in one run (make bench runs
	// a subset of the gVisor benchmarks again on ptrace, and on Debian's
	// runsc where it is installed).
	{"gVisor cold restored session: pinned runsc on ptrace ÷ on systrap (median)", "GVisorColdSession/ptrace", "GVisorColdSession", "ms-p50"},
	{"gVisor cold restored session: Debian's runsc 0.0~20221219 on ptrace (baseline) ÷ pinned runsc on systrap (median)", "GVisorColdSession/debian-ptrace", "GVisorColdSession", "ms-p50"},
	{"gVisor 2000 × os.stat: ptrace ÷ systrap (median)", "GVisorOsStat/ptrace", "GVisorOsStat", "ms-p50"},
	{"gVisor 2000 × os.stat: Debian's runsc on ptrace (baseline) ÷ pinned runsc on systrap (median)", "GVisorOsStat/debian-ptrace", "GVisorOsStat", "ms-p50"},
	{"gVisor 2000 × os.stat on systrap ÷ native /usr/bin/python3 (median)", "GVisorOsStat", "NativeOsStat", "ms-p50"},
	{"gVisor pandas groupby + plot: ptrace ÷ systrap (median)", "GVisorPandasPlot/ptrace", "GVisorPandasPlot", "ms-p50"},
	{"gVisor pandas groupby + plot: Debian's runsc on ptrace (baseline) ÷ pinned runsc on systrap (median)", "GVisorPandasPlot/debian-ptrace", "GVisorPandasPlot", "ms-p50"},
	{"gVisor warm print(25): ptrace ÷ systrap (median)", "GVisorWarmPrint25/ptrace", "GVisorWarmPrint25", "ms-p50"},
	{"gVisor warm print(25): Debian's runsc on ptrace (baseline) ÷ pinned runsc on systrap (median)", "GVisorWarmPrint25/debian-ptrace", "GVisorWarmPrint25", "ms-p50"},
	{"gVisor fresh sessions/s: systrap ÷ ptrace", "GVisorSessionThroughput", "GVisorSessionThroughput/ptrace", "sessions/s"},
	{"gVisor fresh sessions/s: pinned runsc on systrap ÷ Debian's runsc on ptrace (baseline)", "GVisorSessionThroughput", "GVisorSessionThroughput/debian-ptrace", "sessions/s"},
}

// targets are the project's stated goals, checked against this run.
var targets = []struct {
	label, bench, unit string
	max                float64 // the metric must be at most this
	ratioOf            string  // if set: bench's unit ÷ ratioOf's unit must be at least min (or at most maxRatio)
	min                float64
	maxRatio           float64
	atLeast            float64 // if set (and no ratioOf): the metric must be at least this
}{
	{label: "warm print(25), median, ≤ 2 ms", bench: "WarmPrint25", unit: "ms-p50", max: 2},
	{label: "native /usr/bin/python3 ÷ warm print(25), ≥ 8×", bench: "NativePython3Subprocess", ratioOf: "WarmPrint25", unit: "ms-p50", min: 8},
	{label: "worker peak RSS, ≤ 80 MiB", bench: "WorkerPeakRSS", unit: "MiB-peak-rss", max: 80},
	{label: "rewrite of a 1 MiB request, ≤ 5 ms", bench: "RewriteRequest/1024KiB", unit: "ns/op", max: 5e6},
	{label: "pass-through detection, 100 KiB, ≤ 50 µs", bench: "PassThrough/100KiB", unit: "ns/op", max: 50e3},
	{label: "pass-through detection, 100 KiB whose text mentions the tool, ≤ 50 µs", bench: "PassThrough/100KiB-text-mentions", unit: "ns/op", max: 50e3},
	{label: "pass-through with history kept (NewExchange), 100 KiB, ≤ 50 µs", bench: "History/pass-through-100KiB", unit: "ns/op", max: 50e3},
	{label: "turn 21 of a 20-turn conversation with history: expand (in-process store), ≤ 2 ms", bench: "History/turn21-expand", unit: "ns/op", max: 2e6},
	{label: "filter on a pass-through request, median added, ≤ 0.3 ms", bench: "PassThroughOverhead", unit: "added-median-µs", max: 300},
	{label: "code interpreter overhead for print(25), median, ≤ 10 ms", bench: "CodeInterpreterOverhead/warm", unit: "overhead-median-µs", max: 10e3},
	{label: "gVisor warm print(25), median, ≤ 3 ms", bench: "GVisorWarmPrint25", unit: "ms-p50", max: 3},
	{label: "gVisor pandas groupby + plot ÷ native /usr/bin/python3, ≤ 3.5×", bench: "GVisorPandasPlot", ratioOf: "NativePandasPlot", unit: "ms-p50", maxRatio: 3.5},
	{label: "gVisor memory of a warm session (cgroup), ≤ 250 MiB", bench: "GVisorWarmSessionMemory", unit: "cgroup-MiB", max: 250},
	{label: "gVisor cold session with the stack imported (restored), median, ≤ 500 ms", bench: "GVisorColdSession", unit: "ms-p50", max: 500},
	{label: "gVisor fresh sessions/s on this machine (restored), ≥ 4", bench: "GVisorSessionThroughput", unit: "sessions/s", atLeast: 4},
	{label: "gVisor pandas groupby + plot ÷ native /usr/bin/python3, ≤ 2×", bench: "GVisorPandasPlot", ratioOf: "NativePandasPlot", unit: "ms-p50", maxRatio: 2},
	{label: "gVisor first code call of a new container through extproc dev, p90, ≤ 700 ms", bench: "GVisorFirstCallThroughDev", unit: "request-p90-ms", max: 700},
	{label: "gVisor: an allowed HTTPS request on a new connection from the sandbox (relay + egress proxy) ÷ native /usr/bin/python3 straight to the origin, median, ≤ 10×", bench: "NetworkHTTPS/sandbox-via-proxy", ratioOf: "NetworkHTTPS/native-direct", unit: "median-µs", maxRatio: 10},
	{label: "live stream: first byte after the upstream's first event, ≤ 50 ms", bench: "LiveTimeToFirstByte", unit: "live-first-byte-after-upstream-ms", max: 50},
	{label: "live stream: final round's first text delta after the upstream sent it, ≤ 50 ms", bench: "LiveTimeToFirstByte", unit: "live-final-delta-after-upstream-ms", max: 50},
	{label: "live stream: added latency per passed-through event, median, ≤ 0.2 ms", bench: "LivePassThrough", unit: "median-ns/event", max: 200e3},
	{label: "live stream through the front proxy and gRPC: first byte after the model's first event, ≤ 50 ms", bench: "LiveStreamThroughProxy/live", unit: "first-byte-after-upstream-ms", max: 50},
	{label: "live stream through the front proxy and gRPC: final round's first text delta after the model sent it, ≤ 50 ms", bench: "LiveStreamThroughProxy/live", unit: "final-delta-after-upstream-ms", max: 50},
	{label: "live stream through the front proxy and gRPC: added delay per text delta, median, ≤ 0.2 ms", bench: "LiveStreamThroughProxy/live", unit: "added-per-delta-median-ms", max: 0.2},
	{label: "cold session restored, 1 session per worker, median, ≤ 90 ms", bench: "ColdSession/snapshot-1-per-worker", unit: "ms-p50", max: 90},
	{label: "cold session restored, 8 sessions per worker, median, ≤ 10 ms", bench: "ColdSession/snapshot-8-per-worker", unit: "ms-p50", max: 10},
	{label: "fresh sessions/s restored, 8 sessions per worker, ≥ 150", bench: "FreshSessions/snapshot-8-per-worker", unit: "sessions/s", atLeast: 150},
	{label: "code interpreter overhead back to back, p90, ≤ 20 ms", bench: "CodeInterpreterOverhead/back-to-back", unit: "overhead-p90-µs", max: 20e3},
	{label: "cold session with sympy imported ÷ a plain one, ≤ 1.1×", bench: "SympySession/import-sympy", ratioOf: "SympySession/plain-print25", unit: "ms-p50", maxRatio: 1.1},
	{label: "load 200 requests at 50 concurrent, default settings: code calls completed, ≥ 95 %", bench: "LoadThroughDev/default", unit: "code-calls-completed-%", atLeast: 95},
	{label: "load 200 requests at 50 concurrent, default settings: requests lost, 0", bench: "LoadThroughDev/default", unit: "requests-lost", max: 0},
	{label: "egress: added latency of an allowed HTTPS request through the proxy, median, ≤ 2 ms", bench: "EgressAddedLatency/new-connection", unit: "tunnel-added-median-µs", max: 2000},
	{label: "warm WASM print(25), a session's first call, median, ≤ 0.5 ms", bench: "WarmPrint25", unit: "ms-p50", max: 0.5},
	{label: "warm WASM print(25), a session's second call, median, ≤ 0.5 ms", bench: "WarmPrint25SecondCall", unit: "ms-p50", max: 0.5},
	{label: "native /usr/bin/python3 -c 'print(25)' ÷ warm WASM print(25), ≥ 35×", bench: "NativePython3Subprocess", ratioOf: "WarmPrint25", unit: "ms-p50", min: 35},
	// Issue 27: gVisor at full speed (pinned runsc, systrap).
	{label: "gVisor cold session with the stack imported (restored), median, ≤ 300 ms", bench: "GVisorColdSession", unit: "ms-p50", max: 300},
	{label: "gVisor fresh sessions/s on this machine (restored), ≥ 6", bench: "GVisorSessionThroughput", unit: "sessions/s", atLeast: 6},
	{label: "gVisor first code call of a new container through extproc dev, back to back, p90, ≤ 600 ms", bench: "GVisorFirstCallThroughDev", unit: "request-p90-ms", max: 600},
	{label: "gVisor 2000 × os.stat in a warm session ÷ native /usr/bin/python3, ≤ 5×", bench: "GVisorOsStat", ratioOf: "NativeOsStat", unit: "ms-p50", maxRatio: 5},
	{label: "gVisor warm print(25), median, ≤ 0.4 ms", bench: "GVisorWarmPrint25", unit: "ms-p50", max: 0.4},
	{label: "gVisor warm print(25), a session's first call, median, ≤ 1 ms", bench: "GVisorWarmPrint25", unit: "ms-p50", max: 1},
	{label: "gVisor warm print(25), a session's second call, median, ≤ 1 ms", bench: "GVisorWarmPrint25SecondCall", unit: "ms-p50", max: 1},
	{label: "code interpreter overhead for print(25), median, ≤ 4 ms", bench: "CodeInterpreterOverhead/warm", unit: "overhead-median-µs", max: 4e3},
	{label: "egress: added latency of an allowed HTTPS request to a domain with secrets (TLS terminated), median, ≤ 2 ms", bench: "EgressAddedLatency/new-connection", unit: "terminated-added-median-µs", max: 2000},
	{label: "back-to-back print(25) rounds through extproc dev, each a new container (wasm): overhead over a plain request, median, ≤ 4 ms", bench: "NewContainerOverhead", unit: "overhead-median-µs", max: 4e3},
	{label: "back-to-back print(25) rounds through extproc dev, each a new container (wasm): overhead over a plain request, p90, ≤ 20 ms", bench: "NewContainerOverhead", unit: "overhead-p90-µs", max: 20e3},
	{label: "a plain /v1/responses request through extproc dev, added over straight to the model server, median, ≤ 0.3 ms", bench: "NewContainerOverhead", unit: "dev-plain-added-median-µs", max: 300},
	// Issue 41, item 6: the wasm start.
	{label: "CPU per new wasm interpreter (its worker, exec to ready; cmd/wasm-worker), median, ≤ 25 ms", bench: "InterpreterStartCPU", unit: "cpu-ms-p50", max: 25},
}

func main() {
	notes := flag.String("notes", "", "a Markdown file appended after the tables: what was measured by hand, and what each change bought")
	flag.Parse()
	rows, cpu, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
	if len(rows) == 0 {
		fmt.Fprintln(os.Stderr, "benchtable: no benchmark lines on stdin")
		os.Exit(1)
	}
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	fmt.Fprintf(w, "# Benchmarks\n\nWritten by `make bench` on %s.\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "Machine: %s, %d cores, %s, %s, %s.\n\n", cpu, runtime.NumCPU(), memTotal(), kernel(), runtime.Version())
	fmt.Fprintln(w, "Figures from one run on a shared machine; compare ratios measured side by side, not absolute values across runs.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| package | benchmark | iterations | time/op | other |")
	fmt.Fprintln(w, "|---|---|---:|---:|---|")
	for _, r := range rows {
		var nsop string
		var other []string
		for _, m := range r.metrics {
			if m[1] == "ns/op" {
				v, _ := strconv.ParseFloat(m[0], 64)
				nsop = human(v)
				continue
			}
			other = append(other, m[0]+" "+m[1])
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", r.pkg, r.name, r.iters, nsop, strings.Join(other, ", "))
	}
	fmt.Fprintln(w, "\n| target | measured | met |\n|---|---:|:---:|")
	for _, t := range targets {
		v, ok := find(rows, t.bench, t.unit)
		if !ok {
			fmt.Fprintf(w, "| %s | not run | — |\n", t.label)
			continue
		}
		met := v <= t.max
		if t.atLeast > 0 {
			met = v >= t.atLeast
		}
		shown := fmt.Sprintf("%.4g %s", v, t.unit)
		if t.ratioOf != "" {
			d, ok := find(rows, t.ratioOf, t.unit)
			if !ok || d == 0 {
				fmt.Fprintf(w, "| %s | not run | — |\n", t.label)
				continue
			}
			v /= d
			met, shown = v >= t.min, fmt.Sprintf("%.1f×", v)
			if t.maxRatio > 0 {
				met = v <= t.maxRatio
			}
		}
		mark := "no"
		if met {
			mark = "yes"
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", t.label, shown, mark)
	}
	var lines []string
	for _, q := range ratios {
		n, okN := find(rows, q.num, q.unit)
		d, okD := find(rows, q.den, q.unit)
		if okN && okD && d > 0 {
			lines = append(lines, fmt.Sprintf("| %s | %.1f× |", q.label, n/d))
		}
	}
	if len(lines) > 0 {
		fmt.Fprintln(w, "\n| ratio | value |\n|---|---:|")
		for _, l := range lines {
			fmt.Fprintln(w, l)
		}
	}
	if *notes != "" {
		b, err := os.ReadFile(*notes)
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchtable:", err)
			os.Exit(1)
		}
		fmt.Fprintf(w, "\n%s", b)
	}
}

func find(rows []row, name, unit string) (float64, bool) {
	for _, r := range rows {
		if r.name == name {
			return r.metric(unit)
		}
	}
	return 0, false
}

func parse(in io.Reader) ([]row, string, error) {
	var rows []row
	cpu, pkg := "unknown CPU", ""
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "cpu: "); ok {
			cpu = strings.TrimSpace(v)
			continue
		}
		if v, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(v), "github.com/codeinterp/codeinterp/"), "internal/")
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		// A benchmark that skipped itself prints 0 iterations and NaN.
		if n, err := strconv.Atoi(f[1]); err != nil || n == 0 {
			continue
		}
		name := strings.TrimPrefix(f[0], "Benchmark")
		if i := strings.LastIndex(name, "-"); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		r := row{name: name, pkg: pkg, iters: f[1]}
		for i := 2; i+1 < len(f); i += 2 {
			r.metrics = append(r.metrics, [2]string{f[i], f[i+1]})
		}
		rows = append(rows, r)
	}
	return rows, cpu, sc.Err()
}

func human(ns float64) string {
	switch {
	case ns >= 1e9:
		return fmt.Sprintf("%.2f s", ns/1e9)
	case ns >= 1e6:
		return fmt.Sprintf("%.2f ms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.1f µs", ns/1e3)
	}
	return fmt.Sprintf("%.0f ns", ns)
}

func memTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "unknown memory"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return fmt.Sprintf("%.0f GiB", kb/1024/1024)
		}
	}
	return "unknown memory"
}

func kernel() string {
	out, err := exec.Command("uname", "-sr").Output()
	if err != nil {
		return "unknown kernel"
	}
	return strings.TrimSpace(string(out))
}
