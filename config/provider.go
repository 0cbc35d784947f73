package config

// The limits a gVisor sandbox needs, measured on a 2-core machine
// (sandbox/gvisor's Recommended* constants): CPython with numpy, pandas and
// matplotlib imported holds ~150 MiB, runsc's gofer and sentry ~90 MiB
// more, and an idle sandbox already has ~80 host threads.
const (
	gvisorGuestMemory    = 1 * GiB
	gvisorMaxGuestMemory = 4 * GiB
	gvisorWorkerOverhead = 256 * MiB
	gvisorMaxMemoryLimit = 4 * GiB
	gvisorPids           = 512
)

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
}
