// The sharing rule of backend.h, written once for every store written in
// C++, for a Backend to call (the SQL and Lua stores carry their own copy,
// checked against the same table of cases in tests/conformance/
// sharing_cases.h):
//
//     a request is granted when
//       holders + waiters queued ahead of it + 1
//         <= the smallest limit among itself, those holders and waiters
//
// Limit 1 is a writer (a mutex), N a semaphore's permit, kSharedLimit a
// reader. A holder inside its lock-delay still counts.
//
// Pure functions: safe from any thread.
#ifndef DLOCK_SHARING_H_
#define DLOCK_SHARING_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "dlock/export.h"

namespace dlock {

// Whether a request of `limit` is granted behind `ahead` holders and
// waiters whose smallest limit is `smallest_ahead` (ignored when ahead is 0).
constexpr bool Admits(std::size_t ahead, std::uint32_t smallest_ahead, std::uint32_t limit) {
  const std::uint32_t smallest = ahead == 0 ? limit : std::min(limit, smallest_ahead);
  return ahead + 1 <= smallest;
}

// What a queued request does next, for stores that keep every holder and
// waiter as one ordered queue (etcd's keys, ZooKeeper's sequential nodes):
// take the key, or which of those ahead to wait for.
struct QueueDecision {
  enum class Outcome {
    kGranted,
    // Wait until ahead[watch] is gone: the nearest writer ahead, or for a
    // writer its predecessor. Until it goes this request cannot be granted.
    kWatchOne,
    // No single one must go (a semaphore's waiter): wait for any of them.
    kWatchAll,
    // Only holdings in their lock-delay stand in the way: wait for those.
    kWaitForDelays,
  };
  Outcome outcome = Outcome::kGranted;
  std::size_t watch = 0;  // kWatchOne: an index into `ahead`

  friend bool operator==(const QueueDecision&, const QueueDecision&) = default;
};

// `ahead`: the limits of the holders and waiters before this request, in
// queue order. `delayed`: the limits of holdings that ended uncleanly and
// are still inside their lock-delay (they count, but no queue position
// waits on them). `limit`: this request's.
DLOCK_EXPORT QueueDecision DecideQueue(std::span<const std::uint32_t> ahead,
                          std::span<const std::uint32_t> delayed, std::uint32_t limit);

}  // namespace dlock

#endif  // DLOCK_SHARING_H_
