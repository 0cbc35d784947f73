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
	// gets a larger one; a holder renewing keeps its own. Tokens never
	// repeat, also after the store lost its data (redislease seeds its
	// counter from the store's clock): a checkpoint store that records
	// the largest token it saw refuses writes of older holders.
	Token uint64
}

// Leases is the shared table of holders (redislease). Every method is
// atomic in the store.
type Leases interface {
	// Take makes self (Holder, Addr) the key's holder when no one holds
	// it (never held, released, or expired by the store's clock), when
	// self already does (renewing it, same token), or when it is held
	// with token prev exactly (prev > 0: a holder proven gone). It
	// returns the lease in force afterwards: self's, or the other
	// holder's. It works when the store is full (it must: a container
	// whose lease cannot be taken cannot run at all).
	Take(ctx context.Context, key string, self Lease, prev uint64, ttl time.Duration) (Lease, error)
	// Renew extends holder's lease on key held with token. Otherwise it
	// returns the lease in force (ok false: none), changing nothing.
	Renew(ctx context.Context, key, holder string, token uint64, ttl time.Duration) (l Lease, ok bool, err error)
	// Get returns the key's lease; ok is false when no one holds it.
	Get(ctx context.Context, key string) (l Lease, ok bool, err error)
	// Release ends holder's lease on key if it still holds it with token.
	Release(ctx context.Context, key, holder string, token uint64) error
}

// Errors of Forward, for callers to branch on (errors.Is). None of them
// but ErrLost leaves a run's fate unknown: the others say it was not
// started.
var (
	// ErrGone: another process answers at the holder's address (the
	// holder restarted): proof that the lease's holder is gone. The
	// caller may Steal the lease.
	ErrGone = errors.New("cluster: the holder is gone")
	// ErrUnreachable: the holder could not be reached in time. That is
	// no proof it is gone — a paused or slow process, a partition, look
	// the same — so the caller waits for the holder or for its lease to
	// expire by the store's clock, and never steals on it.
	ErrUnreachable = errors.New("cluster: the holder could not be reached")
	// ErrMoved: the holder answered that it no longer holds the lease the
	// caller named (it lost or released it): the caller claims again.
	ErrMoved = errors.New("cluster: the holder no longer holds that lease")
	// ErrStoreUnavailable: the holder could not ask the lease store
	// whether it still holds the lease, so it refused to run (fencing
	// fails closed). The caller tries again later.
	ErrStoreUnavailable = errors.New("cluster: the holder could not reach the lease store")
	// ErrDraining: the holder is shutting down and will release the
	// lease once its checkpoint is written; the caller waits and claims
	// again.
	ErrDraining = errors.New("cluster: the holder is draining")
	// ErrLost: the connection to the holder broke while the run was
	// there: whether it ran is not known.
	ErrLost = errors.New("cluster: the holder went away during the run")
)
