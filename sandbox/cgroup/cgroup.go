package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
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
}

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

// ---------------------------------------------------------------- v1

type v1Driver struct {
	// parents are where each required controller's groups are made, as
	// paths below its mount: the configured parent under the server's own
	// cgroup (nestedParent).
	parents    map[string]string
	hierarchy  cgroup1.Hierarchy
	memRoot    string // the memory hierarchy's mount, for files containerd does not read
	memswFiles bool
	// roots are the cgroups each required controller's mount shows as its
	// "/" (mountRoot), so Verify can compare with /proc/PID/cgroup.
	roots map[string]string
}

func openV1(parent string) (Driver, error) {
	if cgroups.Mode() == cgroups.Unified {
		return nil, fmt.Errorf("%w: host runs the unified hierarchy only (no v1)", ErrUnavailable)
	}
	all, err := cgroup1.Default()
	if err != nil {
		return nil, fmt.Errorf("%w: v1 subsystems: %v", ErrUnavailable, err)
	}
	var picked []cgroup1.Subsystem
	var memRoot string
	roots := map[string]string{}
	self, err := readProcCgroup(os.Getpid())
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	parents := map[string]string{}
	for _, s := range all {
		if slices.Contains(required, string(s.Name())) {
			picked = append(picked, s)
			p, ok := s.(interface{ Path(string) string })
			if !ok {
				return nil, fmt.Errorf("%w: v1 %s has no mount point", ErrUnavailable, s.Name())
			}
			if s.Name() == cgroup1.Memory {
				memRoot = p.Path("/")
			}
			root, err := mountRootOf(p.Path("/"))
			if err != nil {
				return nil, fmt.Errorf("%w: v1 %s: %v", ErrUnavailable, s.Name(), err)
			}
			roots[string(s.Name())] = root
			if parents[string(s.Name())], err = nestedParent(self[string(s.Name())], root, parent); err != nil {
				return nil, fmt.Errorf("%w: v1 %s: %v", ErrUnavailable, s.Name(), err)
			}
		}
	}
	if len(picked) != len(required) {
		var have []string
		for _, s := range picked {
			have = append(have, string(s.Name()))
		}
		return nil, fmt.Errorf("%w: v1 needs controllers %v, found %v", ErrUnavailable, required, have)
	}
	_, err = os.Stat(filepath.Join(memRoot, "memory.memsw.limit_in_bytes"))
	return &v1Driver{
		parents:    parents,
		hierarchy:  func() ([]cgroup1.Subsystem, error) { return picked, nil },
		memRoot:    memRoot,
		memswFiles: err == nil,
		roots:      roots,
	}, nil
}

func (d *v1Driver) Version() string { return "v1" }

func (d *v1Driver) New(name string, l Limits) (Group, error) {
	paths := map[string]string{}
	for c, parent := range d.parents {
		paths[c] = path.Join(parent, name)
	}
	p := paths["memory"]
	swappiness := uint64(0)
	res := &specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: &l.MemoryBytes, Swappiness: &swappiness},
		Pids:   &specs.LinuxPids{Limit: &l.Pids},
		CPU:    cpuV1(l.CPUs),
	}
	if d.memswFiles {
		// memory+swap equal to memory: the group can never swap.
		res.Memory.Swap = &l.MemoryBytes
	}
	// Without memsw accounting the kernel cannot limit swap per group; that
	// is only safe when the host has no swap at all.
	if !d.memswFiles && hostHasSwap() {
		return nil, fmt.Errorf("%w: v1 memory.memsw is not accounted and the host has swap: workers could swap", ErrUnavailable)
	}
	at := func(n cgroup1.Name) (string, error) {
		if q, ok := paths[string(n)]; ok {
			return q, nil
		}
		return "", fmt.Errorf("cgroup v1: no path for controller %s", n)
	}
	cg, err := cgroup1.New(at, res, cgroup1.WithHierarchy(d.hierarchy))
	if err != nil {
		return nil, fmt.Errorf("cgroup v1: create %s: %w", p, err)
	}
	return &v1Group{cg: cg, path: p, paths: paths, memRoot: d.memRoot, roots: d.roots}, nil
}

func cpuV1(cpus float64) *specs.LinuxCPU {
	quota := int64(cpus * cpuPeriod)
	period := uint64(cpuPeriod)
	return &specs.LinuxCPU{Quota: &quota, Period: &period}
}

type v1Group struct {
	cg      cgroup1.Cgroup
	path    string            // the memory controller's, below its mount
	paths   map[string]string // each required controller's, below its mount
	memRoot string
	roots   map[string]string
}

func (g *v1Group) Path() string { return g.path }

func (g *v1Group) Add(pid int) error {
	if err := g.cg.AddProc(uint64(pid)); err != nil {
		return fmt.Errorf("cgroup v1: add pid %d to %s: %w", pid, g.path, err)
	}
	return nil
}

func (g *v1Group) Verify(pid int) error {
	memberships, err := readProcCgroup(pid)
	if err != nil {
		return err
	}
	for _, c := range required {
		got, ok := memberships[c]
		if want := path.Join(g.roots[c], g.paths[c]); !ok || got != want {
			return fmt.Errorf("cgroup v1: pid %d is in %s:%q, want %q", pid, c, got, want)
		}
	}
	return nil
}

func (g *v1Group) OOMKills() (uint64, error) {
	return readKeyed(filepath.Join(g.memRoot, g.path, "memory.oom_control"), "oom_kill")
}

func (g *v1Group) Procs() ([]int, error) {
	return readProcs(filepath.Join(g.memRoot, g.path, "cgroup.procs"))
}

// KillAll signals until the group is empty. v1 has no cgroup.kill, so a
// process forking as fast as it is killed is caught by the loop, bounded by
// pids.max.
func (g *v1Group) KillAll() error { return killLoop(g.Procs, nil) }

func (g *v1Group) Delete() error {
	if err := g.cg.Delete(); err != nil {
		return fmt.Errorf("cgroup v1: delete %s: %w", g.path, err)
	}
	return nil
}

// ---------------------------------------------------------------- v2

type v2Driver struct {
	mount, parent string
	root          string // what the mount shows as "/" (mountRoot)
}

func openV2(parent string) (Driver, error) {
	var mount string
	switch cgroups.Mode() {
	case cgroups.Unified:
		mount = "/sys/fs/cgroup"
	case cgroups.Hybrid:
		mount = "/sys/fs/cgroup/unified"
	default:
		return nil, fmt.Errorf("%w: no cgroup2 mount", ErrUnavailable)
	}
	d, err := openV2At(mount, parent)
	if err != nil {
		return nil, err
	}
	if d.root, err = mountRootOf(mount); err != nil {
		return nil, fmt.Errorf("%w: cgroup2 at %s: %v", ErrUnavailable, mount, err)
	}
	self, err := readProcCgroup(os.Getpid())
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if d.parent, err = nestedParent(self[""], d.root, parent); err != nil {
		return nil, fmt.Errorf("%w: cgroup2 at %s: %v", ErrUnavailable, mount, err)
	}
	return d, nil
}

// openV2At opens the unified hierarchy mounted at mount, which shows the
// hierarchy's root ("/"; openV2 reads what a real mount shows).
func openV2At(mount, parent string) (*v2Driver, error) {
	b, err := os.ReadFile(filepath.Join(mount, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	have := strings.Fields(string(b))
	var missing []string
	for _, c := range required {
		if !slices.Contains(have, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: cgroup2 at %s lacks controllers %v (they are bound to v1 on this host; have %v)",
			ErrUnavailable, mount, missing, have)
	}
	return &v2Driver{mount: mount, parent: parent, root: "/"}, nil
}

func (d *v2Driver) Version() string { return "v2" }

func (d *v2Driver) New(name string, l Limits) (Group, error) {
	// The parent holds only groups, never processes, so controllers can be
	// delegated to its children ("no internal processes" rule).
	if _, err := cgroup2.NewManager(d.mount, d.parent, &cgroup2.Resources{}); err != nil {
		return nil, fmt.Errorf("cgroup v2: parent %s: %w", d.parent, err)
	}
	if err := enableV2(d.mount, d.parent); err != nil {
		return nil, err
	}
	p := path.Join(d.parent, name)
	zero := int64(0)
	quota := int64(l.CPUs * cpuPeriod)
	period := uint64(cpuPeriod)
	res := &cgroup2.Resources{
		Memory: &cgroup2.Memory{Max: &l.MemoryBytes, Swap: &zero},
		Pids:   &cgroup2.Pids{Max: l.Pids},
		CPU:    &cgroup2.CPU{Max: cgroup2.NewCPUMax(&quota, &period)},
	}
	m, err := cgroup2.NewManager(d.mount, p, res)
	if err != nil {
		return nil, fmt.Errorf("cgroup v2: create %s: %w", p, err)
	}
	return &v2Group{m: m, dir: filepath.Join(d.mount, p), path: p, root: d.root}, nil
}

// enableV2 turns the required controllers on in every ancestor's
// subtree_control down to parent.
func enableV2(mount, parent string) error {
	dir := mount
	for _, part := range strings.Split(strings.Trim(parent, "/"), "/") {
		if err := writeSubtree(dir); err != nil {
			return err
		}
		dir = filepath.Join(dir, part)
	}
	return writeSubtree(dir)
}

// writeSubtree enables the required controllers for dir's children. The
// kernel refuses (EBUSY) while dir itself holds processes — the "no internal
// processes" rule. In a container the server typically sits in the
// namespace's root group; then the server moves itself into a leaf group of
// its own and the write is retried once.
func writeSubtree(dir string) error {
	err := writeSubtreeOnce(dir)
	if !errors.Is(err, syscall.EBUSY) {
		return err
	}
	if merr := moveSelfToLeaf(dir); merr != nil {
		return fmt.Errorf("%w (and moving the server to a leaf group failed: %v)", err, merr)
	}
	return writeSubtreeOnce(dir)
}

// serverLeaf is the group the server moves itself to, see writeSubtree.
const serverLeaf = "codeinterp-server"

func moveSelfToLeaf(dir string) error {
	procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return err
	}
	self := strconv.Itoa(os.Getpid())
	if !slices.Contains(strings.Fields(string(procs)), self) {
		return fmt.Errorf("%s holds other processes, not the server", dir)
	}
	leaf := filepath.Join(dir, serverLeaf)
	if err := os.MkdirAll(leaf, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(self), 0)
}

func writeSubtreeOnce(dir string) error {
	f := filepath.Join(dir, "cgroup.subtree_control")
	b, err := os.ReadFile(f)
	if err != nil {
		return fmt.Errorf("cgroup v2: %w", err)
	}
	on := strings.Fields(string(b))
	var add []string
	for _, c := range required {
		if !slices.Contains(on, c) {
			add = append(add, "+"+c)
		}
	}
	if len(add) == 0 {
		return nil
	}
	if err := os.WriteFile(f, []byte(strings.Join(add, " ")), 0); err != nil {
		return fmt.Errorf("cgroup v2: enable %v in %s: %w", add, dir, err)
	}
	return nil
}

type v2Group struct {
	m         *cgroup2.Manager
	dir, path string
	root      string
}

func (g *v2Group) Path() string { return g.path }

func (g *v2Group) Add(pid int) error {
	if err := g.m.AddProc(uint64(pid)); err != nil {
		return fmt.Errorf("cgroup v2: add pid %d to %s: %w", pid, g.path, err)
	}
	return nil
}

func (g *v2Group) Verify(pid int) error {
	memberships, err := readProcCgroup(pid)
	if err != nil {
		return err
	}
	if got, want := memberships[""], path.Join(g.root, g.path); got != want {
		return fmt.Errorf("cgroup v2: pid %d is in %q, want %q", pid, got, want)
	}
	return nil
}

func (g *v2Group) OOMKills() (uint64, error) {
	return readKeyed(filepath.Join(g.dir, "memory.events"), "oom_kill")
}

func (g *v2Group) Procs() ([]int, error) {
	return readProcs(filepath.Join(g.dir, "cgroup.procs"))
}

// KillAll uses cgroup.kill (Linux 5.14+), which kills atomically even a
// group that forks, and falls back to signalling each process.
func (g *v2Group) KillAll() error {
	return killLoop(g.Procs, func() error {
		return os.WriteFile(filepath.Join(g.dir, "cgroup.kill"), []byte("1"), 0)
	})
}

func (g *v2Group) Delete() error {
	if err := g.m.Delete(); err != nil {
		return fmt.Errorf("cgroup v2: delete %s: %w", g.path, err)
	}
	return nil
}

// ---------------------------------------------------------------- helpers

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
