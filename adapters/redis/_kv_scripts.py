"""The Lua of ``RedisCoordinationStore``: one prelude and three scripts, ``WRITE`` (the one
compare-and-set every conditional write goes through), ``READ`` and ``LEASE``.

Layout under the root ``p`` (``shoal:{group}:kv:``, ARGV[1]): ``k:{key}`` a hash (``v``
value, ``r`` revision, ``l`` lease), ``keys`` every key (a sorted set, for prefix ranges),
``rev`` the revision counter, ``leases`` each lease's deadline (a sorted set, in ms of
Redis's clock), ``ttl`` each lease's TTL (ms), ``lease:{id}`` the keys bound to a lease,
``lease-ids`` the lease counter and ``events`` the change stream: one entry per revision,
its id ``{revision}-0``, with ``k`` the key, ``v`` the value (absent for a deletion) and
``w`` the token of the call that wrote it (a watcher checks it to resume, see ``_kv``).

Every script ends the leases past their deadline first (``expire_due``), so no read ever
sees a key of an expired lease, whether anyone swept it yet or not. ARGV[2] is the
stream's approximate cap, ARGV[3] the call's random token. Keys are built from ``p``, so
the scripts are for a single Redis (or a primary with replicas), not Redis Cluster.
"""

from __future__ import annotations

__all__ = ["LEASE", "READ", "WRITE"]

_PRELUDE = """
local p, maxlen, token = ARGV[1], ARGV[2], ARGV[3]
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function last_revision()
  local counted = tonumber(redis.call('GET', p .. 'rev') or '0')
  local newest = redis.call('XREVRANGE', p .. 'events', '+', '-', 'COUNT', 1)[1]
  if newest then
    counted = math.max(counted, tonumber(string.match(newest[1], '^(%d+)')))
  end
  return counted
end
local function next_revision()
  local revision = last_revision() + 1
  if revision == 1 then
    -- an empty store (fresh, or one that lost its data) counts from ten per millisecond of
    -- Redis's clock, so a Redis that lost writes still hands out revisions above them
    revision = now_ms() * 10 + 1
  end
  return revision
end
local function token_at(revision)
  -- the token of the call that wrote ``revision``, '' when its event is gone
  local entry = redis.call('XRANGE', p .. 'events', revision .. '-0', revision .. '-0')[1]
  for i = 1, entry and #entry[2] or 0, 2 do
    if entry[2][i] == 'w' then return entry[2][i + 1] end
  end
  return ''
end
local function record(revision, key, value)
  local id = revision .. '-0'
  if value then
    redis.call('XADD', p .. 'events', 'MAXLEN', '~', maxlen, id, 'k', key, 'v', value, 'w', token)
  else
    redis.call('XADD', p .. 'events', 'MAXLEN', '~', maxlen, id, 'k', key, 'w', token)
  end
  redis.call('SET', p .. 'rev', revision)
  return revision
end
-- The key itself is written first: a write the server refuses (an ACL on the key) fails
-- before anything else changed, so no event ever tells of a write that did not happen.
local function remove(key)
  local lease = redis.call('HGET', p .. 'k:' .. key, 'l')
  redis.call('DEL', p .. 'k:' .. key)
  if lease then redis.call('SREM', p .. 'lease:' .. lease, key) end
  redis.call('ZREM', p .. 'keys', key)
  return record(next_revision(), key, false)
end
local function end_lease(id)
  local keys = redis.call('SMEMBERS', p .. 'lease:' .. id)
  table.sort(keys)
  for _, key in ipairs(keys) do remove(key) end
  redis.call('DEL', p .. 'lease:' .. id)
  redis.call('ZREM', p .. 'leases', id)
  redis.call('HDEL', p .. 'ttl', id)
end
local function expire_due()
  local now = now_ms()
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', p .. 'leases', '-inf', now)) do
    end_lease(id)
  end
  return now
end
"""

# ARGV[4..8]: key, expected revision (0: the key must be absent), 'put' or 'del', value,
# lease ('0': none). -> {1, revision} written, {0, 0} refused, {-1, 0} lease not live.
WRITE = (
    _PRELUDE
    + """
expire_due()
local key, expected, lease = ARGV[4], tonumber(ARGV[5]), ARGV[8]
local stored = tonumber(redis.call('HGET', p .. 'k:' .. key, 'r') or '0')
if stored ~= expected then return {0, 0} end
if ARGV[6] == 'del' then return {1, remove(key)} end
if lease ~= '0' and not redis.call('ZSCORE', p .. 'leases', lease) then return {-1, 0} end
local bound = redis.call('HGET', p .. 'k:' .. key, 'l')
local revision = next_revision()
redis.call('DEL', p .. 'k:' .. key)
redis.call('HSET', p .. 'k:' .. key, 'v', ARGV[7], 'r', revision)
if bound then redis.call('SREM', p .. 'lease:' .. bound, key) end
if lease ~= '0' then
  redis.call('HSET', p .. 'k:' .. key, 'l', lease)
  redis.call('SADD', p .. 'lease:' .. lease, key)
end
redis.call('ZADD', p .. 'keys', 0, key)
record(revision, key, ARGV[7])
return {1, revision}
"""
)

# ARGV[4..]: 'get' key | 'list' prefix | 'since' revision token.
# get, list -> {revision now, its event's token or '', key, value, revision, ...};
# since -> 1 when the history since (revision, token) is still this store's, else 0.
READ = (
    _PRELUDE
    + """
expire_due()
local revision = last_revision()
if ARGV[4] == 'since' then
  local since, seen = tonumber(ARGV[5]), ARGV[6]
  if revision < since then return 0 end
  return (seen == '' or token_at(since) == seen) and 1 or 0
end
local reply = {revision, token_at(revision)}
local keys
if ARGV[4] == 'get' then
  keys = {ARGV[5]}
elseif ARGV[5] == '' then
  keys = redis.call('ZRANGEBYLEX', p .. 'keys', '-', '+')
else
  keys = redis.call('ZRANGEBYLEX', p .. 'keys', '[' .. ARGV[5], '[' .. ARGV[5] .. '\\255')
end
for _, key in ipairs(keys) do
  local stored = redis.call('HMGET', p .. 'k:' .. key, 'v', 'r')
  if stored[2] then
    table.insert(reply, key)
    table.insert(reply, stored[1])
    table.insert(reply, tonumber(stored[2]))
  end
end
return reply
"""
)

# ARGV[4..]: 'grant' ttl-ms -> lease id | 'keep' id -> 1, or 0 when not live |
# 'revoke' id -> 1 | 'sweep' -> ms until the next deadline, -1 when no lease is held.
LEASE = (
    _PRELUDE
    + """
local now = expire_due()
local op = ARGV[4]
if op == 'grant' then
  local id = redis.call('INCR', p .. 'lease-ids')
  redis.call('ZADD', p .. 'leases', now + tonumber(ARGV[5]), id)
  redis.call('HSET', p .. 'ttl', id, ARGV[5])
  return id
elseif op == 'keep' then
  local ttl = redis.call('HGET', p .. 'ttl', ARGV[5])
  if not ttl then return 0 end
  redis.call('ZADD', p .. 'leases', now + tonumber(ttl), ARGV[5])
  return 1
elseif op == 'revoke' then
  end_lease(ARGV[5])
  return 1
end
local next = redis.call('ZRANGE', p .. 'leases', 0, 0, 'WITHSCORES')
if not next[2] then return -1 end
return math.max(0, tonumber(next[2]) - now)
"""
)
