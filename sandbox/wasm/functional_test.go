package wasm_test

import (
	"context"
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/sandbox"
	"github.com/codeinterp/codeinterp/sandbox/pool"
	"github.com/codeinterp/codeinterp/sandbox/sandboxtest"
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
