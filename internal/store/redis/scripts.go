package redis

import goredis "github.com/redis/go-redis/v9"

// The Lua scripts make every check-then-write one atomic step on the Redis
// server, so replicas sharing a Redis cannot both squeeze past a bound.
//
// Every script gets ARGV[1] = the owner's key prefix (prefix{owner}:),
// ARGV[2] = now in Unix milliseconds (the store's clock: expiry is the
// store's decision, TTLs are the backstop), ARGV[3] = Limits.ExpiredMemory
// and Limits.ExpiredKeep in milliseconds, "mem:keep". Keys are built from the owner prefix; all of an owner's
// keys share the {owner} hash tag, so they live in one Cluster slot.
//
// The "#!lua" shebang (Redis >= 7) makes Redis refuse a writing script as
// a whole when it is at maxmemory, before it runs a line: a full Redis
// never leaves a half-written file. The scripts that only free memory
// (deletes) and the touch (a few bytes) say allow-oom, so a full store can
// still be emptied and its containers used. The key layout is in doc.go.
const prelude = `
local kp = ARGV[1]
local now = tonumber(ARGV[2])
local memS, keepS = string.match(ARGV[3], '^(%d+):(%d+)$')
local mem, keep = tonumber(memS), tonumber(keepS)

local function int(x) return string.format('%.0f', x) end

local function dropFiles(cid)
  local cp = kp .. 'cp:' .. cid
  for _, id in ipairs(redis.call('HVALS', cp)) do redis.call('DEL', kp .. 'f:' .. id) end
  redis.call('DEL', cp, kp .. 'cl:' .. cid)
end

-- expiry of container cid (ms), or nil when it is unknown or forgotten.
local function containerExp(cid)
  local v = redis.call('HMGET', kp .. 'c:' .. cid, 'la', 'min')
  if not v[1] then return nil end
  local exp = (tonumber(v[1]) + tonumber(v[2]) * 60) * 1000
  if exp + mem <= now then return nil end
  return exp
end

-- expireAt sets key's TTL to end at the deadline at (ms); PEXPIRE of a
-- missing key does nothing.
local function expireAt(key, at)
  local ttl = at - now
  if ttl < 1 then ttl = 1 end
  redis.call('PEXPIRE', key, int(ttl))
end

-- refresh gives container cid's file keys the container's expiry.
local function refresh(cid, exp)
  local cp = kp .. 'cp:' .. cid
  for _, id in ipairs(redis.call('HVALS', cp)) do expireAt(kp .. 'f:' .. id, exp) end
  expireAt(cp, exp)
  expireAt(kp .. 'cl:' .. cid, exp)
end

-- reap applies expiry at now to the owner's usage entries (dropping what
-- has expired or vanished) and returns the usage the quotas bound. Its
-- work is bounded by the owner's live containers and files, which the
-- quotas bound.
local function reap()
  local st = {containers = 0, files = 0, bytes = 0, maxExp = 0, maxFileExp = 0, maxKeep = 0, forever = false, cbytes = {}, fbytes = {}, kbytes = {}}
  local live = redis.call('HGETALL', kp .. 'live')
  for i = 1, #live, 2 do
    local cid = live[i]
    local e, b = string.match(live[i + 1], '^(%d+):(%d+)$')
    e, b = tonumber(e), tonumber(b)
    local exists = redis.call('EXISTS', kp .. 'c:' .. cid) == 1
    if e <= now and exists and e + keep > now and e + mem > now then
      -- Expired, its files kept ExpiredKeep for ReviveContainer: they
      -- count against the owner's bytes, not its containers.
      redis.call('HDEL', kp .. 'live', cid)
      redis.call('HSET', kp .. 'kept', cid, int(e + keep) .. ':' .. int(b))
      refresh(cid, math.min(e + keep, e + mem))
    elseif e <= now or not exists then
      dropFiles(cid)
      redis.call('HDEL', kp .. 'live', cid)
    else
      st.containers = st.containers + 1
      st.bytes = st.bytes + b
      st.cbytes[cid] = b
      if e > st.maxExp then st.maxExp = e end
    end
  end
  local kept = redis.call('HGETALL', kp .. 'kept')
  for i = 1, #kept, 2 do
    local cid = kept[i]
    local u, b = string.match(kept[i + 1], '^(%d+):(%d+)$')
    u, b = tonumber(u), tonumber(b)
    if u <= now or redis.call('EXISTS', kp .. 'c:' .. cid) == 0 then
      dropFiles(cid)
      redis.call('HDEL', kp .. 'kept', cid)
    else
      st.bytes = st.bytes + b
      st.kbytes[cid] = b
      if u > st.maxKeep then st.maxKeep = u end
    end
  end
  local fl = redis.call('HGETALL', kp .. 'flive')
  for i = 1, #fl, 2 do
    local fid = fl[i]
    local e, b, ca = string.match(fl[i + 1], '^(%d+):(%d+):(%d+)$')
    e, b = tonumber(e), tonumber(b)
    if (e ~= 0 and e <= now) or redis.call('EXISTS', kp .. 'f:' .. fid) == 0 then
      redis.call('DEL', kp .. 'f:' .. fid)
      redis.call('ZREM', kp .. 'files', ca .. ':' .. fid)
      redis.call('HDEL', kp .. 'flive', fid)
    else
      st.files = st.files + 1
      st.bytes = st.bytes + b
      st.fbytes[fid] = {b, ca}
      if e == 0 then st.forever = true elseif e > st.maxFileExp then st.maxFileExp = e end
    end
  end
  return st
end

-- settle gives the owner's index keys the TTL of the longest-lived thing
-- they index, so an owner who never comes back leaves nothing behind.
local function settle(st)
  if st.containers > 0 then expireAt(kp .. 'live', st.maxExp) end
  if st.maxKeep > 0 then expireAt(kp .. 'kept', st.maxKeep) end
  expireAt(kp .. 'containers', math.max(st.maxExp, now) + mem)
  if st.forever then
    redis.call('PERSIST', kp .. 'files')
    redis.call('PERSIST', kp .. 'flive')
  elseif st.files > 0 then
    expireAt(kp .. 'files', st.maxFileExp)
    expireAt(kp .. 'flive', st.maxFileExp)
  end
end

`

func script(flags, body string) *goredis.Script {
	return goredis.NewScript("#!lua" + flags + "\n" + prelude + body)
}

// scripts are immutable once built; each Store builds its own set so the
// package has no mutable state.
type scripts struct {
	putContainer, touch, deleteContainer, putContainerFile, putAPIFile, deleteFile *goredis.Script
	readFile, ownerBytes                                                           *goredis.Script
}

func newScripts() scripts {
	return scripts{
		// One consistent read of a container (when ARGV[1] names one) and a
		// file. A script rather than MULTI because Redis refuses every
		// command queued in a MULTI when at maxmemory, and a full store
		// must still serve what it holds; no-writes lets it run then.
		// ARGV[1] container key or "", [2] file key, [3] "1" for the bytes.
		readFile: goredis.NewScript(`#!lua flags=no-writes
local c = {false, false}
if ARGV[1] ~= '' then c = redis.call('HMGET', ARGV[1], 'meta', 'la') end
local f
if ARGV[3] == '1' then
  f = redis.call('HMGET', ARGV[2], 'meta', 'cid', 'data')
else
  f = redis.call('HMGET', ARGV[2], 'meta', 'cid')
  f[3] = false
end
return {c[1], c[2], f[1], f[2], f[3]}
`),
		// What the owner holds, once what has expired is reaped.
		ownerBytes: script(" flags=allow-oom", `
local st = reap()
settle(st)
return {'ok', int(st.bytes)}
`),
		// ARGV[4] cid, [5] meta, [6] member, [7] la (s), [8] minutes, [9] max containers.
		putContainer: script("", `
local cid, meta, member = ARGV[4], ARGV[5], ARGV[6]
local exp = (tonumber(ARGV[7]) + tonumber(ARGV[8]) * 60) * 1000
local maxc = tonumber(ARGV[9])
local st = reap()
local ck = kp .. 'c:' .. cid
local wasLive = st.cbytes[cid] ~= nil
local isLive = exp > now
if isLive and not wasLive and maxc > 0 and st.containers >= maxc then
  return {'quota', 'owner_containers', ARGV[9]}
end
local old = redis.call('HGET', ck, 'm')
if old and old ~= member then redis.call('ZREM', kp .. 'containers', old) end
if not isLive or not wasLive then
  -- an expired container (before or after) has no files
  dropFiles(cid)
  redis.call('HDEL', kp .. 'live', cid)
  redis.call('HDEL', kp .. 'kept', cid)
end
if exp + mem <= now then
  redis.call('DEL', ck)
  redis.call('ZREM', kp .. 'containers', member)
  settle(st)
  return {'ok'}
end
redis.call('HSET', ck, 'meta', meta, 'la', ARGV[7], 'min', ARGV[8], 'm', member)
expireAt(ck, exp + mem)
redis.call('ZADD', kp .. 'containers', 0, member)
if isLive then
  redis.call('HSET', kp .. 'live', cid, int(exp) .. ':' .. int(st.cbytes[cid] or 0))
  refresh(cid, exp)
  if not wasLive then st.containers = st.containers + 1 end
  if exp > st.maxExp then st.maxExp = exp end
end
settle(st)
return {'ok'}
`),
		// ARGV[4] cid, [5] new last_active_at (s), [6] max containers,
		// [7] "1" to revive. A live container is touched (its new expiry
		// counts from ARGV[5]; now is the touch's time); with [7], an
		// expired one whose files are kept is live again.
		touch: script(" flags=allow-oom", `
local cid = ARGV[4]
local maxc = tonumber(ARGV[6])
local st = reap()
local ck = kp .. 'c:' .. cid
local v = redis.call('HMGET', ck, 'meta', 'la', 'min')
if not v[1] then return {'notfound'} end
local exp = (tonumber(v[2]) + tonumber(v[3]) * 60) * 1000
if exp + mem <= now then return {'notfound'} end
local b = st.cbytes[cid]
if exp <= now or b == nil then
  b = st.kbytes[cid]
  if b == nil or ARGV[7] ~= '1' then return {'expired'} end
  if maxc > 0 and st.containers >= maxc then return {'quota', 'owner_containers', ARGV[6]} end
  redis.call('HDEL', kp .. 'kept', cid)
  st.containers = st.containers + 1
end
local nexp = (tonumber(ARGV[5]) + tonumber(v[3]) * 60) * 1000
redis.call('HSET', ck, 'la', ARGV[5])
expireAt(ck, nexp + mem)
redis.call('HSET', kp .. 'live', cid, int(nexp) .. ':' .. int(b))
refresh(cid, nexp)
if nexp > st.maxExp then st.maxExp = nexp end
settle(st)
return {'ok', v[1]}
`),
		// ARGV[4] cid.
		deleteContainer: script(" flags=allow-oom", `
local cid = ARGV[4]
local ck = kp .. 'c:' .. cid
local m = redis.call('HGET', ck, 'm')
local known = containerExp(cid) ~= nil
if m then
  redis.call('DEL', ck)
  redis.call('ZREM', kp .. 'containers', m)
end
redis.call('HDEL', kp .. 'live', cid)
redis.call('HDEL', kp .. 'kept', cid)
dropFiles(cid)
settle(reap())
if not known then return {'notfound'} end
return {'ok'}
`),
		// ARGV[4] cid, [5] fid, [6] path, [7] meta, [8] data, [9] size,
		// [10] member, [11] the file id expected at path ("" none),
		// [12] max container bytes, [13] max container files, [14] max owner bytes,
		// [15] the data directory (/mnt/data) the paths are below.
		putContainerFile: script("", `
local cid, fid, path = ARGV[4], ARGV[5], ARGV[6]
local size = tonumber(ARGV[9])
local maxcb, maxcf, maxob = tonumber(ARGV[12]), tonumber(ARGV[13]), tonumber(ARGV[14])
local st = reap()
local exp = containerExp(cid)
if not exp then return {'notfound'} end
if exp <= now or st.cbytes[cid] == nil then return {'expired'} end
local cp = kp .. 'cp:' .. cid
local cur = redis.call('HGET', cp, path)
if (cur or '') ~= ARGV[11] then return {'retry'} end
local fk = kp .. 'f:' .. fid
local oldSize = 0
if cur then
  oldSize = tonumber(redis.call('HGET', fk, 'size')) or 0
elseif redis.call('EXISTS', fk) == 1 then
  return {'taken'}
else
  -- A container's paths form a tree: no file at a parent's place, none
  -- below the new path (the container's files are bounded by its quota).
  local i = #ARGV[15] + 2
  while true do
    local j = string.find(path, '/', i, true)
    if not j then break end
    local parent = string.sub(path, 1, j - 1)
    if redis.call('HEXISTS', cp, parent) == 1 then return {'conflict', parent} end
    i = j + 1
  end
  local below = path .. '/'
  for _, p in ipairs(redis.call('HKEYS', cp)) do
    if string.sub(p, 1, #below) == below then return {'conflict', p} end
  end
end
local delta = size - oldSize
local cb = st.cbytes[cid]
if maxcb > 0 and cb + delta > maxcb then return {'quota', 'container_bytes', ARGV[12]} end
if not cur and maxcf > 0 and redis.call('HLEN', cp) >= maxcf then return {'quota', 'container_files', ARGV[13]} end
if maxob > 0 and st.bytes + delta > maxob then return {'quota', 'owner_bytes', ARGV[14]} end
redis.call('HSET', fk, 'meta', ARGV[7], 'data', ARGV[8], 'size', ARGV[9], 'path', path, 'cid', cid, 'm', ARGV[10])
expireAt(fk, exp)
redis.call('HSET', cp, path, fid)
expireAt(cp, exp)
redis.call('ZADD', kp .. 'cl:' .. cid, 0, ARGV[10])
expireAt(kp .. 'cl:' .. cid, exp)
redis.call('HSET', kp .. 'live', cid, int(exp) .. ':' .. int(cb + delta))
settle(st)
return {'ok'}
`),
		// ARGV[4] fid, [5] meta, [6] data, [7] size, [8] member,
		// [9] created_at (20 digits), [10] expiry (ms; 0 never),
		// [11] max owner files, [12] max owner bytes.
		putAPIFile: script("", `
local fid = ARGV[4]
local size, exp = tonumber(ARGV[7]), tonumber(ARGV[10])
local maxof, maxob = tonumber(ARGV[11]), tonumber(ARGV[12])
local st = reap()
local fk = kp .. 'f:' .. fid
local old = st.fbytes[fid]
if not old and redis.call('EXISTS', fk) == 1 then return {'taken'} end
local delta = size - (old and old[1] or 0)
if not old and maxof > 0 and st.files >= maxof then return {'quota', 'owner_files', ARGV[11]} end
if maxob > 0 and st.bytes + delta > maxob then return {'quota', 'owner_bytes', ARGV[12]} end
if old then redis.call('ZREM', kp .. 'files', old[2] .. ':' .. fid) end
if exp ~= 0 and exp <= now then
  -- born expired: nothing to keep
  redis.call('DEL', fk)
  redis.call('HDEL', kp .. 'flive', fid)
  settle(st)
  return {'ok'}
end
redis.call('HSET', fk, 'meta', ARGV[5], 'data', ARGV[6], 'size', ARGV[7], 'path', '', 'cid', '', 'm', ARGV[8])
if exp == 0 then
  redis.call('PERSIST', fk)
  st.forever = true
else
  expireAt(fk, exp)
  if exp > st.maxFileExp then st.maxFileExp = exp end
end
redis.call('ZADD', kp .. 'files', 0, ARGV[8])
redis.call('HSET', kp .. 'flive', fid, ARGV[10] .. ':' .. ARGV[7] .. ':' .. ARGV[9])
if not old then st.files = st.files + 1 end
settle(st)
return {'ok'}
`),
		// ARGV[4] cid ("" for a Files API file), [5] fid.
		deleteFile: script(" flags=allow-oom", `
local cid, fid = ARGV[4], ARGV[5]
local st = reap()
local fk = kp .. 'f:' .. fid
if cid == '' then
  local old = st.fbytes[fid]
  if not old then return {'notfound'} end
  redis.call('DEL', fk)
  redis.call('ZREM', kp .. 'files', old[2] .. ':' .. fid)
  redis.call('HDEL', kp .. 'flive', fid)
  settle(st)
  return {'ok'}
end
local exp = containerExp(cid)
if not exp then return {'notfound'} end
if exp <= now or st.cbytes[cid] == nil then return {'expired'} end
local f = redis.call('HMGET', fk, 'cid', 'path', 'size', 'm')
if f[1] ~= cid then return {'notfound'} end
redis.call('DEL', fk)
redis.call('HDEL', kp .. 'cp:' .. cid, f[2])
redis.call('ZREM', kp .. 'cl:' .. cid, f[4])
redis.call('HSET', kp .. 'live', cid, int(exp) .. ':' .. int(st.cbytes[cid] - tonumber(f[3])))
settle(st)
return {'ok'}
`),
	}
}
