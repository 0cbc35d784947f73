package wasm_test

import (
	"context"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
	"github.com/codeinterp/codeinterp/internal/sandbox/wasm"
)

func open(t *testing.T, p *pool.Pool) sandbox.Session {
	t.Helper()
	s, err := p.Open(context.Background(), sandbox.SessionOptions{})
	if err != nil {
		t.Fatalf("open session: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func run(t *testing.T, s sandbox.Session, code string) sandbox.Result {
	t.Helper()
	r, err := s.Run(context.Background(), code)
	if err != nil {
		t.Fatalf("run %q: %v", code, err)
	}
	return r
}

// TestStdlibModules imports and uses every module the product promises.
func TestStdlibModules(t *testing.T) {
	p := sandboxtest.New(t)
	s := open(t, p)
	cases := []struct{ name, code, want string }{
		{"json", `import json; print(json.dumps({"a": [1, 2]}))`, `{"a": [1, 2]}`},
		{"re", `import re; print(re.sub(r"\d+", "#", "a1b22"))`, "a#b#"},
		{"math", `import math; print(math.isqrt(10**20))`, "10000000000"},
		{"decimal", `import decimal; print(decimal.Decimal(1) / decimal.Decimal(7))`, "0.1428571428571428571428571429"},
		{"fractions", `import fractions; print(fractions.Fraction(3, 6))`, "1/2"},
		{"statistics", `import statistics; print(statistics.median([5, 1, 3]))`, "3"},
		{"datetime", `import datetime; print(datetime.date(2024, 2, 29).isoformat())`, "2024-02-29"},
		{"collections", `import collections; print(collections.Counter("abca").most_common(1))`, "[('a', 2)]"},
		{"itertools", `import itertools; print(list(itertools.accumulate([1, 2, 3])))`, "[1, 3, 6]"},
		{"hashlib", `import hashlib; print(hashlib.sha256(b"abc").hexdigest()[:16])`, "ba7816bf8f01cfea"},
		{"random", `import random; r = random.Random(1); print(r.randint(1, 10**6))`, "140892"},
		{"csv", "import csv, io; print(next(csv.reader(io.StringIO('a,\"b,c\"'))))", "['a', 'b,c']"},
		{"sqlite3", `import sqlite3; c = sqlite3.connect(":memory:"); print(c.execute("select 6*7").fetchone()[0])`, "42"},
		{"zlib", `import zlib; print(zlib.decompress(zlib.compress(b"x" * 1000)) == b"x" * 1000)`, "True"},
		{"bz2", `import bz2; print(bz2.decompress(bz2.compress(b"hello")))`, "b'hello'"},
		{"lzma", `import lzma; print(lzma.decompress(lzma.compress(b"hello")))`, "b'hello'"},
		{"last expression is shown", `21 * 2`, "42"},
		{"scratch files", `open("/mnt/data/f.txt", "w").write("hi"); open("/tmp/g", "w").write("x"); print(open("/mnt/data/f.txt").read())`, "hi"},
		{"time.sleep", `import time; t = time.monotonic(); time.sleep(0.05); print(time.monotonic() - t >= 0.05)`, "True"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := run(t, s, c.code)
			if r.Outcome != sandbox.OutcomeCompleted || strings.TrimSpace(r.Stdout) != c.want {
				t.Fatalf("outcome %s, stdout %q, stderr %q; want completed with %q", r.Outcome, r.Stdout, r.Stderr, c.want)
			}
		})
	}
}

// TestStatePersistsWithinSessionOnly: a session keeps its variables; another
// session never sees them.
func TestStatePersistsWithinSessionOnly(t *testing.T) {
	p := sandboxtest.New(t)
	a, b := open(t, p), open(t, p)
	run(t, a, "secret = 'a-only'\nimport json")
	if r := run(t, a, "print(secret, json.dumps(1))"); strings.TrimSpace(r.Stdout) != "a-only 1" {
		t.Fatalf("state not kept: %+v", r)
	}
	r := run(t, b, "print(secret)")
	if r.Outcome != sandbox.OutcomeError || !strings.Contains(r.Stderr, "NameError") {
		t.Fatalf("state leaked between sessions: %+v", r)
	}
	run(t, a, "open('/tmp/mine', 'w').write('a')")
	if r := run(t, b, "import os; print(os.listdir('/tmp'))"); strings.TrimSpace(r.Stdout) != "[]" {
		t.Fatalf("scratch leaked between sessions: %+v", r)
	}
}

// TestRealRandomnessAndClock: wazero's deterministic defaults must be off.
func TestRealRandomnessAndClock(t *testing.T) {
	p := sandboxtest.New(t)
	code := `import random, os, time, datetime
print(random.random(), os.urandom(8).hex(), hash("abc"), time.time() > 1.7e9, datetime.datetime.now().year >= 2025)`
	first := run(t, open(t, p), code)
	second := run(t, open(t, p), code)
	if first.Outcome != sandbox.OutcomeCompleted || !strings.HasSuffix(strings.TrimSpace(first.Stdout), "True True") {
		t.Fatalf("clock not real: %+v", first)
	}
	if first.Stdout == second.Stdout {
		t.Fatalf("two fresh interpreters produced the same random values: %q", first.Stdout)
	}
}

func TestPythonErrorHasTraceback(t *testing.T) {
	p := sandboxtest.New(t)
	s := open(t, p)
	r := run(t, s, "def f():\n    raise ValueError('boom')\nf()")
	if r.Outcome != sandbox.OutcomeError {
		t.Fatalf("outcome %s, want error", r.Outcome)
	}
	for _, want := range []string{"Traceback", "line 2, in f", "raise ValueError('boom')", "ValueError: boom"} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.Stderr)
		}
	}
	if strings.Contains(r.Stderr, "_codeinterp_loop") {
		t.Errorf("traceback shows the bootstrap:\n%s", r.Stderr)
	}
	// The session goes on after an error, state intact.
	run(t, s, "y = 5")
	if r := run(t, s, "y"); strings.TrimSpace(r.Stdout) != "5" {
		t.Fatalf("session broken after an error: %+v", r)
	}
}

// TestWarmUpLeavesNoState: the worker's warm-up cells (run before an
// interpreter is handed over: cold, restored, or recycled for the owner's
// next session) leave nothing a session can see: no names, no _, no
// output, and the session's first cell is cell 1.
func TestWarmUpLeavesNoState(t *testing.T) {
	const probe = `import sys, linecache
print(sorted(k for k in globals() if not k.startswith("__")))
print(sorted(k for k in linecache.cache if k.startswith("<cell")))
1 / 0`
	for _, m := range []struct {
		name string
		cold bool
	}{{"restored", false}, {"cold", true}} {
		t.Run(m.name, func(t *testing.T) {
			cfg := sandboxtest.Config(t)
			cfg.ColdStart = m.cold
			cfg.SessionsPerWorker = 2
			cfg.WarmWorkers = 0
			p, err := wasm.New(context.Background(), cfg, zaptest.NewLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			// The owner's second session is the recycled worker's (the
			// restored mode only: a cold worker cannot recycle).
			pids := map[int]bool{}
			for i := range 2 {
				s := openAs(t, p, "warm-up-owner")
				r := run(t, s, probe)
				if r.Outcome != sandbox.OutcomeError || r.Stdout != "['linecache', 'sys']\n['<cell 1>']\n" ||
					!strings.Contains(r.Stderr, `File "<cell 1>", line 4`) {
					t.Errorf("session %d's first run: %s, stdout %q, stderr %q", i, r.Outcome, r.Stdout, r.Stderr)
				}
				if r := run(t, s, "'_w' in globals(), '_' in globals()"); r.Stdout != "(False, False)\n" {
					t.Errorf("session %d: %q", i, r.Stdout)
				}
				pids[s.WorkerPID()] = true
				closeAndWaitIdle(t, p, s)
			}
			if !m.cold && len(pids) != 1 {
				t.Errorf("the owner's sessions ran in %d workers; want 1 (recycled)", len(pids))
			}
		})
	}
}
