#include "core/shared_loop.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "dlock/testing/simulated_clock.h"

namespace dlock::internal {
namespace {

using std::chrono::milliseconds;
using testing::SimulatedClock;

TEST(SharedLoopTest, EachJobRunsAtTheTimesItAsksFor) {
  auto clock = std::make_shared<SimulatedClock>();
  const TimePoint t0 = clock->Now();
  std::vector<std::pair<char, Duration>> runs;
  SharedLoop loop(clock);
  loop.Add([&](TimePoint now) {
    runs.push_back({'a', now - t0});
    return now + milliseconds(30);
  });
  loop.Add([&](TimePoint now) {
    runs.push_back({'b', now - t0});
    return now + milliseconds(45);
  });
  clock->Advance(milliseconds(90));
  const std::vector<std::pair<char, Duration>> want = {
      {'a', milliseconds(0)},  {'b', milliseconds(0)},  {'a', milliseconds(30)},
      {'b', milliseconds(45)}, {'a', milliseconds(60)}, {'a', milliseconds(90)},
      {'b', milliseconds(90)}};
  EXPECT_EQ(runs, want);
}

// The point of separate due times: waking the driver's timer must not run
// the renewal round, which walks every held lease.
TEST(SharedLoopTest, AWakerRunsItsOwnJobOnly) {
  auto clock = std::make_shared<SimulatedClock>();
  int a_runs = 0;
  int b_runs = 0;
  SharedLoop loop(clock);
  loop.Add([&](TimePoint now) {
    ++a_runs;
    return now + std::chrono::hours(1);
  });
  const SharedLoop::Waker wake_b = loop.Add([&](TimePoint now) {
    ++b_runs;
    return now + std::chrono::hours(1);
  });
  clock->Advance(milliseconds(0));
  EXPECT_EQ(a_runs, 1);
  EXPECT_EQ(b_runs, 1);
  wake_b(clock->Now());
  clock->Advance(milliseconds(10));
  EXPECT_EQ(a_runs, 1);
  EXPECT_EQ(b_runs, 2);
}

// A waker says by when the job must run; the loop wakes it only if it
// planned its next run later, so a caller keeps no copy of that plan.
TEST(SharedLoopTest, AWakeByALaterTimeThanPlannedRunsNothing) {
  auto clock = std::make_shared<SimulatedClock>();
  int runs = 0;
  SharedLoop loop(clock);
  const SharedLoop::Waker wake = loop.Add([&](TimePoint now) {
    ++runs;
    return now + milliseconds(100);
  });
  clock->Advance(milliseconds(0));
  ASSERT_EQ(runs, 1);
  wake(clock->Now() + milliseconds(500));  // it runs at +100 ms anyway
  clock->Advance(milliseconds(50));
  EXPECT_EQ(runs, 1) << "woken though it was due sooner than asked";
  wake(clock->Now() + milliseconds(10));  // sooner than its +100 ms
  clock->Advance(milliseconds(0));
  EXPECT_EQ(runs, 2) << "not woken though asked for before its plan";
}

TEST(SharedLoopTest, AJobWokenWhileItRunsRunsAgain) {
  auto clock = std::make_shared<SimulatedClock>();
  int runs = 0;
  SharedLoop loop(clock);
  SharedLoop::Waker wake;
  // Even a wake by a time past its plan: the plan is not known while it
  // runs, and may have been made without what asks.
  wake = loop.Add([&](TimePoint now) {
    if (++runs == 1) wake(now + std::chrono::hours(2));
    return now + std::chrono::hours(1);  // computed after the wake
  });
  clock->Advance(milliseconds(0));
  EXPECT_EQ(runs, 2);
}

TEST(SharedLoopTest, AWakerOutlivesItsLoopHarmlessly) {
  auto clock = std::make_shared<SimulatedClock>();
  int runs = 0;
  SharedLoop::Waker wake;
  {
    SharedLoop loop(clock);
    wake = loop.Add([&](TimePoint now) {
      ++runs;
      return now + std::chrono::hours(1);
    });
    clock->Advance(milliseconds(0));
    loop.Stop();
    wake(TimePoint::min());        // stopped
    loop.Add([&](TimePoint now) {  // never runs
      ++runs;
      return now;
    })(TimePoint::min());
  }
  wake(TimePoint::min());  // gone
  clock->Advance(milliseconds(10));
  EXPECT_EQ(runs, 1);
}

// Between jobs, and before the first, the loop waits a bounded time: a
// wait until TimePoint::max() overflows the clock's arithmetic (UBSan).
TEST(SharedLoopTest, AnIdleLoopWaitsABoundedTime) {
  std::promise<void> ran;
  {
    SharedLoop loop(DefaultClock());
    std::this_thread::sleep_for(milliseconds(20));  // an empty turn, likely
    loop.Add([&](TimePoint now) {
      ran.set_value();
      return now + std::chrono::hours(24 * 365);
    });
    ASSERT_EQ(ran.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready);
    std::this_thread::sleep_for(milliseconds(20));  // waiting for the year, capped
  }
}

// A job may end the loop (an on_lost callback drops the last Client): no
// job runs after it, and nothing waits for itself.
TEST(SharedLoopTest, AJobThatDestroysTheLoopIsTheLastToRun) {
  auto loop = std::make_unique<SharedLoop>(DefaultClock());
  std::promise<void> both_added;
  std::promise<void> thread_done;  // the loop's jobs are destroyed with its thread
  std::atomic<int> after{0};
  loop->Add([&, added = both_added.get_future().share()](TimePoint now) {
    added.wait();
    loop.reset();
    return now;
  });
  auto witness = std::shared_ptr<int>(new int(0), [&](int* p) {
    delete p;
    thread_done.set_value();
  });
  loop->Add([&, witness](TimePoint now) {
    ++after;
    return now + std::chrono::hours(1);
  });
  witness.reset();
  both_added.set_value();
  ASSERT_EQ(thread_done.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready)
      << "the loop's thread did not end";
  EXPECT_EQ(loop, nullptr);
  EXPECT_EQ(after.load(), 0) << "a job ran after the one that destroyed the loop";
}

}  // namespace
}  // namespace dlock::internal
