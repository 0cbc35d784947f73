package gvisor_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	sbx "github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/gvisor"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
)

// cpuWeight reads the CPU weight of pid's cgroup in v2 units: v2's
// cpu.weight, or v1's cpu.shares scaled (1024 is 100).
func cpuWeight(t *testing.T, pid int) int {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			if c == "cpu" {
				var shares int
				b, err := os.ReadFile("/sys/fs/cgroup/cpu" + f[2] + "/cpu.shares")
				if err != nil {
					t.Fatal(err)
				}
				fmt.Sscan(string(b), &shares)
				return shares * 100 / 1024
			}
		}
		if f[1] == "" {
			for _, root := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
				if b, err := os.ReadFile(root + f[2] + "/cpu.weight"); err == nil {
					var w int
					fmt.Sscan(string(b), &w)
					return w
				}
			}
		}
	}
	t.Fatalf("no CPU weight found for pid %d", pid)
	return 0
}

// TestRefillYieldsCPU (issue 41): with a refill weight configured, a
// sandbox the pool starts ahead of time runs at that low CPU weight, so a
// running session's cell gets the contended core; handed to a session, it
// gets the normal weight back before any of the session's code runs.
func TestRefillYieldsCPU(t *testing.T) {
	const refill = 25
	p := sandboxtest.NewGVisorWith(t, func(c *gvisor.Config) { c.RefillCPUWeight = refill },
		func(c *pool.Config) { c.MaxSessions, c.WarmWorkers = 2, 1 })
	waitWarm := func() {
		for deadline := time.Now().Add(2 * time.Minute); p.Capacity().Warm < 1; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("no warm sandbox after 2 minutes")
			}
		}
	}
	waitWarm()
	pids := p.WorkerPIDs()
	if len(pids) != 1 {
		t.Fatalf("%d sandboxes, want the one warm", len(pids))
	}
	warm := pids[0]
	if w := cpuWeight(t, warm); w != refill {
		t.Errorf("the warm sandbox's CPU weight is %d, want the refill weight %d", w, refill)
	}
	s, err := p.Open(context.Background(), sbx.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if w := cpuWeight(t, warm); w != 100 {
		t.Errorf("the sandbox handed to a session has CPU weight %d, want the normal 100", w)
	}
	if r, err := s.Run(context.Background(), "print(25)"); err != nil || r.Stdout != "25\n" {
		t.Fatalf("%+v %v", r, err)
	}
	waitWarm() // the next refill
	for _, pid := range p.WorkerPIDs() {
		if want := map[bool]int{true: 100, false: refill}[pid == warm]; cpuWeight(t, pid) != want {
			t.Errorf("sandbox %d has CPU weight %d, want %d", pid, cpuWeight(t, pid), want)
		}
	}
}
