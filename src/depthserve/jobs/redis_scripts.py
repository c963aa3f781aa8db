"""The Lua scripts of RedisJobStore: each state change, with its quota charge, is one atomic script.

Quota keys beside the job keys: `NS:usage` (hash: `active`, `bytes`, and `active:OWNER`,
`bytes:OWNER`; a field that falls to 0 is deleted), `NS:charges` (hash: job id -> "ACTIVE BYTES
OWNER", what the job holds now) and `NS:expiry` (sorted set: job id by the epoch second its record
expires). Redis expires a record's keys by itself, but it cannot give back the record's charge:
`sweep` does, for every job past its expiry, before a new job is checked against the limits.
The rules and the codes match jobs/quota.py; a limit of -1 means none. `NS:parts:ID` (list) holds a
result written piece by piece (video jobs), in order, charged as each piece lands.
"""

from __future__ import annotations

_PRELUDE = """
local function bump(usage, field, delta)
  if delta ~= 0 and redis.call('HINCRBY', usage, field, delta) <= 0 then redis.call('HDEL', usage, field) end
end
local function charge(usage, charges, job, owner, active, bytes)
  local old = redis.call('HGET', charges, job)
  local was_active, was_bytes = 0, 0
  if old then
    local a, b, o = string.match(old, '^(%d+) (%d+) (.*)$')
    was_active, was_bytes, owner = tonumber(a), tonumber(b), o
  elseif not owner then
    return
  end
  bump(usage, 'active', active - was_active)
  bump(usage, 'active:' .. owner, active - was_active)
  bump(usage, 'bytes', bytes - was_bytes)
  bump(usage, 'bytes:' .. owner, bytes - was_bytes)
  if active == 0 and bytes == 0 then
    redis.call('HDEL', charges, job)
  else
    redis.call('HSET', charges, job, string.format('%d %d %s', active, bytes, owner))
  end
end
local function sweep(usage, charges, expiry, queued, ns, now)
  local gone = redis.call('ZRANGEBYSCORE', expiry, '-inf', now, 'LIMIT', 0, 1000)
  for _, job in ipairs(gone) do
    charge(usage, charges, job, false, 0, 0)
    redis.call('DEL', ns .. 'job:' .. job, ns .. 'payload:' .. job, ns .. 'parts:' .. job)
    redis.call('ZREM', queued, job)
  end
  if #gone > 0 then redis.call('ZREM', expiry, unpack(gone)) end
end
local function usage_of(usage, owner)
  local v = redis.call('HMGET', usage, 'active:' .. owner, 'bytes:' .. owner, 'active', 'bytes')
  return tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0, tonumber(v[4]) or 0
end
local function over(limit, value)
  limit = tonumber(limit)
  return limit >= 0 and value > limit
end
"""

# KEYS: job, payload, idem ('' for none), queued, usage, charges, expiry
# ARGV: ttl_ms, id, created_at, payload, ns, owner, now, expires_at, 4 limits, record_bytes, fields...
CREATE = (
    _PRELUDE
    + """
sweep(KEYS[5], KEYS[6], KEYS[7], KEYS[4], ARGV[5], ARGV[7])
if KEYS[3] ~= '' then
  local known = redis.call('GET', KEYS[3])
  if known and redis.call('EXISTS', ARGV[5] .. 'job:' .. known) == 1 then return known end
end
local active, bytes, total_active, total_bytes = usage_of(KEYS[5], ARGV[6])
local cost = string.len(ARGV[4]) + tonumber(ARGV[13])
if over(ARGV[9], active + 1) then return 'quota:caller_active' end
if over(ARGV[11], bytes + cost) then return 'quota:caller_bytes' end
if over(ARGV[10], total_active + 1) then return 'quota:total_active' end
if over(ARGV[12], total_bytes + cost) then return 'quota:total_bytes' end
if KEYS[3] ~= '' then redis.call('SET', KEYS[3], ARGV[2], 'PX', ARGV[1]) end
redis.call('HSET', KEYS[1], unpack(ARGV, 14))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[1])
redis.call('ZADD', KEYS[4], ARGV[3], ARGV[2])
redis.call('ZADD', KEYS[7], ARGV[8], ARGV[2])
charge(KEYS[5], KEYS[6], ARGV[2], ARGV[6], 1, cost)
return ARGV[2]
"""
)
# KEYS: job, payload, idem, queued, usage, charges, expiry; ARGV: id
DISCARD = (
    _PRELUDE
    + """
if KEYS[3] ~= '' and redis.call('GET', KEYS[3]) == ARGV[1] then redis.call('DEL', KEYS[3]) end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('ZREM', KEYS[7], ARGV[1])
charge(KEYS[5], KEYS[6], ARGV[1], false, 0, 0)
return 1
"""
)
# KEYS: job, payload, queued, usage, charges; ARGV: now, max_attempts, id, error, stale_after_s, record_bytes
START = (
    _PRELUDE
    + """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {'skip', 0} end
if state == 'succeeded' or state == 'failed' or state == 'cancelled' then
  redis.call('ZREM', KEYS[3], ARGV[3])
  return {'skip', tonumber(redis.call('HGET', KEYS[1], 'attempts'))}
end
if state == 'running' then
  local beat = redis.call('HGET', KEYS[1], 'heartbeat_at') or redis.call('HGET', KEYS[1], 'started_at') or '0'
  if tonumber(ARGV[1]) - (tonumber(beat) or 0) < tonumber(ARGV[5]) then
    return {'busy', tonumber(redis.call('HGET', KEYS[1], 'attempts'))}
  end
end
local attempts = redis.call('HINCRBY', KEYS[1], 'attempts', 1)
redis.call('ZREM', KEYS[3], ARGV[3])
if attempts > tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[1], 'state', 'failed', 'finished_at', ARGV[1], 'error', ARGV[4], 'gave_up', '1')
  redis.call('DEL', KEYS[2])
  charge(KEYS[4], KEYS[5], ARGV[3], false, 0, tonumber(ARGV[6]))
  return {'gave_up', attempts}
end
redis.call('HSET', KEYS[1], 'state', 'running', 'started_at', ARGV[1], 'heartbeat_at', ARGV[1])
return {'run', attempts}
"""
)
HEARTBEAT = """
if redis.call('HGET', KEYS[1], 'state') ~= 'running' then return 0 end
redis.call('HSET', KEYS[1], 'heartbeat_at', ARGV[1])
return 1
"""
# KEYS: job, payload, queued, usage, charges, expiry
# ARGV: now, result, content_type, ttl_ms, id, caller byte limit, total byte limit, record_bytes,
#       error if the caller's limit refuses it, error if the total refuses it, expires_at
# Answers 1 stored, 0 duplicate, -1 no such job, 2 / 3 refused by the caller's / the total byte limit.
SUCCEED = (
    _PRELUDE
    + """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return -1 end
local late = state == 'failed' and redis.call('HGET', KEYS[1], 'gave_up') == '1'
if state ~= 'running' and state ~= 'queued' and not late then
  redis.call('HINCRBY', KEYS[1], 'duplicates', 1)
  return 0
end
local cost = string.len(ARGV[2]) + tonumber(ARGV[8])
local held = redis.call('HGET', KEYS[5], ARGV[5])
if held then
  local _, was, owner = string.match(held, '^(%d+) (%d+) (.*)$')
  local _, bytes, _, total_bytes = usage_of(KEYS[4], owner)
  local refused = nil
  if over(ARGV[6], bytes + cost - tonumber(was)) then refused = 2
  elseif over(ARGV[7], total_bytes + cost - tonumber(was)) then refused = 3 end
  if refused then
    redis.call('HSET', KEYS[1], 'state', 'failed', 'finished_at', ARGV[1], 'error', ARGV[7 + refused])
    redis.call('HDEL', KEYS[1], 'gave_up')
    redis.call('DEL', KEYS[2])
    redis.call('ZREM', KEYS[3], ARGV[5])
    charge(KEYS[4], KEYS[5], ARGV[5], false, 0, tonumber(ARGV[8]))
    return refused
  end
end
redis.call('HSET', KEYS[1], 'state', 'succeeded', 'finished_at', ARGV[1], 'result', ARGV[2], 'content_type', ARGV[3])
redis.call('HDEL', KEYS[1], 'error', 'gave_up')
redis.call('HINCRBY', KEYS[1], 'stores', 1)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('DEL', KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[5])
redis.call('ZADD', KEYS[6], ARGV[11], ARGV[5])
charge(KEYS[4], KEYS[5], ARGV[5], false, 0, cost)
return 1
"""
)
# KEYS: job, payload, queued, usage, charges, parts; ARGV: now, error, final ('1'/'0'), id, record_bytes
FAIL = (
    _PRELUDE
    + """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return 'gone' end
if state ~= 'running' then return state end
local partial = tonumber(redis.call('HGET', KEYS[1], 'partial_bytes') or '0')
redis.call('DEL', KEYS[6])
redis.call('HDEL', KEYS[1], 'partial_bytes')
if ARGV[3] == '1' then
  redis.call('HSET', KEYS[1], 'state', 'failed', 'finished_at', ARGV[1], 'error', ARGV[2])
  redis.call('DEL', KEYS[2])
  charge(KEYS[4], KEYS[5], ARGV[4], false, 0, tonumber(ARGV[5]))
  return 'failed'
end
redis.call('HSET', KEYS[1], 'state', 'queued', 'error', ARGV[2])
redis.call('ZADD', KEYS[3], redis.call('HGET', KEYS[1], 'created_at'), ARGV[4])
local held = partial > 0 and redis.call('HGET', KEYS[5], ARGV[4])
if held then
  local active, bytes = string.match(held, '^(%d+) (%d+)')
  charge(KEYS[4], KEYS[5], ARGV[4], false, tonumber(active), tonumber(bytes) - partial)
end
return 'queued'
"""
)
# KEYS: job, payload, queued, usage, charges; ARGV: now, id, record_bytes
CANCEL = (
    _PRELUDE
    + """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return 'gone' end
if state == 'queued' then
  redis.call('HSET', KEYS[1], 'state', 'cancelled', 'finished_at', ARGV[1])
  redis.call('DEL', KEYS[2])
  redis.call('ZREM', KEYS[3], ARGV[2])
  charge(KEYS[4], KEYS[5], ARGV[2], false, 0, tonumber(ARGV[3]))
  return 'cancelled'
end
return state
"""
)
# KEYS: job, payload, queued, usage, charges, expiry, parts; ARGV: id
DELETE = (
    _PRELUDE
    + """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return 'gone' end
if state ~= 'succeeded' and state ~= 'failed' and state ~= 'cancelled' then return state end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[7])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[6], ARGV[1])
charge(KEYS[4], KEYS[5], ARGV[1], false, 0, 0)
return 'deleted'
"""
)
# KEYS: usage, charges, expiry, queued; ARGV: ns, now, owner
USAGE = (
    _PRELUDE
    + """
sweep(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2])
return {usage_of(KEYS[1], ARGV[3])}
"""
)
# KEYS: job; ARGV: now, progress (JSON). Answers 1 recorded, 0 the job ended (or is gone).
REPORT = """
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'running' and state ~= 'queued' then return 0 end
redis.call('HSET', KEYS[1], 'progress', ARGV[2], 'heartbeat_at', ARGV[1])
return 1
"""
# KEYS: job, parts, payload, usage, charges
# ARGV: piece, caller byte limit, total byte limit, ttl_ms, id, now, record_bytes, error if the caller's limit
#       refuses it, error if the total refuses it. Answers 'ok', 'refused' (the job failed), or the job's state.
APPEND = (
    _PRELUDE
    + """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return 'gone' end
if state ~= 'running' then return state end
local size = string.len(ARGV[1])
local held = redis.call('HGET', KEYS[5], ARGV[5])
if held then
  local active, was, owner = string.match(held, '^(%d+) (%d+) (.*)$')
  local _, bytes, _, total_bytes = usage_of(KEYS[4], owner)
  local refused = nil
  if over(ARGV[2], bytes + size) then refused = 8 elseif over(ARGV[3], total_bytes + size) then refused = 9 end
  if refused then
    redis.call('HSET', KEYS[1], 'state', 'failed', 'finished_at', ARGV[6], 'error', ARGV[refused])
    redis.call('HDEL', KEYS[1], 'partial_bytes')
    redis.call('DEL', KEYS[2], KEYS[3])
    charge(KEYS[4], KEYS[5], ARGV[5], false, 0, tonumber(ARGV[7]))
    return 'refused'
  end
  charge(KEYS[4], KEYS[5], ARGV[5], false, tonumber(active), tonumber(was) + size)
end
redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
redis.call('HINCRBY', KEYS[1], 'partial_bytes', size)
return 'ok'
"""
)
# KEYS: job, parts, payload, queued, usage, charges, expiry; ARGV: now, content_type, ttl_ms, id, record_bytes,
# expires_at. Answers 1 stored, 0 duplicate (the job ended otherwise), -1 no such job.
SUCCEED_APPENDED = (
    _PRELUDE
    + """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return -1 end
if state ~= 'running' then
  redis.call('HINCRBY', KEYS[1], 'duplicates', 1)
  return 0
end
local size = tonumber(redis.call('HGET', KEYS[1], 'partial_bytes') or '0')
redis.call('HSET', KEYS[1], 'state', 'succeeded', 'finished_at', ARGV[1], 'content_type', ARGV[2], 'result_size', size)
redis.call('HDEL', KEYS[1], 'error', 'gave_up', 'partial_bytes')
redis.call('HINCRBY', KEYS[1], 'stores', 1)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
redis.call('DEL', KEYS[3])
redis.call('ZREM', KEYS[4], ARGV[4])
redis.call('ZADD', KEYS[7], ARGV[6], ARGV[4])
charge(KEYS[5], KEYS[6], ARGV[4], false, 0, size + tonumber(ARGV[5]))
return 1
"""
)
# KEYS: job, parts, payload, queued, usage, charges; ARGV: now, error, silent_for_s, id, record_bytes
# Answers 1 when the job was failed now, 0 when it ended already or its runner is alive.
ABANDON = (
    _PRELUDE
    + """
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'running' and state ~= 'queued' then return 0 end
local beat = redis.call('HGET', KEYS[1], 'heartbeat_at') or redis.call('HGET', KEYS[1], 'started_at')
  or redis.call('HGET', KEYS[1], 'created_at') or '0'
if tonumber(ARGV[1]) - (tonumber(beat) or 0) < tonumber(ARGV[3]) then return 0 end
redis.call('HSET', KEYS[1], 'state', 'failed', 'finished_at', ARGV[1], 'error', ARGV[2])
redis.call('HDEL', KEYS[1], 'gave_up', 'partial_bytes')
redis.call('DEL', KEYS[2], KEYS[3])
redis.call('ZREM', KEYS[4], ARGV[4])
charge(KEYS[5], KEYS[6], ARGV[4], false, 0, tonumber(ARGV[5]))
return 1
"""
)
