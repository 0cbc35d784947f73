package cgroup

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("cgroup tests need root (they create cgroups); run them as root as CI does")
	}
}

// startHeld starts a shell that waits for a line on stdin before running
// script, so that it can be put in a group before it does anything.
func startHeld(t *testing.T, script string) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "read go; "+script)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, in
}

func TestV1GroupEnforcesLimits(t *testing.T) {
	requireRoot(t)
	if cgroups.Mode() == cgroups.Unified {
		t.Fatal("this host has no cgroup v1 hierarchy; the v1 driver cannot be tested here (CI's machine has one)")
	}
	d, err := Open("v1", "/codeinterp-cgtest")
	if err != nil {
		t.Fatalf("open v1: %v", err)
	}
	g, err := d.New(fmt.Sprintf("g-%d", os.Getpid()), Limits{MemoryBytes: 64 << 20, Pids: 8, CPUs: 0.5})
	if err != nil {
		t.Fatalf("new group: %v", err)
	}
	// Every controller's group is under the test process's own cgroup of
	// that controller (on this kind of machine memory is nested, pids and
	// cpu are at "/"), so sandboxes are charged to whatever the server runs in.
	self, err := readProcCgroup(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	paths := g.(*v1Group).paths
	for _, c := range required {
		want := path.Join(self[c], "codeinterp-cgtest", fmt.Sprintf("g-%d", os.Getpid()))
		if paths[c] != want {
			t.Errorf("%s group at %q, want %q (under the server's own %q)", c, paths[c], want, self[c])
		}
	}
	read := func(ctrl, file string) string {
		b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", ctrl, paths[ctrl], file))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	for _, c := range []struct{ ctrl, file, want string }{
		{"memory", "memory.limit_in_bytes", fmt.Sprint(64 << 20)},
		{"pids", "pids.max", "8"},
		{"cpu", "cpu.cfs_quota_us", "50000"},
		{"cpu", "cpu.cfs_period_us", "100000"},
	} {
		if got := read(c.ctrl, c.file); got != c.want {
			t.Errorf("%s/%s = %s, want %s", c.ctrl, c.file, got, c.want)
		}
	}
	// A refill's low CPU weight, then the normal one: the quota stays.
	for _, w := range []struct {
		weight uint64
		shares string
	}{{10, "102"}, {DefaultCPUWeight, "1024"}} {
		if err := g.SetCPUWeight(w.weight); err != nil {
			t.Fatal(err)
		}
		if got := read("cpu", "cpu.shares"); got != w.shares {
			t.Errorf("cpu.shares after SetCPUWeight(%d) = %s, want %s", w.weight, got, w.shares)
		}
		if got := read("cpu", "cpu.cfs_quota_us"); got != "50000" {
			t.Errorf("cpu.cfs_quota_us after SetCPUWeight = %s, want 50000 still", got)
		}
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"); err == nil {
		if got := read("memory", "memory.memsw.limit_in_bytes"); got != fmt.Sprint(64<<20) {
			t.Errorf("memsw limit %s: swap is not disallowed", got)
		}
	}

	// A process outside the group fails verification.
	cmd, in := startHeld(t, "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do sleep 5 & done; wait")
	if err := g.Verify(cmd.Process.Pid); err == nil {
		t.Fatal("Verify passed for a process not in the group")
	}
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if err := g.Verify(cmd.Process.Pid); err != nil {
		t.Fatalf("verify after add: %v", err)
	}
	// pids.max: the shell cannot fork 12 children in a group of 8 tasks.
	fmt.Fprintln(in, "go")
	// The shell keeps trying; whatever it manages, the group never holds
	// more than 8 tasks, and it did get some.
	var peak int
	for i := 0; i < 20; i++ {
		var n int
		fmt.Sscan(read("pids", "pids.current"), &n)
		peak = max(peak, n)
		time.Sleep(25 * time.Millisecond)
	}
	if peak > 8 || peak < 2 {
		t.Fatalf("pids.current peaked at %d with pids.max 8 and 13 tasks wanted", peak)
	}
	if ev := read("pids", "pids.events"); !strings.HasPrefix(ev, "max ") || ev == "max 0" {
		t.Errorf("pids.events = %q: no fork was refused", ev)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()

	// The memory limit: a process that touches more than 64 MiB is OOM-killed.
	cmd2, in2 := startHeld(t, `exec awk 'BEGIN { s = "x"; while (1) { s = s s; } }'`)
	if err := g.Add(cmd2.Process.Pid); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(in2, "go")
	werr := cmd2.Wait()
	if werr == nil {
		t.Fatal("memory hog exited cleanly inside a 64 MiB group")
	}
	if n, err := g.OOMKills(); err != nil || n == 0 {
		t.Fatalf("OOMKills = %d, %v after the hog died (%v)", n, err, werr)
	}
	// Wait for the sleeps the first shell forked to be gone before deleting.
	deadline := time.Now().Add(10 * time.Second)
	for read("pids", "pids.current") != "0" && time.Now().Before(deadline) {
		_ = exec.Command("pkill", "-KILL", "-f", "sleep 5").Run()
		time.Sleep(100 * time.Millisecond)
	}
	if err := g.Delete(); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/memory", g.Path())); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("group still exists after Delete: %v", err)
	}
}

// TestV2 exercises the unified hierarchy where it has the controllers and,
// where it does not (hybrid hosts such as CI's, where memory, pids and cpu
// are bound to v1), checks that asking for v2 fails closed with a reason.
func TestV2(t *testing.T) {
	requireRoot(t)
	d, err := Open("v2", "/codeinterp-cgtest")
	if err != nil {
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "lacks controllers") && !strings.Contains(err.Error(), "no cgroup2") {
			t.Fatalf("v2 unavailable but the error does not say why: %v", err)
		}
		t.Logf("cgroup v2 fails closed on this host, as it must: %v", err)
		// auto must then choose v1 rather than run unconfined.
		a, err := Open("auto", "/codeinterp-cgtest")
		if err != nil || a.Version() != "v1" {
			t.Fatalf("auto on a host without usable v2: %v, %v; want v1", a, err)
		}
		return
	}
	g, err := d.New(fmt.Sprintf("g-%d", os.Getpid()), Limits{MemoryBytes: 64 << 20, Pids: 8, CPUs: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(d.(*v2Driver).mount, g.Path())
	for file, want := range map[string]string{"memory.max": fmt.Sprint(64 << 20), "memory.swap.max": "0", "pids.max": "8", "cpu.max": "50000 100000"} {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil || strings.TrimSpace(string(b)) != want {
			t.Errorf("%s = %q, %v; want %s", file, b, err, want)
		}
	}
	if err := g.SetCPUWeight(10); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{"cpu.weight": "10", "cpu.max": "50000 100000"} {
		if b, err := os.ReadFile(filepath.Join(dir, file)); err != nil || strings.TrimSpace(string(b)) != want {
			t.Errorf("after SetCPUWeight(10): %s = %q, %v; want %s", file, b, err, want)
		}
	}
	cmd, in := startHeld(t, "exit 0")
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if err := g.Verify(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(in, "go")
	_ = cmd.Wait()
	if err := g.Delete(); err != nil {
		t.Fatal(err)
	}
}

// TestV2ControllerCheck runs the v2 controller check against fake
// cgroup.controllers files, for both answers, on any host.
func TestV2ControllerCheck(t *testing.T) {
	for _, c := range []struct {
		controllers string
		ok          bool
	}{
		{"cpuset cpu io memory hugetlb pids rdma misc", true},
		{"hugetlb", false},
		{"cpu memory", false},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "cgroup.controllers"), []byte(c.controllers+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := openV2At(dir, "/x")
		if (err == nil) != c.ok {
			t.Errorf("controllers %q: err %v, want ok=%v", c.controllers, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrUnavailable) {
			t.Errorf("error does not match ErrUnavailable: %v", err)
		}
	}
}

func TestOpenRejectsBadInput(t *testing.T) {
	for _, c := range []struct{ mode, parent string }{
		{"v3", "/codeinterp"}, {"auto", "codeinterp"}, {"auto", "/"}, {"v1", "/a/../b"},
	} {
		if _, err := Open(c.mode, c.parent); err == nil {
			t.Errorf("Open(%q, %q) accepted", c.mode, c.parent)
		}
	}
}

// TestKillAll puts a shell and the children it forks (in their own process
// groups, so that killing the shell's group would miss them) in a group and
// checks that KillAll leaves it empty, on the hierarchy auto picks.
func TestKillAll(t *testing.T) {
	requireRoot(t)
	d, err := Open("auto", "/codeinterp-cgtest")
	if err != nil {
		t.Fatal(err)
	}
	g, err := d.New(fmt.Sprintf("k-%d", os.Getpid()), Limits{MemoryBytes: 64 << 20, Pids: 16, CPUs: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := g.Delete(); err != nil {
			t.Errorf("delete: %v", err)
		}
	}()
	cmd, in := startHeld(t, "for i in 1 2 3 4; do setsid sleep 60 & done; wait")
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(in, "go")
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids, err := g.Procs()
		if err != nil {
			t.Fatal(err)
		}
		if len(pids) >= 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("group holds %v, want the shell and 4 sleeps", pids)
		}
		time.Sleep(10 * time.Millisecond)
	}
	go func() { _ = cmd.Wait() }()
	if err := g.KillAll(); err != nil {
		t.Fatal(err)
	}
	if pids, err := g.Procs(); err != nil || len(pids) != 0 {
		t.Fatalf("after KillAll the group holds %v (%v)", pids, err)
	}
	if err := g.KillAll(); err != nil {
		t.Fatalf("KillAll on an empty group: %v", err)
	}
}
