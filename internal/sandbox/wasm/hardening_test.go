package wasm_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
)

// TestWorkerHardening inspects a live worker from outside through /proc:
// what the guest could reach if it ever escaped wasm.
func TestWorkerHardening(t *testing.T) {
	p := sandboxtest.New(t)
	s := open(t, p)
	if r := run(t, s, "print(1)"); r.Stdout != "1\n" {
		t.Fatalf("run: %+v", r)
	}
	pids := p.WorkerPIDs()
	if len(pids) == 0 {
		t.Fatal("no worker")
	}
	cfg := sandboxtest.Config(t)
	for _, pid := range pids {
		proc := "/proc/" + strconv.Itoa(pid)
		status := readProc(t, proc+"/status")
		wantUID := strconv.Itoa(int(cfg.Isolation.UID))
		for key, want := range map[string]string{
			"Uid":        strings.Repeat(wantUID+"\t", 3) + wantUID,
			"Gid":        strings.Repeat(strconv.Itoa(int(cfg.Isolation.GID))+"\t", 3) + strconv.Itoa(int(cfg.Isolation.GID)),
			"NoNewPrivs": "1",
			"CapEff":     "0000000000000000",
			"CapPrm":     "0000000000000000",
			"Groups":     "",
			"Seccomp":    "2", // filter mode
		} {
			if got := field(status, key); got != want {
				t.Errorf("worker %d: %s = %q, want %q", pid, key, got, want)
			}
		}
		if env := readProc(t, proc+"/environ"); env != "" {
			t.Errorf("worker %d has an environment: %q", pid, env)
		}
		if lim := readProc(t, proc+"/limits"); !strings.Contains(lim, "Max core file size        0                    0") {
			t.Errorf("worker %d may dump core:\n%s", pid, lim)
		}
		for _, ns := range []string{"net", "ipc"} {
			mine, _ := os.Readlink("/proc/self/ns/" + ns)
			theirs, err := os.Readlink(proc + "/ns/" + ns)
			if err != nil || theirs == mine {
				t.Errorf("worker %d shares the server's %s namespace (%s, %v)", pid, ns, theirs, err)
			}
		}
		// Descriptors: stdio on /dev/null or the diagnostics pipe, the two
		// control pipes, the runtime directory (and the stdlib mount in it),
		// the Go runtime's own epoll/eventfd/pidfd, the cgroup CPU files
		// the Go runtime keeps open read-only to size GOMAXPROCS, and its own
		// /proc/self/pagemap, read-only (which of its pages a session wrote,
		// for checkpoints; without CAP_SYS_ADMIN it holds no frame numbers,
		// and WASI gives the guest no descriptors of the worker). Nothing
		// else of the server's leaks in, and nothing is open for writing but
		// pipes.
		fds, err := os.ReadDir(proc + "/fd")
		if err != nil {
			t.Fatal(err)
		}
		for _, fd := range fds {
			target, _ := os.Readlink(filepath.Join(proc, "fd", fd.Name()))
			switch {
			case target == "/dev/null", strings.HasPrefix(target, "pipe:"), strings.HasPrefix(target, "anon_inode:"):
			case target == cfg.RuntimeDir || strings.HasPrefix(target, cfg.RuntimeDir+"/"),
				strings.HasPrefix(target, "/sys/fs/cgroup/") && strings.Contains(target, "/cpu.cfs_"),
				target == proc+"/pagemap":
				if !readOnly(t, filepath.Join(proc, "fdinfo", fd.Name())) {
					t.Errorf("worker %d holds fd %s → %s open for writing", pid, fd.Name(), target)
				}
			default:
				t.Errorf("worker %d holds fd %s → %s", pid, fd.Name(), target)
			}
		}
	}
}

// readOnly reports whether an fdinfo's flags have the O_RDONLY access mode.
func readOnly(t *testing.T, fdinfo string) bool {
	flags, err := strconv.ParseUint(field(readProc(t, fdinfo), "flags"), 8, 64)
	return err == nil && flags&3 == 0
}

func readProc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func field(status, key string) string {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "<absent>"
}
