package cluster

import (
	"context"
	"errors"
	"time"
)

// Lease is one key's holder.
type Lease struct {
	// Holder is the holding Node's ID.
	Holder string
	// Addr is where the holder takes forwarded runs (host:port).
	Addr string
	// Token is the lease's fencing token: every new holder of any key
	// gets a larger one; a holder renewing keeps its own.
	Token uint64
}

// Leases is the shared table of holders (redislease). Every method is
// atomic in the store.
type Leases interface {
	// Take makes self (Holder, Addr) the key's holder when no one holds
	// it, when self already does (renewing it, same token), or when it is
	// held with token prev exactly (prev > 0: a holder found gone). It
	// returns the lease in force afterwards: self's, or the other
	// holder's.
	Take(ctx context.Context, key string, self Lease, prev uint64, ttl time.Duration) (Lease, error)
	// Renew extends holder's lease on key held with token. Otherwise it
	// returns the lease in force (ok false: none), changing nothing.
	Renew(ctx context.Context, key, holder string, token uint64, ttl time.Duration) (l Lease, ok bool, err error)
	// Get returns the key's lease; ok is false when no one holds it.
	Get(ctx context.Context, key string) (l Lease, ok bool, err error)
	// Release ends holder's lease on key if it still holds it with token.
	Release(ctx context.Context, key, holder string, token uint64) error
}

// Errors of Forward, for callers to branch on (errors.Is).
var (
	// ErrGone: the lease's holder is not there (unreachable, or another
	// process answers at its address) or no longer holds the lease. The
	// run was not started; the caller may Steal the lease.
	ErrGone = errors.New("cluster: the holder is gone")
	// ErrDraining: the holder is shutting down and will release the
	// lease once its checkpoint is written; the caller waits and claims
	// again. The run was not started.
	ErrDraining = errors.New("cluster: the holder is draining")
	// ErrLost: the connection to the holder broke while the run was
	// there: whether it ran is not known.
	ErrLost = errors.New("cluster: the holder went away during the run")
)
