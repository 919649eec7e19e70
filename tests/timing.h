// Timing margins taken from the machine a test runs on. A test that tells a
// fast path (a notification, a watch, a pub/sub wake-up) from a slow fallback
// (a poll, a re-armed wait, a lease running out) measures what the fast path
// costs here and now, and bounds the latency it observes by a multiple of
// that, never above the fallback. A fixed bound is either too tight for a
// loaded machine or too loose to catch the fallback; users' machines are
// rarely idle.
#ifndef DLOCK_TESTS_TIMING_H_
#define DLOCK_TESTS_TIMING_H_

#include <algorithm>
#include <chrono>
#include <ostream>
#include <semaphore>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "dlock/client.h"
#include "dlock/clock.h"

namespace dlock::testing_support {

// Whole milliseconds of `d`, for a test's messages.
inline long long Millis(Duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

// Sleeps for `d` in steps of `step` and returns the longest gap between two
// steps: far above `step` when the machine stalled this process. A check
// that such a stall can fail legitimately (a session or lease shorter than
// the stall, which then ends as it should) is reported, not asserted, when
// the stall reached its margin.
inline Duration SleepNotingStalls(Duration d, Duration step = std::chrono::milliseconds(10)) {
  const TimePoint end = MonotonicClock::now() + d;
  TimePoint last = MonotonicClock::now();
  Duration longest{0};
  while (last < end) {
    std::this_thread::sleep_for(std::min<Duration>(step, end - last));
    const TimePoint now = MonotonicClock::now();
    longest = std::max<Duration>(longest, now - last);
    last = now;
  }
  return longest;
}

// The slowest of `n` runs of `fn`: its cost on a busy machine, not its best.
template <typename F>
Duration MeasureSlowest(int n, F fn) {
  Duration slowest{0};
  for (int i = 0; i < n; ++i) {
    const TimePoint start = MonotonicClock::now();
    fn();
    slowest = std::max<Duration>(slowest, MonotonicClock::now() - start);
  }
  return slowest;
}

// The slowest of `n` runs of `fn`, each on a thread blocked until then,
// from letting it go to fn's end: a woken waiter's step with its wake, which
// on a busy machine is most of it.
template <typename F>
Duration MeasureWokenSlowest(int n, F fn) {
  Duration slowest{0};
  for (int i = 0; i < n; ++i) {
    std::binary_semaphore go{0};
    TimePoint done;
    std::jthread woken([&] {
      go.acquire();
      fn();
      done = MonotonicClock::now();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // most likely blocked by then
    const TimePoint start = MonotonicClock::now();
    go.release();
    woken.join();
    slowest = std::max<Duration>(slowest, done - start);
  }
  return slowest;
}

// What a hand-off's hops cost `client` now: an uncontended grant and
// release of `key` (a name of its own) by a woken thread, the slowest of
// three after one that may connect or start the session.
inline Duration GrantAndReleaseCost(Client& client, const std::string& key,
                                    std::chrono::milliseconds ttl) {
  auto once = [&] {
    AcquireOptions opts;
    opts.ttl = ttl;
    auto lease = client.TryAcquire(key, opts);
    EXPECT_TRUE(lease.ok()) << lease.status().ToString();
    if (lease.ok()) {
      EXPECT_TRUE(lease->Release().ok());
    }
  };
  once();
  return MeasureWokenSlowest(3, once);
}

// What a latency is asserted to stay below. `limit` never exceeds
// `fallback`, so a latency below it cannot have come by the fallback; when
// the machine is so slow that the wanted margin reaches the fallback,
// `separates` is false and the failure message says the test could not tell
// the two apart. A fallback that polls is sometimes as quick as the fast
// path: a test against one asserts on several samples, not one.
struct FastPathBound {
  Duration limit;
  Duration measured;  // the fast path's measured cost
  Duration floor;
  Duration fallback;
  int factor;
  bool separates;
};

// The path under test has more steps than the one measured (a wake, a
// look, a grant), each of which a busy machine may stall; the factor leaves
// room for them and still keeps a bound well below a fallback of a second.
inline constexpr int kFastPathFactor = 8;

// max(floor, factor × measured), capped at the fallback's latency.
inline FastPathBound FastPath(Duration measured, Duration floor, Duration fallback,
                              int factor = kFastPathFactor) {
  const Duration wanted = std::max<Duration>(floor, measured * factor);
  return {std::min(wanted, fallback), measured, floor, fallback, factor, wanted < fallback};
}

// For a wake-up whose fallback (a re-arm, a poll) is `b.fallback` away:
// anything before half of it was woken, however long a busy machine made
// the wake-up itself; and never less than the fast path's own bound.
inline Duration WokenWithin(const FastPathBound& b) {
  return std::max<Duration>(b.limit, b.fallback / 2);
}

inline std::ostream& operator<<(std::ostream& os, const FastPathBound& b) {
  os << "bound " << Millis(b.limit) << " ms = max(floor " << Millis(b.floor) << " ms, " << b.factor
     << " x measured " << Millis(b.measured) << " ms), below the fallback's " << Millis(b.fallback)
     << " ms";
  if (!b.separates) {
    os << "; this machine is too slow right now to tell the fast path from the fallback";
  }
  return os;
}

}  // namespace dlock::testing_support

#endif  // DLOCK_TESTS_TIMING_H_
