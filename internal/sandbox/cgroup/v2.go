package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup2"
)

// The unified hierarchy: one mount, controllers delegated through
// cgroup.subtree_control.

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

func (g *v2Group) SetCPUWeight(weight uint64) error {
	w := min(max(weight, 1), 10000)
	if err := g.m.Update(&cgroup2.Resources{CPU: &cgroup2.CPU{Weight: &w}}); err != nil {
		return fmt.Errorf("cgroup v2: cpu.weight of %s: %w", g.path, err)
	}
	return nil
}

func (g *v2Group) Delete() error {
	if err := g.m.Delete(); err != nil {
		return fmt.Errorf("cgroup v2: delete %s: %w", g.path, err)
	}
	return nil
}
