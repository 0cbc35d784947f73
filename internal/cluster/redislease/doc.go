// Package redislease keeps cluster leases in Redis: one hash per key
// (token, holder, addr) with a TTL, changed only by Lua scripts, and one
// counter the fencing tokens come from. A Redis restarted without
// persistence forgets the leases: holders take theirs again on their
// next renewal (cluster.Node), with new tokens.
package redislease
