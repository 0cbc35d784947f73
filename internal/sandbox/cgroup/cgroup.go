package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Limits are the resources one group may use.
type Limits struct {
	MemoryBytes int64   // hard limit; swap is disallowed
	Pids        int64   // most tasks (threads count) at once
	CPUs        float64 // CPU quota in cores
}

// cpuPeriod is the CFS period the quota is expressed in (100 ms, the kernel default).
const cpuPeriod = 100_000

// Group is the cgroup of one worker process.
type Group interface {
	// Add moves pid into the group.
	Add(pid int) error
	// Verify checks, from /proc/PID/cgroup, that pid is in this group for
	// every controller the limits rely on.
	Verify(pid int) error
	// OOMKills reports how many processes the kernel's OOM killer ended in
	// this group.
	OOMKills() (uint64, error)
	// Procs lists the processes (thread-group leaders) in the group now.
	Procs() ([]int, error)
	// KillAll sends SIGKILL to every process in the group until the group
	// is empty, for a worker made of several processes (a gVisor sandbox's
	// runsc, gofer and sentry) whose children a parent cannot all reach.
	KillAll() error
	// Delete removes the group. Its processes must be gone.
	Delete() error
	// Path is the group's path relative to the hierarchy root.
	Path() string
	// SetCPUWeight sets the group's share of contended CPU among its
	// siblings, in cgroup v2 units (1–10000, DefaultCPUWeight normal; v1
	// cpu.shares scaled from it). The quota (Limits.CPUs) stays.
	SetCPUWeight(weight uint64) error
}

// DefaultCPUWeight is the kernel's default weight (v2 cpu.weight 100, v1
// cpu.shares 1024).
const DefaultCPUWeight = 100

// Driver makes groups on one hierarchy.
type Driver interface {
	// Version is "v1" or "v2".
	Version() string
	// New makes the group parent/name with the limits applied.
	New(name string, l Limits) (Group, error)
}

// ErrUnavailable is matched by errors that mean the requested cgroup
// hierarchy or one of its needed controllers does not exist on this host.
var ErrUnavailable = errors.New("cgroup: unavailable")

// required are the controllers a worker's limits depend on.
var required = []string{"memory", "pids", "cpu"}

// Open returns a driver for mode ("auto", "v1" or "v2") whose groups are made
// under parent (e.g. "/codeinterp"). "auto" picks v2 when the unified
// hierarchy offers every needed controller, else v1.
func Open(mode, parent string) (Driver, error) {
	if !strings.HasPrefix(parent, "/") || path.Clean(parent) != parent || parent == "/" {
		return nil, fmt.Errorf("cgroup: parent %q must be an absolute, clean path below the root", parent)
	}
	switch mode {
	case "v1":
		return openV1(parent)
	case "v2":
		return openV2(parent)
	case "auto":
		d2, err2 := openV2(parent)
		if err2 == nil {
			return d2, nil
		}
		d1, err1 := openV1(parent)
		if err1 == nil {
			return d1, nil
		}
		return nil, fmt.Errorf("cgroup: neither hierarchy is usable: v2: %w; v1: %w", err2, err1)
	}
	return nil, fmt.Errorf("cgroup: unknown mode %q (want auto, v1 or v2)", mode)
}

// nestedParent is where groups are made, as a path below the hierarchy's
// mount: parent under the server's own cgroup self (from /proc/self/cgroup,
// which names groups from the hierarchy's real root), the mount showing
// root as its "/". So every sandbox is charged to the cgroup the server
// runs in — a Kubernetes pod's, whether or not it has a cgroup namespace
// of its own — and never to a group outside it. A server that moved itself
// into its leaf (moveSelfToLeaf) nests beside it, not inside.
func nestedParent(self, root, parent string) (string, error) {
	if self == "" || !strings.HasPrefix(self, "/") {
		return "", fmt.Errorf("the server's own cgroup is unknown (%q)", self)
	}
	rel := self
	if root != "/" {
		if self != root && !strings.HasPrefix(self, root+"/") {
			return "", fmt.Errorf("the server's cgroup %s is outside what the mount shows (%s)", self, root)
		}
		rel = "/" + strings.TrimPrefix(strings.TrimPrefix(self, root), "/")
	}
	if path.Base(rel) == serverLeaf {
		rel = path.Dir(rel)
	}
	return path.Join(rel, parent), nil
}

// mountRootOf is mountRoot of the cgroup file system mounted at mountpoint,
// read from this process's mountinfo.
func mountRootOf(mountpoint string) (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	return mountRoot(f, mountpoint)
}

// mountRoot is the cgroup that a cgroup file system mounted at mountpoint
// shows as its "/", from a mountinfo listing: "/" on the host and in a
// private cgroup namespace, but the container's own cgroup where a
// container sees its subtree bind-mounted without a namespace of its own
// (podman --cgroupns=host, a Kubernetes pod on a cgroup v1 node). There
// /proc/PID/cgroup names groups from the hierarchy's real root, so a group
// made at mountpoint/codeinterp/x is root/codeinterp/x there.
func mountRoot(mountinfo io.Reader, mountpoint string) (string, error) {
	root, found := "", false
	sc := bufio.NewScanner(mountinfo)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		f := strings.Fields(sc.Text())
		sep := slices.Index(f, "-")
		if len(f) < 5 || sep < 6 || sep+1 >= len(f) {
			continue
		}
		if fs := f[sep+1]; (fs != "cgroup" && fs != "cgroup2") || unescapeMountinfo(f[4]) != mountpoint {
			continue
		}
		// A later mount at the same point hides the earlier one.
		root, found = unescapeMountinfo(f[3]), true
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	if !found {
		return "", fmt.Errorf("no cgroup file system is mounted at %s", mountpoint)
	}
	return root, nil
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// readProcCgroup maps each controller of /proc/PID/cgroup to its path; the
// unified hierarchy's entry has the key "".
func readProcCgroup(pid int) (map[string]string, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controller-list:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out, sc.Err()
}

// readProcs parses a cgroup.procs file.
func readProcs(file string) ([]int, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("cgroup: %s: bad pid %q", file, f)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// killWait bounds how long KillAll waits for a group to empty. A killed
// process leaves the group as soon as it exits, before it is reaped.
const killWait = 5 * time.Second

// killLoop SIGKILLs whatever procs lists until it lists nothing. groupKill,
// when not nil, is tried first on each round; its failure (an old kernel
// without cgroup.kill) is not an error since the per-process signals follow.
func killLoop(procs func() ([]int, error), groupKill func() error) error {
	deadline := time.Now().Add(killWait)
	for {
		pids, err := procs()
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup: %d processes still in the group after SIGKILL for %v: %v", len(pids), killWait, pids)
		}
		if groupKill != nil {
			_ = groupKill()
		}
		for _, pid := range pids {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("cgroup: kill %d: %w", pid, err)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// readKeyed reads "key value" lines and returns key's value.
func readKeyed(file, key string) (uint64, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, fmt.Errorf("cgroup: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == key {
			return strconv.ParseUint(f[1], 10, 64)
		}
	}
	return 0, fmt.Errorf("cgroup: %s has no %q", file, key)
}

func hostHasSwap() bool {
	b, err := os.ReadFile("/proc/swaps")
	if err != nil {
		return true // unknown: assume the worst
	}
	return len(strings.Split(strings.TrimSpace(string(b)), "\n")) > 1
}
