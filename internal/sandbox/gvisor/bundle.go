package gvisor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Paths inside the sandbox.
const (
	guestCtlDir  = "/run/ci"
	guestCtlIn   = guestCtlDir + "/in"  // host → kernel
	guestCtlOut  = guestCtlDir + "/out" // kernel → host
	guestScratch = "/mnt/data"
	guestTmp     = "/tmp"
	hostname     = "sandbox"
)

// identityFiles are the sandbox's /etc/passwd, /etc/group and /etc/hosts,
// written by Prepare into dir and bound read-only over the root's own: the
// one sandbox user (the configured uid and gid, whatever the root's passwd
// names) and the sandbox's hostname.
func identityFiles(dir string, uid, gid uint32) (map[string]string, error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	u, g := strconv.FormatUint(uint64(uid), 10), strconv.FormatUint(uint64(gid), 10)
	files := map[string]string{
		"/etc/passwd": "sandbox:x:" + u + ":" + g + ":sandbox:/tmp:/usr/sbin/nologin\n",
		"/etc/group":  "sandbox:x:" + g + ":\n",
		"/etc/hosts":  "127.0.0.1\tlocalhost " + hostname + "\n",
	}
	binds := map[string]string{}
	for guest, content := range files {
		host := filepath.Join(dir, filepath.Base(guest))
		if err := os.WriteFile(host, []byte(content), 0o644); err != nil {
			return nil, err
		}
		binds[guest] = host
	}
	return binds, nil
}

// bundleParams are one interpreter's settings for its OCI spec.
type bundleParams struct {
	root         string            // the root filesystem (Config.RootFS), read-only
	identity     map[string]string // guest path → host file (identityFiles)
	ctlIn        string            // host FIFOs
	ctlOut       string
	netDir       string // the egress directory (network.go), mounted at guestNetDir; "": none
	args         []string
	uid, gid     uint32
	scratchBytes int64
	nproc        uint64 // RLIMIT_NPROC; 0: none
}

// Host tasks (threads) a sandbox needs on the ptrace platform: about 80
// when idle with the kernel warm (runsc, gofer, sentry, the stub), and
// about seven more for each forked guest process (measured: its stub
// process and threads, the sentry threads that trace them). When the cgroup's
// pids limit is reached the sentry cannot make a stub and dies, so the
// guest is held below it with RLIMIT_NPROC, which gVisor enforces and
// which fails fork and thread creation cleanly (EAGAIN).
const (
	hostTasksBase         = 96
	hostTasksPerGuestTask = 7
	minGuestTasks         = 8
)

// guestTasks is the RLIMIT_NPROC that keeps the sandbox under pids host
// tasks.
func guestTasks(pids int64) uint64 {
	return uint64(max(minGuestTasks, (pids-hostTasksBase)/hostTasksPerGuestTask))
}

// guestEnv is the whole environment of the sandbox's Python: nothing of the
// host's. MPLBACKEND picks the non-interactive renderer; MPLCONFIGDIR and
// HOME point into the tmpfs because the root is read-only (matplotlib and
// fontconfig write caches there); LANG makes stdio UTF-8; PATH is what
// subprocess needs to find /usr/bin (a child stays inside the sandbox).
//
// The MALLOC_* tunables keep glibc's heap: under gVisor every page a
// process touches for the first time is a fault the sentry serves, so
// memory that glibc returns with munmap or a heap trim after each large
// array and takes back on the next costs a fault per page again (a pandas
// groupby on 200 000 rows ran twice as fast with them, natively 1.7x).
// Blocks up to 32 MiB (glibc's own ceiling for its adaptive threshold)
// come from the heap, which keeps up to 256 MiB free before it trims and
// grows 64 MiB at a time. The cgroup still bounds all of it.
func guestEnv() []string {
	return []string{
		"PATH=/usr/bin:/bin",
		"HOME=/tmp",
		"LANG=C.UTF-8",
		"MPLBACKEND=Agg",
		"MPLCONFIGDIR=/tmp/.mpl",
		"MALLOC_MMAP_THRESHOLD_=33554432",
		"MALLOC_TRIM_THRESHOLD_=268435456",
		"MALLOC_TOP_PAD_=67108864",
	}
}

// spec is the OCI runtime spec of one sandbox.
func (p bundleParams) spec() *specs.Spec {
	ro := []string{"bind", "ro", "nosuid", "nodev"}
	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
	}
	// Sorted: the spec of every session is the same but for its FIFOs (a
	// restore needs the checkpoint's mounts in the same order).
	for _, guest := range []string{"/etc/group", "/etc/hosts", "/etc/passwd"} {
		if host, ok := p.identity[guest]; ok {
			mounts = append(mounts, specs.Mount{Destination: guest, Type: "bind", Source: host, Options: ro})
		}
	}
	// Each tmpfs may hold ScratchBytes; both live in the sentry's memory,
	// so the cgroup's memory limit bounds their sum with everything else.
	size := "size=" + strconv.FormatInt(p.scratchBytes, 10)
	for _, d := range []string{guestTmp, guestScratch} {
		mounts = append(mounts, specs.Mount{
			Destination: d, Type: "tmpfs", Source: "tmpfs",
			Options: []string{"nosuid", "nodev", "mode=1777", size},
		})
	}
	mounts = append(mounts,
		specs.Mount{Destination: guestCtlIn, Type: "bind", Source: p.ctlIn, Options: []string{"bind", "rw"}},
		specs.Mount{Destination: guestCtlOut, Type: "bind", Source: p.ctlOut, Options: []string{"bind", "rw"}},
	)
	if p.netDir != "" {
		// Last, so a sealed sandbox's mounts are a prefix of a networked
		// one's. Read-only: the sandbox connects to the socket there (a
		// connect is not a write to the file system) and reads the CA
		// bundle; it can create nothing.
		mounts = append(mounts, specs.Mount{Destination: guestNetDir, Type: "bind", Source: p.netDir,
			Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
	}
	rlimits := []specs.POSIXRlimit{
		{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024},
		{Type: "RLIMIT_CORE", Hard: 0, Soft: 0},
	}
	if p.nproc > 0 {
		// gVisor counts the sandbox user's tasks (threads too) itself.
		rlimits = append(rlimits, specs.POSIXRlimit{Type: "RLIMIT_NPROC", Hard: p.nproc, Soft: p.nproc})
	}
	return &specs.Spec{
		Version:  specs.Version,
		Root:     &specs.Root{Path: p.root, Readonly: true},
		Hostname: hostname,
		Process: &specs.Process{
			User:            specs.User{UID: p.uid, GID: p.gid, AdditionalGids: []uint32{}},
			Args:            p.args,
			Env:             guestEnv(),
			Cwd:             guestScratch,
			Capabilities:    &specs.LinuxCapabilities{},
			Rlimits:         rlimits,
			NoNewPrivileges: true,
		},
		Mounts: mounts,
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace}, {Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.MountNamespace},
			},
			MaskedPaths:   []string{"/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware"},
			ReadonlyPaths: []string{"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"},
		},
	}
}

// writeBundle writes dir/config.json.
func writeBundle(dir string, s *specs.Spec) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("gvisor: encode spec: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600); err != nil {
		return fmt.Errorf("gvisor: write spec: %w", err)
	}
	return nil
}

// safeID reports whether id can name a container, a directory and a cgroup.
func safeID(id string) bool {
	if id == "" || len(id) > 64 || strings.HasPrefix(id, ".") || strings.HasPrefix(id, "-") {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}
