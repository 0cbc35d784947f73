package main

import (
	"github.com/codeinterp/codeinterp/internal/telemetry"

	"context"
	"fmt"
	"os"

	"go.uber.org/zap"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/codeinterp/codeinterp/internal/config"
	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/sandbox/gvisor"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
	"github.com/codeinterp/codeinterp/internal/sandbox/wasm"
)

// newProvider starts the pool of the configured sandbox provider. self is
// this binary, re-executed for the hidden worker and launcher commands.
// oneShot (extproc exec: one session, the operator's own code) starts
// from the newest snapshot already taken, when there is one, rather than
// spending seconds on a new one for a single run.
//
// eg is the egress proxy of sessions with a network_policy allowlist (nil:
// none has a network); only the gVisor provider uses it. bases keeps the
// wasm snapshots that container checkpoints are taken over (nil: none).
// origin is what the gVisor provider's session checkpoints are bound to
// (runsc, the root and the kernel, known once it is prepared); "" for
// wasm, whose origin is known before (worker.Fingerprint).
// egressUsed, when set, accounts each session's egress bytes to its owner.
func newProvider(ctx context.Context, cfg *config.Config, self string, oneShot bool, eg *egress.Proxy, caPEM []byte, egressUsed func(string, int64), bases wasm.Bases, log *zap.Logger) (p *pool.Pool, origin string, err error) {
	switch cfg.Sandbox.Provider {
	case config.ProviderWASM:
		if err := resolvePaths(cfg, os.LookupEnv); err != nil {
			return nil, "", err
		}
		wc := wasmConfig(cfg, wasmWorkerCommand(self, log))
		wc.ReuseSnapshot = oneShot
		wc.Bases = bases
		p, err := wasm.New(ctx, wc, log)
		return p, "", err
	case config.ProviderGVisor:
		return newGVisor(ctx, cfg, self, eg, caPEM, egressUsed, log)
	}
	return nil, "", fmt.Errorf("sandbox.provider: %q is not one of wasm, gvisor", cfg.Sandbox.Provider)
}

// newGVisor starts a pool of gVisor sandboxes. It fails closed when runsc
// or the Python packages are missing, saying what to install.
func newGVisor(ctx context.Context, cfg *config.Config, self string, eg *egress.Proxy, caPEM []byte, egressUsed func(string, int64), log *zap.Logger) (*pool.Pool, string, error) {
	gc := gvisorConfig(cfg, self)
	pc := poolConfig(cfg)
	if eg != nil {
		gc.ExtraCAPEM = caPEM
		pc.Egress, pc.EgressUsed = eg, egressUsed
	}
	k, err := gvisor.New(gc, log)
	if err != nil {
		return nil, "", err
	}
	p, err := pool.New(ctx, pc, k, log)
	if err != nil || !k.RestoresSessions() {
		return p, "", err
	}
	origin, err := k.CheckpointOrigin()
	if err != nil {
		_ = p.Close()
		return nil, "", err
	}
	return p, origin, nil
}

// newEgress starts the egress proxy when sandbox.network.allowed_domains
// is set (config validation has made sure the provider is gVisor), its
// metrics on reg; nil when the feature is off.
func newEgress(cfg *config.Config, reg prometheus.Registerer, tel *telemetry.Telemetry, log *zap.Logger) (*egress.Proxy, []byte, error) {
	if !cfg.Sandbox.Network.Enabled() || cfg.Sandbox.Provider != config.ProviderGVisor {
		return nil, nil, nil
	}
	ec, caPEM, err := egressConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	if tel.Enabled {
		ec.Tracer = tel.Tracer("egress")
	}
	p, err := egress.New(ec, log, reg)
	return p, caPEM, err
}
