// The Lua scripts of the Redis backend (docs/backend-redis.md). Each runs
// atomically on the server; the server's clock (TIME, PX, PTTL) is the only
// clock that decides expiry. Tokens travel as decimal strings, never as Lua
// numbers printed with %.14g; they stay exact up to 2^53.
#ifndef DLOCK_SRC_BACKENDS_REDIS_REDIS_SCRIPTS_H_
#define DLOCK_SRC_BACKENDS_REDIS_REDIS_SCRIPTS_H_

#include <string>

#include "backends/redis/redis_conn.h"

namespace dlock::redis::scripts {

// Layout (redis_keys.h, docs/backend-redis.md). The lock key is what the
// fast paths look at; it exists exactly while somebody holds the key (or an
// ended holding's lock-delay runs):
//  - an exclusive holding without lock-delay (the common case) is the lock
//    key alone: "owner:token|ttl|granted|label", PX = the lease. `granted`
//    (the grant time, server ms) is left empty by the fast path, which does
//    not read the clock; the first extension fills it in (as long as the
//    value was never extended, it was granted ttl - PTTL ago). Values of
//    older versions have no ":token" (the token was then the key's own
//    counter, `token`), or are the owner alone.
//  - shared holdings (read locks, semaphore permits) and holdings with a
//    lock-delay are members of the `holders` zset, scored by their end (the
//    lease's end + its lock-delay, server ms), with "token|limit|ttl|delay|
//    granted|label" in the `hinfo` hash; the lock key is then the guard "*",
//    expiring with the last of them. A holding whose lease has ended but whose
//    end has not is inside its lock-delay: it holds nothing (no renewal,
//    release or retry) but still counts against the sharing rule.
// Tokens come from the counter of the key's hash slot (redis_slots.h). A
// key's own counter `token`, which an older dlock kept for ever, is folded
// into its slot's counter (raised to it, then deleted) when the key is next
// granted or released: no token goes down, and nothing stays behind.
// Waiters: the `queue` list (arrival order), `qexp` (owner -> place expiry)
// and `qinfo` (owner -> "limit|since|ttl|label"; ttl, in ms, only for an
// exclusive waiter without lock-delay: what a grant on release gives it).
// The fast paths (a free key nobody waits for; an uncontended release) make
// as few redis.call()s as possible, before any Lua function is defined:
// each call costs the server about a microsecond.

// What every script that grants needs first: `counter` (the slot's) and
// the next token. Kept to two functions: each one defined costs every call
// of the script, the fast path too.
inline constexpr const char* kTokens = R"lua(
-- Folds an older dlock's counter of the key (base .. 'token') into the
-- slot's counter.
local function absorb_old_counter(counter, base)
  local old = redis.call('GET', base .. 'token')
  if not old then return end
  redis.call('DEL', base .. 'token')
  if tonumber(old) > tonumber(redis.call('GET', counter) or '0') then
    redis.call('SET', counter, old)
  end
end
local function next_token(counter, base)
  absorb_old_counter(counter, base)
  return string.format('%.0f', redis.call('INCR', counter))
end
)lua";

// Helpers shared by the slow paths.
inline constexpr const char* kLib = R"lua(
local function fmt(x) return string.format('%.0f', x) end
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- An exclusive holding's value: owner, ttl and grant time (nil when
-- unknown), label, token (nil in an older dlock's value).
local function parse_lock(v)
  local o, k, t, g, l = string.match(v, '^(%x+):?(%d*)|(%d*)|(%d*)|(.*)$')
  if not o then return v, nil, nil, '', nil end
  if k == '' then k = nil end
  return o, tonumber(t), tonumber(g), l, k
end
-- The token of the exclusive holding `held` of the key whose names start
-- with `base`.
local function lock_token(held, base)
  local _, _, _, _, k = parse_lock(held)
  return k or redis.call('GET', base .. 'token') or '0'
end
local function parse_hold(v)
  if not v then return nil end
  local tok, lim, t, d, g, l = string.match(v, '^(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|(.*)$')
  if not tok then return nil end
  return {token = tok, limit = tonumber(lim), ttl = tonumber(t), delay = tonumber(d),
          granted = tonumber(g), label = l}
end
local function hold_value(h)
  return h.token .. '|' .. fmt(h.limit) .. '|' .. fmt(h.ttl) .. '|' .. fmt(h.delay) .. '|' ..
         fmt(h.granted) .. '|' .. h.label
end
local function qlimit(v)
  return v and tonumber(string.match(v, '^(%d+)|')) or 1
end
-- HMGET in slices (unpack has a stack limit).
local function hmget(hash, fields)
  local out = {}
  for i = 1, #fields, 512 do
    local r = redis.call('HMGET', hash, unpack(fields, i, math.min(#fields, i + 511)))
    for j = 1, #r do out[i + j - 1] = r[j] end
  end
  return out
end
-- A fresh ttl for the exclusive holding `held` in `lock`, keeping (or
-- inferring, the first time) its grant time.
local function extend_lock(lock, held, ttl)
  local o, vt, vg, lab, k = parse_lock(held)
  if not vt or (vg and vt == tonumber(ttl)) then
    redis.call('PEXPIRE', lock, ttl)
    return
  end
  if not vg then vg = clock() - (vt - redis.call('PTTL', lock)) end
  redis.call('SET', lock, o .. (k and (':' .. k) or '') .. '|' .. ttl .. '|' .. fmt(vg) .. '|' ..
             lab, 'PX', ttl)
end
-- The holdings in the zset, after dropping those whose end has passed.
local function load_holders(holders, hinfo, now)
  local dead = redis.call('ZRANGEBYSCORE', holders, '-inf', fmt(now))
  if #dead > 0 then
    redis.call('ZREMRANGEBYSCORE', holders, '-inf', fmt(now))
    for i = 1, #dead, 512 do
      redis.call('HDEL', hinfo, unpack(dead, i, math.min(#dead, i + 511)))
    end
  end
  local z = redis.call('ZRANGE', holders, 0, -1, 'WITHSCORES')
  local owners, hs = {}, {}
  for i = 1, #z, 2 do owners[#owners + 1] = z[i] end
  local infos = hmget(hinfo, owners)
  for i, o in ipairs(owners) do
    local h = parse_hold(infos[i]) or
              {token = '0', limit = 1, ttl = 0, delay = 0, granted = 0, label = ''}
    h.owner = o
    h.ends = tonumber(z[2 * i])
    hs[i] = h
  end
  return hs, #dead > 0
end
-- The lock key as the guard, until the last holding in the zset ends.
local function guard(lock, holders, hinfo)
  local at = redis.call('ZRANGE', holders, -1, -1, 'WITHSCORES')[2]
  redis.call('SET', lock, '*')
  redis.call('PEXPIREAT', lock, at)
  redis.call('PEXPIREAT', holders, at)
  redis.call('PEXPIREAT', hinfo, at)
end
-- Wakes (PUBLISH of the owner id) each live waiter among the first 256 that
-- the sharing rule admits now, given n holders whose smallest limit is lim:
-- a prefix of the queue. Not `skip`.
local function wake(queue, qexp, qinfo, channel, n, lim, now, skip)
  local q = redis.call('LRANGE', queue, 0, 255)
  if #q == 0 then return end
  local exps = redis.call('HMGET', qexp, unpack(q))
  local infos = redis.call('HMGET', qinfo, unpack(q))
  for i, w in ipairs(q) do
    if tonumber(exps[i] or '0') > now then
      local l = qlimit(infos[i])
      if l < lim then lim = l end
      n = n + 1
      if n > lim then return end
      if w ~= skip then redis.call('PUBLISH', channel, w) end
    end
  end
end
)lua";

// KEYS: lock, counter (the slot's), queue. ARGV: "owner|ttl_ms||label" (the
// value of an exclusive holding, its token and grant time not yet in it),
// ttl_ms, "limit|
// lock_delay_ms" (only "1|0" may take the fast path), queue_ttl_ms, channel.
// The other keys of the lock key (qexp, qinfo, holders, hinfo: same hash
// tag, so the same slot) are named from KEYS[1] on the slow path: each
// argument costs the server about 0.1 us on every call, the fast path too.
// Returns {1, token, ttl_ms} when granted (a fresh grant takes the next token;
// an owner already holding it gets its token back and a fresh ttl), else
// {0, 0, ms until a holding ends, or, with no holder, until the place of the
// waiter ahead expires, the server's time in ms}.
// The sharing rule (backend.h): granted iff holders (including those inside
// their lock-delay) + live waiters ahead + 1 <= the smallest limit among
// them and this request. A refused caller with queue_ttl_ms > 0 takes (or
// keeps) its place at the tail, for queue_ttl_ms from now. Dead waiters
// ahead are dropped. A wake-up (PUBLISH on the channel) names the waiter it
// is for: after dead waiters or holdings were dropped, or a shared grant,
// each waiter the rule now admits.
// NOLINTNEXTLINE(readability-function-size): the body is a Lua program.
inline const Script& Acquire() {
  static const Script s(std::string(kTokens) + std::string(R"lua(
local lock, counter, queue = KEYS[1], KEYS[2], KEYS[3]
local ttl = ARGV[2]
local base = string.sub(lock, 1, -5)
-- One call for the fast path's two questions (nobody holds, nobody waits).
local present = redis.call('EXISTS', lock, queue)
if present == 0 and ARGV[3] == '1|0' then
  local tok = next_token(counter, base)
  redis.call('SET', lock, string.sub(ARGV[1], 1, 32) .. ':' .. tok .. string.sub(ARGV[1], 33),
             'PX', ttl)
  return {1, tok, tonumber(ttl)}
end
local head = present > 0 and redis.call('LINDEX', queue, 0)
-- The lock key exists unless the queue alone makes `present`.
local free = present == (head and 1 or 0)
local owner = string.sub(ARGV[1], 1, 32)
if head == owner and ARGV[3] == '1|0' and free then
  -- The hand-off: the head of the queue, woken by a release, takes the free
  -- key (an exclusive request: nobody ahead, nobody holding) and its place
  -- goes.
  redis.call('LPOP', queue)
  redis.call('HDEL', base .. 'qexp', owner)
  redis.call('HDEL', base .. 'qinfo', owner)
  local tok = next_token(counter, base)
  redis.call('SET', lock, owner .. ':' .. tok .. string.sub(ARGV[1], 33), 'PX', ttl)
  return {1, tok, tonumber(ttl)}
end
local held = redis.call('GET', lock)
local mine = held and held ~= '*' and string.sub(held, 1, 32) == owner
if mine then
  local o, k, vt, vg = string.match(held, '^(%x+):?(%d*)|(%d*)|(%d*)|')
  if not o or (vg ~= '' and vt == ttl) then
    redis.call('PEXPIRE', lock, ttl)
    if not k or k == '' then k = redis.call('GET', base .. 'token') or '0' end
    return {1, k, tonumber(ttl)}
  end
  -- Ours, but its grant time is not yet recorded (or the ttl changes): the
  -- slow path extends it (extend_lock). Never the queue: that would put a
  -- holder retrying a waiting acquire (its reply was lost) behind itself.
end
if ARGV[3] == '1|0' and ARGV[4] ~= '0' and head ~= owner and not mine then
  -- A new exclusive waiter that cannot be granted now: another owner holds
  -- the key alone, or a live waiter is ahead. It takes its place at the
  -- tail and looks no further (dead places ahead are dropped by the slow
  -- path, which every retry runs). This runs right after every release, as
  -- the releaser queues again, so it is kept short.
  local qexp = base .. 'qexp'
  if redis.call('HEXISTS', qexp, owner) == 0 then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local blocked = held and held ~= '*'
    local ahead = 0  -- when the head's place ends; needed only if not blocked
    if head and not blocked then ahead = tonumber(redis.call('HGET', qexp, head) or '0') end
    if blocked or ahead > now then
      local qttl = tonumber(ARGV[4])
      redis.call('HSET', qexp, owner, string.format('%.0f', now + qttl))
      redis.call('RPUSH', queue, owner)
      redis.call('HSET', base .. 'qinfo', owner, '1|' .. string.format('%.0f', now) .. '|' ..
                 ttl .. '|' .. (string.match(ARGV[1], '^%x+|%d*||(.*)$') or ''))
      if redis.call('PTTL', queue) < qttl then
        redis.call('PEXPIRE', queue, qttl)
        redis.call('PEXPIRE', qexp, qttl)
        redis.call('PEXPIRE', base .. 'qinfo', qttl)
      end
      local left = blocked and redis.call('PTTL', lock) or ahead - now
      if left < 0 then left = 0 end
      return {0, 0, left, now}
    end
  end
end
)lua") + kLib + R"lua(
local qexp, qinfo, holders, hinfo = base .. 'qexp', base .. 'qinfo', base .. 'holders', base .. 'hinfo'
local qttl, channel = tonumber(ARGV[4]), ARGV[5]
local limit, delay = string.match(ARGV[3], '^(%d+)|(%d+)$')
limit, delay = tonumber(limit), tonumber(delay)
local label = string.match(ARGV[1], '^%x+|%d*||(.*)$') or ''
if held and held ~= '*' and string.sub(held, 1, 32) == owner then
  extend_lock(lock, held, ttl)
  return {1, lock_token(held, base), tonumber(ttl)}
end
local now = clock()
local hs, pruned = {}, false
local hn, hlim = 0, 4294967295  -- holders, and their smallest limit
if held == '*' then
  hs, pruned = load_holders(holders, hinfo, now)
  for _, h in ipairs(hs) do
    if h.owner == owner and h.ends - h.delay > now then  -- a retry
      h.ttl = tonumber(ttl)
      redis.call('ZADD', holders, fmt(now + h.ttl + h.delay), owner)
      redis.call('HSET', hinfo, owner, hold_value(h))
      guard(lock, holders, hinfo)
      return {1, h.token, h.ttl}
    end
    hn = hn + 1
    if h.limit < hlim then hlim = h.limit end
  end
  if hn == 0 then
    redis.call('DEL', lock, holders, hinfo)
    held = nil
  end
elseif held then
  hn, hlim = 1, 1
end
local n, lim = hn + 1, math.min(limit, hlim)
local queued, first = false, nil
local from = 0
while n <= lim do
  local q = redis.call('LRANGE', queue, from, from + 255)
  if #q == 0 then break end
  local exps = redis.call('HMGET', qexp, unpack(q))
  local infos = redis.call('HMGET', qinfo, unpack(q))
  local removed = 0
  for i, w in ipairs(q) do
    if w == owner then
      queued = true
      break
    end
    local e = tonumber(exps[i] or '0')
    if e <= now then
      redis.call('LREM', queue, 1, w)
      redis.call('HDEL', qexp, w)
      redis.call('HDEL', qinfo, w)
      removed = removed + 1
      pruned = true
    else
      first = first or e
      n = n + 1
      lim = math.min(lim, qlimit(infos[i]))
      if n > lim then break end
    end
  end
  if queued or #q < 256 then break end
  from = from + 256 - removed
end
if n <= lim then
  if queued then
    redis.call('LREM', queue, 1, owner)
    redis.call('HDEL', qexp, owner)
    redis.call('HDEL', qinfo, owner)
  end
  local tok = next_token(counter, base)
  if limit == 1 and delay == 0 and not held then
    redis.call('SET', lock, owner .. ':' .. tok .. '|' .. ttl .. '|' .. fmt(now) .. '|' .. label,
               'PX', ttl)
  else
    redis.call('ZADD', holders, fmt(now + tonumber(ttl) + delay), owner)
    redis.call('HSET', hinfo, owner, hold_value({token = tok, limit = limit,
               ttl = tonumber(ttl), delay = delay, granted = now, label = label}))
    guard(lock, holders, hinfo)
    if limit > 1 then
      wake(queue, qexp, qinfo, channel, hn + 1, math.min(limit, hlim), now, owner)
    end
  end
  return {1, tok, tonumber(ttl)}
end
if qttl > 0 then
  if redis.call('HSET', qexp, owner, fmt(now + qttl)) == 1 then
    redis.call('RPUSH', queue, owner)
    redis.call('HSET', qinfo, owner, fmt(limit) .. '|' .. fmt(now) .. '|' ..
               ((limit == 1 and delay == 0) and ttl or '') .. '|' .. label)
  end
  if redis.call('PTTL', queue) < qttl then
    redis.call('PEXPIRE', queue, qttl)
    redis.call('PEXPIRE', qexp, qttl)
    redis.call('PEXPIRE', qinfo, qttl)
  end
end
if pruned and (not held or held == '*') then
  wake(queue, qexp, qinfo, channel, hn, hlim, now, owner)
end
local left = 0
if held and held ~= '*' then
  left = redis.call('PTTL', lock)
elseif hn > 0 then
  left = hs[1].ends
  for _, h in ipairs(hs) do left = math.min(left, h.ends) end
  left = left - now
elseif first then
  left = first - now
end
if left < 0 then left = 0 end
return {0, 0, left, now}
)lua");
  return s;
}

// KEYS: lock, queue, counter (the slot's; the others are named from
// KEYS[1]). ARGV: owner, channel.
// Ends the owner's holding if it has one (1); otherwise drops the owner's
// place in the queue (a waiter giving up) and returns 0 when nobody holds
// the key, -1 when another owner does. A holding inside its lock-delay is
// not held. Then serves the queue:
//  - grant on release: an exclusive holding's release gives the key straight
//    to the head of the queue when that is a live exclusive waiter without
//    lock-delay (its place records its ttl): the head's holding is set with
//    the next token, its place dropped, and the message "owner:token:time"
//    (time: the grant's, server ms) tells it so. The head needs no round
//    trip of its own (docs/backend-redis.md, "Grant on release");
//  - otherwise it wakes each waiter the sharing rule now admits (a message
//    naming its owner): an exclusive head with lock-delay, or a reader head
//    and the readers behind it; dead places are passed over.
inline const Script& Release() {
  static const Script s(std::string(kTokens) + std::string(R"lua(
local lock, queue, counter = KEYS[1], KEYS[2], KEYS[3]
local owner, channel = ARGV[1], ARGV[2]
local held = redis.call('GET', lock)
local base = string.sub(lock, 1, -5)
local head, now
if held and held ~= '*' and string.sub(held, 1, 32) == owner then
  redis.call('DEL', lock)
  if string.byte(held, 33) ~= 58 then  -- no ":token": an older dlock's holding
    absorb_old_counter(counter, base)
  end
  head = redis.call('LINDEX', queue, 0)
  if not head then return 1 end
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if tonumber(redis.call('HGET', base .. 'qexp', head) or '0') > now then
    local info = redis.call('HGET', base .. 'qinfo', head) or ''
    local gttl, label = string.match(info, '^1|%d+|(%d+)|(.*)$')
    if gttl then
      local tok = next_token(counter, base)
      redis.call('SET', lock, head .. ':' .. tok .. '|' .. gttl .. '||' .. label, 'PX', gttl)
      redis.call('LPOP', queue)
      redis.call('HDEL', base .. 'qexp', head)
      redis.call('HDEL', base .. 'qinfo', head)
      redis.call('PUBLISH', channel, head .. ':' .. tok .. ':' .. string.format('%.0f', now))
      return 1
    end
    -- An exclusive head that takes the key itself (lock-delay): woken alone,
    -- before the helpers below are defined (each costs a closure per call).
    local lim = string.match(info, '^(%d+)|')
    if not lim or lim == '1' then
      redis.call('PUBLISH', channel, head)
      return 1
    end
  end
end
)lua") + kLib + R"lua(
local qexp, qinfo, holders, hinfo = base .. 'qexp', base .. 'qinfo', base .. 'holders', base .. 'hinfo'
if head then
  -- A reader at the head, or a dead head: every live waiter now admitted.
  wake(queue, qexp, qinfo, channel, 0, 4294967295, now, nil)
  return 1
end
local mine, live = false, false
local hn, hlim = 0, 4294967295
if held == '*' then
  now = clock()
  local hs = load_holders(holders, hinfo, now)
  for _, h in ipairs(hs) do
    if h.owner == owner and h.ends - h.delay > now then
      mine = true
      redis.call('ZREM', holders, owner)
      redis.call('HDEL', hinfo, owner)
    else
      hn = hn + 1
      hlim = math.min(hlim, h.limit)
      if h.ends - h.delay > now then live = true end
    end
  end
  if hn == 0 then redis.call('DEL', lock, holders, hinfo) end
end
local left = redis.call('HDEL', qexp, owner) == 1
if left then
  redis.call('LREM', queue, 1, owner)
  redis.call('HDEL', qinfo, owner)
end
if (mine or left) and (not held or held == '*') then
  wake(queue, qexp, qinfo, channel, hn, hlim, now or clock(), owner)
end
if mine then return 1 end
if live or (held and held ~= '*') then return -1 end
return 0
)lua");
  return s;
}

// KEYS: lock_1, lock_2, ... (holders and hinfo named from each; on a
// cluster they follow, declared, after the locks). ARGV: owner_1, ttl_ms_1,
// owner_2, ttl_ms_2, ... One result per lease: 1 renewed, 0 not held by that
// owner any more (ended, released, or inside its lock-delay).
inline const Script& Renew() {
  static const Script s(std::string(kLib) + R"lua(
local out, now = {}, nil
for i = 1, #ARGV / 2 do
  local lock = KEYS[i]
  local base = string.sub(lock, 1, -5)
  local holders, hinfo = base .. 'holders', base .. 'hinfo'
  local owner, ttl = ARGV[2 * i - 1], ARGV[2 * i]
  local held = redis.call('GET', lock)
  out[i] = 0
  if held == '*' then
    now = now or clock()
    local h = parse_hold(redis.call('HGET', hinfo, owner))
    local ends = tonumber(redis.call('ZSCORE', holders, owner))
    if h and ends and ends - h.delay > now then
      h.ttl = tonumber(ttl)
      redis.call('ZADD', holders, fmt(now + h.ttl + h.delay), owner)
      redis.call('HSET', hinfo, owner, hold_value(h))
      guard(lock, holders, hinfo)
      out[i] = 1
    end
  elseif held and string.sub(held, 1, 32) == owner then
    extend_lock(lock, held, ttl)
    out[i] = 1
  end
end
return out
)lua");
  return s;
}

// Backend::KeepPlaces. KEYS: queue_1, queue_2, ... (qexp and qinfo named
// from each; on a cluster they follow, declared). ARGV: owner_1,
// place_ttl_ms_1, owner_2, place_ttl_ms_2, ... One result per place: 1 kept
// (it now lasts at least place_ttl_ms from the server's now, and so do the
// queue's keys), 0 when the owner has no live place there (it lapsed, or
// was granted: a grant drops the place). Only `qexp` and the queue's
// expiry are written: a holding is never touched, a lapsed place never
// revived (its owner's next attempt decides), and a place is never cut.
inline const Script& KeepPlaces() {
  static const Script s(R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for i = 1, #ARGV / 2 do
  local queue = KEYS[i]
  local base = string.sub(queue, 1, -6)
  local qexp = base .. 'qexp'
  local owner, ttl = ARGV[2 * i - 1], tonumber(ARGV[2 * i])
  local ends = tonumber(redis.call('HGET', qexp, owner) or '0')
  out[i] = 0
  if ends > now then
    if now + ttl > ends then
      redis.call('HSET', qexp, owner, string.format('%.0f', now + ttl))
    end
    if redis.call('PTTL', queue) < ttl then
      redis.call('PEXPIRE', queue, ttl)
      redis.call('PEXPIRE', qexp, ttl)
      redis.call('PEXPIRE', base .. 'qinfo', ttl)
    end
    out[i] = 1
  end
end
return out
)lua");
  return s;
}

// KEYS: lock_1, lock_2, ... (found by SCAN; holders and hinfo are named
// from each; on a cluster they follow, declared, and ARGV[1] is the number
// of locks). Returns, per holding whose lease runs: the index of its lock
// (1..), owner, ms left, token, ttl (-1 unknown), held for (ms, -1
// unknown), limit, label.
inline const Script& List() {
  static const Script s(std::string(kLib) + R"lua(
local out, now = {}, clock()
local function add(i, owner, left, token, ttl, held_for, limit, label)
  for _, v in ipairs({i, owner, left, token, ttl, held_for, limit, label}) do
    out[#out + 1] = v
  end
end
for i = 1, tonumber(ARGV[1]) or #KEYS do
  local lock = KEYS[i]
  local base = string.sub(lock, 1, -5)
  local holders, hinfo = base .. 'holders', base .. 'hinfo'
  local held = redis.call('GET', lock)
  if held == '*' then
    local z = redis.call('ZRANGE', holders, 0, -1, 'WITHSCORES')
    for j = 1, #z, 2 do
      local h = parse_hold(redis.call('HGET', hinfo, z[j]))
      local ends = tonumber(z[j + 1])
      if h and ends - h.delay > now then
        add(i, z[j], fmt(ends - h.delay - now), h.token, fmt(h.ttl),
            fmt(math.max(0, now - h.granted)), fmt(h.limit), h.label)
      end
    end
  elseif held then
    local o, vt, vg, lab = parse_lock(held)
    local pttl = redis.call('PTTL', lock)
    local held_for = -1
    if vg then held_for = math.max(0, now - vg) elseif vt then held_for = math.max(0, vt - pttl) end
    add(i, o, pttl, lock_token(held, base), fmt(vt or -1), fmt(held_for), '1', lab)
  end
end
return out
)lua");
  return s;
}

// KEYS: queue_1, queue_2, ... (found by SCAN; qexp and qinfo are named
// from each; on a cluster they follow, declared, and ARGV[1] is the number
// of queues).
// Returns, per live waiter in queue order: the index of its queue (1..),
// owner, limit, waited for (ms, -1 unknown), label.
inline const Script& Waiters() {
  static const Script s(std::string(kLib) + R"lua(
local out, now = {}, clock()
for i = 1, tonumber(ARGV[1]) or #KEYS do
  local queue = KEYS[i]
  local base = string.sub(queue, 1, -6)
  local q = redis.call('LRANGE', queue, 0, -1)
  local exps = hmget(base .. 'qexp', q)
  local infos = hmget(base .. 'qinfo', q)
  for j, w in ipairs(q) do
    if tonumber(exps[j] or '0') > now then
      local lim, waited, lab = '1', '-1', ''
      if infos[j] then
        local a, b, c = string.match(infos[j], '^(%d+)|(%d+)|%d*|(.*)$')
        if a then lim, waited, lab = a, fmt(math.max(0, now - tonumber(b))), c end
      end
      for _, v in ipairs({i, w, lim, waited, lab}) do out[#out + 1] = v end
    end
  end
end
return out
)lua");
  return s;
}

// Backend::MarkDone. KEYS: lock, done (holders and hinfo named from the
// lock). ARGV: owner, retention in ms ("" for ever). Sets the run-once
// record (to the holder's token, expiring with its retention) only while
// the owner holds the lock: 1, or 0 when it does not.
inline const Script& MarkDone() {
  static const Script s(std::string(kLib) + R"lua(
local held = redis.call('GET', KEYS[1])
local base = string.sub(KEYS[1], 1, -5)
local tok
if held == '*' then
  local h = parse_hold(redis.call('HGET', base .. 'hinfo', ARGV[1]))
  local ends = tonumber(redis.call('ZSCORE', base .. 'holders', ARGV[1]))
  if h and ends and ends - h.delay > clock() then tok = h.token end
elseif held and string.sub(held, 1, 32) == ARGV[1] then
  tok = lock_token(held, base)
end
if not tok then return 0 end
if ARGV[2] == '' then
  redis.call('SET', KEYS[2], tok)
else
  redis.call('SET', KEYS[2], tok, 'PX', ARGV[2])
end
return 1
)lua");
  return s;
}

// Backend::RecordBreak. KEYS: breaks. ARGV: "owner\ttoken\tbreak_token\t
// by\tlabel", retention in ms ("" for ever). Appends the record stamped
// with the server's clock, keeps the newest 1000, drops those past their
// end from the head, and lets the list live as long as its longest
// retention ("for ever" on a list that already expires: a century). Only
// commands of the minimal ACL (docs/backend-redis.md): no LTRIM, no
// PERSIST.
inline const Script& RecordBreak() {
  static const Script s(std::string(kLib) + R"lua(
local now = clock()
local ttl = redis.call('PTTL', KEYS[1])  -- -2: no list yet, -1: one kept for ever
local keep_until = ''
if ARGV[2] ~= '' then keep_until = fmt(now + tonumber(ARGV[2])) end
local n = redis.call('RPUSH', KEYS[1], fmt(now) .. '\t' .. keep_until .. '\t' .. ARGV[1])
for _ = 1001, n do redis.call('LPOP', KEYS[1]) end
while true do
  local head = redis.call('LINDEX', KEYS[1], 0)
  local ends = head and tonumber(string.match(head, '^%d+\t(%d+)\t'))
  if not ends or ends > now then break end
  redis.call('LPOP', KEYS[1])
end
if ttl >= 0 or (ttl == -2 and ARGV[2] ~= '') then
  local keep = ARGV[2] == '' and 3155760000000 or tonumber(ARGV[2])
  redis.call('PEXPIRE', KEYS[1], math.max(ttl, keep))
end
return 1
)lua");
  return s;
}

// KEYS: breaks_1, breaks_2, ... (found by SCAN). Returns, per record still
// kept, oldest first: the index of its list (1..) and the record.
inline const Script& Breaks() {
  static const Script s(std::string(kLib) + R"lua(
local out, now = {}, clock()
for i, name in ipairs(KEYS) do
  for _, r in ipairs(redis.call('LRANGE', name, 0, -1)) do
    local ends = string.match(r, '^%d+\t(%d*)\t')
    if ends and (ends == '' or tonumber(ends) > now) then
      out[#out + 1] = i
      out[#out + 1] = r
    end
  end
end
return out
)lua");
  return s;
}

// Backend::Ping: one script call that touches no key (the floor a lock's
// round trip is compared against).
inline const Script& Ping() {
  static const Script s("return 1");
  return s;
}

// On a Redis Cluster wake-ups go by sharded pub/sub (Redis 7): SPUBLISH
// reaches the nodes of the channel's slot only, where PUBLISH would be
// broadcast to every node. The channel shares the lock key's hash tag, so
// a script may publish on it. Otherwise the same scripts.
inline std::string Sharded(std::string text) {
  const std::string from = "redis.call('PUBLISH'", to = "redis.call('SPUBLISH'";
  for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at)) {
    text.replace(at, from.size(), to);
    at += to.size();
  }
  return text;
}
inline const Script& Acquire(bool sharded) {
  static const Script s(Sharded(Acquire().text));
  return sharded ? s : Acquire();
}
inline const Script& Release(bool sharded) {
  static const Script s(Sharded(Release().text));
  return sharded ? s : Release();
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

// Redlock renewal, per node (the lock key holds the owner). KEYS: lock keys.
// ARGV: owner_1, ttl_ms_1, owner_2, ttl_ms_2, ... One result per key: 1
// renewed, 0 not held by that owner any more.
inline const Script& RedlockRenew() {
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

// Redlock List, per node (the layout of the previous version: the lock key
// holds the owner). KEYS: lock_1, counter_1, lock_2, counter_2, ...
// Returns name, owner, pttl, token for each held one.
inline const Script& RedlockList() {
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
