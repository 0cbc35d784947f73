package config

import "time"

// The limits a gVisor sandbox needs, measured on a 2-core machine: CPython
// with numpy, pandas and matplotlib imported holds ~150 MiB, runsc's gofer
// and sentry ~90 MiB more, and an idle sandbox already has ~80 host
// threads. sandbox/gvisor's Recommended* constants say the same for the
// package's own use; cmd/extproc's tests check that they agree.
const (
	GVisorGuestMemory    = 1 * GiB
	GVisorMaxGuestMemory = 4 * GiB
	GVisorWorkerOverhead = 256 * MiB
	GVisorPids           = 512
	// GVisorOverheadCPUs is the CPU quota the pool adds to
	// sandbox.limits.cpus for gVisor's sentry (not a setting: it is what
	// the sentry needs whatever the code is allowed).
	GVisorOverheadCPUs = 1.0
)

// GVisorPlatforms are sandbox.gvisor.platform's values (runsc's
// --platform; sandbox/gvisor's Platforms, checked equal by cmd/extproc).
var GVisorPlatforms = []string{"systrap", "ptrace", "kvm"}

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
		l.GuestMemory = GVisorGuestMemory
	}
	if l.MaxGuestMemory == dl.MaxGuestMemory {
		l.MaxGuestMemory = GVisorMaxGuestMemory
	}
	if l.WorkerOverhead == dl.WorkerOverhead {
		l.WorkerOverhead = GVisorWorkerOverhead
	}
	if l.Pids == dl.Pids {
		l.Pids = GVisorPids
	}
	if c.Interceptor.MaxMemoryLimit == d.Interceptor.MaxMemoryLimit && l.MaxGuestMemory >= GVisorMaxGuestMemory {
		c.Interceptor.MaxMemoryLimit = GVisorMaxGuestMemory
	}
	// A gVisor checkpoint is the whole sandbox (~16 MB compressed, ~1 s):
	// taken after 10 s idle, not 2.
	if c.Checkpoints.After == d.Checkpoints.After {
		c.Checkpoints.After = gvisorCheckpointAfter
	}
}

// gvisorCheckpointAfter is checkpoints.after's gVisor default.
const gvisorCheckpointAfter = 10 * time.Second
