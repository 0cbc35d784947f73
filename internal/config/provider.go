package config

import (
	"time"

	"github.com/codeinterp/codeinterp/internal/sandbox/gvisor"
)

// The limits a gVisor sandbox needs are sandbox/gvisor's Recommended*
// constants, measured on a 2-core machine: CPython with numpy, pandas and
// matplotlib imported holds ~150 MiB, runsc's gofer and sentry ~90 MiB
// more, and an idle sandbox already has ~80 host threads.
const (
	gvisorGuestMemory    = ByteSize(gvisor.RecommendedGuestMemoryBytes)
	gvisorMaxGuestMemory = ByteSize(gvisor.RecommendedMaxGuestMemoryBytes)
	gvisorWorkerOverhead = ByteSize(gvisor.RecommendedOverheadBytes)
	gvisorMaxMemoryLimit = ByteSize(gvisor.RecommendedMaxGuestMemoryBytes)
	gvisorPids           = gvisor.RecommendedPids
)

// workerOverheadCPUs is the CPU quota the pool adds to sandbox.limits.cpus
// for the provider's own machinery: gVisor's sentry (not a setting: it is
// what the sentry needs whatever the code is allowed).
func (c *Config) workerOverheadCPUs() float64 {
	if c.Sandbox.Provider == ProviderGVisor {
		return gvisor.RecommendedOverheadCPUs
	}
	return 0
}

// ApplyProviderDefaults gives a gVisor configuration the gVisor limits for
// every field still at the WASM provider's default, so that
// `sandbox.provider: gvisor` alone gives a working server. A field set to
// another value is left as the operator wrote it (and validated).
func (c *Config) ApplyProviderDefaults() {
	if c.Sandbox.Provider != ProviderGVisor {
		return
	}
	d := Default()
	l, dl := &c.Sandbox.Limits, d.Sandbox.Limits
	if l.GuestMemory == dl.GuestMemory {
		l.GuestMemory = gvisorGuestMemory
	}
	if l.MaxGuestMemory == dl.MaxGuestMemory {
		l.MaxGuestMemory = gvisorMaxGuestMemory
	}
	if l.WorkerOverhead == dl.WorkerOverhead {
		l.WorkerOverhead = gvisorWorkerOverhead
	}
	if l.Pids == dl.Pids {
		l.Pids = gvisorPids
	}
	if c.Interceptor.MaxMemoryLimit == d.Interceptor.MaxMemoryLimit && l.MaxGuestMemory >= gvisorMaxMemoryLimit {
		c.Interceptor.MaxMemoryLimit = gvisorMaxMemoryLimit
	}
	// A gVisor checkpoint is the whole sandbox (~16 MB compressed, ~1 s):
	// taken after 10 s idle, not 2.
	if c.Checkpoints.After == d.Checkpoints.After {
		c.Checkpoints.After = gvisorCheckpointAfter
	}
}

// gvisorCheckpointAfter is checkpoints.after's gVisor default.
const gvisorCheckpointAfter = 10 * time.Second
