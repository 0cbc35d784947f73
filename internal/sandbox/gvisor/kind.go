package gvisor

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/internal/cellrunner"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
)

//go:embed kernel.py
var kernelMain string

// kernelSource is what the sandbox's python3 runs: the cell runner both
// kernels share, then kernel.py. A checkpoint's stamp hashes this, the
// whole of it.
var kernelSource = cellrunner.Prepend(kernelMain)

// Kind runs Debian's CPython inside gVisor, one sandbox per interpreter. It
// implements pool.Kind.
type Kind struct {
	cfg      Config
	log      *zap.Logger
	identity map[string]string // the sandbox's /etc/passwd, group, hosts (set by Prepare)
	packages []string          // set by Prepare
	python   string            // "major.minor", set by Prepare
	images   *checkpoints      // nil with ColdStart
	features features          // of the runsc in use, set by Prepare
	version  string            // runsc's, set by Prepare

	// digest names runsc, the root and the kernel for session
	// checkpoints (runtimeDigest), set by Prepare; digestErr says why
	// there is none (sessions are then not checkpointed).
	digest    string
	digestErr error

	ctx    context.Context // ends at Close: background rotations
	cancel context.CancelFunc
}

var _ pool.Kind = (*Kind)(nil)

// New checks cfg and returns the kind; Prepare does the slow checks.
func New(cfg Config, log *zap.Logger) (*Kind, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	k := &Kind{cfg: cfg, log: log}
	k.ctx, k.cancel = context.WithCancel(context.Background())
	if !cfg.ColdStart {
		k.images = newCheckpoints(k)
	}
	return k, nil
}

// Name implements pool.Kind.
func (k *Kind) Name() string { return "gvisor" }

// MaxMemoryBytes implements pool.Kind: 64-bit CPython has no wasm32 bound;
// the cgroup is the limit.
func (k *Kind) MaxMemoryBytes() int64 { return 64 << 30 }

// Packages lists the importable top-level packages of interest, as the
// sandbox's Python reported them in Prepare, for the tool's description.
func (k *Kind) Packages() []string { return append([]string(nil), k.packages...) }

// installHint is appended to every Prepare failure.
const installHint = "build the pinned runsc and the sandbox's root filesystem: make setup " +
	"(runtime/build-runsc.sh, runtime/build-gvisor-rootfs.sh)"

// Runsc returns the runsc the kind runs (its resolved path) and the
// version it reported, as Prepare found them.
func (k *Kind) Runsc() (path, version string) { return k.cfg.RunscPath, k.version }

// Environment implements pool.Kind: what the sandbox's Python reported in
// Prepare.
func (k *Kind) Environment() sandbox.Environment {
	// Network: the kind can wire a session to an egress proxy (the pool
	// says whether it has one).
	return sandbox.Environment{Provider: k.Name(), PythonVersion: k.python, Packages: k.Packages(), Images: true, Network: true, Shell: true}
}

// Prepare implements pool.Kind: it finds runsc and Python, writes the
// shared root and proves the whole path works by starting one sandbox
// (which also reports which packages import).
func (k *Kind) Prepare(ctx context.Context) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("gvisor: runsc needs root (namespaces, chroot, its gofer); the server runs as uid %d", os.Geteuid())
	}
	runsc, err := resolveRunsc(k.cfg.RunscPath)
	if err != nil {
		return err
	}
	k.cfg.RunscPath = runsc
	version, err := runscVersion(ctx, runsc)
	if err != nil {
		return fmt.Errorf("%w; %s", err, installHint)
	}
	if err := checkVersion(runsc, version, k.cfg.RunscVersion); err != nil {
		return err
	}
	k.version = version
	k.features = pinnedFeatures()
	if version != PinnedRunscVersion {
		k.features = probeFeatures(ctx, runsc)
	}
	if k.cfg.RootFS == "" {
		if k.cfg.RootFS, err = DefaultRootFS(); err != nil {
			return err
		}
	}
	if err := checkRootFS(k.cfg.RootFS, k.cfg.PythonPath); err != nil {
		return err
	}
	k.digest, k.digestErr = runtimeDigest(version, k.cfg.RootFS, k.cfg.Platform)
	if err := makeStateDir(k.cfg.StateDir); err != nil {
		return err
	}
	if k.identity, err = identityFiles(filepath.Join(k.cfg.StateDir, "etc"), k.cfg.UID, k.cfg.GID); err != nil {
		return fmt.Errorf("gvisor: write the sandbox's /etc/passwd: %w", err)
	}
	// The probe proves the whole path works and reports which packages
	// import. With checkpoints it is the first one's template sandbox, for
	// the pool's limits; either way it runs only the trusted kernel, before
	// any session exists, so it needs no cgroup of its own.
	probeStart := time.Now()
	if k.images != nil {
		img, err := k.images.take(ctx, k.cfg.Limits, false, false)
		if err != nil {
			return fmt.Errorf("%w; %s", err, k.startHint())
		}
		k.images.install(k.imageKey(k.cfg.Limits, false), k.cfg.Limits, img)
		k.packages, k.python = img.packages, img.python
	} else {
		it, err := k.start(ctx, pool.StartOptions{
			// runsc names its control socket after the container, in the
			// host's abstract namespace: two servers (or test binaries)
			// probing at once must not share a name.
			ID:          "probe-" + strconv.Itoa(os.Getpid()),
			MemoryBytes: RecommendedGuestMemoryBytes,
			Limits:      pool.Limits{StdoutBytes: 4 << 10, StderrBytes: 4 << 10, ScratchBytes: 16 << 20},
			Confine:     func(int) error { return nil },
		}, coldStart, nil, false)
		if err != nil {
			return fmt.Errorf("gvisor: a test sandbox did not start: %w; %s", err, k.startHint())
		}
		it.Kill()
		k.packages, k.python = it.packages, it.python
	}
	missing := []string{}
	for _, p := range []string{"numpy", "pandas", "matplotlib"} {
		if !contains(k.packages, p) {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("gvisor: the sandbox's Python cannot import %v; %s", missing, installHint)
	}
	k.log.Info("gvisor sandbox ready", zap.String("runsc", runsc), zap.String("runsc_version", version), zap.String("platform", k.cfg.Platform),
		zap.String("rootfs", k.cfg.RootFS),
		zap.Strings("packages", k.packages), zap.Bool("checkpoints", k.images != nil),
		zap.Duration("probe", time.Since(probeStart)))
	return nil
}

// startHint is appended when the first sandbox does not start: the
// platform is the setting most likely to be wrong for the host (systrap
// needs seccomp's SECCOMP_RET_TRAP and ptrace for its stubs, which a
// container's seccomp profile or a missing CAP_SYS_PTRACE forbids; kvm
// needs /dev/kvm), so the error names it and what to set instead. The
// kind never falls back to another platform by itself: the operator
// chose this one.
func (k *Kind) startHint() string {
	switch k.cfg.Platform {
	case "systrap":
		return "runsc's platform is systrap (sandbox.gvisor.platform); where the host forbids it " +
			"(a seccomp profile, no CAP_SYS_PTRACE), set sandbox.gvisor.platform: ptrace; else " + installHint
	case "kvm":
		return "runsc's platform is kvm (sandbox.gvisor.platform), which needs /dev/kvm and hangs without nested " +
			"virtualisation; set sandbox.gvisor.platform: systrap; else " + installHint
	}
	return installHint
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// makeStateDir makes dir 0700 and refuses one that is a symlink or belongs
// to someone else (a world-writable TempDir must not let another user
// plant it).
func makeStateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("gvisor: state dir: %w", err)
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("gvisor: state dir: %w", err)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !st.IsDir() || !ok || int(sys.Uid) != os.Geteuid() {
		return fmt.Errorf("gvisor: state dir %s is not a directory owned by this server", dir)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("gvisor: state dir: %w", err)
	}
	return nil
}

// Start implements pool.Kind.
func (k *Kind) Start(ctx context.Context, o pool.StartOptions) (pool.Interpreter, error) {
	if k.packages == nil {
		return nil, errors.New("gvisor: Start before Prepare")
	}
	network := o.Egress != nil
	if o.Restore != nil {
		return k.startRestored(ctx, o)
	}
	if k.images == nil {
		return k.start(ctx, o, coldStart, nil, network)
	}
	img, err := k.images.get(ctx, o.Limits, network)
	if err != nil {
		return nil, err
	}
	it, err := k.start(ctx, o, restoreStart, img, network)
	k.images.release(img)
	if err != nil && ctx.Err() == nil {
		// A bad image must not fail every session: the next one takes a
		// new image (this one's error still reaches the pool).
		k.images.drop(img)
	}
	return it, err
}

// Close implements pool.Kind: it removes the state directory.
func (k *Kind) Close() error {
	k.cancel()
	if k.images != nil {
		k.images.wg.Wait()
	}
	// Every interpreter's Kill unmounts its own; one that was never
	// killed (a start that failed half-way) must not keep the state
	// directory from going.
	roots, _ := filepath.Glob(filepath.Join(k.cfg.StateDir, "i-*", "state"))
	for _, r := range roots {
		unmountNullNetNS(r)
	}
	if err := os.RemoveAll(k.cfg.StateDir); err != nil {
		return fmt.Errorf("gvisor: remove state dir: %w", err)
	}
	return nil
}
