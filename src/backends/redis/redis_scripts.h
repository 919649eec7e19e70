// The Lua scripts of the Redis backend (docs/backend-redis.md). Each runs
// atomically on the server; the server's clock (TIME, PX, PTTL) is the only
// clock that decides expiry. Tokens travel as decimal strings, never as Lua
// numbers printed with %.14g; they stay exact up to 2^53.
#ifndef DLOCK_SRC_BACKENDS_REDIS_REDIS_SCRIPTS_H_
#define DLOCK_SRC_BACKENDS_REDIS_REDIS_SCRIPTS_H_

#include "backends/redis/redis_conn.h"

namespace dlock::redis::scripts {

// The lock key holds the owner id; its token is the counter's value, which
// only a grant changes (INCR and SET in one script), so while the lock
// exists the counter names its token. The fast paths (a free key nobody
// waits for; an uncontended release) make as few redis.call()s as possible:
// each one costs the server about a microsecond.

// KEYS: lock, counter, queue, qexp. ARGV: owner, ttl_ms, queue_ttl_ms, channel.
// Returns {1, token, ttl_ms} when granted (a fresh grant bumps the counter;
// the owner already holding it gets its token back and a fresh ttl), else
// {0, 0, ms until the holder's lease, or the waiter ahead's place, expires}.
// A free key goes only to the live head of the queue, or to anyone when
// nobody waits. A refused caller with queue_ttl_ms > 0 takes (or keeps) its
// place at the tail, for queue_ttl_ms from now. A wake-up (PUBLISH on the
// channel) names the waiter it is for: here, the new head after dead heads
// were dropped. (A grant wakes nobody: the next in line finds the new
// lease's expiry at its next place refresh, within kPlaceRefresh.)
inline const Script& Acquire() {
  static const Script s(R"lua(
local lock, counter, queue, qexp = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, ttl, qttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local head = redis.call('LINDEX', queue, 0)
if not head and redis.call('SET', lock, owner, 'NX', 'PX', ttl) then
  return {1, redis.call('INCR', counter), ttl}
end
local held = redis.call('GET', lock)
if held == owner then
  redis.call('PEXPIRE', lock, ttl)
  return {1, redis.call('GET', counter), ttl}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local pruned = false
while head do
  if tonumber(redis.call('HGET', qexp, head) or '0') > now then break end
  redis.call('LPOP', queue)
  redis.call('HDEL', qexp, head)
  pruned = true
  head = redis.call('LINDEX', queue, 0)
end
if not held and (not head or head == owner) then
  if head then
    redis.call('LPOP', queue)
    redis.call('HDEL', qexp, owner)
  end
  redis.call('SET', lock, owner, 'PX', ttl)
  return {1, redis.call('INCR', counter), ttl}
end
if qttl > 0 then
  if redis.call('HSET', qexp, owner, now + qttl) == 1 then
    redis.call('RPUSH', queue, owner)
  end
  if redis.call('PTTL', queue) < qttl then
    redis.call('PEXPIRE', queue, qttl)
    redis.call('PEXPIRE', qexp, qttl)
  end
  if not head then head = owner end
end
if pruned and not held and head ~= owner then
  redis.call('PUBLISH', ARGV[4], head)
end
local left = 0
if held then
  left = redis.call('PTTL', lock)
elseif head then
  left = tonumber(redis.call('HGET', qexp, head) or now) - now
end
if left < 0 then left = 0 end
return {0, 0, left}
)lua");
  return s;
}

// KEYS: lock, queue, qexp. ARGV: owner, channel.
// Deletes the lock if the owner holds it (1); otherwise drops the owner's
// place in the queue (a waiter giving up) and returns 0 when nobody holds
// the key, -1 when another owner does. When the key became free (or the
// head left) and somebody waits, publishes the owner id of the waiter
// whose turn it is: only that one wakes.
inline const Script& Release() {
  static const Script s(R"lua(
local lock, queue, qexp = KEYS[1], KEYS[2], KEYS[3]
local owner = ARGV[1]
local held = redis.call('GET', lock)
if held == owner then
  redis.call('DEL', lock)
  local head = redis.call('LINDEX', queue, 0)
  if head then redis.call('PUBLISH', ARGV[2], head) end
  return 1
end
if redis.call('HDEL', qexp, owner) == 1 then
  local was_head = redis.call('LINDEX', queue, 0) == owner
  redis.call('LREM', queue, 1, owner)
  if was_head and not held then
    local head = redis.call('LINDEX', queue, 0)
    if head then redis.call('PUBLISH', ARGV[2], head) end
  end
end
if held then return -1 end
return 0
)lua");
  return s;
}

// KEYS: lock keys. ARGV: owner_1, ttl_ms_1, owner_2, ttl_ms_2, ...
// One result per key: 1 renewed, 0 not held by that owner any more.
inline const Script& Renew() {
  static const Script s(R"lua(
local out = {}
for i, lock in ipairs(KEYS) do
  if redis.call('GET', lock) == ARGV[2 * i - 1] then
    redis.call('PEXPIRE', lock, ARGV[2 * i])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
)lua");
  return s;
}

// KEYS: lock_1, counter_1, lock_2, counter_2, ... (locks found by SCAN).
// Returns name, owner, pttl, token for each held one.
inline const Script& List() {
  static const Script s(R"lua(
local out = {}
for i = 1, #KEYS, 2 do
  local held = redis.call('GET', KEYS[i])
  if held then
    out[#out + 1] = KEYS[i]
    out[#out + 1] = held
    out[#out + 1] = redis.call('PTTL', KEYS[i])
    out[#out + 1] = redis.call('GET', KEYS[i + 1]) or '0'
  end
end
return out
)lua");
  return s;
}

// Backend::MarkDone. KEYS: lock, counter, done. ARGV: owner. Sets the
// run-once record (to the holder's token) only while the owner holds the
// lock: 1, or 0 when it does not.
inline const Script& MarkDone() {
  static const Script s(R"lua(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[3], redis.call('GET', KEYS[2]) or '1')
return 1
)lua");
  return s;
}

// Backend::Ping: one script call that touches no key (the floor a lock's
// round trip is compared against).
inline const Script& Ping() {
  static const Script s("return 1");
  return s;
}

// Redlock, per node: no counter and no queue (there is no order across
// nodes to keep). KEYS: lock. ARGV: owner, ttl_ms. {1, ttl} or {0, pttl}.
inline const Script& RedlockAcquire() {
  static const Script s(R"lua(
local held = redis.call('GET', KEYS[1])
if held and held ~= ARGV[1] then
  local left = redis.call('PTTL', KEYS[1])
  if left < 0 then left = 0 end
  return {0, left}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, tonumber(ARGV[2])}
)lua");
  return s;
}

// Redlock release, per node. KEYS: lock. ARGV: owner. 1 / 0 / -1 as Release.
inline const Script& RedlockRelease() {
  static const Script s(R"lua(
local held = redis.call('GET', KEYS[1])
if not held then return 0 end
if held ~= ARGV[1] then return -1 end
redis.call('DEL', KEYS[1])
return 1
)lua");
  return s;
}

}  // namespace dlock::redis::scripts

#endif  // DLOCK_SRC_BACKENDS_REDIS_REDIS_SCRIPTS_H_
