// Asynchronous waiters on the real SQLite backend (Acquisition::Notify, the
// backend's one WalWatcher thread), in real time: a waiter is woken by the
// write that lets it in, and only then; nothing is lost between its Try and
// its Notify; nothing stays registered; hundreds of them add no thread.
#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "backends/sqlite/sqlite_backend.h"
#include "dlock/client.h"
#include "dlock/testing/faulty_backend.h"
#include "eventually.h"
#include "threads.h"

namespace dlock::sqlite {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing_support::Eventually;

// Longer than anything here takes on a loaded machine: a wake that does not
// come fails the test rather than hanging it.
constexpr milliseconds kPatience{60'000};
// How long a test watches for a wake that must not come: the watcher looks
// again for ~25 ms after each change to the file, so this covers it.
constexpr milliseconds kQuiet{150};
// The core's queue place (kQueueTtl in src/core/acquire_step.h); a waiter
// refreshes it (one Try) every third of it.
constexpr milliseconds kQueueTtl{3000};
// The queue place of a waiter these tests drive by hand, which nothing
// refreshes: it outlasts the test, so a slow machine cannot let it lapse
// (a lapsed place ahead lets the next waiter's turn come early).
constexpr milliseconds kUnrefreshedPlace = kPatience;

using dlock::testing_support::ThreadsOfThisProcess;

// What one registration's wake saw; shared with the wake, which may
// outlive a failed assertion.
struct Woken {
  std::atomic<int> count{0};
  std::atomic<bool> on_caller{false};
  std::thread::id caller = std::this_thread::get_id();

  std::function<void()> Wake(const std::shared_ptr<Woken>& self) {
    return [self] {
      if (std::this_thread::get_id() == self->caller) self->on_caller = true;
      ++self->count;
    };
  }
  bool Came() {
    return Eventually([&] { return count.load() > 0; }, kPatience);
  }
  bool StaysAway() {
    std::this_thread::sleep_for(kQuiet);
    return count.load() == 0;
  }
};

class SqliteNotifyTest : public ::testing::Test {
 protected:
  SqliteNotifyTest() {
    char tmpl[] = "/tmp/dlock-sqlite-notify.XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  ~SqliteNotifyTest() override { std::filesystem::remove_all(dir_); }

  // One connection, as one process would have: real clocks.
  std::unique_ptr<Backend> OpenBackend() {
    SqliteOptions options;
    options.path = dir_ + "/locks.db";
    auto backend = Open(options);
    EXPECT_TRUE(backend.ok()) << backend.status().ToString();
    return backend.ok() ? std::move(*backend) : nullptr;
  }

  static LeaseRequest Waiting(const OwnerId& owner, std::uint32_t limit = 1) {
    LeaseRequest request{"k", owner, seconds(30), kUnrefreshedPlace};
    request.limit = limit;
    return request;
  }

  std::string dir_;
};

AcquireOptions WaitingOptions() {
  AcquireOptions o;
  o.ttl = seconds(30);
  o.wait = seconds(100);
  return o;
}

TEST_F(SqliteNotifyTest, AReleaseBetweenTryAndNotifyIsNotLost) {
  auto holders = OpenBackend();
  auto waiters = OpenBackend();
  ASSERT_TRUE(holders && waiters);
  const OwnerId holder(1, 1);
  ASSERT_TRUE(holders->TryAcquire({"k", holder, seconds(30)})->granted);
  auto acquisition = waiters->Begin(Waiting(OwnerId(2, 2)));
  auto tried = acquisition->Try();
  ASSERT_TRUE(tried.ok() && !tried->granted);
  // Released by another connection before the waiter asks to be woken: no
  // change to the file comes after Notify, only the first check can see it.
  ASSERT_TRUE(holders->Release("k", holder).ok());
  auto woken = std::make_shared<Woken>();
  ASSERT_TRUE(acquisition->Notify(woken->Wake(woken)));
  ASSERT_TRUE(woken->Came());
  EXPECT_FALSE(woken->on_caller) << "woken inside Notify";
  EXPECT_EQ(woken->count.load(), 1);
  EXPECT_EQ(PendingNotifications(*waiters), 0u);
  EXPECT_TRUE(acquisition->Try()->granted);
}

// Only the waiter whose turn it is wakes: the second in line sleeps through
// the release, the first one's grant, and wakes at the first one's release.
TEST_F(SqliteNotifyTest, OnlyTheWaiterWhoseTurnItIsIsWoken) {
  auto holders = OpenBackend();
  auto waiters = OpenBackend();
  ASSERT_TRUE(holders && waiters);
  const OwnerId holder(1, 1), first(2, 2), second(3, 3);
  ASSERT_TRUE(holders->TryAcquire({"k", holder, seconds(30)})->granted);
  auto a = waiters->Begin(Waiting(first));
  auto b = waiters->Begin(Waiting(second));
  ASSERT_FALSE(a->Try()->granted);
  ASSERT_FALSE(b->Try()->granted);
  auto woke_a = std::make_shared<Woken>(), woke_b = std::make_shared<Woken>();
  ASSERT_TRUE(a->Notify(woke_a->Wake(woke_a)));
  ASSERT_TRUE(b->Notify(woke_b->Wake(woke_b)));
  EXPECT_TRUE(woke_a->StaysAway() && woke_b->StaysAway()) << "woken while the key is held";
  EXPECT_EQ(PendingNotifications(*waiters), 2u);

  ASSERT_TRUE(holders->Release("k", holder).ok());
  ASSERT_TRUE(woke_a->Came());
  EXPECT_TRUE(woke_b->StaysAway()) << "the second in line woke at the first one's turn";
  ASSERT_TRUE(a->Try()->granted);
  EXPECT_TRUE(woke_b->StaysAway()) << "the second in line woke at the first one's grant";
  EXPECT_EQ(PendingNotifications(*waiters), 1u);

  ASSERT_TRUE(waiters->Release("k", first).ok());
  ASSERT_TRUE(woke_b->Came());
  EXPECT_TRUE(b->Try()->granted);
  EXPECT_EQ(woke_a->count.load(), 1);
  EXPECT_EQ(woke_b->count.load(), 1);
  EXPECT_EQ(PendingNotifications(*waiters), 0u);
}

TEST_F(SqliteNotifyTest, StopNotifyAndDestructionLeaveNothingRegistered) {
  auto holders = OpenBackend();
  auto waiters = OpenBackend();
  ASSERT_TRUE(holders && waiters);
  const OwnerId holder(1, 1);
  ASSERT_TRUE(holders->TryAcquire({"k", holder, seconds(30)})->granted);
  auto stopped = waiters->Begin(Waiting(OwnerId(2, 2)));
  auto dropped = waiters->Begin(Waiting(OwnerId(3, 3)));
  ASSERT_FALSE(stopped->Try()->granted);
  ASSERT_FALSE(dropped->Try()->granted);
  auto woke_stopped = std::make_shared<Woken>(), woke_dropped = std::make_shared<Woken>();
  ASSERT_TRUE(stopped->Notify(woke_stopped->Wake(woke_stopped)));
  ASSERT_TRUE(dropped->Notify(woke_dropped->Wake(woke_dropped)));
  EXPECT_EQ(PendingNotifications(*waiters), 2u);
  stopped->StopNotify();
  stopped->StopNotify();  // idempotent
  EXPECT_EQ(PendingNotifications(*waiters), 1u);
  dropped.reset();  // a waiter that died mid-wait
  EXPECT_EQ(PendingNotifications(*waiters), 0u);
  ASSERT_TRUE(holders->Release("k", holder).ok());
  EXPECT_TRUE(woke_stopped->StaysAway());
  EXPECT_TRUE(woke_dropped->StaysAway());
}

// A holder that died writes nothing when its lease ends: the waiter wakes at
// that expiry all the same.
TEST_F(SqliteNotifyTest, AWaiterWakesWhenTheHoldingThatBlocksItLapses) {
  auto holders = OpenBackend();
  auto waiters = OpenBackend();
  ASSERT_TRUE(holders && waiters);
  constexpr milliseconds kTtl{400};
  // Before the attempt: the store counts the ttl from inside it.
  const auto asked_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(holders->TryAcquire({"k", OwnerId(1, 1), kTtl})->granted);
  auto acquisition = waiters->Begin(Waiting(OwnerId(2, 2)));
  ASSERT_FALSE(acquisition->Try()->granted);
  auto woken = std::make_shared<Woken>();
  ASSERT_TRUE(acquisition->Notify(woken->Wake(woken)));
  ASSERT_TRUE(woken->Came());
  // (The store's clock counts whole milliseconds.)
  EXPECT_GE(std::chrono::steady_clock::now() - asked_at, kTtl - milliseconds(1))
      << "woken before the expiry";
  EXPECT_TRUE(acquisition->Try()->granted);
}

// The mechanism through the client: a pending asynchronous acquisition is
// refused once, then makes no attempt (no polling) until the release wakes
// it, and the store could give every notification it was asked for.
TEST_F(SqliteNotifyTest, APendingAsyncAcquireWaitsWithoutPollingUntilTheRelease) {
  auto holder = Client::FromBackend(OpenBackend());
  auto plan = std::make_shared<testing::FaultPlan>();
  auto waiters = Client::FromBackend(std::make_unique<testing::FaultyBackend>(OpenBackend(), plan));
  auto held = holder->Acquire("k", WaitingOptions());
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  auto pending = waiters->AcquireFuture("k", WaitingOptions());
  ASSERT_TRUE(Eventually([&] { return plan->Notifies() >= 1; }, kPatience));
  const auto refused_at = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(milliseconds(300));  // a poller tries ~8 times in this
  // The place's refresh (one Try a third of the queue ttl later) is the
  // only attempt allowed before the wake.
  if (std::chrono::steady_clock::now() - refused_at < kQueueTtl / 3) {
    EXPECT_EQ(plan->Tries(), 1) << "the waiter polled";
  }
  EXPECT_EQ(plan->BlindNotifies(), 0) << "of " << plan->Notifies() << " notifications";
  const int tries_before = plan->Tries();
  ASSERT_TRUE(held->Release().ok());
  ASSERT_EQ(pending.wait_for(kPatience), std::future_status::ready);
  auto lease = pending.get();
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ(plan->Tries(), tries_before + 1) << "more than one attempt after the wake";
  EXPECT_EQ(plan->BlindNotifies(), 0);
}

// 500 asynchronous acquisitions wait on one key of one backend: the
// backend's one watcher thread serves them all, each wakes in its turn, and
// nothing stays registered.
TEST_F(SqliteNotifyTest, FiveHundredPendingAcquisitionsAddNoThreads) {
  auto holder = Client::FromBackend(OpenBackend());
  auto backend = OpenBackend();
  ASSERT_TRUE(holder && backend);
  Backend* raw = backend.get();  // owned by the client, which outlives its use here
  auto plan = std::make_shared<testing::FaultPlan>();
  auto waiters =
      Client::FromBackend(std::make_unique<testing::FaultyBackend>(std::move(backend), plan));
  int after_first_round = 0, peak_growth = 0;
  for (const int n : {5, 500}) {
    auto held = holder->Acquire("k", WaitingOptions());
    ASSERT_TRUE(held.ok()) << held.status().ToString();
    struct Answers {
      std::atomic<int> granted{0}, answered{0};
      std::promise<void> all;
    };
    auto answers = std::make_shared<Answers>();
    for (int i = 0; i < n; ++i) {
      waiters->AcquireAsync("k", WaitingOptions(), [answers, n](Result<Lease> lease) {
        if (lease.ok()) {
          ++answers->granted;
          (void)lease->Release();  // the next one's turn
        }
        if (answers->answered.fetch_add(1) + 1 == n) answers->all.set_value();
      });
    }
    // All registered at once (a waiter refreshing its place is briefly not).
    ASSERT_TRUE(Eventually(
        [&] { return PendingNotifications(*raw) == static_cast<std::size_t>(n); }, kPatience));
    if (n == 500) peak_growth = ThreadsOfThisProcess() - after_first_round;
    ASSERT_TRUE(held->Release().ok());
    ASSERT_EQ(answers->all.get_future().wait_for(kPatience), std::future_status::ready);
    EXPECT_EQ(answers->granted.load(), n);
    if (n == 5) after_first_round = ThreadsOfThisProcess();
  }
  EXPECT_LE(peak_growth, 1) << "threads grew with the number of pending acquisitions";
  EXPECT_EQ(PendingNotifications(*raw), 0u);
  EXPECT_EQ(plan->BlindNotifies(), 0) << "of " << plan->Notifies() << " notifications";
  std::cout << "attempts: " << plan->Tries() << ", notifications: " << plan->Notifies()
            << ", of which the store could not give: " << plan->BlindNotifies() << "\n";
}

}  // namespace
}  // namespace dlock::sqlite
