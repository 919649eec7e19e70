// Redis Cluster's hash slots, and the one token counter per slot.
//
// A key's tokens must increase however often its own keys come and go, and
// a script may only touch keys of one slot (in a cluster). So tokens come
// from a counter per hash slot, named so that it lands in the slot of every
// lock key it serves: dlock:{T}:tokens, where the tag T is the first of
// "%s0", "%s1", "%s2", ... (in that order) whose slot is the slot wanted.
// The rule is part of the store layout: every dlock must name the same
// counter for a slot. No escaped lock key starts with "%s" (EscapeKey
// writes '%' only as %25, %7B or %7D), so a counter is never a lock key's.
// Without a cluster the slots mean nothing to the server; they only bound
// the counters at 16384.
#ifndef DLOCK_SRC_BACKENDS_REDIS_REDIS_SLOTS_H_
#define DLOCK_SRC_BACKENDS_REDIS_REDIS_SLOTS_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace dlock::redis {

inline constexpr std::uint16_t kSlotCount = 16384;

// The slot Redis Cluster puts `name` in: CRC16 (XMODEM) of its hash tag
// (the bytes between the first '{' and the next '}', when not empty) or
// else of the whole name, modulo 16384.
std::uint16_t HashSlot(std::string_view name);

// The tag T of `slot`'s counter (above).
const std::string& SlotTag(std::uint16_t slot);

// The token counter of the lock key `key` (a dlock key, not yet escaped),
// and of a key already escaped (EscapeKey).
std::string SlotCounterName(std::string_view key);
std::string SlotCounterNameOfEscaped(std::string_view escaped);

}  // namespace dlock::redis

#endif  // DLOCK_SRC_BACKENDS_REDIS_REDIS_SLOTS_H_
