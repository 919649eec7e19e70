// Time and randomness, passed in rather than reached for.
//
// dlock never compares wall clocks. Every deadline and every lease's
// valid_until is a point on MonotonicClock, which is Linux CLOCK_BOOTTIME:
// it never steps when the wall clock is set, and unlike CLOCK_MONOTONIC (what
// std::chrono::steady_clock reads) it keeps counting while the machine is
// suspended. A store's lease keeps expiring during a suspend, so the client's
// own view of it must age too.
//
// Clock is the seam through which the core reads time, sleeps, and runs its
// one background loop per client. RealClock is the production one;
// testing::SimulatedClock (dlock/testing/simulated_clock.h) is its twin in
// which tests move time forward and nothing sleeps.
//
// Thread-safety: all implementations are safe to use from many threads.
#ifndef DLOCK_CLOCK_H_
#define DLOCK_CLOCK_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stop_token>

#include "dlock/export.h"

namespace dlock {

struct DLOCK_EXPORT MonotonicClock {
  using duration = std::chrono::nanoseconds;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<MonotonicClock>;
  static constexpr bool is_steady = true;
  static time_point now() noexcept;  // CLOCK_BOOTTIME
};

using TimePoint = MonotonicClock::time_point;
using Duration = MonotonicClock::duration;

// A periodic job started by Clock::StartLoop. Destroying the handle stops the
// job and waits for a run in progress to finish.
class DLOCK_EXPORT Loop {
 public:
  virtual ~Loop() = default;
  // Asks for a run as soon as possible (e.g. a new lease needs an earlier
  // renewal than the loop planned for).
  virtual void Wake() = 0;
};

class DLOCK_EXPORT Clock {
 public:
  virtual ~Clock() = default;

  virtual TimePoint Now() const = 0;

  // Blocks until Now() >= deadline or `stop` is requested. Returns false if
  // it returned because of `stop`.
  virtual bool SleepUntil(TimePoint deadline, std::stop_token stop) = 0;

  // Runs `run(now)` repeatedly; each run returns the time of the next one.
  // RealClock gives each loop its own thread; SimulatedClock runs loops
  // inside Advance(), on the test's thread, in time order.
  virtual std::unique_ptr<Loop> StartLoop(
      std::function<TimePoint(TimePoint now)> run) = 0;
};

class DLOCK_EXPORT RealClock final : public Clock {
 public:
  TimePoint Now() const override { return MonotonicClock::now(); }
  bool SleepUntil(TimePoint deadline, std::stop_token stop) override;
  std::unique_ptr<Loop> StartLoop(
      std::function<TimePoint(TimePoint now)> run) override;
};

// The process-wide real clock.
DLOCK_EXPORT std::shared_ptr<Clock> DefaultClock();

// Randomness for owner ids and backoff jitter.
class DLOCK_EXPORT Random {
 public:
  virtual ~Random() = default;
  virtual std::uint64_t Next() = 0;
};

// Reads the kernel's CSPRNG (getrandom), so owner ids from different
// processes and machines do not collide.
DLOCK_EXPORT std::shared_ptr<Random> DefaultRandom();

}  // namespace dlock

#endif  // DLOCK_CLOCK_H_
