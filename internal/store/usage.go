package store

import (
	"context"
	"time"
)

// Usage accounts what each owner used of the code interpreter, for the
// caller's own GET /v1/organization/usage/code_interpreter_sessions and
// the operator's view of all owners. Counts are kept per minute for
// UsageMinutesKept and per hour for UsageHoursKept.
type Usage interface {
	// Add adds d to owner's usage in the minute (and hour) of at.
	Add(ctx context.Context, owner string, at time.Time, d UsageDelta) error
	// Buckets returns owner's usage summed per width (time.Minute, Hour,
	// or 24*Hour; buckets start at multiples of width since the Unix
	// epoch, UTC) for the buckets that start in [from, to), ascending,
	// those with no usage left out. Minutes older than UsageMinutesKept
	// and hours older than UsageHoursKept count as none.
	Buckets(ctx context.Context, owner string, from, to time.Time, width time.Duration) ([]UsageBucket, error)
	// Owners returns every owner's usage in the hours that start in
	// [from, to), by owner: the operator's view.
	Owners(ctx context.Context, from, to time.Time) (map[string]UsageDelta, error)
}

// UsageDelta is an amount of usage.
type UsageDelta struct {
	// Sessions are containers made (OpenAI bills a code interpreter
	// session per container), SessionsByMemory the same by memory_limit.
	Sessions         int64
	SessionsByMemory map[string]int64
	// Runs are code runs, RunMillis their wall time.
	Runs      int64
	RunMillis int64
	// EgressBytes are what sessions' network_policy connections carried.
	EgressBytes int64
}

// Plus is d and e together.
func (d UsageDelta) Plus(e UsageDelta) UsageDelta {
	out := UsageDelta{Sessions: d.Sessions + e.Sessions, Runs: d.Runs + e.Runs, RunMillis: d.RunMillis + e.RunMillis,
		EgressBytes: d.EgressBytes + e.EgressBytes}
	for _, m := range []map[string]int64{d.SessionsByMemory, e.SessionsByMemory} {
		for k, v := range m {
			if out.SessionsByMemory == nil {
				out.SessionsByMemory = map[string]int64{}
			}
			out.SessionsByMemory[k] += v
		}
	}
	return out
}

// UsageBucket is the usage of one time bucket.
type UsageBucket struct {
	Start time.Time
	UsageDelta
}

// How long usage is kept, per minute and per hour.
const (
	UsageMinutesKept = 25 * time.Hour
	UsageHoursKept   = 32 * 24 * time.Hour
)

// UsageGranule is the granule Buckets reads for width: minutes for
// minute buckets, hours for the rest.
func UsageGranule(width time.Duration) time.Duration {
	if width < time.Hour {
		return time.Minute
	}
	return time.Hour
}
