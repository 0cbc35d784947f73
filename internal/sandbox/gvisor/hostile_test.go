package gvisor_test

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/sandbox/gvisor"
	"github.com/codeinterp/codeinterp/internal/sandbox/internal/wire"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
)

// TestHostileContained runs attacks that must fail (or show nothing of the
// host) without ending the session, all in one sandbox.
func TestHostileContained(t *testing.T) {
	for _, p := range platforms {
		for _, m := range modes {
			t.Run(p+"/"+m.name, func(t *testing.T) {
				hostileContained(t, newEnv(t, func(c *gvisor.Config) { c.ColdStart, c.Platform = m.cold, p }))
			})
		}
	}
}

func hostileContained(t *testing.T, e *env) {
	os.Setenv("CODEINTERP_HOST_SECRET", "hunter2")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	hostName, _ := os.Hostname()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	tcpPort := tcp.Addr().(*net.TCPAddr).Port
	unixPath := t.TempDir() + "/host.sock"
	ux, err := net.Listen("unix", unixPath)
	if err != nil {
		t.Fatal(err)
	}
	defer ux.Close()
	go func() {
		for {
			c, err := tcp.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("HOST-TCP"))
			c.Close()
		}
	}()
	// Canaries where a host keeps what a sandbox must not see: what an
	// operator installed (/usr/local: a toolchain, the server binary in
	// the image) and its configuration (/etc).
	canary := fmt.Sprintf("codeinterp-canary-%d", time.Now().UnixNano())
	for _, dir := range []string{"/usr/local", "/etc"} {
		p := dir + "/" + canary
		if err := os.WriteFile(p, []byte("host"), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(p) })
	}
	s := e.start(t)
	// Each program prints "VERDICT ok" when the attack failed as it must;
	// anything else is a finding.
	cases := []struct{ name, code string }{
		{"walking / finds no file of the host", fmt.Sprintf(`
import os
found, n = [], 0
for d, dirs, files in os.walk('/'):
    if d == '/':
        dirs[:] = [x for x in dirs if x not in ('proc', 'sys', 'dev')]
    n += len(files)
    found += [os.path.join(d, f) for f in files + dirs if %q in f]
print('walked', n, 'files')
print('VERDICT', 'ok' if not found and n > 1000 else 'bad: %%r (%%d files)' %% (found, n))`, canary)},
		{"the host's /usr/local is not the sandbox's", tryOpen("/usr/local/go/bin/go")},
		{"read /etc/shadow", tryOpen("/etc/shadow")},
		{"list /root", tryList("/root")},
		{"list /home", tryList("/home")},
		{"read the test binary", tryOpen(self)},
		{"read the host's temporary dir", tryList(t.TempDir())},
		{"etc/passwd is synthetic", `
p = open('/etc/passwd').read()
print('VERDICT', 'ok' if p.count('\n') == 1 and 'sandbox:x:65534:65534' in p and 'root' not in p else 'bad: ' + p)`},
		{"proc/1/environ has no host variable", `
e = open('/proc/1/environ', 'rb').read()
print('VERDICT', 'ok' if b'hunter2' not in e and b'CODEINTERP' not in e else 'bad: %r' % e)`},
		{"proc shows only the sandbox", `
import os
pids = [p for p in os.listdir('/proc') if p.isdigit()]
cmds = [open('/proc/%s/cmdline' % p, 'rb').read()[:40] for p in pids]
print('VERDICT', 'ok' if all(b'python3' in c for c in cmds) else 'bad: %r' % cmds)`},
		{"mounts name no host path", `
m = open('/proc/self/mountinfo').read()
print('VERDICT', 'ok' if 'codeinterp' not in m and '/tmp/' not in m.replace(' /tmp ', ' ') else 'bad: ' + m)`},
		{"sysfs shows nothing of the host", `
import os
files = []
for d, _, fs in os.walk('/sys'):
    files += [os.path.join(d, f) for f in fs]
print(len(files), sorted(set(f.split('/')[2] + '/' + f.split('/')[3] for f in files)))
bad = [f for f in files if not f.startswith(('/sys/devices/system/cpu/', '/sys/devices/system/node/', '/sys/kernel/mm/', '/sys/class/net/lo/'))]
print('VERDICT', 'ok' if not bad else 'bad: %r' % bad[:20])`},
		{"environment is the guest's only", `
import os
print('VERDICT', 'ok' if set(os.environ) <= {'PATH', 'HOME', 'LANG', 'MPLBACKEND', 'MPLCONFIGDIR', 'LC_CTYPE', 'MALLOC_MMAP_THRESHOLD_', 'MALLOC_TRIM_THRESHOLD_', 'MALLOC_TOP_PAD_'} else 'bad: %r' % dict(os.environ))`},
		{"uid is 65534", `
import os
print('VERDICT', 'ok' if (os.getuid(), os.geteuid(), os.getgid(), os.getgroups()) == (65534, 65534, 65534, []) else 'bad: %r' % ((os.getuid(), os.getgid(), os.getgroups()),))`},
		{"hostname is not the host's", fmt.Sprintf(`
import socket
h = socket.gethostname()
print('VERDICT', 'ok' if h == 'sandbox' and h != %q else 'bad: ' + h)`, hostName)},
		{"clock is real", fmt.Sprintf(`
import time
print('VERDICT', 'ok' if abs(time.time() - %d) < 60 else 'bad: %%f' %% time.time())`, time.Now().Unix())},
		{"write outside the tmpfs", `
bad = []
for p in ('/x', '/usr/x', '/etc/x', '/run/ci/x', '/usr/lib/python3/dist-packages/numpy/__init__.py', '/etc/passwd'):
    try:
        open(p, 'a').write('x')
        bad.append(p)
    except OSError:
        pass
print('VERDICT', 'ok' if not bad else 'bad: %r' % bad)`},
		{"fill the tmpfs", `
import errno
n = 0
try:
    with open('/mnt/data/big', 'wb') as f:
        while n < 200 << 20:
            f.write(b'x' * (1 << 20))
            f.flush()
            n += 1 << 20
except OSError as e:
    print('stopped at', n >> 20, 'MiB', e)
import os
os.remove('/mnt/data/big')
print('VERDICT', 'ok' if n <= 32 << 20 else 'bad: wrote %d MiB' % (n >> 20))`},
		{"subprocess stays inside", `
import subprocess
out = subprocess.run(['/usr/bin/id', '-u'], capture_output=True, text=True).stdout.strip()
ps = subprocess.run(['/bin/sh', '-c', 'ls /proc | grep -c "^[0-9]"'], capture_output=True, text=True).stdout.strip()
print('id', out, 'procs', ps)
print('VERDICT', 'ok' if out == '65534' else 'bad: ' + out)`},
		{"TCP to the host", fmt.Sprintf(`
import socket
res = []
for host in ('127.0.0.1', %q, '8.8.8.8', '10.0.2.2', '169.254.169.254'):
    try:
        c = socket.create_connection((host, %d), timeout=1)
        res.append((host, c.recv(10)))
    except OSError:
        pass
print('VERDICT', 'ok' if not res else 'bad: %%r' %% res)`, hostIP(), tcpPort)},
		{"IPv6", `
import socket
try:
    socket.create_connection(('::1', 22), timeout=1)
    print('VERDICT bad: connected')
except OSError as e:
    print('VERDICT ok', e)`},
		{"a host unix socket", fmt.Sprintf(`
import socket
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(%q)
    print('VERDICT bad: connected')
except OSError as e:
    print('VERDICT ok', e)`, unixPath)},
		{"netlink and packet sockets", `
import socket
res = {}
for fam, typ, proto in ((socket.AF_NETLINK, socket.SOCK_RAW, 0), (socket.AF_PACKET, socket.SOCK_RAW, 0x0300), (socket.AF_INET, socket.SOCK_RAW, 1)):
    try:
        socket.socket(fam, typ, proto).close()
        res[fam] = 'created'
    except OSError as e:
        res[fam] = str(e)
print(res)
ifs = [n for _, n in socket.if_nameindex()]
print('VERDICT', 'ok' if res[socket.AF_PACKET] != 'created' and res[socket.AF_INET] != 'created' and ifs == ['lo'] else 'bad: %r %r' % (res, ifs))`},
		{"ctypes: setuid, mount, ptrace, unshare, reboot", `
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
r = {
  'setuid': libc.setuid(0),
  'mount': libc.mount(b'none', b'/mnt', b'tmpfs', 0, None),
  'ptrace_attach_1': libc.ptrace(16, 1, None, None),
  'unshare_user': libc.unshare(0x10000000),
  'reboot': libc.reboot(0x4321fedc),
  'chroot': libc.chroot(b'/tmp'),
}
# gVisor lets a user make a device node on its tmpfs, but the device is
# gVisor's (none behind major 8) and the mount is nodev: opening it fails.
libc.mknod(b'/tmp/sda', 0o60600, os.makedev(8, 0))
try:
    open('/tmp/sda', 'rb').read(1)
    r['open_block_device'] = 0
except OSError as e:
    print('open device:', e)
print(r, os.getuid())
print('VERDICT', 'ok' if all(v == -1 for v in r.values()) and os.getuid() == 65534 else 'bad: %r' % r)`},
		{"forged end marker with a guessed nonce", `
import os
os.write(1, b'\x00CI-END:' + b'0' * 32 + b'\n')
print('VERDICT ok still running')`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := s.run(c.code, 30*time.Second)
			if r.Status != wire.StatusOK || !strings.Contains(string(r.Stdout), "VERDICT ok") {
				t.Fatalf("%s", describe(r))
			}
			t.Logf("%s", strings.TrimSpace(string(r.Stdout)))
		})
	}
}

// hostIP is a non-loopback address of this host, or 127.0.0.2.
func hostIP() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return "127.0.0.2"
}

func tryOpen(path string) string {
	return fmt.Sprintf(`
try:
    data = open(%q, 'rb').read(100)
    print('VERDICT bad: read %%r' %% data)
except OSError as e:
    print('VERDICT ok', e)`, path)
}

// tryList passes when path cannot be listed or is empty: the sandbox's
// root is a Debian tree of its own, whose /home is an empty directory.
func tryList(path string) string {
	return fmt.Sprintf(`
import os
try:
    names = os.listdir(%q)
    print('VERDICT', 'ok (empty)' if not names else 'bad: listed %%r' %% names)
except OSError as e:
    print('VERDICT ok', e)`, path)
}

// TestHostileDestructive runs attacks that may end the interpreter. Each
// gets its own sandbox; it must end with a Run error or a typed status,
// Kill must leave its cgroup empty, and a bystander sandbox started
// alongside must be unaffected.
func TestHostileDestructive(t *testing.T) {
	for _, p := range platforms {
		for _, m := range modes {
			t.Run(p+"/"+m.name, func(t *testing.T) {
				hostileDestructive(t, newEnv(t, func(c *gvisor.Config) { c.ColdStart, c.Platform = m.cold, p }))
			})
		}
	}
}

func hostileDestructive(t *testing.T, e *env) {
	bystander := e.start(t)
	bystander.expectOK("secret = 'kept'", "")
	cases := []struct {
		name    string
		code    string
		timeout time.Duration
		mem     int64
		want    []string // acceptable statuses; "err" is a Run error
		check   func(t *testing.T, r *wire.Result, took time.Duration)
	}{
		{name: "python busy loop", code: "print('started')\nwhile True:\n    pass", timeout: 2 * time.Second,
			want: []string{wire.StatusTimeout}, check: func(t *testing.T, r *wire.Result, took time.Duration) {
				wantGone(t, r)
				if !strings.Contains(string(r.Stdout), "started") {
					t.Errorf("output before the timeout lost: %q", r.Stdout)
				}
				wantWithin(t, took, 2*time.Second)
			}},
		{name: "numpy C loop", code: "import numpy as np\nprint('started')\nwhile True:\n    np.linalg.eigvals(np.random.rand(600, 600))",
			timeout: 2 * time.Second, want: []string{wire.StatusTimeout}, check: func(t *testing.T, r *wire.Result, took time.Duration) {
				wantGone(t, r)
				wantWithin(t, took, 2*time.Second)
			}},
		{name: "one C call longer than the timeout", code: "import numpy as np\nnp.linalg.eigvals(np.random.rand(3000, 3000))",
			timeout: 2 * time.Second, want: []string{wire.StatusTimeout}, check: func(t *testing.T, r *wire.Result, took time.Duration) {
				wantGone(t, r)
				wantWithin(t, took, 2*time.Second)
			}},
		{name: "alarm handler swallowed", code: "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True:\n    pass",
			timeout: 2 * time.Second, want: []string{wire.StatusTimeout}, check: func(t *testing.T, r *wire.Result, took time.Duration) {
				wantGone(t, r)
				wantWithin(t, took, 2*time.Second)
			}},
		{name: "memory bomb, one allocation", code: "x = bytearray(8 << 30)", mem: 256 << 20,
			want: []string{wire.StatusMemory, wire.StatusExited}},
		{name: "memory bomb, numpy touches pages", code: "import numpy as np\nx = np.ones((1 << 30,), dtype=np.uint8)", mem: 256 << 20,
			want: []string{wire.StatusMemory, wire.StatusExited}},
		{name: "memory bomb, growing list", code: "l = []\nwhile True:\n    l.append(bytearray(1 << 20))", mem: 256 << 20,
			want: []string{wire.StatusMemory, wire.StatusExited}},
		{name: "fork bomb", code: "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass", timeout: 5 * time.Second,
			want: []string{wire.StatusTimeout, wire.StatusExited, wire.StatusMemory, wire.StatusError, "err"}},
		{name: "thread bomb", code: "import threading, time\nwhile True:\n    threading.Thread(target=time.sleep, args=(100,)).start()", timeout: 5 * time.Second,
			want: []string{wire.StatusTimeout, wire.StatusExited, wire.StatusMemory, wire.StatusError, "err"}},
		{name: "os._exit", code: "import os\nprint('bye')\nos._exit(3)", want: []string{wire.StatusExited},
			check: func(t *testing.T, r *wire.Result, _ time.Duration) {
				wantGone(t, r)
				if !strings.Contains(string(r.Stdout), "bye") {
					t.Errorf("output before the exit lost: %q", r.Stdout)
				}
			}},
		{name: "kill -9 self", code: "import os\nos.kill(os.getpid(), 9)", want: []string{wire.StatusExited}},
		{name: "SIGTERM self", code: "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)", want: []string{wire.StatusExited}},
		{name: "SIGSTOP self", code: "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)", timeout: 2 * time.Second,
			want: []string{wire.StatusTimeout}},
		{name: "kill every process", code: "import os\nos.kill(-1, 9)", want: []string{wire.StatusExited, wire.StatusOK, wire.StatusError}},
		{name: "close fds 1 and 2", code: "import os\nos.close(1)\nos.close(2)", want: []string{wire.StatusOK, wire.StatusError, "err"}},
		{name: "close the control fds", code: "import os\nos.close(1000)\nos.close(1001)", want: []string{wire.StatusExited, "err"}},
		{name: "forge a result frame", code: "import os, struct\nb = b'{\"kind\":\"result\",\"result\":{\"id\":99,\"status\":\"ok\"}}'\n" +
			"fd = os.open('/run/ci/out', os.O_WRONLY)\nos.write(fd, struct.pack('>I', len(b)) + b)\nimport time\ntime.sleep(1)", want: []string{"err"}},
		{name: "forge a huge frame header", code: "import os\nos.write(1001, b'\\xff\\xff\\xff\\xff')\nimport time\ntime.sleep(1)", want: []string{"err"}},
		{name: "garbage on the control fd", code: "import os\nos.write(1001, b'\\x00\\x00\\x00\\x05hello')\nimport time\ntime.sleep(1)", want: []string{"err"}},
		{name: "forge host-only fields", code: "import os, struct, json\nb = json.dumps({'kind': 'result', 'result': {'id': 1, 'status': 'ok', 'stdout': 'ZmFrZQ==', 'interpreter_gone': True}}).encode()\n" +
			"os.write(1001, struct.pack('>I', len(b)) + b)\nimport time\ntime.sleep(1)", want: []string{"err"}},
		{name: "steal the next request", code: "import os\nos.read(1000, 100)", timeout: 2 * time.Second, want: []string{wire.StatusTimeout}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := e.start(t, func(o *pool.StartOptions) {
				if c.mem != 0 {
					o.MemoryBytes = c.mem
				}
			})
			timeout := c.timeout
			if timeout == 0 {
				timeout = 10 * time.Second
			}
			started := time.Now()
			r, err := s.tryRun(c.code, timeout)
			took := time.Since(started)
			got := "err"
			if err == nil {
				got = r.Status
			}
			if !contains(c.want, got) {
				if err != nil {
					t.Fatalf("Run error %v; want %v", err, c.want)
				}
				t.Fatalf("%s; want %v", describe(r), c.want)
			}
			if err != nil {
				t.Logf("Run error (as allowed): %v (%v)", err, took)
			} else {
				t.Logf("%s (%v)", describe(r), took)
				if n, _ := s.group.OOMKills(); n > 0 {
					t.Logf("cgroup OOM kills: %d", n)
				}
			}
			if err == nil && r.Status == wire.StatusExited {
				d := s.it.Diagnostics()
				t.Logf("runsc log tail: %s", d[max(0, len(d)-300):])
			}
			if c.check != nil && err == nil {
				c.check(t, r, took)
			}
			// The pool kills after a Run error or a gone interpreter; a
			// surviving one must still work.
			if err == nil && !r.InterpreterGone && r.Status != wire.StatusExited {
				if r2, err := s.tryRun("print('alive')", 10*time.Second); err == nil {
					t.Logf("afterwards: %s", describe(r2))
				}
			}
			killStarted := time.Now()
			s.it.Kill()
			t.Logf("kill took %v", time.Since(killStarted))
			bystander.expectOK("print(secret)", "kept")
		})
	}
	// A new sandbox still starts and works.
	e.start(t).expectOK("print(6 * 7)", "42")
}

func wantGone(t *testing.T, r *wire.Result) {
	t.Helper()
	if !r.InterpreterGone {
		t.Errorf("InterpreterGone is false: %s", describe(r))
	}
}

// wantWithin checks that a run was ended by its time limit, not left to
// run on: the margin is wide (these machines are shared, and a loaded one
// takes seconds to schedule the kill), so it tells a limit that holds
// from one that does not, and measures no speed.
func wantWithin(t *testing.T, took, timeout time.Duration) {
	t.Helper()
	if limit := timeout + 15*time.Second; took > limit {
		t.Errorf("took %v, want at most %v", took, limit)
	}
}
