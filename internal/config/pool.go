package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/codeinterp/codeinterp/internal/buildcache"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
	"github.com/codeinterp/codeinterp/internal/sandbox/wasm"
)

// WASMConfig maps the sandbox section onto the WASM provider's
// configuration. workerCommand is the server's own binary plus its hidden
// worker command. Call ResolvePaths first when runtime_dir or cache_dir are
// left empty.
func (c *Config) WASMConfig(workerCommand []string) wasm.Config {
	s := c.Sandbox
	return wasm.Config{
		Config:        c.PoolConfig(),
		RuntimeDir:    s.RuntimeDir,
		CacheDir:      s.CacheDir,
		WorkerCommand: append([]string(nil), workerCommand...),

		ColdStart:              !s.Snapshot,
		SnapshotRotateSessions: s.SnapshotRotateSessions,
		SnapshotDir:            s.SnapshotDir,
	}
}

// PoolConfig maps the sandbox section onto what the pool needs whatever the
// provider.
func (c *Config) PoolConfig() pool.Config {
	s := c.Sandbox
	l := s.Limits
	return pool.Config{
		MaxSessions:       s.MaxSessions,
		WarmWorkers:       s.WarmWorkers,
		SessionsPerWorker: s.SessionsPerWorker,
		QueueWait:         s.QueueWait,
		Limits: pool.Limits{
			SourceBytes:         int(l.SourceBytes),
			RunTimeout:          l.RunTimeout,
			GuestMemoryBytes:    int64(l.GuestMemory),
			MaxGuestMemoryBytes: int64(l.MaxGuestMemory),
			WorkerOverheadBytes: int64(l.WorkerOverhead),
			StdoutBytes:         int(l.StdoutBytes),
			StderrBytes:         int(l.StderrBytes),
			ScratchBytes:        int64(l.ScratchBytes),
			Pids:                l.Pids,
			CPUs:                l.CPUs,
			WorkerOverheadCPUs:  c.workerOverheadCPUs(),
		},
		Isolation: pool.Isolation{
			Cgroup:       s.Isolation.Cgroup,
			CgroupParent: s.Isolation.CgroupParent,
			UID:          s.Isolation.UID,
			GID:          s.Isolation.GID,
		},
	}
}

// RuntimePrefix is the name prefix of the build script's output
// directories (runtime/build-python-wasi.sh: cpython-<version>-<recipe hash>).
const RuntimePrefix = "cpython-" + wasm.RuntimeVersion + "-"

// ErrNoRuntime is matched by ResolvePaths errors when no CPython-WASI
// runtime can be found.
var ErrNoRuntime = errors.New("no CPython-WASI runtime found: build it with `make runtime` (runtime/build-python-wasi.sh) or set sandbox.runtime_dir")

// ResolvePaths fills an empty sandbox.runtime_dir and sandbox.cache_dir the
// way the build script lays them out, and checks that the runtime directory
// holds python.wasm. lookupEnv is os.LookupEnv outside tests.
//
//	runtime_dir: $CODEINTERP_RUNTIME_DIR if set (the build script writes
//	             there), else the most recently built complete (MANIFEST
//	             present) <cache root>/codeinterp/cpython-3.13.5-* directory;
//	cache_dir:   <cache root>/codeinterp/wazero;
//	cache root:  $XDG_CACHE_HOME, else $HOME/.cache.
func (c *Config) ResolvePaths(lookupEnv func(string) (string, bool)) error {
	s := &c.Sandbox
	root, rootErr := buildcache.Root(lookupEnv)
	if s.RuntimeDir == "" {
		if d, ok := lookupEnv("CODEINTERP_RUNTIME_DIR"); ok && d != "" {
			s.RuntimeDir = d
		} else if rootErr != nil {
			return fmt.Errorf("sandbox.runtime_dir: %v: %w", rootErr, ErrNoRuntime)
		} else {
			d, err := buildcache.Newest(root, RuntimePrefix)
			if err != nil {
				return fmt.Errorf("sandbox.runtime_dir: %v: %w", err, ErrNoRuntime)
			}
			s.RuntimeDir = d
		}
	}
	if _, err := os.Stat(filepath.Join(s.RuntimeDir, "python.wasm")); err != nil {
		return fmt.Errorf("sandbox.runtime_dir: %s has no python.wasm (%w): %w", s.RuntimeDir, err, ErrNoRuntime)
	}
	if s.CacheDir == "" {
		if rootErr != nil {
			return fmt.Errorf("sandbox.cache_dir: %v; set it explicitly", rootErr)
		}
		s.CacheDir = filepath.Join(root, "wazero")
	}
	return nil
}
