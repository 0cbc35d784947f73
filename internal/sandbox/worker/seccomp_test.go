package worker

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

const seccompChildEnv = "CODEINTERP_SECCOMP_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(seccompChildEnv) == "1" {
		os.Exit(seccompChild())
	}
	os.Exit(m.Run())
}

// seccompChild installs the filter as a worker does, then tries what an
// escaped guest would, and what the Go runtime needs, printing one line each.
func seccompChild() int {
	if err := hardenEarly(); err != nil {
		fmt.Println("harden:", err)
		return 1
	}
	if err := installSeccomp(); err != nil {
		fmt.Println("install:", err)
		return 1
	}
	report := func(name string, err error) { fmt.Printf("%s=%v\n", name, errno(err)) }
	_, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	report("socket", err)
	_, err = unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	report("socket_unix", err)
	report("execve", unix.Exec("/bin/true", []string{"true"}, nil))
	_, err = syscall.ForkExec("/bin/true", []string{"true"}, nil)
	report("forkexec", err)
	_, _, e := unix.RawSyscall(unix.SYS_CLONE, uintptr(unix.SIGCHLD), 0, 0)
	report("fork_via_clone", e)
	report("ptrace", unix.PtraceAttach(1))
	report("unshare", unix.Unshare(unix.CLONE_NEWNS))
	report("setuid", unix.Setuid(0))
	_, err = unix.MemfdCreate("x", 0)
	report("memfd", err)
	_, err = unix.Open("/tmp/codeinterp-seccomp-probe", unix.O_CREAT|unix.O_WRONLY, 0o600)
	report("open_create", err)
	_, err = unix.Open("/proc/self/status", unix.O_RDWR, 0)
	report("open_rdwr", err)
	report("mkdir", unix.Mkdir("/tmp/codeinterp-seccomp-dir", 0o700))
	report("unlink", unix.Unlink("/tmp/codeinterp-seccomp-absent"))
	report("kill_other", unix.Kill(1, 0))
	report("kill_all", unix.Kill(-1, 0))
	report("kill_self", unix.Kill(unix.Getpid(), 0))
	report("tgkill_other", unix.Tgkill(1, 1, 0))
	// The Go runtime must keep working: new OS threads, files, memory.
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread() // forces fresh threads (clone with CLONE_THREAD)
			_ = make([]byte, 1<<20)
		}()
	}
	wg.Wait()
	_, err = os.ReadFile("/proc/self/status")
	report("readfile", err)
	return 0
}

func errno(err error) string {
	if err == nil {
		return "ok"
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		if e == 0 {
			return "ok"
		}
		return unix.ErrnoName(e)
	}
	return err.Error()
}

func TestSeccompDeniesEscapeSyscalls(t *testing.T) {
	self, _ := os.Executable()
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), seccompChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child failed: %v\n%s", err, out)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		got[k] = v
	}
	want := map[string]string{
		"socket": "EPERM", "socket_unix": "EPERM", "execve": "EPERM", "forkexec": "EPERM",
		"fork_via_clone": "EPERM", "ptrace": "EPERM", "unshare": "EPERM", "setuid": "EPERM",
		"memfd": "EPERM", "readfile": "ok",
		"open_create": "EPERM", "open_rdwr": "EPERM", "mkdir": "EPERM", "unlink": "EPERM",
		"kill_other": "EPERM", "kill_all": "EPERM", "kill_self": "ok", "tgkill_other": "EPERM",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %q, want %q", k, got[k], v)
		}
	}
	if t.Failed() {
		t.Logf("child output:\n%s", out)
	}
}
