// Package memory is the default store.Store: everything in this process's
// memory, nothing to install — right for one replica (and for make demo).
// With several replicas use store/redis: each memory store sees only its
// own objects.
//
// One mutex guards maps keyed by owner, so another owner's objects are not
// merely filtered out but never looked at. Expiry is evaluated on every
// access against the injected clock, exactly: a container that has
// expired (LastActiveAt + ExpiresAfterMinutes) loses its files' bytes and
// stops counting against the owner's quotas the first time anything looks
// at it, and its record is kept for Limits.ExpiredMemory so GetContainer
// can still report it (callers answer "Container is expired."). A
// goroutine sweeps the whole store every SweepInterval so that memory held
// by owners who never come back is released too; Close stops it.
//
// Quotas are checked before any write, so a refused PutContainer or
// PutFile changes nothing. The work of a write is bounded by the owner's
// objects, which the quotas bound.
package memory
