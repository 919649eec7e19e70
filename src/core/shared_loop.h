// SharedLoop: one Clock loop (one thread under RealClock) that runs several
// timed jobs of a client: the renewal of its leases and the asynchronous
// API's timers. Each job runs when the time its last run returned comes, or
// when it is woken; the others are not run with it.
//
// Why one thread and not one per job: a client's threads are a budget its
// users count (issue 25: four beyond the application's). The price is that
// the jobs take turns: a renewal round (a store round trip, bounded by the
// attempt timeout, and the on_lost callbacks it runs) delays a due timer by
// as much. A timer only posts an acquisition's next step to the workers, so
// it is late by one round trip at worst, not blocked; docs/async.md.
//
// Thread-safety: every method may be called from any thread, including from
// a job. A job may destroy the SharedLoop (a callback that drops the last
// Client): the loop stops, and no job runs after the one that did.
#ifndef DLOCK_SRC_CORE_SHARED_LOOP_H_
#define DLOCK_SRC_CORE_SHARED_LOOP_H_

#include <cstddef>
#include <functional>
#include <memory>

#include "dlock/clock.h"

namespace dlock::internal {

class SharedLoop {
 public:
  using Run = std::function<TimePoint(TimePoint now)>;
  // Asks one job to run by `by` at the latest: at the loop's next turn if
  // its last run planned the next one later (or it is running now, and may
  // have planned without what asks), else nothing. Callers need not track
  // when the job runs next. Does nothing once the loop has stopped, so it
  // may outlive the loop.
  using Waker = std::function<void(TimePoint by)>;

  explicit SharedLoop(std::shared_ptr<Clock> clock);
  ~SharedLoop();  // Stop()
  SharedLoop(const SharedLoop&) = delete;
  SharedLoop& operator=(const SharedLoop&) = delete;

  // Adds a job, first run at the loop's next turn; `run(now)` returns when
  // it wants to run next.
  Waker Add(Run run);
  // Runs no job from here on; waits for a job in progress unless called
  // from one.
  void Stop();

 private:
  struct State;
  std::shared_ptr<State> state_;
  std::unique_ptr<Loop> loop_;
};

}  // namespace dlock::internal

#endif  // DLOCK_SRC_CORE_SHARED_LOOP_H_
