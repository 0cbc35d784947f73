package store

import (
	"context"
	"time"
)

// Background keeps, for every replica, what a background response
// (`"background": true`) needs beyond its stored record (Responses): the
// bound on how many run at once, the liveness of the replica running one,
// a cancel request that any replica may make, and — for one created with
// `"stream": true` — its events in order, so that a client that lost its
// connection resumes from any replica (GET /v1/responses/{id}?stream=true
// &starting_after=N).
//
// Keys are (owner, id): another owner's id is not found.
type Background interface {
	// Begin admits the background response id of owner while fewer than
	// perOwner of the owner's and total of all are running (a *QuotaError
	// for LimitBackgroundPerOwner or LimitBackgroundTotal otherwise). It
	// runs while renewed within ttl; keep is how long its events and state
	// are kept after End (or after it stopped being renewed).
	Begin(ctx context.Context, owner, id string, perOwner, total int, ttl, keep time.Duration) error
	// Renew says the runner is alive for another ttl. ok is false when the
	// response is no longer running (ended, or it lapsed).
	Renew(ctx context.Context, owner, id string, ttl time.Duration) (ok bool, err error)
	// End ends the run (idempotent): its slot is freed and its event log is
	// finished; readers get what is left and then done.
	End(ctx context.Context, owner, id string) error
	// Running reports whether the response is running and renewed within
	// its ttl: false for one whose runner ended, or died without ending.
	Running(ctx context.Context, owner, id string) (bool, error)

	// AppendEvent adds the event whose sequence_number is seq; seq counts
	// from 0 and rises by one. A response's log holds at most
	// BackgroundEventBytes (a *QuotaError past it; the run goes on, the
	// stream can no longer be resumed past that point).
	AppendEvent(ctx context.Context, owner, id string, seq int64, event []byte) error
	// Events returns the events whose sequence_number is above after, in
	// order. When there are none yet it waits up to wait (at most
	// BackgroundWait) for one. done is true when the log is finished and
	// nothing follows what it returned.
	// A response with no log is ErrNotFound; one whose log was forgotten
	// by BackgroundAllBytes is ErrEventsTrimmed. One call returns at most
	// BackgroundEventsPage events: a reader pages through a long log.
	Events(ctx context.Context, owner, id string, after int64, wait time.Duration) (events []Event, done bool, err error)

	// Cancel asks the runner to stop (idempotent); Cancelled reports it.
	Cancel(ctx context.Context, owner, id string) error
	Cancelled(ctx context.Context, owner, id string) (bool, error)

	// Settle records how the run ended (a response status: "completed",
	// "cancelled", "failed"…), compare-and-set: the first status given
	// wins, and every call returns the winner — whoever stores the
	// response's end (its runner, a cancel, a replica that found the run
	// dead) stores that one. A response with no run is ErrNotFound.
	Settle(ctx context.Context, owner, id, status string) (won string, err error)
}

// Event is one server-sent event of a background response, as written on
// the stream (its `data:` JSON).
type Event struct {
	Seq  int64
	Data []byte
}

// BackgroundEventBytes bounds one response's event log.
const BackgroundEventBytes = 64 << 20

// BackgroundAllBytes bounds the event logs one store holds, all owners'
// together: past it the logs of runs that ended longest ago are forgotten
// first (Events then is ErrEventsTrimmed); when only running logs are
// left, an append past it is a *QuotaError, as past BackgroundEventBytes.
const BackgroundAllBytes = 256 << 20

// BackgroundReaders is how many Events calls one replica has waiting at
// once: the Redis store keeps that many connections for them, apart from
// the ones every other call uses (so that waiting readers never hold up a
// Renew), and the API serves no more resumed streams by default.
const BackgroundReaders = 128

// BackgroundWait bounds how long one Events call waits (a shared store
// holds a connection for it): a reader that wants to wait longer calls
// again.
const BackgroundWait = 5 * time.Second

// BackgroundEventsPage bounds the events one Events call returns (one
// store round trip reads no more).
const BackgroundEventsPage = 256

// Background QuotaError limits.
const (
	LimitBackgroundPerOwner = "background_per_owner"
	LimitBackgroundTotal    = "background_total"
	LimitBackgroundEvents   = "background_events"
)
