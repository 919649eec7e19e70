// SimulatedClock: a Clock in which time moves only when a test says so.
//
// Nothing sleeps for real. Advance() walks time forward stopping at every
// deadline on the way, in order: each Loop (a Client's renewal loop) runs on
// the test's own thread at exactly the time it asked for, and threads blocked
// in SleepUntil are released when their deadline is reached. A test is
// therefore deterministic: "the lease is lost exactly at valid_until" can be
// asserted to the nanosecond.
//
// Threads other than the test's may sleep on the clock (a blocking Acquire
// started in a std::thread); AwaitSleepers(n) lets the test wait, on a
// condition rather than a timer, until they have gone to sleep.
//
// Thread-safety: safe from many threads; loops run inside Advance().
#ifndef DLOCK_TESTING_SIMULATED_CLOCK_H_
#define DLOCK_TESTING_SIMULATED_CLOCK_H_

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "dlock/clock.h"

namespace dlock::testing {

class SimulatedClock final : public Clock {
 public:
  // Starts at an arbitrary non-zero time (one day after the epoch of
  // MonotonicClock), so that "zero" never looks like a valid timestamp.
  SimulatedClock();
  explicit SimulatedClock(TimePoint start);
  ~SimulatedClock() override;

  TimePoint Now() const override;
  bool SleepUntil(TimePoint deadline, std::stop_token stop) override;
  std::unique_ptr<Loop> StartLoop(
      std::function<TimePoint(TimePoint now)> run) override;

  // Moves time to Now() + d (or to t), running due loops and waking due
  // sleepers at each deadline on the way. Advance(0) runs loops that were
  // woken. A backend may call it from inside a loop's run to model a slow
  // store call; that loop is not re-entered.
  void Advance(Duration d);
  void AdvanceTo(TimePoint t);

  // Blocks until at least `n` threads are inside SleepUntil with a deadline
  // still in the future.
  void AwaitSleepers(int n);

  // The earliest time a loop or a sleeper waits for, if any.
  std::optional<TimePoint> NextDeadline() const;

 private:
  struct LoopEntry;
  class SimLoop;
  struct Sleeper {
    TimePoint deadline;
  };

  std::optional<TimePoint> NextDeadlineLocked() const;

  mutable std::mutex mu_;
  std::condition_variable_any sleepers_cv_;  // sleepers wait on it
  std::condition_variable count_cv_;         // AwaitSleepers waits on it
  TimePoint now_;
  std::vector<std::shared_ptr<LoopEntry>> loops_;
  std::vector<Sleeper*> sleepers_;
};

}  // namespace dlock::testing

#endif  // DLOCK_TESTING_SIMULATED_CLOCK_H_
