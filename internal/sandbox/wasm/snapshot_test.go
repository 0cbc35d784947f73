package wasm_test

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
	"github.com/codeinterp/codeinterp/internal/sandbox/wasm"
	"github.com/codeinterp/codeinterp/internal/sandbox/worker"
)

type pidSession interface {
	sandbox.Session
	WorkerPID() int
}

func openAs(t *testing.T, p sandbox.Provider, owner string) pidSession {
	t.Helper()
	s, err := p.Open(context.Background(), sandbox.SessionOptions{Owner: owner})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s.(pidSession)
}

func runOK(t *testing.T, s sandbox.Session, code string) string {
	t.Helper()
	r, err := s.Run(context.Background(), code)
	if err != nil || r.Outcome != sandbox.OutcomeCompleted {
		t.Fatalf("run %q: %+v, %v", code, r, err)
	}
	return strings.TrimSpace(r.Stdout)
}

// closeAndWaitIdle closes s and waits until no session is open: its
// interpreter is then parked for reuse (or released), so the next Open of
// the owner can take it.
func closeAndWaitIdle(t *testing.T, p *pool.Pool, s sandbox.Session) {
	t.Helper()
	_ = s.Close()
	for p.Capacity().InUse > 0 {
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRestoredSessionsAreIndependent runs two sessions in turn, each
// started from the snapshot, with one session per worker (a new process
// each) and with several (the second session in the first one's process),
// and checks that nothing of the first is visible in the second while
// entropy and clocks are the session's own.
func TestRestoredSessionsAreIndependent(t *testing.T) {
	for _, perWorker := range []int{1, 4} {
		t.Run(fmt.Sprintf("sessions_per_worker=%d", perWorker), func(t *testing.T) {
			p := sandboxtest.New(t, func(c *pool.Config) {
				c.SessionsPerWorker = perWorker
				c.WarmWorkers = 0
			})
			snap := p.Kind().(*wasm.Kind).SnapshotDir()
			if snap == "" {
				t.Fatal("the pool does not start sessions from a snapshot")
			}
			meta, err := worker.ReadSnapshotMeta(snap)
			if err != nil {
				t.Fatal(err)
			}
			const probe = `import random, os, uuid, time, sys
print(random.random(), os.urandom(8).hex(), uuid.uuid4().hex, time.monotonic_ns(), time.time(), repr(globals().get("leak")), os.path.exists("/tmp/leak"), os.path.exists("/mnt/data/leak"), sys.argv, len(os.environ))`
			var outs [][]string
			var pids []int
			for i := range 2 {
				s := openAs(t, p, "owner-a")
				pids = append(pids, s.WorkerPID())
				out := strings.Fields(runOK(t, s, probe))
				outs = append(outs, out)
				// Leave state behind for the next session to (not) see.
				runOK(t, s, `leak = 41
open("/tmp/leak", "w").write("x"); open("/mnt/data/leak", "w").write("x")
import random; random.seed(1234)
print("unterminated", end="")`)
				if i == 0 {
					closeAndWaitIdle(t, p, s)
				} else {
					_ = s.Close()
				}
			}
			if perWorker > 1 && pids[0] != pids[1] {
				t.Fatalf("with sessions_per_worker %d the second session ran in pid %d, not the first one's %d: the test did not exercise reuse", perWorker, pids[1], pids[0])
			}
			if perWorker == 1 && pids[0] == pids[1] {
				t.Fatalf("with one session per worker both sessions ran in pid %d", pids[0])
			}
			a, b := outs[0], outs[1]
			if len(a) != 10 || len(b) != 10 {
				t.Fatalf("probe output: %q / %q", a, b)
			}
			for i, name := range []string{"random.random()", "os.urandom", "uuid4"} {
				if a[i] == b[i] {
					t.Errorf("%s is the same in two restored sessions: %s", name, a[i])
				}
			}
			for i, tc := range []struct{ name, want string }{
				{"the previous session's global", "None"},
				{"the previous session's /tmp file", "False"},
				{"the previous session's /mnt/data file", "False"},
				{"argv", "['']"},
				{"environ size", "0"},
			} {
				if got := b[5+i]; got != tc.want {
					t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
				}
			}
			// Clocks: monotonic never reads less than at the snapshot nor
			// between two sessions in turn; wall time is the host's.
			m1, _ := strconv.ParseInt(a[3], 10, 64)
			m2, _ := strconv.ParseInt(b[3], 10, 64)
			if m1 < meta.MonotonicNanos || m2 < m1 {
				t.Errorf("monotonic clock went backwards: snapshot %d, session 1 %d, session 2 %d", meta.MonotonicNanos, m1, m2)
			}
			wall, _ := strconv.ParseFloat(b[4], 64)
			if d := time.Since(time.Unix(0, int64(wall*1e9))); d < -time.Minute || d > time.Minute {
				t.Errorf("guest wall clock %v is not the host's (%v off)", wall, d)
			}
		})
	}
}

// TestOwnersNeverShareAWorker: a process that served owner a's session is
// reused for a, never for b, and never for sessions with no owner.
func TestOwnersNeverShareAWorker(t *testing.T) {
	p := sandboxtest.New(t, func(c *pool.Config) {
		c.SessionsPerWorker = 8
		c.WarmWorkers = 0
	})
	pidOf := func(owner string) int {
		s := openAs(t, p, owner)
		runOK(t, s, "print(1)")
		pid := s.WorkerPID()
		closeAndWaitIdle(t, p, s)
		return pid
	}
	a := pidOf("owner-a")
	for _, tc := range []struct {
		owner string
		same  bool
	}{
		{"owner-b", false},
		{"", false},
		{"owner-a", true},
		{"", false},
		{"owner-b", false},
	} {
		got := pidOf(tc.owner)
		if (got == a) != tc.same {
			t.Errorf("owner %q: pid %d, owner-a's worker is %d (want same=%v)", tc.owner, got, a, tc.same)
		}
	}
}

// TestMultiSessionWorkerKeepsOutputAndFilesApart runs sessions of one
// owner side by side and in turn on 2-session workers; each sees only its
// own output and files.
func TestMultiSessionWorkerKeepsOutputAndFilesApart(t *testing.T) {
	p := sandboxtest.New(t, func(c *pool.Config) { c.SessionsPerWorker = 2 })
	var pids [3]map[int]bool
	for round := range 3 {
		ss := []pidSession{openAs(t, p, "owner-a"), openAs(t, p, "owner-a")}
		pids[round] = map[int]bool{ss[0].WorkerPID(): true, ss[1].WorkerPID(): true}
		for i, s := range ss {
			tag := fmt.Sprintf("r%d-s%d", round, i)
			if err := s.WriteFile(context.Background(), "/mnt/data/in.txt", []byte(tag)); err != nil {
				t.Fatal(err)
			}
			got := runOK(t, s, `import os
print(open("/mnt/data/in.txt").read(), sorted(os.listdir("/mnt/data")), sorted(os.listdir("/tmp")))
_ = open("/tmp/" + open("/mnt/data/in.txt").read(), "w").write("x")`)
			if want := tag + " ['in.txt'] []"; got != want {
				t.Errorf("round %d session %d: %q, want %q", round, i, got, want)
			}
		}
		_ = ss[0].Close()
		closeAndWaitIdle(t, p, ss[1])
	}
	// Round 1 ran in round 0's two processes (their second sessions);
	// round 2 needed new ones.
	if fmt.Sprint(pids[0]) != fmt.Sprint(pids[1]) || pids[2][firstKey(pids[0])] {
		t.Errorf("worker pids per round %v: want round 1 = round 0 and round 2 new", pids)
	}
}

func firstKey(m map[int]bool) int {
	for k := range m {
		return k
	}
	return 0
}

// TestSnapshotsHaveTheirOwnHashSeed: sessions of one snapshot share the
// string hash seed (it is fixed at start-up); two snapshots do not.
func TestSnapshotsHaveTheirOwnHashSeed(t *testing.T) {
	hashOf := func(p *pool.Pool) string {
		s := openAs(t, p, "")
		defer s.Close()
		return runOK(t, s, `print(hash("codeinterp"), hash(b"x" * 9))`)
	}
	fresh := func() *pool.Pool {
		cfg := sandboxtest.Config(t)
		cfg.ReuseSnapshot = false
		cfg.WarmWorkers = 0
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		p, err := wasm.New(ctx, cfg, zaptest.NewLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	p1 := fresh()
	h1a, h1b := hashOf(p1), hashOf(p1)
	if h1a != h1b {
		t.Errorf("two sessions of one snapshot hash differently (%s, %s): sessions are not from one image?", h1a, h1b)
	}
	p2 := fresh()
	if p1.Kind().(*wasm.Kind).SnapshotDir() == p2.Kind().(*wasm.Kind).SnapshotDir() {
		t.Fatal("the second pool reused the first one's snapshot")
	}
	if h2 := hashOf(p2); h2 == h1a {
		t.Errorf("two snapshots share the hash seed: %s", h2)
	}
}

// TestSnapshotRotates: after SnapshotRotateSessions sessions new sessions
// start from a new snapshot.
func TestSnapshotRotates(t *testing.T) {
	cfg := sandboxtest.Config(t)
	cfg.WarmWorkers = 0
	cfg.SnapshotRotateSessions = 2
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, err := wasm.New(ctx, cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	k := p.Kind().(*wasm.Kind)
	first := k.SnapshotDir()
	for range 2 {
		s := openAs(t, p, "")
		runOK(t, s, "pass")
		_ = s.Close()
	}
	deadline := time.Now().Add(2 * time.Minute)
	for k.SnapshotDir() == first && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if k.SnapshotDir() == first {
		t.Fatal("no new snapshot after the rotation count")
	}
	s := openAs(t, p, "")
	defer s.Close()
	runOK(t, s, "print(1)")
}

// TestPackagesGiveKnownAnswers runs the package set's usual work in
// restored sessions; the tool description lists what imported.
func TestPackagesGiveKnownAnswers(t *testing.T) {
	p := sandboxtest.New(t)
	env := p.Environment()
	want := []string{"dateutil", "mpmath", "networkx", "openpyxl", "pypdf", "pytz", "sympy", "tabulate"}
	if strings.Join(env.Packages, " ") != strings.Join(want, " ") {
		t.Errorf("Environment().Packages = %v, want %v", env.Packages, want)
	}
	s := openAs(t, p, "")
	defer s.Close()
	for _, tc := range []struct{ name, code, want string }{
		{"sympy factor", `import sympy as sp; x = sp.symbols("x"); print(sp.factor(x**2 - 1))`, "(x - 1)*(x + 1)"},
		{"sympy integrate", `import sympy as sp; x = sp.symbols("x"); print(sp.integrate(sp.sin(x)**2, (x, 0, sp.pi)))`, "pi/2"},
		{"sympy solve", `import sympy as sp; x = sp.symbols("x"); print(sorted(sp.solve(x**2 - 5*x + 6, x)))`, "[2, 3]"},
		{"sympy isprime", `import sympy; print(sympy.isprime(2**61 - 1), sympy.nextprime(100))`, "True 101"},
		{"mpmath pi", `import mpmath; mpmath.mp.dps = 30; print(mpmath.pi)`, "3.14159265358979323846264338328"},
		{"networkx shortest path", `import networkx as nx
g = nx.Graph(); g.add_weighted_edges_from([(1, 2, 1), (2, 3, 1), (1, 3, 5), (3, 4, 1)])
print(nx.shortest_path(g, 1, 4, weight="weight"), nx.shortest_path_length(g, 1, 4, weight="weight"))`, "[1, 2, 3, 4] 3"},
		{"networkx petersen", `import networkx as nx; g = nx.petersen_graph(); print(g.number_of_nodes(), g.number_of_edges(), nx.diameter(g), nx.is_bipartite(g))`, "10 15 2 False"},
		{"dateutil", `from dateutil import parser, relativedelta; d = parser.parse("2024-01-31"); print(d + relativedelta.relativedelta(months=1))`, "2024-02-29 00:00:00"},
		{"pytz", `import pytz, datetime; print(pytz.timezone("Europe/Berlin").localize(datetime.datetime(2024, 7, 1, 12)).utcoffset())`, "2:00:00"},
		{"zoneinfo", `import zoneinfo, datetime; print(datetime.datetime(2024, 1, 1, tzinfo=zoneinfo.ZoneInfo("America/New_York")).utcoffset())`, "-1 day, 19:00:00"},
		{"tabulate", `from tabulate import tabulate; print(tabulate([[1, 2]], headers=["a", "b"], tablefmt="github"))`, "|   a |   b |\n|-----|-----|\n|   1 |   2 |"},
		{"openpyxl", `import openpyxl, io
wb = openpyxl.Workbook(); wb.active["A1"] = 6; wb.active["A2"] = "=A1*7"; b = io.BytesIO(); wb.save(b)
print(openpyxl.load_workbook(io.BytesIO(b.getvalue())).active["A2"].value)`, "=A1*7"},
		{"pypdf", `import pypdf, io
w = pypdf.PdfWriter(); w.add_blank_page(72, 144); b = io.BytesIO(); w.write(b)
r = pypdf.PdfReader(io.BytesIO(b.getvalue())); print(len(r.pages), r.pages[0].mediabox.height)`, "1 144.0"},
		{"the packages are read-only", `import sympy, os
try:
    open(os.path.join(os.path.dirname(sympy.__file__), "x"), "w"); print("writable")
except OSError:
    print("read-only")`, "read-only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := runOK(t, s, tc.code); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestWorkersOnlyReadTheCompilationCache: the trusted steps (precompile,
// snapshot) fill wazero's cache with exactly what workers load, so a
// worker never compiles (seconds) nor writes the cache.
func TestWorkersOnlyReadTheCompilationCache(t *testing.T) {
	cfg := sandboxtest.Config(t)
	cacheDir := t.TempDir()
	for _, cold := range []bool{true, false} {
		t.Run(fmt.Sprintf("cold=%v", cold), func(t *testing.T) {
			c := cfg
			c.CacheDir, c.ColdStart, c.ReuseSnapshot, c.WarmWorkers = cacheDir, cold, true, 0
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			p, err := wasm.New(ctx, c, zaptest.NewLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			before := cacheFiles(t, cacheDir)
			s := openAs(t, p, "")
			runOK(t, s, "print(1)")
			_ = s.Close()
			if after := cacheFiles(t, cacheDir); after != before {
				t.Errorf("a worker changed the compilation cache:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

func cacheFiles(t *testing.T, dir string) string {
	t.Helper()
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && !strings.Contains(p, "snapshots") {
			names = append(names, strings.TrimPrefix(p, dir))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(names, " ")
}

// TestRecycleEndsAPatchedKernel: a session that disarms the kernel's exit
// on end of input (os._exit replaced, a busy loop in a finally) still ends
// when its worker is recycled, and the next session of the owner runs in
// that worker, unaffected.
func TestRecycleEndsAPatchedKernel(t *testing.T) {
	p := sandboxtest.New(t, func(c *pool.Config) {
		c.SessionsPerWorker = 4
		c.WarmWorkers = 0
	})
	s := openAs(t, p, "owner-a")
	pid := s.WorkerPID()
	runOK(t, s, `import os, builtins
os._exit = lambda *a: None
builtins.marker = "left behind"`)
	closeAndWaitIdle(t, p, s)
	s2 := openAs(t, p, "owner-a")
	defer s2.Close()
	if s2.WorkerPID() != pid {
		t.Fatalf("the next session ran in pid %d, not the recycled %d: the recycle failed", s2.WorkerPID(), pid)
	}
	if got := runOK(t, s2, `import builtins, os; print(hasattr(builtins, "marker"), os._exit.__name__)`); got != "False _exit" {
		t.Errorf("the recycled session saw %q of the previous one", got)
	}
}
