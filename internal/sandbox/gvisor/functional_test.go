package gvisor_test

import (
	"bytes"
	"image/png"
	"strings"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/sandbox/gvisor"
	"github.com/codeinterp/codeinterp/internal/sandbox/internal/wire"
)

// TestFunctional runs a notebook's worth of programs, in order, in one
// warm sandbox: state persists, the data-science stack works, figures come
// back as PNGs.
func TestFunctional(t *testing.T) {
	e := newEnv(t)
	for _, want := range []string{"numpy", "pandas", "matplotlib", "scipy", "sklearn", "sympy"} {
		if !contains(e.kind.Packages(), want) {
			t.Errorf("Packages() = %v lacks %s", e.kind.Packages(), want)
		}
	}
	s := e.start(t)
	cases := []struct {
		name   string
		code   string
		status string
		stdout string // substring
		stderr string // substring
		check  func(t *testing.T, r *wire.Result)
	}{
		{name: "define", code: "x = 41\ndef f(a):\n    return a + 1", status: wire.StatusOK},
		{name: "state persists, last expression shown", code: "f(x)", status: wire.StatusOK, stdout: "42\n"},
		{name: "None is not shown", code: "None", status: wire.StatusOK,
			check: func(t *testing.T, r *wire.Result) { wantEqual(t, string(r.Stdout), "") }},
		{name: "__main__", code: "__name__", status: wire.StatusOK, stdout: "'__main__'"},
		{name: "traceback with the cell's source", code: "def g():\n    return 1 / 0  # boom\ng()", status: wire.StatusError,
			stderr: "return 1 / 0  # boom", check: func(t *testing.T, r *wire.Result) {
				if !strings.Contains(string(r.Stderr), "ZeroDivisionError") || strings.Contains(string(r.Stderr), "kernel") {
					t.Errorf("traceback: %s", r.Stderr)
				}
			}},
		{name: "syntax error", code: "def (", status: wire.StatusError, stderr: "SyntaxError"},
		{name: "sys.exit(0) is ok", code: "import sys\nprint('a')\nsys.exit(0)", status: wire.StatusOK, stdout: "a"},
		{name: "sys.exit(3) is an error", code: "import sys\nsys.exit(3)", status: wire.StatusError, stderr: "SystemExit: 3"},
		{name: "stdin is EOF", code: "input()", status: wire.StatusError, stderr: "EOFError"},
		{name: "stderr is separate", code: "import sys\nprint('out')\nprint('err', file=sys.stderr)", status: wire.StatusOK,
			check: func(t *testing.T, r *wire.Result) {
				wantEqual(t, string(r.Stdout), "out\n")
				wantEqual(t, string(r.Stderr), "err\n")
			}},
		{name: "numpy linalg", code: "import numpy as np\na = np.array([[3., 1.], [1., 2.]])\nprint(np.linalg.solve(a, [9., 8.]).round(6).tolist())",
			status: wire.StatusOK, stdout: "[2.0, 3.0]"},
		{name: "pandas read_csv, groupby, merge", code: `import pandas as pd
with open('/mnt/data/sales.csv', 'w') as fh:
    fh.write('region,amount\nnorth,10\nsouth,5\nnorth,7\n')
df = pd.read_csv('/mnt/data/sales.csv')
g = df.groupby('region', as_index=False)['amount'].sum()
names = pd.DataFrame({'region': ['north', 'south'], 'boss': ['Ann', 'Bo']})
m = g.merge(names, on='region')
print(m.to_dict('records'))`, status: wire.StatusOK, stdout: "{'region': 'north', 'amount': 17, 'boss': 'Ann'}"},
		{name: "relative paths are /mnt/data", code: "import os\nprint(os.getcwd(), os.path.exists('sales.csv'))", status: wire.StatusOK, stdout: "/mnt/data True"},
		{name: "scipy.optimize", code: "from scipy.optimize import minimize_scalar\nround(minimize_scalar(lambda v: (v - 2) ** 2).x, 4)",
			status: wire.StatusOK, stdout: "2.0"},
		{name: "sklearn fit", code: "from sklearn.linear_model import LinearRegression\nimport numpy as np\n" +
			"X = np.arange(10).reshape(-1, 1)\nm = LinearRegression().fit(X, 3 * X.ravel() + 1)\nprint(round(m.coef_[0], 6), round(m.intercept_, 6))",
			status: wire.StatusOK, stdout: "3.0 1.0"},
		{name: "sympy solve", code: "import sympy as sp\nv = sp.symbols('v')\nsorted(sp.solve(v**2 - 4, v))", status: wire.StatusOK, stdout: "[-2, 2]"},
		{name: "matplotlib figure becomes a PNG", code: "import matplotlib.pyplot as plt\nfig = plt.figure(figsize=(4, 3), dpi=50)\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title('t')",
			status: wire.StatusOK, check: wantPNGs(1, 200, 150)},
		{name: "figures are closed after capture", code: "import matplotlib.pyplot as plt\nlen(plt.get_fignums())", status: wire.StatusOK, stdout: "0",
			check: wantPNGs(0, 0, 0)},
		{name: "plt.show keeps the figure", code: "import matplotlib.pyplot as plt\nplt.figure(figsize=(2, 2), dpi=40)\nplt.bar(['a', 'b'], [1, 2])\nplt.show()\nprint('shown')",
			status: wire.StatusOK, stdout: "shown", check: wantPNGs(1, 80, 80)},
		{name: "seaborn and pandas plotting", code: "import seaborn as sns, pandas as pd\nax = pd.Series([1, 3, 2]).plot()\nsns.histplot([1, 2, 2, 3], ax=ax)\nNone",
			status: wire.StatusOK, check: wantPNGs(1, 640, 480)},
		{name: "many figures are bounded", code: "import matplotlib.pyplot as plt\nfor i in range(12):\n    plt.figure(figsize=(1, 1), dpi=20)\n    plt.plot([i])",
			status: wire.StatusOK, check: func(t *testing.T, r *wire.Result) {
				if len(r.Images) != 8 || r.ImagesDropped != 4 {
					t.Errorf("%d images, %d dropped; want 8 and 4", len(r.Images), r.ImagesDropped)
				}
			}},
		{name: "a figure left by a failing cell is still returned", code: "import matplotlib.pyplot as plt\nplt.figure(figsize=(1, 1), dpi=30)\nraise ValueError('after plot')",
			status: wire.StatusError, stderr: "ValueError: after plot", check: wantPNGs(1, 30, 30)},
		// FreeType reads fonts from memory (kernel.py fonts_in_memory): a
		// chart's text makes no read system calls on the font file (a
		// plain FT2Font makes ~350 for this one), and the PDF backend,
		// which embeds fonts by their path, still works.
		{name: "fonts are read from memory", code: "import io, matplotlib.pyplot as plt\n" +
			"def syscr(): return int(dict(l.split(': ') for l in open('/proc/self/io').read().splitlines())['syscr'])\n" +
			"a = syscr(); b = syscr()\n" +
			"fig = plt.figure(figsize=(4, 3), dpi=50); plt.plot([1, 2, 3]); plt.title('a title 12345'); plt.xlabel('x axis')\n" +
			"fig.savefig(io.BytesIO(), format='png')\n" +
			"reads = syscr() - b - (b - a)\n" +
			"plt.rcParams['pdf.fonttype'] = 42; fig.savefig('chart.pdf'); plt.close(fig)\n" +
			"pdf = open('chart.pdf', 'rb').read()\n" +
			"print('reads', 'few' if reads < 100 else reads, b'FontFile2' in pdf, b'DejaVuSans' in pdf)",
			status: wire.StatusOK, stdout: "reads few True True"},
		{name: "state survived all that", code: "x, m.coef_.round(3).tolist()", status: wire.StatusOK, stdout: "(41, [3.0])"},
		{name: "a module in /mnt/data imports", code: "open('/mnt/data/helper.py', 'w').write('K = 7\\n')\nimport helper\nhelper.K", status: wire.StatusOK, stdout: "7"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := s.run(c.code, 0)
			if r.Status != c.status || !strings.Contains(string(r.Stdout), c.stdout) || !strings.Contains(string(r.Stderr), c.stderr) || r.InterpreterGone {
				t.Fatalf("%s\nwant status %s, stdout ∋ %q, stderr ∋ %q", describe(r), c.status, c.stdout, c.stderr)
			}
			if c.check != nil {
				c.check(t, r)
			}
		})
	}
}

// TestOutputFlood floods both streams from Python, from os.write and from
// C (libc's write): the host keeps the limit, counts the rest, the run
// completes and the session stays healthy.
func TestOutputFlood(t *testing.T) {
	e := newEnv(t)
	s := e.start(t)
	const limit = 64 << 10
	for _, c := range []struct{ name, code string }{
		{"print", "for i in range(30000):\n    print('x' * 99)"},
		{"os.write", "import os\nfor i in range(3000):\n    os.write(1, b'y' * 1000)"},
		{"stderr", "import os\nfor i in range(3000):\n    os.write(2, b'z' * 1000)"},
		{"libc write", "import ctypes\nlibc = ctypes.CDLL(None)\nb = b'w' * 100000\nfor i in range(30):\n    libc.write(1, b, len(b))"},
		{"marker-like bytes", "import os\nfor i in range(20000):\n    os.write(1, b'\\x00CI-END:' + b'0' * 31)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			started := time.Now()
			r := s.run(c.code, 0)
			if r.Status != wire.StatusOK {
				t.Fatalf("%s", describe(r))
			}
			kept, dropped := len(r.Stdout)+len(r.Stderr), r.StdoutDropped+r.StderrDropped
			if kept > limit || dropped == 0 || kept < limit/2 {
				t.Fatalf("kept %d bytes, dropped %d; want at most %d kept and the rest dropped", kept, dropped, limit)
			}
			t.Logf("%v: kept %d, dropped %d", time.Since(started), kept, dropped)
			s.expectOK("print('healthy')", "healthy")
		})
	}
}

func wantEqual(t *testing.T, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// wantPNGs checks the run returned n PNGs, the first w×h pixels.
func wantPNGs(n, w, h int) func(t *testing.T, r *wire.Result) {
	return func(t *testing.T, r *wire.Result) {
		t.Helper()
		if len(r.Images) != n || r.ImagesDropped != 0 {
			t.Fatalf("%d images (%d dropped), want %d", len(r.Images), r.ImagesDropped, n)
		}
		if n == 0 {
			return
		}
		img := r.Images[0]
		if img.MediaType != "image/png" {
			t.Errorf("media type %q", img.MediaType)
		}
		cfg, err := png.DecodeConfig(bytes.NewReader(img.Data))
		if err != nil {
			t.Fatalf("PNG does not decode: %v", err)
		}
		if cfg.Width != w || cfg.Height != h {
			t.Errorf("PNG is %d×%d, want %d×%d", cfg.Width, cfg.Height, w, h)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestWarmUpLeavesNoState: the host's warm-up cells (run before a sandbox
// is handed over, restored or cold) leave nothing a session can see: no
// names, no _, no output, no figure, and the session's first cell is cell 1.
func TestWarmUpLeavesNoState(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			s := newEnv(t, func(c *gvisor.Config) { c.ColdStart = m.cold }).start(t)
			r := s.run(`import sys, linecache
print(sorted(k for k in globals() if not k.startswith("__")))
print(sorted(k for k in linecache.cache if k.startswith("<cell")))
import matplotlib.pyplot as plt
print(len(plt.get_fignums()))
1 / 0`, 10*time.Second)
			if r.Status != wire.StatusError {
				t.Fatalf("first run: %s", describe(r))
			}
			wantEqual(t, string(r.Stdout), "['linecache', 'sys']\n['<cell 1>']\n0\n")
			if !strings.Contains(string(r.Stderr), `File "<cell 1>", line 6`) {
				t.Errorf("the first cell is not cell 1:\n%s", r.Stderr)
			}
			s.expectOK("'_w' in globals(), '_' in globals()", "(False, False)\n")
		})
	}
}

// TestOutputDescriptorsReplaced: code that points fd 1 or 2 elsewhere (a
// file, the other output pipe) would leave a kernel whose later output goes
// there instead of to the host: the run completes with what reached the
// host, and the interpreter is gone, so the session's next run is a fresh
// one whose output is seen.
func TestOutputDescriptorsReplaced(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct{ name, code, stdout string }{
		{"stdout to a file", "import os\nprint('seen', flush=True)\nfd = os.open('/tmp/x', os.O_WRONLY | os.O_CREAT)\nos.dup2(fd, 1)\nprint('hidden')", "seen\n"},
		{"stderr to a file", "import os\nfd = os.open('/tmp/x', os.O_WRONLY | os.O_CREAT)\nos.dup2(fd, 2)\nprint('seen')", "seen\n"},
		{"stdout onto stderr", "import os\nos.dup2(2, 1)\nprint('to stderr')", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := e.start(t)
			r := s.run(c.code, 10*time.Second)
			if r.Status != wire.StatusOK || !r.InterpreterGone || string(r.Stdout) != c.stdout {
				t.Errorf("%s; want ok, stdout %q, the interpreter gone", describe(r), c.stdout)
			}
		})
	}
}
