// Package redis is the store.Store for several replicas: containers,
// files and their bytes live in one Redis (>= 7.0; Debian 12's
// redis-server), so any replica can serve the API and run code in any
// container.
//
// # Keys
//
// Every key starts with the prefix (DefaultPrefix, "codeinterp:", or
// WithPrefix) and the owner as a hash tag, P{owner}:, so one Redis can be
// shared, an owner's keys sit in one Cluster slot, and a lookup under
// another owner builds another key: isolation by construction. Per owner:
//
//	c:<cid>      hash  meta (Container JSON), la (last_active_at), min, m   TTL expiry + ExpiredMemory
//	cp:<cid>     hash  path → file id (replacement keeps the id)            TTL expiry
//	cl:<cid>     zset  members of the container's files (listing)           TTL expiry
//	f:<fid>      hash  meta (File JSON), data (bytes), size, path, cid, m    TTL container expiry / file ExpiresAt
//	containers   zset  members of the owner's containers (listing)          TTL max(expiry) + ExpiredMemory
//	live         hash  cid → "expiry_ms:bytes": the containers that count    TTL max(expiry)
//	kept         hash  cid → "keep_until_ms:bytes": expired, files kept      TTL max(keep_until)
//	files        zset  members of the owner's Files API files (listing)      TTL max(ExpiresAt)
//	flive        hash  fid → "expiry_ms:bytes:created": the files that count TTL max(ExpiresAt)
//
// A member is "<created_at as 20 digits>:<id>" with score 0: ZRANGE BYLEX
// orders by (created_at, id) in both directions and the last member seen
// is an exact cursor (no offsets, so concurrent writes neither skip nor
// repeat items). Touching a container refreshes the TTLs of its c:, cp:,
// cl: and every f: key.
//
// Stored responses (Responses, a store.Responses) keep their own keys
// under the same owner prefix — resp:, respidx:, respitem: — laid out in
// Responses' doc. Conversations (Conversations, a store.Conversations)
// too, laid out in Conversations' doc; none of their keys has a TTL:
//
//	conv:<id>       hash  rec (id, owner, created_at), md (metadata), seq, bytes
//	convorder:<id>  zset  item id → sequence number (the append order)
//	convitems:<id>  hash  item id → "<Size>:<item record>"
//	convs           set   the owner's conversation ids (the count bound)
//
// # Expiry and quotas
//
// Expiry is the store's decision, taken against its injected clock (tests
// move it by hand); TTLs equal to the expiries are the backstop that frees
// the memory of owners who never come back. Usage for the quotas is
// derived from the live and flive hashes (summed in the script, bounded
// by the quotas), never from counters that a TTL could leave behind.
//
// Every write is one Lua script: it applies expiry, checks the quotas and
// writes, atomically on the Redis server, so two replicas cannot both
// squeeze past a bound. The scripts declare "#!lua" (Redis 7 script
// flags): at maxmemory Redis refuses a writing script before it runs, so
// nothing is half-written, and the store reports a *store.QuotaError with
// Limit store.LimitStoreMemory (wrapping Redis' own words). Deletes and
// touches are allowed at maxmemory, so a full store can still be used and
// emptied; reads are plain reads or a no-writes script.
//
// Tested against one redis-server (as the tests start it, see
// store/redis/redistest); Sentinel works through NewClient with a
// failover client; Redis Cluster is untested (the scripts touch keys they
// do not declare, all in the owner's slot).
package redis
