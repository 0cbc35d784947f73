package main

import (
	"context"
	"fmt"
	"os"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/config"
	"github.com/codeinterp/codeinterp/sandbox/gvisor"
	"github.com/codeinterp/codeinterp/sandbox/pool"
	"github.com/codeinterp/codeinterp/sandbox/wasm"
)

// newProvider starts the pool of the configured sandbox provider. self is
// this binary, re-executed for the hidden worker and launcher commands.
// oneShot (extproc exec: one session, the operator's own code) starts
// from the newest snapshot already taken, when there is one, rather than
// spending seconds on a new one for a single run.
func newProvider(ctx context.Context, cfg *config.Config, self string, oneShot bool, log *zap.Logger) (*pool.Pool, error) {
	switch cfg.Sandbox.Provider {
	case config.ProviderWASM:
		if err := cfg.ResolvePaths(os.LookupEnv); err != nil {
			return nil, err
		}
		wc := cfg.WASMConfig([]string{self, workerCommand})
		wc.ReuseSnapshot = oneShot
		return wasm.New(ctx, wc, log)
	case config.ProviderGVisor:
		return newGVisor(ctx, cfg, self, log)
	}
	return nil, fmt.Errorf("sandbox.provider: %q is not one of wasm, gvisor", cfg.Sandbox.Provider)
}

// gvisorConfig maps the sandbox section onto the gVisor provider's
// configuration.
func gvisorConfig(cfg *config.Config, self string) gvisor.Config {
	g := cfg.Sandbox.GVisor
	return gvisor.Config{
		RunscPath:       g.Runsc,
		Platform:        g.Platform,
		RootFS:          g.RootFS,
		PythonPath:      g.Python,
		StateDir:        g.StateDir,
		LauncherCommand: []string{self, launcherCommand},
		UID:             cfg.Sandbox.Isolation.UID,
		GID:             cfg.Sandbox.Isolation.GID,
		ImageMaxCount:   g.MaxImages,
		ImageMaxBytes:   int(g.MaxImageBytes),

		ColdStart:              !cfg.Sandbox.Snapshot,
		SnapshotRotateSessions: cfg.Sandbox.SnapshotRotateSessions,
		Limits:                 cfg.PoolConfig().Limits,
	}
}

// newGVisor starts a pool of gVisor sandboxes. It fails closed when runsc
// or the Python packages are missing, saying what to install.
func newGVisor(ctx context.Context, cfg *config.Config, self string, log *zap.Logger) (*pool.Pool, error) {
	k, err := gvisor.New(gvisorConfig(cfg, self), log)
	if err != nil {
		return nil, err
	}
	return pool.New(ctx, cfg.PoolConfig(), k, log)
}
