#include "dlock/testing/simulated_clock.h"

#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace dlock::testing {
namespace {

using std::chrono::milliseconds;

TEST(SimulatedClockTest, LoopsRunAtTheTimesTheyAskForInOrder) {
  SimulatedClock clock;
  const TimePoint t0 = clock.Now();
  std::vector<std::pair<char, Duration>> runs;
  auto a = clock.StartLoop([&](TimePoint now) {
    runs.push_back({'a', now - t0});
    return now + milliseconds(30);
  });
  auto b = clock.StartLoop([&](TimePoint now) {
    runs.push_back({'b', now - t0});
    return now + milliseconds(45);
  });
  clock.Advance(milliseconds(90));
  std::vector<std::pair<char, Duration>> want = {
      {'a', milliseconds(0)},  {'b', milliseconds(0)},  {'a', milliseconds(30)},
      {'b', milliseconds(45)}, {'a', milliseconds(60)}, {'a', milliseconds(90)},
      {'b', milliseconds(90)}};
  EXPECT_EQ(runs, want);
  EXPECT_EQ(clock.Now(), t0 + milliseconds(90));
}

TEST(SimulatedClockTest, WakeRunsALoopAtTheCurrentTime) {
  SimulatedClock clock;
  int runs = 0;
  auto loop = clock.StartLoop([&](TimePoint now) {
    ++runs;
    return now + std::chrono::hours(1);
  });
  clock.Advance(milliseconds(0));
  EXPECT_EQ(runs, 1);
  clock.Advance(milliseconds(10));
  EXPECT_EQ(runs, 1);
  loop->Wake();
  clock.Advance(milliseconds(0));
  EXPECT_EQ(runs, 2);
}

// A Wake that comes while the loop runs (another thread asks for a sooner
// run, as a driver's worker arms a timer while the timer loop posts jobs)
// is not lost to the time that run returns, as RealClock's loop keeps it.
TEST(SimulatedClockTest, AWakeWhileTheLoopRunsRunsItAgain) {
  SimulatedClock clock;
  int runs = 0;
  std::unique_ptr<Loop> loop;
  loop = clock.StartLoop([&](TimePoint now) {
    if (++runs == 1) std::thread([&] { loop->Wake(); }).join();
    return now + std::chrono::hours(1);  // computed before the wake
  });
  clock.Advance(milliseconds(0));
  EXPECT_EQ(runs, 2);
}

TEST(SimulatedClockTest, SleepersWakeAtTheirDeadlineNotBefore) {
  SimulatedClock clock;
  const TimePoint deadline = clock.Now() + milliseconds(100);
  std::atomic<bool> woke{false};
  std::jthread t([&] {
    EXPECT_TRUE(clock.SleepUntil(deadline, {}));
    woke = true;
  });
  clock.AwaitSleepers(1);
  clock.Advance(milliseconds(99));
  clock.AwaitSleepers(1);  // still asleep: its deadline is ahead
  EXPECT_FALSE(woke);
  clock.Advance(milliseconds(1));
  t.join();
  EXPECT_TRUE(woke);
}

TEST(SimulatedClockTest, StopEndsASleep) {
  SimulatedClock clock;
  std::stop_source stop;
  std::jthread t([&] { EXPECT_FALSE(clock.SleepUntil(clock.Now() + std::chrono::hours(1), stop.get_token())); });
  clock.AwaitSleepers(1);
  stop.request_stop();
  t.join();
}

}  // namespace
}  // namespace dlock::testing
