"""The Lua scripts: every mutation is one atomic script that also appends a change event.

Every script but ``PUBLISH`` may run twice for one call (the client retries once on a
connection that broke, e.g. a pooled connection to a Redis that restarted): each is
idempotent for the same arguments (tokens and hold versions are unique per call).

Events go to the ``events`` stream (``XADD ... MAXLEN ~ n``) with the fields ``topic``
(members | leader | assignment | holds), ``op`` and ``key``. Owner checks compare the
value's ``{token}:`` prefix, so no script decodes JSON except ``release_hold``
(the member of a hold) and ``publish`` (the stored generation).

Keys not passed in KEYS are only built from ``ARGV`` prefixes in ``members``: the scripts
are for a single Redis (or a primary with replicas), not Redis Cluster.
"""

from __future__ import annotations

_EVENT = """
local function event(stream, maxlen, topic, op, key)
  redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*', 'topic', topic, 'op', op, 'key', key)
end
local function owned(value, token)
  return value and string.sub(value, 1, #token + 1) == token .. ':'
end
"""

# KEYS: member key, members set, events. ARGV: member id, value, ttl ms, maxlen.
JOIN = (
    _EVENT
    + """
local current = redis.call('GET', KEYS[1])
if current == ARGV[2] then return 1 end  -- this very call, retried (the value has its token)
if current then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('SADD', KEYS[2], ARGV[1])
event(KEYS[3], ARGV[4], 'members', 'join', KEYS[1])
return 1
"""
)

# KEYS: key. ARGV: token, ttl ms. 1 renewed, 0 not ours (gone or replaced).
RENEW = (
    _EVENT
    + """
if not owned(redis.call('GET', KEYS[1]), ARGV[1]) then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""
)

# KEYS: member key, reports. ARGV: token, member id, report value ({token}:{stats}).
# A load report: no event, so it wakes no watcher of the member set.
REPORT = (
    _EVENT
    + """
if not owned(redis.call('GET', KEYS[1]), ARGV[1]) then return 0 end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
return 1
"""
)

# KEYS: member key, members set, reports, events. ARGV: token, member id, maxlen.
LEAVE = (
    _EVENT
    + """
if not owned(redis.call('GET', KEYS[1]), ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[2])
redis.call('HDEL', KEYS[3], ARGV[2])
event(KEYS[4], ARGV[3], 'members', 'leave', KEYS[1])
return 1
"""
)

# KEYS: members set, reports. ARGV: member key prefix. -> {id, report or false, ...} of
# the live members; the report only if the live member's token wrote it. Prunes the ids
# (and reports) of members whose key expired.
MEMBERS = (
    _EVENT
    + """
local out = {}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local value = redis.call('GET', ARGV[1] .. id)
  if value then
    local report = redis.call('HGET', KEYS[2], id)
    local token = string.match(value, '^([^:]*):')
    out[#out + 1] = id
    out[#out + 1] = (report and owned(report, token)) and report or false
  else
    redis.call('SREM', KEYS[1], id)
    redis.call('HDEL', KEYS[2], id)
  end
end
return out
"""
)

# KEYS: leader, term counter, events. ARGV: candidate id, token, ttl ms, maxlen.
# -> {1, term} elected (also when the key is already this token's: a retry after a lost
# reply); {0, pttl of the current leader key} otherwise.
# A term is the counter + 1 or the server's clock in ms, whichever is higher: terms keep
# growing across a restart that lost the counter or its last increments (no persistence,
# or appendfsync everysec), so a new leader's term is above every term handed out before
# (assignment watchers rely on it, see core.coordination.supersedes). Should the clock
# step back as well, PUBLISH still tells two leaders of one term apart by their token.
CAMPAIGN = (
    _EVENT
    + """
local current = redis.call('GET', KEYS[1])
if owned(current, ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {1, tonumber(string.match(current, '^[^:]*:(%d+):'))}
end
if current then return {0, redis.call('PTTL', KEYS[1])} end
local now = redis.call('TIME')
local clock = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local term = math.max((tonumber(redis.call('GET', KEYS[2])) or 0) + 1, clock)
redis.call('SET', KEYS[2], string.format('%d', term))
redis.call('SET', KEYS[1], ARGV[2] .. ':' .. string.format('%d', term) .. ':' .. ARGV[1],
  'PX', ARGV[3])
event(KEYS[3], ARGV[4], 'leader', 'elected', KEYS[1])
return {1, term}
"""
)

# KEYS: leader, events. ARGV: token, maxlen.
RESIGN = (
    _EVENT
    + """
if not owned(redis.call('GET', KEYS[1]), ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1])
event(KEYS[2], ARGV[2], 'leader', 'resigned', KEYS[1])
return 1
"""
)

# KEYS: leader, assignment, events. ARGV: term, generation, value, maxlen, owner token,
# leader id.
# -> {1} stored; {0} nobody leads; {-1, leader term} another term leads;
#    {-3, leader term} this term, but another owner token or id (Redis lost writes and its
#    counter handed the term out twice); {-2, stored generation} the stored generation is
#    not lower.
PUBLISH = (
    _EVENT
    + """
local leader = redis.call('GET', KEYS[1])
if not leader then return {0} end
local term = string.match(leader, '^[^:]*:(%d+):')
if term ~= ARGV[1] then return {-1, term or ''} end
if leader ~= ARGV[5] .. ':' .. ARGV[1] .. ':' .. ARGV[6] then return {-3, term} end
local stored = redis.call('GET', KEYS[2])
if stored then
  local ok, decoded = pcall(cjson.decode, stored)
  local generation = ok and type(decoded) == 'table' and tonumber(decoded['generation'])
  if generation and generation >= tonumber(ARGV[2]) then
    return {-2, string.format('%d', generation)}
  end
end
redis.call('SET', KEYS[2], ARGV[3])
event(KEYS[3], ARGV[4], 'assignment', 'published', KEYS[2])
return {1}
"""
)

# KEYS: holds hash, events. ARGV: partition, new value, expected value ('' = must be free),
# maxlen. The values carry a random version, so comparing values compares versions.
CLAIM = (
    _EVENT
    + """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if current == ARGV[2] then return 1 end  -- this very call, retried (its version is new)
if ARGV[3] == '' then
  if current then return 0 end
elseif current ~= ARGV[3] then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
event(KEYS[2], ARGV[4], 'holds', 'claimed', KEYS[1])
return 1
"""
)

# KEYS: holds hash, events. ARGV: partition, member id, maxlen.
RELEASE_HOLD = (
    _EVENT
    + """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current then return 0 end
local ok, decoded = pcall(cjson.decode, current)
if not (ok and type(decoded) == 'table' and decoded['member'] == ARGV[2]) then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
event(KEYS[2], ARGV[3], 'holds', 'released', KEYS[1])
return 1
"""
)

# The registrations of one partition: a sorted set, member project id, score its expiry
# (seconds, the registrant's clock). A key of an older version (a plain set, no expiry) is
# dropped: handlers register their active projects again.
_REGISTRY = """
local function registrations(key)
  local kind = redis.call('TYPE', key)['ok']
  if kind ~= 'zset' and kind ~= 'none' then redis.call('DEL', key) end
end
"""

# KEYS: registrations. ARGV: now, expiry, cap, ttl ms, project ids...
# Drops the expired, refreshes the live (never to an earlier expiry), adds the others while
# fewer than cap are live. The whole key expires a TTL after the last registration that
# extended it. Returns {added, refused}.
REGISTER_PROJECTS = (
    _REGISTRY
    + """
local key = KEYS[1]
registrations(key)
local expiry, cap = tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', key, '-inf', ARGV[1])
local count = redis.call('ZCARD', key)
local added, refused = {}, {}
for i = 5, #ARGV do
  local score = redis.call('ZSCORE', key, ARGV[i])
  if score then
    if tonumber(score) < expiry then redis.call('ZADD', key, ARGV[2], ARGV[i]) end
  elseif count < cap then
    redis.call('ZADD', key, ARGV[2], ARGV[i])
    count = count + 1
    added[#added + 1] = ARGV[i]
  else
    refused[#refused + 1] = ARGV[i]
  end
end
if count > 0 then
  local left = redis.call('PTTL', key)
  if left == -1 or left < tonumber(ARGV[4]) then redis.call('PEXPIRE', key, ARGV[4]) end
end
return {added, refused}
"""
)

# KEYS: registrations. ARGV: now. The project ids whose registration expires after now.
PROJECTS = (
    _REGISTRY
    + """
if redis.call('TYPE', KEYS[1])['ok'] ~= 'zset' then return {} end
return redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[1], '+inf')
"""
)
