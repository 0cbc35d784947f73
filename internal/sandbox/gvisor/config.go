package gvisor

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
)

// Config configures the gVisor kind. Zero values take the documented
// defaults (see withDefaults).
type Config struct {
	// RunscPath is runsc: a path, or a name looked up on PATH. Default:
	// the pinned runsc runtime/build-runsc.sh built (DefaultRunsc).
	RunscPath string
	// RunscVersion is the version Prepare requires runsc to report;
	// default PinnedRunscVersion. AnyRunscVersion accepts any, for a
	// baseline measured beside the pinned one, never for a server.
	RunscVersion string
	// Platform is runsc's --platform: "systrap" (default; gVisor's own
	// default since 2023, seccomp traps instead of a ptrace stop per
	// system call), "ptrace", or "kvm" (needs /dev/kvm; hangs on VMs
	// without nested virtualisation).
	Platform string
	// RootFS is the sandbox's root filesystem, mounted read-only as its /:
	// the Debian tree runtime/build-gvisor-rootfs.sh builds (`make setup`;
	// the gVisor image ships one). Default: DefaultRootFS.
	RootFS string
	// PythonPath is the interpreter inside the sandbox (a path in RootFS);
	// default "/usr/bin/python3".
	PythonPath string
	// StateDir holds the shared read-only root, runsc's state and one
	// directory per interpreter (bundle, control FIFOs, runsc's log). It is
	// made 0700 and removed by Close. Default: os.TempDir()/codeinterp-gvisor-PID.
	StateDir string
	// LauncherCommand starts the launcher (LaunchMain): the server's own
	// binary with its hidden command. Required.
	LauncherCommand []string
	// UID and GID the Python process runs as inside the sandbox; default
	// 65534 (nobody).
	UID, GID uint32
	// ImageMaxCount and ImageMaxBytes bound the figures one run returns
	// (count, and total PNG bytes); defaults 8 and 8 MiB.
	ImageMaxCount int
	ImageMaxBytes int
	// AddressSpaceBytes, when positive, is RLIMIT_AS of the Python process
	// (gVisor enforces it, so a large allocation raises MemoryError instead
	// of an OOM kill of the whole sandbox). 0 means session memory +
	// DefaultAddressSpaceSlack; negative disables it.
	AddressSpaceBytes int64
	// RefillCPUWeight is the cgroup CPU weight (v2 units; the kernel's
	// default is 100) of a sandbox the pool starts ahead of time, until a
	// session takes it (pool.RefillWeigher): below 100, refills yield
	// contended CPU to running sessions. Default DefaultRefillCPUWeight.
	RefillCPUWeight uint64
	// ColdStart makes every sandbox start cold (runsc run, then ≈2–3 s of
	// imports) instead of being restored from a checkpoint of a sandbox
	// whose kernel imported the stack (≈0.4 s).
	ColdStart bool
	// SnapshotRotateSessions: a new checkpoint is taken after this many
	// sessions (sessions of one checkpoint share its str hash seed); 0
	// means only at start.
	SnapshotRotateSessions int
	// Limits are the pool's limits, so that Prepare takes the first
	// checkpoint for them (a session with other tmpfs or pids limits gets
	// an image of its own, taken when it first starts).
	Limits pool.Limits
	// ExtraCAPEM are CAs (PEM) a networked sandbox's code trusts besides
	// the root's system bundle and its session's proxy CA: the operator's
	// sandbox.network.ca_file, for a private mirror reached through the
	// proxy's tunnel.
	ExtraCAPEM []byte
	// Debug adds runsc's --debug and --strace logs to the interpreter's
	// directory (slow; never in production).
	Debug bool
}

// Defaults.
const (
	DefaultPlatform      = "systrap"
	DefaultPythonPath    = "/usr/bin/python3"
	DefaultUID           = 65534
	DefaultImageMaxCount = 8
	DefaultImageMaxBytes = 8 << 20
	// DefaultAddressSpaceSlack is added to the session's memory for
	// RLIMIT_AS: CPython with numpy, pandas and matplotlib imported maps
	// about 1.2 GiB of address space (thread stacks, OpenBLAS buffers,
	// arenas) of which only ~150 MiB is resident.
	DefaultAddressSpaceSlack = 1536 << 20
)

// Recommended pool limits for this kind, measured on a 2-core bookworm VM
// (see doc.go): a warm sandbox holds about 200 MiB, of which runsc, the
// gofer and the sentry's own memory are about 90 MiB.
const (
	RecommendedGuestMemoryBytes    = 1 << 30
	RecommendedMaxGuestMemoryBytes = 4 << 30
	RecommendedOverheadBytes       = 256 << 20
	// RecommendedOverheadCPUs is added to the session's CPU quota for the
	// sentry: on systrap a system call is handed between the code's stub
	// thread and the sentry through shared memory, both spinning, so a
	// guest with one core of quota was throttled for half of every CFS
	// period (measured with a 1-core quota against 2: a pandas groupby +
	// chart 169 ms against 56 ms, native 48 ms; 2000 os.stat 78 against
	// 29 ms).
	RecommendedOverheadCPUs = 1
	// RecommendedPids is the cgroup pids limit: an idle sandbox already
	// holds about 80 host threads (see guestTasks); 512 leaves the guest
	// about 59 tasks.
	RecommendedPids = 512
)

// Platforms lists the runsc platforms the kind runs on, the default
// first; config validation and `extproc exec --platform` accept the same
// set.
func Platforms() []string { return []string{"systrap", "ptrace", "kvm"} }

func (c Config) withDefaults() Config {
	if c.RunscVersion == "" {
		c.RunscVersion = PinnedRunscVersion
	}
	if c.Platform == "" {
		c.Platform = DefaultPlatform
	}
	if c.PythonPath == "" {
		c.PythonPath = DefaultPythonPath
	}
	if c.StateDir == "" {
		c.StateDir = filepath.Join(os.TempDir(), "codeinterp-gvisor-"+strconv.Itoa(os.Getpid()))
	}
	if c.UID == 0 && c.GID == 0 {
		c.UID, c.GID = DefaultUID, DefaultUID
	}
	if c.ImageMaxCount == 0 {
		c.ImageMaxCount = DefaultImageMaxCount
	}
	if c.ImageMaxBytes == 0 {
		c.ImageMaxBytes = DefaultImageMaxBytes
	}
	if c.RefillCPUWeight == 0 {
		c.RefillCPUWeight = DefaultRefillCPUWeight
	}
	return c
}

// DefaultRefillCPUWeight leaves refills at the normal weight.
// BenchmarkGVisorOsStatAfterBurst measured weight 25 against 100 side by
// side (docs/benchmark-notes.md, issue 41): the syscall-heavy cell right
// after a burst kept its core better in one run of two, but the burst's
// own sessions waited 4–10× longer for their sandboxes in both — the
// starving of refills seen before at weights 1 and 10. Not a default
// until a weight (or pausing refills only while a cell runs) helps the
// one without the other.
const DefaultRefillCPUWeight = 100

// RefillCPUWeight implements pool.RefillWeigher.
func (k *Kind) RefillCPUWeight() uint64 { return k.cfg.RefillCPUWeight }

func (c Config) validate() error {
	if len(c.LauncherCommand) == 0 {
		return fmt.Errorf("gvisor: LauncherCommand must be set (the server binary and its hidden launcher command)")
	}
	if !filepath.IsAbs(c.PythonPath) || filepath.Clean(c.PythonPath) != c.PythonPath || !isUnder(c.PythonPath, "/usr") {
		return fmt.Errorf("gvisor: PythonPath %q must be a clean absolute path under /usr of the sandbox's root filesystem", c.PythonPath)
	}
	if !filepath.IsAbs(c.StateDir) {
		return fmt.Errorf("gvisor: StateDir %q must be absolute", c.StateDir)
	}
	if c.UID == 0 || c.GID == 0 {
		return fmt.Errorf("gvisor: the sandbox user must not be root (uid %d, gid %d)", c.UID, c.GID)
	}
	if c.SnapshotRotateSessions < 0 {
		return fmt.Errorf("gvisor: SnapshotRotateSessions must not be negative")
	}
	if c.ImageMaxCount < 0 || c.ImageMaxBytes < 0 {
		return fmt.Errorf("gvisor: image bounds must not be negative")
	}
	if !slices.Contains(Platforms(), c.Platform) {
		return fmt.Errorf("gvisor: unknown platform %q (want one of %s)", c.Platform, strings.Join(Platforms(), ", "))
	}
	return nil
}

func isUnder(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../")
}
