package config

import (
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
)

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
