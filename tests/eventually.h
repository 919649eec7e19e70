// Eventually: a bounded wait for a condition tests cannot be told about,
// polled instead of slept on, so a test waits as long as the machine needs
// and no longer.
#ifndef DLOCK_TESTS_EVENTUALLY_H_
#define DLOCK_TESTS_EVENTUALLY_H_

#include <chrono>
#include <thread>

#include "dlock/clock.h"

namespace dlock::testing_support {

// Polls `done` every `every` for up to `limit`; true once it holds.
template <typename F>
bool Eventually(F done, std::chrono::milliseconds limit = std::chrono::milliseconds(5000),
                std::chrono::milliseconds every = std::chrono::milliseconds(5)) {
  const auto until = MonotonicClock::now() + limit;
  while (MonotonicClock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(every);
  }
  return done();
}

}  // namespace dlock::testing_support

#endif  // DLOCK_TESTS_EVENTUALLY_H_
