package gvisor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	sb "github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
)

// shell runs commands in s by its kind's hosted shell and fails on an error.
func (s *sandbox) shell(commands []string, timeout time.Duration, onOutput func(int, string, string)) []sb.CommandResult {
	s.tb.Helper()
	sh, ok := s.it.(pool.Sheller)
	if !ok {
		s.tb.Fatal("the gVisor interpreter has no shell")
	}
	s.runs++
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(len(commands))*(timeout+5*time.Second)+30*time.Second)
	defer cancel()
	res, err := sh.Shell(ctx, s.runs, commands, timeout, onOutput)
	if err != nil {
		s.tb.Fatalf("shell %q: %v", commands, err)
	}
	if len(res) != len(commands) {
		s.tb.Fatalf("shell %q: %d results", commands, len(res))
	}
	return res
}

// TestShell runs a session's worth of hosted-shell calls in one sandbox:
// each command by bash in /mnt/data as the sandbox's user, its own stdout,
// stderr and exit code, files shared with Python, Python's state untouched.
func TestShell(t *testing.T) {
	e := newEnv(t)
	s := e.start(t)
	s.expectOK("x = 41", "")
	r := s.shell([]string{
		"pwd; id -u; echo err >&2",
		"printf 'a,b\\n1,2\\n' > t.csv && ls",
		"exit 7",
		"x=5; echo $x",
		"tty || echo no-tty",
		"python3 -c 'print(6*7)'",
		"kill -9 $$",
	}, 10*time.Second, nil)
	want := []struct {
		stdout, stderr string
		code           int
	}{
		{"/mnt/data\n65534\n", "err\n", 0},
		{"t.csv\n", "", 0},
		{"", "", 7},
		{"5\n", "", 0},
		{"not a tty\nno-tty\n", "", 0},
		{"42\n", "", 0},
		{"", "", 137},
	}
	for k, w := range want {
		c := r[k]
		if c.Stdout != w.stdout || c.Stderr != w.stderr || c.ExitCode != w.code || c.TimedOut {
			t.Errorf("command %d: %+v; want stdout %q stderr %q exit %d", k, c, w.stdout, w.stderr, w.code)
		}
	}
	// The file is the interpreter's; Python's variables are as they were.
	s.expectOK("print(open('t.csv').read().splitlines()[1], x)", "1,2 41")
}

// TestShellTimeoutAndBounds: a command past its timeout is killed with
// its process group and the next command runs; output is bounded at the
// sandbox boundary; binary output arrives as text; a background process
// does not hold the call, even one holding stdout open, and keeps running.
func TestShellTimeoutAndBounds(t *testing.T) {
	e := newEnv(t)
	s := e.start(t)
	start := time.Now()
	r := s.shell([]string{
		"echo before; sleep 30; echo after",
		"echo next",
	}, time.Second, nil)
	if !r[0].TimedOut || r[0].Stdout != "before\n" || r[1].Stdout != "next\n" || r[1].TimedOut {
		t.Fatalf("timeout: %+v", r)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("a 1 s timeout took %s", d)
	}
	lim := testLimits()
	r = s.shell([]string{
		"yes flood | head -c 10000000",
		"head -c 3000 /dev/urandom; printf '\\xff\\xfe\\x00ok'",
		"(sleep 60; echo late) & echo started",
		"nohup sh -c 'while :; do date; sleep 1; done' > /tmp/svc.log 2>&1 & echo svc",
		"sleep 2; wc -l < /tmp/svc.log | tr -d ' '",
	}, 10*time.Second, nil)
	if len(r[0].Stdout) != lim.StdoutBytes || !r[0].StdoutTruncated || r[0].ExitCode != 0 {
		t.Errorf("flood: %d bytes, truncated %v, exit %d", len(r[0].Stdout), r[0].StdoutTruncated, r[0].ExitCode)
	}
	if !strings.HasSuffix(r[1].Stdout, "\uFFFD\x00ok") || r[1].ExitCode != 0 {
		t.Errorf("binary: %q", tail(r[1].Stdout))
	}
	if r[2].Stdout != "started\n" || r[2].TimedOut {
		t.Errorf("background holding stdout: %+v", r[2])
	}
	if r[3].Stdout != "svc\n" || r[4].Stdout < "2\n" {
		t.Errorf("service: %+v %+v", r[3], r[4])
	}
}

// TestShellLiveOutput: a command's output reaches onOutput while it runs,
// before the call returns.
func TestShellLiveOutput(t *testing.T) {
	e := newEnv(t)
	s := e.start(t)
	var mu sync.Mutex
	var got []string
	seenEarly := make(chan struct{})
	var once sync.Once
	r := s.shell([]string{"echo one; echo two >&2; sleep 3; echo three"}, 10*time.Second, func(cmd int, out, errOut string) {
		mu.Lock()
		got = append(got, out+"|"+errOut)
		mu.Unlock()
		if out == "one\n" {
			once.Do(func() { close(seenEarly) })
		}
	})
	select {
	case <-seenEarly:
	default:
		t.Fatalf("no live output: %q", got)
	}
	joined := strings.Join(got, ",")
	if !strings.Contains(joined, "one\n|") || !strings.Contains(joined, "|two\n") || r[0].Stdout != "one\nthree\n" {
		t.Errorf("deltas %q, result %+v", got, r[0])
	}
}

// TestShellHostile: the hostile corpus, each followed by a command the
// sandbox must still answer.
func TestShellHostile(t *testing.T) {
	e := newEnv(t)
	s := e.start(t)
	cases := []struct {
		name, cmd string
		check     func(c sb.CommandResult) bool
	}{
		{"fork bomb", "b(){ b|b & }; b; sleep 3", func(c sb.CommandResult) bool { return true }},
		{"disk fill", "dd if=/dev/zero of=/mnt/data/fill bs=1M count=100; echo $?", func(c sb.CommandResult) bool {
			return strings.Contains(c.Stderr, "No space left")
		}},
		{"host files", "cat /etc/shadow /root/.bashrc /proc/1/environ 2>&1 | head -c 2000; ls /home /usr/local 2>&1", func(c sb.CommandResult) bool {
			return !strings.Contains(c.Stdout, "root:") && !strings.Contains(c.Stdout, "CODEINTERP")
		}},
		{"stdout held open", "sleep 100 &", func(c sb.CommandResult) bool { return !c.TimedOut }},
	}
	for _, tc := range cases {
		r := s.shell([]string{tc.cmd, "echo alive"}, 5*time.Second, nil)
		if !tc.check(r[0]) {
			t.Errorf("%s: %+v", tc.name, r[0])
		}
		if r[1].Stdout != "alive\n" {
			t.Errorf("%s: the next command got %+v", tc.name, r[1])
		}
	}
	_ = s.shell([]string{"rm -f /mnt/data/fill"}, 5*time.Second, nil)
	s.expectOK("print('python alive')", "python alive")

	// Killing the shell's parent (the kernel: the same user, as a cell's
	// os.kill could) ends this sandbox only: the call is an error, the
	// pool reports the commands not run and the session's next call gets
	// a fresh interpreter (pool.session.Shell), the container its files
	// back from the store.
	sh := s.it.(pool.Sheller)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := sh.Shell(ctx, 99, []string{"kill -9 $PPID; sleep 5", "echo never"}, 10*time.Second, nil); err == nil {
		t.Fatal("a shell call whose command killed the kernel answered")
	}
	select {
	case <-s.it.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("the sandbox lives on without its kernel")
	}
}

// spareCmdline finds the waiting login bash (kernel.py, the spare) by its
// bootstrap, from a cell: its pid, or "none".
const spareCmdline = `import os
def _spares():
    found = []
    for p in os.listdir('/proc'):
        try:
            if p.isdigit() and open('/proc/%s/cmdline' % p, 'rb').read().startswith(b'/bin/bash\0-lc\0IFS= read -r -u'):
                found.append(p)
        except OSError:
            pass
    return found
print(' '.join(_spares()) or 'none')`

// spare is the pid of the sandbox's waiting login bash, once the kernel has
// started it (after a call, in a thread: polled for a few seconds).
func (s *sandbox) spare() string {
	s.tb.Helper()
	for range 100 {
		r := s.run(spareCmdline, 30*time.Second)
		if out := strings.TrimSpace(string(r.Stdout)); out != "none" && !strings.Contains(out, " ") {
			return out
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.tb.Fatal("no spare login bash after a shell call")
	return ""
}

// TestShellSpare: the login bash started ahead of a call runs the next
// command as `bash -lc` would — cwd, login shell, its own process group
// and session, no TTY, no descriptors or variables of its own left, the
// command in BASH_EXECUTION_STRING, exit status, a long command — and is
// not used when what its profile read changed since it started: a login
// file written by a command, a variable or umask set by a cell. A spare
// killed meanwhile is replaced by a fresh bash.
func TestShellSpare(t *testing.T) {
	e := newEnv(t)
	s := e.start(t)
	s.shell([]string{"true"}, 10*time.Second, nil)

	pid := s.spare()
	long := "cat <<'EOF' | wc -c\n" + strings.Repeat("x", 99999) + "\nEOF"
	r := s.shell([]string{
		`echo $$; pwd; shopt -q login_shell && echo login; [ -t 0 ] || echo no-tty; ` +
			`[ "$(ps -o pgid= -p $$ | tr -d ' ')" = $$ ] && [ "$(ps -o sid= -p $$ | tr -d ' ')" = $$ ] && echo leader; ` +
			`ls /proc/$$/fd | tr '\n' ' '; echo; declare -p __ci 2>/dev/null || echo clean; echo "$BASH_EXECUTION_STRING" | head -c 7; echo; exit 3`,
		long,
	}, 10*time.Second, nil)
	want := pid + "\n/mnt/data\nlogin\nno-tty\nleader\n0 1 2 \nclean\necho $$\n"
	if r[0].Stdout != want || r[0].ExitCode != 3 || r[0].Stderr != "" {
		t.Errorf("the spare ran %+v; want stdout %q exit 3", r[0], want)
	}
	if r[1].Stdout != "100000\n" || r[1].ExitCode != 0 {
		t.Errorf("a 100 kB command: %+v", r[1])
	}

	// What the profile reads changes: a login file, the kernel's
	// environment, its umask. Each next command sees the change.
	s.shell([]string{`printf 'echo from-profile\nexport FROM_PROFILE=1\n' > ~/.profile`}, 10*time.Second, nil)
	if r := s.shell([]string{"echo $FROM_PROFILE"}, 10*time.Second, nil); r[0].Stdout != "from-profile\n1\n" {
		t.Errorf("a login file written by the last call: %+v", r[0])
	}
	s.spare()
	s.expectOK("import os\nos.environ['FROM_CELL'] = '7'\nos.umask(0o077)\nprint('set')", "set")
	if r := s.shell([]string{"echo $FROM_CELL; umask"}, 10*time.Second, nil); r[0].Stdout != "from-profile\n7\n0077\n" {
		t.Errorf("a variable and umask set by a cell: %+v", r[0])
	}
	s.expectOK("os.umask(0o022)\nprint('reset')", "reset")

	// The next command's spare killed before its turn (by the command
	// before it, which finds it as it starts).
	kill := `for i in $(seq 200); do for p in /proc/[0-9]*; do ` +
		`[ ${p#/proc/} != $$ ] && [[ "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" == "/bin/bash -lc IFS= read"* ]] && ` +
		`kill -9 ${p#/proc/} && echo killed && exit; done; sleep 0.05; done`
	r = s.shell([]string{kill, "echo alive"}, 30*time.Second, nil)
	if r[0].Stdout != "from-profile\nkilled\n" || r[1].Stdout != "from-profile\nalive\n" || r[1].ExitCode != 0 {
		t.Errorf("a killed spare: %+v", r)
	}
}

// TestShellSpareCheckpoint: a sandbox checkpointed while its spare login
// bash waits (runsc keeps processes and pipes) answers shell calls after
// a restore, in the new sandbox and in the old one, with the files and the
// Python state of the checkpoint.
func TestShellSpareCheckpoint(t *testing.T) {
	e := newEnv(t)
	if !e.kind.RestoresSessions() {
		t.Fatal("the pinned runsc cannot checkpoint a running sandbox")
	}
	a := e.start(t)
	a.expectOK("x = 41", "")
	a.shell([]string{"echo kept > f.txt"}, 10*time.Second, nil)
	pid := a.spare()
	state := checkpointOf(t, a)

	b := e.start(t, func(o *pool.StartOptions) { o.Restore = state })
	if got := b.spare(); got != pid {
		t.Errorf("the restored sandbox's spare is %s, want %s (the checkpoint's)", got, pid)
	}
	for _, s := range []*sandbox{b, a} {
		r := s.shell([]string{"echo $$; cat f.txt", "echo again"}, 10*time.Second, nil)
		if r[0].Stdout != pid+"\nkept\n" || r[1].Stdout != "again\n" {
			t.Errorf("after the checkpoint: %+v", r)
		}
		s.expectOK("print(x + 1)", "42")
	}
}

// refShell is a cell that runs one command by a fresh `bash -lc` as the
// hosted shell spawns it (cwd, its own session, no stdin) and prints its
// stdout, stderr and exit status (128+n for a signal) as JSON: what a
// command run on a spare must show too.
const refShell = `import json, subprocess
p = subprocess.run(["/bin/bash", "-lc", %q], cwd="/mnt/data", stdin=subprocess.DEVNULL, capture_output=True, start_new_session=True)
print(json.dumps([p.stdout.decode(), p.stderr.decode(), 128 - p.returncode if p.returncode < 0 else p.returncode]))`

// TestShellSpareEndings: however a command ends — its own EXIT trap, one
// that exits with its own status, exit, errexit, exec, a signal bash
// catches (its EXIT trap runs, then it dies of the signal) or one it
// cannot — a spare login bash reports what a fresh `bash -lc` does, one
// call at a time (each on the spare started after the last) and all in
// one call (each on the spare started during the one before). A spare
// whose login profile wrote to stderr is not used: the command shows the
// profile's output as bash -lc does. A background job holding stdout does
// not hold the call.
func TestShellSpareEndings(t *testing.T) {
	e := newEnv(t)
	s := e.start(t)
	cmds := []string{
		"trap 'echo bye' EXIT; echo hi",
		"trap 'echo bye; exit 3' EXIT; echo hi",
		"echo out; echo err >&2; exit 7",
		"set -e; false; echo never",
		"exec sh -c 'echo replaced; exit 9'",
		"trap 'echo trapped' EXIT; kill -TERM $$; echo never",
		"kill -INT $$",
		"kill -9 $$",
		"echo last",
	}
	ref := func(cmd string) (want sb.CommandResult) {
		t.Helper()
		r := s.run(fmt.Sprintf(refShell, cmd), 30*time.Second)
		var v [3]any
		if err := json.Unmarshal(r.Stdout, &v); err != nil {
			t.Fatalf("the reference for %q: %v (%s)", cmd, err, describe(r))
		}
		return sb.CommandResult{Stdout: v[0].(string), Stderr: v[1].(string), ExitCode: int(v[2].(float64))}
	}
	check := func(how, cmd string, got, want sb.CommandResult) {
		t.Helper()
		if got.Stdout != want.Stdout || got.Stderr != want.Stderr || got.ExitCode != want.ExitCode || got.TimedOut {
			t.Errorf("%s %q: got %+v, bash -lc gives %+v", how, cmd, got, want)
		}
	}
	s.shell([]string{"true"}, 10*time.Second, nil)
	wants := make([]sb.CommandResult, len(cmds))
	for k, cmd := range cmds {
		wants[k] = ref(cmd)
		s.spare()
		check("alone", cmd, s.shell([]string{cmd}, 10*time.Second, nil)[0], wants[k])
	}
	s.spare()
	for k, got := range s.shell(cmds, 10*time.Second, nil) {
		check("in one call", cmds[k], got, wants[k])
	}

	// A login profile writing to stderr: the spare started after this
	// call has, and is replaced by a fresh bash.
	s.shell([]string{`printf 'echo warn >&2\n' > ~/.profile`}, 10*time.Second, nil)
	s.spare()
	want := ref("echo hi")
	if want.Stderr != "warn\n" {
		t.Fatalf("the profile did not run: %+v", want)
	}
	check("after a profile writing to stderr", "echo hi", s.shell([]string{"echo hi"}, 10*time.Second, nil)[0], want)
	s.shell([]string{"rm ~/.profile"}, 10*time.Second, nil)

	start := time.Now()
	r := s.shell([]string{"sleep 30 & echo started", "echo next"}, 20*time.Second, nil)
	if r[0].Stdout != "started\n" || r[0].TimedOut || r[0].ExitCode != 0 || r[1].Stdout != "next\n" {
		t.Errorf("a background job holding stdout: %+v", r)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("a background job held the call for %s", d)
	}
}
