package gvisor_test

import (
	"context"
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
