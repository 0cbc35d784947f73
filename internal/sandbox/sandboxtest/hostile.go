package sandboxtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
)

// CanaryEnv is set in the environment of every test process that uses
// Main: a sandbox whose guest can see it leaks the host's environment.
const CanaryEnv = "CODEINTERP_TEST_CANARY"

const canaryValue = "canary-4f1c9e2b"

// HostileLimits are the small limits the hostile corpus expects, so that
// every program trips its limit fast. The gVisor sandbox holds CPython with
// numpy, pandas and matplotlib imported, so it needs more memory than a
// WASM guest to start at all.
func HostileLimits(provider string) func(*pool.Config) {
	return func(c *pool.Config) {
		c.Limits.RunTimeout = 1500 * time.Millisecond
		c.Limits.StdoutBytes = 4 << 10
		c.Limits.StderrBytes = 4 << 10
		c.Limits.SourceBytes = 8 << 10
		c.Limits.GuestMemoryBytes = 128 << 20
		c.Limits.ScratchBytes = 1 << 20
		if provider == "gvisor" {
			c.Limits.RunTimeout = 3 * time.Second
			c.Limits.GuestMemoryBytes = 384 << 20
		}
	}
}

// outcomes maps a provider name to the outcomes a hostile program may end
// with there.
type outcomes map[string][]sandbox.Outcome

// both is the same expectation for every provider.
func both(o ...sandbox.Outcome) outcomes { return outcomes{"wasm": o, "gvisor": o} }

// hostileCase is one program of the corpus.
type hostileCase struct {
	name string
	// code is the program; %[1]d is replaced by the pid of a host canary
	// process, %[2]d by the port of a host TCP listener, %[3]q by the path
	// of the test binary.
	code  string
	want  outcomes
	check func(t *testing.T, provider string, r sandbox.Result)
}

const (
	completed = sandbox.OutcomeCompleted
	failed    = sandbox.OutcomeError
	timeout   = sandbox.OutcomeTimeout
	memory    = sandbox.OutcomeMemoryLimit
	truncated = sandbox.OutcomeOutputTruncated
	crashed   = sandbox.OutcomeCrashed
	rejected  = sandbox.OutcomeRejected
)

// hostileCorpus is the one table of programs that attack a sandbox; every
// provider runs all of it (RunHostile). Where a provider lacks what a
// program reaches for (the WASM guest has no numpy, ctypes, fork or
// signals), the program fails with an exception there: that is its
// expected outcome, not a skip.
func hostileCorpus() []hostileCase {
	return []hostileCase{
		{name: "python busy loop", code: "print('started')\nwhile True:\n    pass", want: both(timeout),
			check: func(t *testing.T, _ string, r sandbox.Result) {
				if r.Stdout != "started\n" {
					t.Errorf("output before the timeout was lost: %q", r.Stdout)
				}
			}},
		{name: "C-level loop (bigint power)", code: "10**(10**9)", want: both(timeout)},
		{name: "C-level loop (regex backtracking)", code: "import re\nre.match(r'(a+)+$', 'a'*64 + 'b')", want: both(timeout)},
		{name: "C-level loop (numpy)", code: "import numpy as np\nnp.linalg.svd(np.random.rand(3000, 3000))",
			want: outcomes{"wasm": {failed}, "gvisor": {timeout}}},
		// Under gVisor the pages are touched through the sentry: on a loaded
		// 2-core machine filling the cgroup can take longer than the run's
		// limit, and the timeout then ends it first — bounded either way.
		{name: "memory bomb, one allocation", code: "x = bytearray(2**30)\nx[::4096] = b'x' * len(x[::4096])",
			want: outcomes{"wasm": {memory}, "gvisor": {memory, timeout}}},
		{name: "memory bomb, growing list", code: "l = []\nwhile True:\n    l.append(bytearray(b'x' * 10**6))",
			want: outcomes{"wasm": {memory}, "gvisor": {memory, timeout}}},
		{name: "memory bomb, numpy", code: "import numpy as np\na = np.ones(2**31)",
			want: outcomes{"wasm": {failed}, "gvisor": {memory}}},
		{name: "memory bomb, growing numpy arrays", code: "import numpy as np\nl = []\nwhile True:\n    l.append(np.ones(10**7))",
			want: outcomes{"wasm": {failed}, "gvisor": {memory, timeout}}},
		{name: "print flood", code: "for i in range(200000):\n    print('x' * 100)", want: both(truncated, timeout),
			check: boundedOutput(4 << 10)},
		{name: "os.write flood", code: "import os\nfor i in range(100000):\n    os.write(1, b'y' * 1000)", want: both(truncated, timeout),
			check: boundedOutput(4 << 10)},
		{name: "stderr flood", code: "import os\nfor i in range(100000):\n    os.write(2, b'z' * 1000)", want: both(truncated, timeout),
			check: boundedOutput(4 << 10)},
		{name: "C-level write flood", code: "import ctypes\nlibc = ctypes.CDLL(None)\nbuf = b'w' * 65536\nfor i in range(2000):\n    libc.write(1, buf, len(buf))",
			want: outcomes{"wasm": {failed}, "gvisor": {truncated, timeout}},
			check: func(t *testing.T, provider string, r sandbox.Result) {
				if provider == "gvisor" {
					boundedOutput(4<<10)(t, provider, r)
				}
			}},
		{name: "read /etc/shadow", code: "print(open('/etc/shadow').read())", want: both(failed), check: stdoutLacks("root:")},
		{name: "read the host's /etc/passwd", code: "print(open('/etc/passwd').read())", want: outcomes{"wasm": {failed}, "gvisor": {completed}},
			check: all(stdoutLacks("root:"), stdoutLacks("/bin/bash"))},
		{name: "list /root", code: "import os\nprint(os.listdir('/root'))", want: both(failed)},
		// The host's /usr/local holds what its operator installed (a Go
		// toolchain here, the server binary in the gVisor image): none of
		// it may show. The WASM guest's /usr/local/lib is its own stdlib;
		// the gVisor sandbox's root is a Debian tree of its own, whose
		// /usr/local holds only Debian's empty skeleton (base-files).
		{name: "look into the host's /usr/local", code: "import os\nprint(sorted(os.listdir('/usr/local')))\n" +
			"print(sorted(os.path.join(d, f) for d, _, fs in os.walk('/usr/local') for f in fs))",
			want: outcomes{"wasm": {completed, failed}, "gvisor": {completed}},
			check: func(t *testing.T, provider string, r sandbox.Result) {
				if r.Outcome != completed {
					return
				}
				want := map[string]string{
					"wasm":   "['lib']\n",
					"gvisor": "['bin', 'etc', 'games', 'include', 'lib', 'man', 'sbin', 'share', 'src']\n[]\n",
				}[provider]
				if provider == "wasm" {
					r.Stdout, _, _ = strings.Cut(r.Stdout, "\n")
					r.Stdout += "\n"
				}
				if r.Stdout != want {
					t.Errorf("/usr/local in the guest: %q, want %q", r.Stdout, want)
				}
			}},
		{name: "list /home", code: "import os\nprint(os.listdir('/home'))", want: outcomes{"wasm": {failed}, "gvisor": {completed}},
			check: func(t *testing.T, provider string, r sandbox.Result) {
				if provider == "gvisor" && r.Stdout != "[]\n" {
					t.Errorf("/home in the sandbox: %q, want Debian's empty directory", r.Stdout)
				}
			}},
		{name: "read /proc/1/environ", code: "print(open('/proc/1/environ', 'rb').read())", want: outcomes{"wasm": {failed}, "gvisor": {completed, failed}},
			check: all(stdoutLacks(canaryValue), stdoutLacks("/root"))},
		{name: "read the server binary", code: "print(open(%[3]q, 'rb').read(4))", want: both(failed), check: stdoutLacks("ELF")},
		{name: "look into /sys", code: "import os\nfor d, _, fs in os.walk('/sys'):\n    print(d, fs)", want: both(completed, failed),
			check: all(stdoutLacks("codeinterp"), stdoutLacks("kubepods"))},
		// Climbing out of /usr reaches the guest's own root, never the
		// host's: the WASM guest has no /etc; the gVisor sandbox's
		// /etc/hostname is its root filesystem's, which names no host.
		{name: "escape a mount with ..", code: "print(open('/usr/lib/../../etc/hostname').read())",
			want: outcomes{"wasm": {failed}, "gvisor": {completed}},
			check: func(t *testing.T, provider string, r sandbox.Result) {
				if provider == "gvisor" && r.Stdout != "sandbox\n\n" {
					t.Errorf("/etc/hostname in the sandbox: %q, want the root filesystem's own \"sandbox\"", r.Stdout)
				}
			}},
		{name: "hostname", code: "import socket\nprint(socket.gethostname())", want: both(completed, failed),
			check: func(t *testing.T, _ string, r sandbox.Result) {
				if h, _ := os.Hostname(); h != "" && strings.Contains(r.Stdout, h) {
					t.Errorf("the guest sees the host's hostname %q", h)
				}
			}},
		{name: "write into /usr", code: "open('/usr/lib/python3/dist-packages/pwned.py', 'w').write('x = 1')", want: both(failed)},
		{name: "write into the stdlib", code: "import os\nopen(os.__file__, 'a').write('pwned = 1')", want: both(failed)},
		{name: "write /etc/passwd", code: "open('/etc/passwd', 'a').write('x::0:0::/:/bin/sh')", want: both(failed)},
		{name: "fill the scratch space", code: "f = open('/tmp/big', 'wb')\nwhile True:\n    f.write(b'x' * 65536)\n    f.flush()", want: both(failed),
			check: stderrHas("OSError")},
		{name: "environment", code: "import os\nprint(dict(os.environ))", want: both(completed),
			check: func(t *testing.T, _ string, r sandbox.Result) {
				for _, bad := range []string{canaryValue, "/root", "GOPATH", "SSH_", "KUBERNETES"} {
					if strings.Contains(r.Stdout, bad) {
						t.Errorf("guest environment shows %q: %s", bad, r.Stdout)
					}
				}
			}},
		{name: "user id", code: "import os\nprint(os.getuid(), os.geteuid(), os.getgid())", want: outcomes{"wasm": {completed, failed}, "gvisor": {completed}},
			check: func(t *testing.T, provider string, r sandbox.Result) {
				if provider == "gvisor" && strings.TrimSpace(r.Stdout) != "65534 65534 65534" {
					t.Errorf("the guest runs as %q, want nobody (65534)", r.Stdout)
				}
			}},
		{name: "sockets of every family", code: socketProgram, want: both(completed, failed),
			check: all(stdoutLacks("CONNECTED"), stdoutLacks("BOUND-PACKET"))},
		{name: "subprocess", code: "import subprocess\nprint(subprocess.run(['id'], capture_output=True, text=True).stdout)",
			want:  outcomes{"wasm": {failed}, "gvisor": {completed, failed}},
			check: all(stdoutLacks("uid=0"), stdoutLacks("(root)"))},
		{name: "os.fork", code: "import os\npid = os.fork()\nif pid == 0:\n    os._exit(0)\nprint('child', os.waitpid(pid, 0)[1])",
			want: outcomes{"wasm": {failed}, "gvisor": {completed, failed}}},
		{name: "fork bomb", code: "import os\nwhile True:\n    os.fork()", want: outcomes{"wasm": {failed}, "gvisor": {failed, timeout, crashed, memory}}},
		{name: "ptrace", code: "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nprint('ptrace', libc.ptrace(16, %[1]d, 0, 0), libc.ptrace(16, 1, 0, 0))",
			want: outcomes{"wasm": {failed}, "gvisor": {completed}}, check: stdoutLacks(" 0")},
		{name: "ctypes setuid(0)", code: "import ctypes\nlibc = ctypes.CDLL(None)\nprint('setuid', libc.setuid(0))",
			want: outcomes{"wasm": {failed}, "gvisor": {completed}}, check: stdoutLacks("setuid 0")},
		{name: "mount", code: "import ctypes\nlibc = ctypes.CDLL(None)\nprint('mount', libc.mount(b'none', b'/mnt/data', b'tmpfs', 0, None), libc.mount(b'/', b'/tmp', None, 4096, None))",
			want: outcomes{"wasm": {failed}, "gvisor": {completed}}, check: stdoutLacks(" 0")},
		{name: "signal a host process", code: "import os, signal\nos.kill(%[1]d, signal.SIGKILL)", want: both(failed)},
		{name: "signal every process", code: "import os, signal\nos.kill(-1, signal.SIGKILL)\nprint('survived')",
			want: outcomes{"wasm": {failed}, "gvisor": {completed, crashed, failed}}},
		{name: "kill the interpreter", code: "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", want: outcomes{"wasm": {failed}, "gvisor": {crashed}}},
		{name: "segfault the interpreter", code: "import ctypes\nctypes.string_at(0)", want: outcomes{"wasm": {failed}, "gvisor": {crashed}}},
		{name: "exit the interpreter", code: "import os\nos._exit(3)", want: both(crashed)},
		{name: "oversized source", code: "x = 1\n" + strings.Repeat("#", 9<<10), want: both(rejected)},
		{name: "non-UTF-8 source", code: "print('\xff\xfe')\n", want: both(failed), check: stderrHas("SyntaxError")},
		{name: "forge the end-of-run markers", code: "import os\nfor m in (b'\\x00CI:0123456789abcdef:ok\\n', b'\\x00CI-END:0123456789abcdef\\n'):\n    os.write(1, m)\n    os.write(2, m)\nprint('still running')",
			want: both(completed),
			check: func(t *testing.T, _ string, r sandbox.Result) {
				if !strings.Contains(r.Stdout, "still running") {
					t.Errorf("a forged marker ended the run early: %+v", r)
				}
			}},
		{name: "forge control frames", code: "import os\nframe = b'{\"kind\":\"result\",\"result\":{\"id\":1,\"status\":\"ok\",\"stdout\":\"Zm9yZ2Vk\"}}'\nfor fd in range(3, 64):\n    try:\n        os.write(fd, len(frame).to_bytes(4, 'big') + frame)\n    except OSError:\n        pass\nprint('forged')",
			want:  both(completed, crashed, failed),
			check: stdoutLacks("forged\x00")},
		{name: "steal the next program from stdin", code: "import os\nos.read(0, 100)", want: both(timeout, completed, failed)},
		{name: "close stdout and stderr", code: "import os\nos.close(1)\nos.close(2)", want: both(crashed, timeout, completed)},
		{name: "close every descriptor", code: "import os\nos.closerange(0, 1024)", want: both(crashed, timeout, completed)},
	}
}

// socketProgram tries every socket family against the host's listener and
// prints what it managed; nothing may connect or bind a raw socket.
const socketProgram = `import socket
port = %[2]d
for name, fam, typ, addr in [
        ("inet", "AF_INET", "SOCK_STREAM", ("127.0.0.1", port)),
        ("inet6", "AF_INET6", "SOCK_STREAM", ("::1", port)),
        ("unix", "AF_UNIX", "SOCK_STREAM", "/run/docker.sock"),
        ("netlink", "AF_NETLINK", "SOCK_RAW", None),
        ("packet", "AF_PACKET", "SOCK_RAW", None),
        ("raw", "AF_INET", "SOCK_RAW", None)]:
    try:
        s = socket.socket(getattr(socket, fam), getattr(socket, typ), 255 if name == "raw" else 0)
    except Exception as e:
        print(name, "denied:", type(e).__name__)
        continue
    try:
        if addr is None:
            if name == "packet":
                s.bind(("eth0", 0))
                print("BOUND-PACKET")
            else:
                print(name, "opened (sandbox-local)")
        else:
            s.settimeout(1)
            s.connect(addr)
            print(name, "CONNECTED")
    except Exception as e:
        print(name, "failed:", type(e).__name__)
    finally:
        s.close()
`

// RunHostile runs the hostile corpus against p, whose provider is named
// provider and whose limits are HostileLimits(provider). Each program must
// end with its typed outcome, reveal nothing of the host, leave its session
// usable (on a fresh interpreter where it killed one) and the provider
// healthy; the host's canary process and listener must be untouched.
func RunHostile(t *testing.T, p sandbox.Provider, provider string) {
	RunHostileAs(t, p, provider, "")
}

// RunHostileAs is RunHostile with every session opened for owner: with
// sessions_per_worker > 1 each hostile program then runs in a process that
// served the previous ones, which must not matter.
func RunHostileAs(t *testing.T, p sandbox.Provider, provider, owner string) {
	canary := exec.Command("sleep", "600")
	if err := canary.Start(); err != nil {
		t.Fatalf("start the canary process: %v", err)
	}
	t.Cleanup(func() { _ = canary.Process.Kill(); _ = canary.Wait() })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := lis.Accept(); err == nil {
			c.Close()
			accepted <- struct{}{}
		}
	}()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port

	seen := map[int]bool{}
	reused := 0
	for _, c := range hostileCorpus() {
		t.Run(c.name, func(t *testing.T) {
			want, ok := c.want[provider]
			if !ok {
				t.Fatalf("the corpus has no expectation for provider %q", provider)
			}
			code := c.code
			if strings.Contains(code, "%[") {
				code = fmt.Sprintf(code, canary.Process.Pid, port, self)
			}
			s, err := p.Open(context.Background(), sandbox.SessionOptions{Owner: owner})
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			if ps, ok := s.(interface{ WorkerPID() int }); ok {
				pid := ps.WorkerPID()
				if seen[pid] {
					reused++
				}
				seen[pid] = true
			}
			defer func() {
				_ = s.Close()
				if owner != "" {
					// Let the interpreter be recycled before the next case
					// opens, so that the next case runs where this one did.
					waitNoneOpen(p)
				}
			}()
			r, err := s.Run(context.Background(), code)
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			matched := false
			for _, w := range want {
				matched = matched || r.Outcome == w
			}
			if !matched {
				t.Fatalf("outcome %s (%s), want one of %v\nstdout %.600q\nstderr %.800q", r.Outcome, r.Detail, want, r.Stdout, r.Stderr)
			}
			if c.check != nil {
				c.check(t, provider, r)
			}
			// The same session (possibly on a fresh interpreter) still works.
			after, err := s.Run(context.Background(), "print(6 * 7)")
			if err != nil || after.Outcome != sandbox.OutcomeCompleted || strings.TrimSpace(after.Stdout) != "42" {
				t.Fatalf("session unusable after %q: %+v, %v", c.name, after, err)
			}
			killed := r.Outcome == timeout || r.Outcome == crashed
			if killed && !after.StateLost {
				t.Errorf("the interpreter was lost (%s) but the next run does not report lost state", r.Outcome)
			}
		})
	}
	if owner != "" {
		t.Logf("%d of %d hostile programs ran in a process that had served an earlier one", reused, len(hostileCorpus()))
		if reused == 0 {
			t.Errorf("no hostile program ran in a recycled process: sessions_per_worker was not exercised")
		}
	}
	if err := canary.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the host canary process was harmed: %v", err)
	}
	select {
	case <-accepted:
		t.Errorf("a guest reached the host's TCP listener on 127.0.0.1:%d", port)
	default:
	}
	// The provider as a whole is healthy: a brand-new session runs normally.
	s, err := p.Open(context.Background(), sandbox.SessionOptions{Owner: owner})
	if err != nil {
		t.Fatalf("open after the corpus: %v", err)
	}
	defer s.Close()
	if r, err := s.Run(context.Background(), "print('healthy')"); err != nil || strings.TrimSpace(r.Stdout) != "healthy" {
		t.Fatalf("provider unhealthy after the hostile programs: %+v, %v", r, err)
	}
}

// waitNoneOpen waits (up to a minute) until p has no session open.
func waitNoneOpen(p sandbox.Provider) {
	for deadline := time.Now().Add(time.Minute); p.Capacity().InUse > 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
}

func stderrHas(s string) func(*testing.T, string, sandbox.Result) {
	return func(t *testing.T, _ string, r sandbox.Result) {
		if !strings.Contains(r.Stderr, s) {
			t.Errorf("stderr lacks %q: %.500q", s, r.Stderr)
		}
	}
}

func stdoutLacks(s string) func(*testing.T, string, sandbox.Result) {
	return func(t *testing.T, _ string, r sandbox.Result) {
		if strings.Contains(r.Stdout, s) {
			t.Errorf("stdout reveals %q: %.500q", s, r.Stdout)
		}
	}
}

func all(fs ...func(*testing.T, string, sandbox.Result)) func(*testing.T, string, sandbox.Result) {
	return func(t *testing.T, provider string, r sandbox.Result) {
		for _, f := range fs {
			f(t, provider, r)
		}
	}
}

// boundedOutput checks that neither stream kept more than limit bytes plus
// the truncation note, and that the cut is marked.
func boundedOutput(limit int) func(*testing.T, string, sandbox.Result) {
	return func(t *testing.T, _ string, r sandbox.Result) {
		const note = 100
		if len(r.Stdout) > limit+note || len(r.Stderr) > limit+note {
			t.Errorf("output not bounded: stdout %d, stderr %d bytes (limit %d)", len(r.Stdout), len(r.Stderr), limit)
		}
		if !r.StdoutTruncated && !r.StderrTruncated {
			t.Errorf("no truncation reported")
		}
		if !strings.Contains(r.Stdout+r.Stderr, "[output truncated:") {
			t.Errorf("truncation is not marked in the output")
		}
	}
}
