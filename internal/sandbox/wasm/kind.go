package wasm

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
)

// Config is the pool's configuration plus what the WASM kind needs.
type Config struct {
	pool.Config
	// RuntimeDir holds python.wasm and lib/python3.13 (runtime/build-python-wasi.sh).
	RuntimeDir string
	// CacheDir holds wazero's compilation cache. Only the trusted
	// pre-compilation step writes it; workers read it. Empty means
	// RuntimeDir/wazero-cache.
	CacheDir string
	// WorkerCommand is the program and arguments that start a worker: the
	// server's own binary with its hidden worker command.
	WorkerCommand []string
	// ColdStart makes every session start python.wasm from scratch (about
	// 120 ms of CPython start-up, no packages imported) instead of from a
	// snapshot of an initialised interpreter.
	ColdStart bool
	// SnapshotDir holds the snapshots; "" means CacheDir/snapshots.
	SnapshotDir string
	// SnapshotRotateSessions: a new snapshot (new hash seed) is taken after
	// this many sessions; 0 means only at start.
	SnapshotRotateSessions int
	// Bases keeps the snapshots session checkpoints were taken over, so
	// they restore after a restart or a rotation and on other replicas
	// (nil: only while the snapshot is on this disk).
	Bases Bases
	// ReuseSnapshot starts from the newest snapshot of this runtime already
	// taken instead of a new one: for tests, which start many pools, and
	// one-shot runs (extproc exec). A server always takes its own at start.
	ReuseSnapshot bool
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{Config: pool.DefaultConfig(), SnapshotRotateSessions: DefaultSnapshotRotateSessions}
}

// DefaultSnapshotRotateSessions is how many sessions share one snapshot
// (and so one hash seed) by default.
const DefaultSnapshotRotateSessions = 1000

// MaxMemoryBytes is the largest linear memory of a wasm32 guest.
const MaxMemoryBytes = 4 << 30

// ErrRuntimeMissing is matched by New's error when the CPython-WASI runtime
// has not been built.
var ErrRuntimeMissing = errors.New("wasm: CPython-WASI runtime not found")

// Kind starts CPython-WASI worker processes.
type Kind struct {
	cfg     Config
	log     *zap.Logger
	root    bool
	spawner *spawner
	snaps   *snapshots // nil with ColdStart
	// ctx ends at Close: it stops a rotation under way.
	ctx    context.Context
	cancel context.CancelFunc

	// published says, by snapshot directory, when each was last kept in
	// Bases and which upload is under way: a snapshot is kept when it is
	// taken (publishBase), and again every baseRefresh while checkpoints
	// are taken over it (keepBase).
	publishMu sync.Mutex
	published map[string]*baseState
	uploads   sync.WaitGroup // uploads under way, for Close
}

var _ pool.Kind = (*Kind)(nil)

// NewKind returns the WASM kind for cfg; pool.New prepares it.
func NewKind(cfg Config, log *zap.Logger) (*Kind, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if cfg.RuntimeDir == "" {
		return nil, errors.New("wasm: runtime_dir must be set")
	}
	if len(cfg.WorkerCommand) == 0 {
		return nil, errors.New("wasm: worker_command must be set")
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = filepath.Join(cfg.RuntimeDir, "wazero-cache")
	}
	if cfg.SnapshotRotateSessions < 0 {
		return nil, errors.New("wasm: snapshot_rotate_sessions must not be negative")
	}
	k := &Kind{cfg: cfg, log: log, root: os.Geteuid() == 0}
	k.ctx, k.cancel = context.WithCancel(context.Background())
	return k, nil
}

// New starts a pool of WASM workers: the sandbox.Provider of
// `sandbox.provider: wasm`.
func New(ctx context.Context, cfg Config, log *zap.Logger) (*pool.Pool, error) {
	k, err := NewKind(cfg, log)
	if err != nil {
		return nil, err
	}
	return pool.New(ctx, cfg.Config, k, log)
}

// Environment implements pool.Kind: the standard library, plus the
// packages the snapshot imported (the cold path imports none for the
// model: each would cost seconds per session).
func (k *Kind) Environment() sandbox.Environment {
	v := RuntimeVersion
	if i := strings.LastIndexByte(v, '.'); i > 0 {
		v = v[:i]
	}
	env := sandbox.Environment{Provider: k.Name(), PythonVersion: v}
	if k.snaps != nil {
		env.Packages = k.snaps.Packages()
	}
	return env
}

// RestoresSessions implements pool.SessionRestorer: a session's state is
// a delta against the snapshot, so only workers that restore one can.
func (k *Kind) RestoresSessions() bool { return k.snaps != nil }

// Name implements pool.Kind.
func (k *Kind) Name() string { return "wasm" }

// MaxMemoryBytes implements pool.Kind.
func (k *Kind) MaxMemoryBytes() int64 { return MaxMemoryBytes }

// Prepare checks the runtime and fills the compilation cache. The trusted
// step that writes native code to the cache runs before any worker, so
// workers only read it.
func (k *Kind) Prepare(ctx context.Context) error {
	for _, f := range []string{"python.wasm", "lib/python3.13/os.py"} {
		if _, err := os.Stat(filepath.Join(k.cfg.RuntimeDir, f)); err != nil {
			return fmt.Errorf("%w at %s (%v): build it with `make runtime` (runtime/build-python-wasi.sh)",
				ErrRuntimeMissing, k.cfg.RuntimeDir, err)
		}
	}
	wc := k.cfg.WorkerCommand
	pre := exec.CommandContext(ctx, wc[0], append(append([]string(nil), wc[1:]...), "precompile", k.cfg.RuntimeDir, k.cfg.CacheDir)...)
	pre.Env = []string{}
	if out, err := pre.CombinedOutput(); err != nil {
		return fmt.Errorf("precompile python.wasm: %w: %s", err, out)
	}
	if !k.cfg.ColdStart {
		s, err := newSnapshots(k.cfg, k.log)
		if err != nil {
			return err
		}
		// Each snapshot taken (or reused) goes up to Bases at once, in
		// the background: the first checkpoint over it finds it there.
		s.onUse = k.publishBase
		switch err := s.start(ctx, k.cfg.ReuseSnapshot); {
		case err == nil:
			k.snaps = s
		case k.cfg.ReuseSnapshot && (errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS)):
			// A one-shot run (extproc exec) in a read-only image with no
			// snapshot to reuse: a snapshot for one session would cost
			// more than it saves, so this one starts cold.
			k.log.Info("no snapshot to reuse and none can be written; starting cold", zap.Error(err))
		default:
			return err
		}
	}
	k.spawner = newSpawner()
	return nil
}

// SnapshotDir is the snapshot new sessions start from ("" with ColdStart).
func (k *Kind) SnapshotDir() string {
	if k.snaps == nil {
		return ""
	}
	return k.snaps.Current()
}

// countSession counts a session starting and returns its snapshot.
func (k *Kind) countSession() string {
	if k.snaps == nil {
		return ""
	}
	return k.snaps.session(k.ctx)
}

// Close stops the spawning thread (every worker it started gets its
// parent-death signal, though the pool has reaped them all by now).
func (k *Kind) Close() error {
	// Under publishMu: an upload starts (uploads.Add) only while ctx is
	// live, so none starts once uploads.Wait may have begun.
	k.publishMu.Lock()
	k.cancel()
	k.publishMu.Unlock()
	if k.snaps != nil {
		k.snaps.wg.Wait()
	}
	k.uploads.Wait()
	if k.spawner != nil {
		k.spawner.stop()
	}
	return nil
}
