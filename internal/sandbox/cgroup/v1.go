package cgroup

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// The legacy hierarchy: one mount per controller.

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

func (g *v1Group) SetCPUWeight(weight uint64) error {
	shares := max(weight*1024/DefaultCPUWeight, 2)
	if err := g.cg.Update(&specs.LinuxResources{CPU: &specs.LinuxCPU{Shares: &shares}}); err != nil {
		return fmt.Errorf("cgroup v1: cpu.shares of %s: %w", g.path, err)
	}
	return nil
}

func (g *v1Group) Delete() error {
	if err := g.cg.Delete(); err != nil {
		return fmt.Errorf("cgroup v1: delete %s: %w", g.path, err)
	}
	return nil
}
