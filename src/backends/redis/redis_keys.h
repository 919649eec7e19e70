// How dlock names things in Redis (docs/backend-redis.md, "Key layout").
//
// A lock key K (1..1024 bytes, anything but NUL) lives under
//
//   dlock:{E}:lock    string, while somebody holds the key (or a lock-delay
//                     runs): "owner|ttl|granted|label" for an exclusive
//                     holding without lock-delay (owner: 32 hex digits;
//                     granted: server ms, empty until known), PX = the
//                     lease; otherwise the guard "*", until the last end in
//                     holders
//   dlock:{E}:token   only from an older dlock: the key's own counter of
//                     grants (now folded into the slot's counter when the
//                     key is next granted or released, then deleted)
//   dlock:{E}:queue   list of waiting owners, in arrival order
//   dlock:{E}:qexp    hash owner -> expiry of that waiter's place (server ms)
//   dlock:{E}:qinfo   hash owner -> "limit|since|ttl|label" of that waiter
//                     (ttl only for an exclusive waiter without lock-delay)
//   dlock:{E}:holders zset owner -> end of the holding (lease end + lock
//                     delay, server ms), for shared and lock-delay holdings
//   dlock:{E}:hinfo   hash owner -> "token|limit|ttl|delay|granted|label"
//   dlock:{E}:fence   highest token admitted by fence::Redis (a string):
//                     the resource's state, not the lock's; it stays
//   dlock:{E}:done    run-once record (Backend::MarkDone): the token of the
//                     lease that set it, PX = its retention
//   dlock:{E}:breaks  list of break records (Backend::RecordBreak), oldest
//                     first, each "at\tkeep_until\towner\ttoken\t
//                     break_token\tby\tlabel" (server ms; keep_until empty:
//                     for ever); PX = the longest retention among them
//
// beside one token counter per hash slot, dlock:{T}:tokens (redis_slots.h),
// and wake-ups are published on the channel dlock:<db>:{E}:wake (pub/sub
// channels are not per database, so the database number is part of it).
//
// E is K with '%', '{' and '}' percent-escaped ("%25", "%7B", "%7D"). That
// makes the braces around E a Redis Cluster hash tag that always covers the
// whole of E (so one key's lock, counter, queue and fence share a slot), and
// keeps names distinct for distinct keys. The escape maps byte by byte, so a
// key prefix escapes to a prefix of the escaped key: List() scans by it.
#ifndef DLOCK_SRC_BACKENDS_REDIS_REDIS_KEYS_H_
#define DLOCK_SRC_BACKENDS_REDIS_REDIS_KEYS_H_

#include <optional>
#include <string>
#include <string_view>

namespace dlock::redis {

std::string EscapeKey(std::string_view key);
// nullopt when `escaped` is not something EscapeKey produced.
std::optional<std::string> UnescapeKey(std::string_view escaped);

std::string LockName(std::string_view key);
std::string CounterName(std::string_view key);
std::string QueueName(std::string_view key);
std::string QueueExpiryName(std::string_view key);
std::string QueueInfoName(std::string_view key);
std::string HoldersName(std::string_view key);
std::string HoldInfoName(std::string_view key);
std::string FenceName(std::string_view key);
std::string DoneName(std::string_view key);
std::string BreaksName(std::string_view key);
std::string WakeChannel(int db, std::string_view key);

// The same names from a key already escaped (EscapeKey), for a call that
// names several Redis keys of one key: role is "lock", "queue", ...
std::string NameOfEscaped(std::string_view escaped, std::string_view role);
std::string WakeChannelOfEscaped(int db, std::string_view escaped);

// For SCAN MATCH: every lock whose key starts with `prefix`.
std::string LockPattern(std::string_view prefix);
// ... every name of every key that starts with `prefix` (counters too).
std::string NamesPattern(std::string_view prefix);
// Whether `name` is one a lock key keeps (lock, queue, holders, run-once
// record...): not a slot's counter, not a fence's state.
bool IsPerKeyName(std::string_view name);
// ... every wait queue whose key starts with `prefix`.
std::string QueuePattern(std::string_view prefix);
// ... every list of break records whose key starts with `prefix`.
std::string BreaksPattern(std::string_view prefix);
// CounterName(K) from LockName(K).
std::string CounterNameOfLock(std::string_view lock_name);
// The lock key K back from a name LockName(K); nullopt for other names.
std::optional<std::string> KeyFromLockName(std::string_view name);
// The lock key K back from a name QueueName(K); nullopt for other names.
std::optional<std::string> KeyFromQueueName(std::string_view name);
// The lock key K back from a name BreaksName(K); nullopt for other names.
std::optional<std::string> KeyFromBreaksName(std::string_view name);

}  // namespace dlock::redis

#endif  // DLOCK_SRC_BACKENDS_REDIS_REDIS_KEYS_H_
