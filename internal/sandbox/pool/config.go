package pool

import (
	"errors"
	"fmt"
	"time"

	"github.com/codeinterp/codeinterp/internal/egress"
)

// Config is what the pool needs whatever the kind of interpreter; start
// from DefaultConfig (or a kind's own defaults).
type Config struct {
	MaxSessions int           // sessions open at once
	WarmWorkers int           // interpreters kept started and waiting
	QueueWait   time.Duration // how long Open waits for capacity
	// SessionsPerWorker is how many sessions one interpreter process may
	// serve in turn, each a fresh interpreter (kinds that implement
	// Recycler only). 1, the default, is one process per session.
	// Sessions of different owners never share a process.
	SessionsPerWorker int

	Limits    Limits
	Isolation Isolation
	// Egress is the proxy sessions with a network allowlist reach
	// (sandbox.SessionOptions.Network); nil or not Enabled: no session
	// has a network. Only a kind whose Environment().Network is set
	// (gVisor) can use it. The pool opens one egress.Session per session,
	// so its byte and connection budgets span every interpreter the
	// session has, and closes it with the session.
	Egress *egress.Proxy
	// EgressUsed, when set, is told the bytes each closed session's egress
	// carried (both directions), with the session's owner: its usage.
	EgressUsed func(owner string, bytes int64) `json:"-"`
}

// Limits bound what one run or session may use.
type Limits struct {
	SourceBytes         int           // size of one program
	RunTimeout          time.Duration // wall time of one run
	GuestMemoryBytes    int64         // a session's memory unless it asks (wasm linear memory, gVisor sandbox)
	MaxGuestMemoryBytes int64         // the most a session may ask for
	WorkerOverheadBytes int64         // cgroup memory = session memory + this
	StdoutBytes         int           // kept per run; more is dropped and marked
	StderrBytes         int
	ScratchBytes        int64   // in-memory /tmp and /mnt/data per session
	Pids                int64   // cgroup pids.max per worker
	CPUs                float64 // cgroup CPU quota per worker, in cores: what the code may use
	// WorkerOverheadCPUs is added to CPUs in the cgroup's quota: the
	// interpreter's own machinery that runs beside the code (gVisor's
	// sentry serves each system call while the code's thread waits
	// spinning for it; on systrap both are on a core during the handoff).
	WorkerOverheadCPUs float64
	// CheckpointBytes bounds one session checkpoint (checkpoints.max_bytes;
	// 0: only the kind's own bound). The kind enforces it while it writes
	// the state, so that no more than that is ever held: a larger state
	// is refused with an error wrapping sandbox.ErrNoCheckpoint and
	// sandbox.ErrTooLarge, and the session goes on.
	CheckpointBytes int64
}

// Isolation says how workers are confined.
type Isolation struct {
	// Cgroup is "auto" (v2 if the unified hierarchy has the controllers,
	// else v1), "v1", "v2", or "off" (laptops only: logs a warning).
	Cgroup string
	// CgroupParent is the parent cgroup path under which a group per
	// worker is made, e.g. "/codeinterp".
	CgroupParent string
	// UID and GID the interpreter runs as when the server runs as root.
	UID, GID uint32
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		MaxSessions:       8,
		WarmWorkers:       2,
		QueueWait:         2 * time.Second,
		SessionsPerWorker: 1,
		Limits: Limits{
			SourceBytes:         256 << 10,
			RunTimeout:          30 * time.Second,
			GuestMemoryBytes:    256 << 20,
			MaxGuestMemoryBytes: 1 << 30,
			WorkerOverheadBytes: 192 << 20,
			StdoutBytes:         64 << 10,
			StderrBytes:         64 << 10,
			ScratchBytes:        32 << 20,
			Pids:                64,
			CPUs:                1,
		},
		Isolation: Isolation{Cgroup: "auto", CgroupParent: "/codeinterp", UID: 65534, GID: 65534},
	}
}

// Validate reports the first invalid field by name.
func (c Config) Validate() error {
	var errs []error
	check := func(ok bool, field, why string) {
		if !ok {
			errs = append(errs, fmt.Errorf("%s: %s", field, why))
		}
	}
	check(c.MaxSessions > 0, "max_sessions", "must be positive")
	check(c.WarmWorkers >= 0 && c.WarmWorkers <= c.MaxSessions, "warm_workers", "must be between 0 and max_sessions")
	check(c.QueueWait >= 0, "queue_wait", "must not be negative")
	check(c.SessionsPerWorker >= 1 && c.SessionsPerWorker <= 10000, "sessions_per_worker", "must be between 1 and 10000")
	l := c.Limits
	check(l.SourceBytes > 0, "limits.source_bytes", "must be positive")
	check(l.RunTimeout > 0, "limits.run_timeout", "must be positive")
	check(l.GuestMemoryBytes >= MinMemoryBytes, "limits.guest_memory", "must be at least 32MiB")
	check(l.MaxGuestMemoryBytes >= l.GuestMemoryBytes, "limits.max_guest_memory", "must be at least guest_memory")
	check(l.WorkerOverheadBytes >= 16<<20, "limits.worker_overhead", "must be at least 16MiB")
	check(l.WorkerOverheadCPUs >= 0, "limits.worker_overhead_cpus", "must not be negative")
	check(l.StdoutBytes > 0, "limits.stdout_bytes", "must be positive")
	check(l.StderrBytes > 0, "limits.stderr_bytes", "must be positive")
	check(l.ScratchBytes >= 0, "limits.scratch_bytes", "must not be negative")
	check(l.Pids > 0, "limits.pids", "must be positive")
	check(l.CPUs > 0, "limits.cpus", "must be positive")
	check(l.CheckpointBytes >= 0, "limits.checkpoint_bytes", "must not be negative")
	switch c.Isolation.Cgroup {
	case "auto", "v1", "v2", "off":
	default:
		errs = append(errs, fmt.Errorf("isolation.cgroup: %q is not one of auto, v1, v2, off", c.Isolation.Cgroup))
	}
	return errors.Join(errs...)
}
