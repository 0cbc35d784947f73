package cellrunner

import (
	"encoding/json"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// harness runs the cells it is given as JSON on stdin through the runner,
// as a kernel does, and reports each one's status and output.
const harness = `
import contextlib, io, json
ns = _codeinterp_namespace()
_codeinterp_warmup()
out = []
for i, cell in enumerate(json.load(sys.stdin), 1):
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        status = _codeinterp_run(cell["src"].encode(), "<cell %d>" % i, ns, cell.get("timeout"))
    out.append({"status": status, "stdout": o.getvalue(), "stderr": e.getvalue()})
_codeinterp_write(1, json.dumps(out).encode())
`

// TestRun runs cells through the runner with the host's python3, the way
// both kernels do: state persists, the last expression is shown, the
// statuses, and tracebacks that show the cell and none of the runner.
func TestRun(t *testing.T) {
	// Debian's CPython, the gVisor kernel's (make setup installs it): the
	// python3 on PATH may be a shim of another version.
	py, err := exec.LookPath("/usr/bin/python3")
	if err != nil {
		t.Fatal("the cell runner's test needs /usr/bin/python3 (make setup installs it):", err)
	}
	cells := []struct {
		src     string
		timeout float64
		status  string
		stdout  string
		stderr  string // a regexp
	}{
		{src: "x = 41\ndef f(a):\n    return a + 1", status: "ok"},
		{src: "f(x)", status: "ok", stdout: "42\n"},
		{src: "None", status: "ok"},
		{src: "_", status: "ok", stdout: "42\n"},
		{src: "__name__", status: "ok", stdout: "'__main__'\n"},
		{src: "def g():\n    return 1 / 0  # boom\ng()", status: "error",
			stderr: `(?s)^Traceback \(most recent call last\):\n  File "<cell 6>", line 3, in <module>\n.*return 1 / 0  # boom\n.*ZeroDivisionError: division by zero\n$`},
		{src: "def (", status: "error", stderr: `(?s)^  File "<cell 7>", line 1\n.*SyntaxError`},
		{src: "import sys\nprint('a')\nsys.exit(0)", status: "ok", stdout: "a\n"},
		{src: "import sys\nsys.exit(3)", status: "error", stderr: `^SystemExit: 3\n$`},
		{src: "raise MemoryError", status: "memory", stderr: `MemoryError\n$`},
		{src: "while True:\n    pass", timeout: 0.2, status: "timeout",
			stderr: `(?s)^Traceback \(most recent call last\):\n  File "<cell 11>".*\nTimeoutError: the run's time limit passed\n$`},
		{src: "x", timeout: 5, status: "ok", stdout: "41\n"},
		// One-line cells: an expression takes the one-compile path, a
		// statement the general one; both behave alike.
		{src: "y = 5", status: "ok"},
		{src: "(z := y + 1)", status: "ok", stdout: "6\n"},
		{src: "z * 2  # a comment\n", status: "ok", stdout: "12\n"},
		{src: "_", status: "ok", stdout: "12\n"},
		{src: "print(25)", status: "ok", stdout: "25\n"},
		{src: "len('a\\tb')", status: "ok", stdout: "3\n"},
		{src: "1 / 0", status: "error",
			stderr: `(?s)^Traceback \(most recent call last\):\n  File "<cell 19>", line 1, in <module>\n    1 / 0\n.*ZeroDivisionError: division by zero\n$`},
		{src: " 1", status: "error", stderr: `(?s)^  File "<cell 20>", line 1\n.*IndentationError: unexpected indent\n$`},
		// A timed cell that ends at once leaves its timer armed: the alarm
		// that comes during the next, untimed cell is ignored.
		{src: "'quick'", timeout: 0.05, status: "ok", stdout: "'quick'\n"},
		{src: "import time\ntime.sleep(0.3)\n'after'", status: "ok", stdout: "'after'\n"},
		{src: "'\\d'", status: "ok", stdout: "'\\\\d'\n", stderr: `^(.*SyntaxWarning.*\n.*\n)?$`},
	}
	in, _ := json.Marshal(func() []map[string]any {
		var v []map[string]any
		for _, c := range cells {
			m := map[string]any{"src": c.src}
			if c.timeout > 0 {
				m["timeout"] = c.timeout
			}
			v = append(v, m)
		}
		return v
	}())
	cmd := exec.Command(py, "-E", "-s", "-u", "-B", "-c", Prepend(harness))
	cmd.Stdin = strings.NewReader(string(in))
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3: %v: %s", err, b)
	}
	var got []struct{ Status, Stdout, Stderr string }
	if err := json.Unmarshal(b, &got); err != nil || len(got) != len(cells) {
		t.Fatalf("the harness reported %q (%v)", b, err)
	}
	for i, c := range cells {
		g := got[i]
		if g.Status != c.status || g.Stdout != c.stdout || !regexp.MustCompile(c.stderr).MatchString(g.Stderr) ||
			(c.stderr == "" && g.Stderr != "") {
			t.Errorf("cell %q: %s, stdout %q, stderr %q; want %s, %q, %s", c.src, g.Status, g.Stdout, g.Stderr, c.status, c.stdout, c.stderr)
		}
		if strings.Contains(g.Stderr, "_codeinterp_") {
			t.Errorf("cell %q: the traceback shows the runner:\n%s", c.src, g.Stderr)
		}
	}
}

// TestRunnerNames: every name the runner defines is _codeinterp_*, which is
// how a traceback tells its frames from the code's and what keeps it clear
// of the kernels' own names.
func TestRunnerNames(t *testing.T) {
	for _, m := range regexp.MustCompile(`(?m)^(?:def|class) (\w+)|^(\w+) =`).FindAllStringSubmatch(source, -1) {
		name := m[1] + m[2]
		if !strings.HasPrefix(name, "_codeinterp_") && !strings.HasPrefix(name, "_Codeinterp") {
			t.Errorf("the runner defines %s", name)
		}
	}
}
