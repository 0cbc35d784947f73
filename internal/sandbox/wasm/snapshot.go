package wasm

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/sandbox/internal/rotation"
	"github.com/codeinterp/codeinterp/internal/sandbox/internal/spawn"
	"github.com/codeinterp/codeinterp/internal/sandbox/worker"
)

// snapshots keeps the kind's current snapshot and rotates it: a new one
// (with a new hash seed) at each start and after every RotateSessions
// sessions. Snapshots live under root/<runtime key>/, one directory each;
// the current and the previous one are kept (a worker being started may
// still be opening the previous one), older ones are removed.
type snapshots struct {
	cmd        []string // the worker command
	runtimeDir string
	cacheDir   string
	root       string // CacheDir/snapshots/<runtime key>
	rotation   *rotation.Counter
	log        *zap.Logger
	// onUse, when set, is told each snapshot as it becomes current (at
	// start and at each rotation), before any session starts from it.
	onUse func(dir string)

	mu       sync.Mutex
	current  string
	packages []string
	wg       sync.WaitGroup // a rotation under way
}

// runtimeKey names a runtime plus its package set and the snapshot recipe:
// a snapshot is only ever used with the exact reactor, packages and init
// program it was taken with.
func runtimeKey(runtimeDir string) (string, error) {
	h := sha256.New()
	h.Write([]byte(worker.SnapshotRecipe()))
	for _, f := range []string{worker.ReactorFile, "PACKAGES"} {
		fh, err := os.Open(filepath.Join(runtimeDir, f))
		if err != nil {
			return "", fmt.Errorf("%w: %v: rebuild it with `make runtime` (runtime/build-python-wasi.sh)", ErrRuntimeMissing, err)
		}
		_, err = io.Copy(h, fh)
		fh.Close()
		if err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

func newSnapshots(cfg Config, log *zap.Logger) (*snapshots, error) {
	key, err := runtimeKey(cfg.RuntimeDir)
	if err != nil {
		return nil, err
	}
	root := cfg.SnapshotDir
	if root == "" {
		root = filepath.Join(cfg.CacheDir, "snapshots")
	}
	return &snapshots{
		cmd: cfg.WorkerCommand, runtimeDir: cfg.RuntimeDir, cacheDir: cfg.CacheDir,
		root: filepath.Join(root, key), rotation: rotation.New(cfg.SnapshotRotateSessions), log: log,
	}, nil
}

// take runs the trusted snapshot step in its own process (it runs no user
// code; the pool's workers only ever read its output) and returns the new
// snapshot's directory.
func (s *snapshots) take(ctx context.Context, background bool) (string, error) {
	if err := os.MkdirAll(s.root, 0o700); err != nil {
		return "", err
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	dir := filepath.Join(s.root, fmt.Sprintf("%d-%s", time.Now().UnixNano(), hex.EncodeToString(b[:])))
	args := append(append([]string(nil), s.cmd[1:]...), "snapshot", s.runtimeDir, s.cacheDir, dir)
	c := exec.CommandContext(ctx, s.cmd[0], args...)
	c.Env = []string{}
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if background {
		c.SysProcAttr.Setpgid = true
	}
	started := time.Now()
	out := &tailBuffer{max: 8 << 10}
	c.Stdout, c.Stderr = out, out
	if err := c.Start(); err != nil {
		return "", fmt.Errorf("snapshot: %w", err)
	}
	if background {
		// A rotation must not slow live sessions down.
		_ = syscall.Setpriority(syscall.PRIO_PGRP, c.Process.Pid, spawn.BackgroundNice)
	}
	if err := c.Wait(); err != nil {
		return "", fmt.Errorf("snapshot: %w: %s", err, out.String())
	}
	s.log.Info("wasm snapshot taken", zap.String("dir", dir), zap.Duration("took", time.Since(started)))
	return dir, nil
}

// latest is the newest complete snapshot under root, "" if none.
func (s *snapshots) latest() string {
	ents, _ := os.ReadDir(s.root)
	var names []string
	for _, e := range ents {
		if _, err := os.Stat(filepath.Join(s.root, e.Name(), worker.SnapshotMetaFile)); err == nil {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return ""
	}
	sort.Slice(names, func(i, j int) bool { return olderName(names[i], names[j]) })
	return filepath.Join(s.root, names[len(names)-1])
}

// olderName orders "<unix nanos>-<random>" names by time.
func olderName(a, b string) bool {
	ta, _, _ := strings.Cut(a, "-")
	tb, _, _ := strings.Cut(b, "-")
	if len(ta) != len(tb) {
		return len(ta) < len(tb)
	}
	return ta < tb
}

// start makes the first snapshot: a new one, or with reuse the newest one
// already there (tests and `make setup` share it).
func (s *snapshots) start(ctx context.Context, reuse bool) error {
	dir := ""
	if reuse {
		dir = s.latest()
	}
	if dir == "" {
		var err error
		if dir, err = s.take(ctx, false); err != nil {
			return err
		}
	}
	return s.use(dir)
}

func (s *snapshots) use(dir string) error {
	meta, err := worker.ReadSnapshotMeta(dir)
	if err != nil {
		return err
	}
	if s.onUse != nil {
		s.onUse(dir)
	}
	s.mu.Lock()
	prev := s.current
	s.current, s.packages = dir, meta.Packages
	s.mu.Unlock()
	if prev != "" {
		s.prune(filepath.Base(prev))
	}
	return nil
}

// prune removes the snapshots older than keep (workers hold open
// descriptors of the files they restore from, so removal never disturbs a
// running one). Newer ones stay: another pool on the same cache may be
// writing one right now.
func (s *snapshots) prune(keep string) {
	ents, _ := os.ReadDir(s.root)
	for _, e := range ents {
		if olderName(e.Name(), keep) {
			_ = os.RemoveAll(filepath.Join(s.root, e.Name()))
		}
	}
}

// session returns the snapshot a new session starts from and counts it;
// the session that reaches the rotation count starts a new snapshot in
// the background (sessions go on from the current one meanwhile).
func (s *snapshots) session(ctx context.Context) string {
	if s.rotation.Session() {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			dir, err := s.take(ctx, true)
			if err == nil {
				err = s.use(dir)
			}
			if err != nil && ctx.Err() == nil {
				s.log.Error("rotating the wasm snapshot failed; sessions keep the current one", zap.Error(err))
			}
			s.rotation.Done(err == nil)
		}()
	}
	return s.Current()
}

// Packages are the package set's import names the snapshot imported.
func (s *snapshots) Packages() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.packages...)
}

// Current is the snapshot new sessions start from.
func (s *snapshots) Current() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current
}
