// Acquisition::Notify on ZooKeeper, against the ensemble fixture: a waiter
// is woken by the watch on the node ahead of it (from the client's own
// threads, never inside Notify), a release it did not see between its Try
// and its Notify still wakes it, StopNotify and destruction leave nothing
// registered, and 500 waiters on one key take no thread each and are woken
// one at a time, in their turn. Without Notify the client polls instead:
// the last test counts its attempts.
#include <atomic>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "backends/zookeeper/zookeeper_backend.h"
#include "dlock/client.h"
#include "dlock/testing/faulty_backend.h"
#include "eventually.h"
#include "zk_fixture.h"
#include "zk_requests.h"
#include "threads.h"

namespace dlock::zookeeper {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing_support::Eventually;
using namespace dlock::zookeeper::testing;

// Far longer than any test: a place is never reaped for want of a Try.
constexpr milliseconds kLongQueueTtl{60000};
// How long a wake-up that should not come is given to come anyway.
constexpr milliseconds kQuiet{300};

std::string UniqueKey(std::string_view name) { return RunKey("zk-notify-test", name); }

using dlock::testing_support::ThreadsOfThisProcess;

// A wake-up that counts its calls and the threads they came from; `token`
// is held by the callback only while the store keeps it registered.
struct Wakes {
  std::atomic<int> calls{0};
  std::atomic<bool> on_callers_thread{false};
  std::thread::id caller = std::this_thread::get_id();
  std::shared_ptr<int> token = std::make_shared<int>(0);

  std::function<void()> Wake() {
    return [this, token = token] {
      if (std::this_thread::get_id() == caller) on_callers_thread = true;
      ++calls;
    };
  }
  bool Registered() const { return token.use_count() > 1; }
};

class ZooKeeperNotifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto b = OpenZooKeeper(FixtureOptions());
    ASSERT_TRUE(b != nullptr);
    backend_ = std::move(b);
  }
  // `owner` holds `key`.
  void Hold(const std::string& key, const OwnerId& owner) {
    auto held = Answered([&] { return backend_->TryAcquire(Req(key, owner)); });
    ASSERT_TRUE(held.ok() && held->granted) << held.status().ToString();
  }
  // An acquisition of `key` that was refused once and keeps its place.
  std::unique_ptr<Acquisition> Queued(const std::string& key, const OwnerId& owner) {
    std::unique_ptr<Acquisition> a = backend_->Begin(Req(key, owner, kLongQueueTtl));
    auto first = Answered([&] { return a->Try(); });
    EXPECT_TRUE(first.ok() && !first->granted) << first.status().ToString();
    return a;
  }

  std::unique_ptr<Backend> backend_;
};

TEST_F(ZooKeeperNotifyTest, AWaiterIsWokenByTheReleaseAndNotBefore) {
  const std::string key = UniqueKey("woken");
  const OwnerId holder = NewOwner(), waiter = NewOwner();
  Hold(key, holder);
  auto w = Queued(key, waiter);
  Wakes wakes;
  ASSERT_TRUE(w->Notify(wakes.Wake())) << "the store can tell a waiter; it must not be polled";
  std::this_thread::sleep_for(kQuiet);
  EXPECT_EQ(wakes.calls.load(), 0) << "woken while the key was still held";

  ASSERT_TRUE(backend_->Release(key, holder).ok());
  ASSERT_TRUE(Eventually([&] { return wakes.calls.load() > 0; }, seconds(10)));
  EXPECT_FALSE(wakes.on_callers_thread.load());
  auto granted = Answered([&] { return w->Try(); });
  ASSERT_TRUE(granted.ok() && granted->granted) << granted.status().ToString();
  std::this_thread::sleep_for(kQuiet);
  EXPECT_EQ(wakes.calls.load(), 1) << "a wake-up is called once";
  EXPECT_TRUE(backend_->Release(key, waiter).ok());
}

// The release comes after the Try's look and before Notify: the watch set
// by Notify finds the node ahead gone, and that is a wake-up.
TEST_F(ZooKeeperNotifyTest, AReleaseBeforeTheFirstNotifyIsNotLost) {
  const std::string key = UniqueKey("before-first");
  const OwnerId holder = NewOwner(), waiter = NewOwner();
  Hold(key, holder);
  auto w = Queued(key, waiter);
  ASSERT_TRUE(backend_->Release(key, holder).ok());
  Wakes wakes;
  ASSERT_TRUE(w->Notify(wakes.Wake()));
  ASSERT_TRUE(Eventually([&] { return wakes.calls.load() > 0; }, seconds(10)));
  EXPECT_FALSE(wakes.on_callers_thread.load()) << "called inside Notify";
  auto granted = Answered([&] { return w->Try(); });
  ASSERT_TRUE(granted.ok() && granted->granted) << granted.status().ToString();
  EXPECT_TRUE(backend_->Release(key, waiter).ok());
}

// The watch was already set (by an earlier Notify, stopped) when the
// release came, with no wake-up registered to call: the event is kept in
// the waiter's standing, and the next Notify is woken by it (from the
// keeper, not inside Notify). The stopped one is never called.
TEST_F(ZooKeeperNotifyTest, AReleaseWhileNoWakeUpIsRegisteredIsNotLost) {
  const std::string key = UniqueKey("between");
  const OwnerId holder = NewOwner(), waiter = NewOwner();
  Hold(key, holder);
  auto w = Queued(key, waiter);
  Wakes stopped;
  ASSERT_TRUE(w->Notify(stopped.Wake()));
  std::this_thread::sleep_for(milliseconds(100));  // the watch is set by then
  w->StopNotify();
  EXPECT_FALSE(stopped.Registered()) << "StopNotify kept the wake-up";
  ASSERT_TRUE(backend_->Release(key, holder).ok());
  std::this_thread::sleep_for(kQuiet);  // the event comes, and finds nobody
  EXPECT_EQ(stopped.calls.load(), 0);

  Wakes wakes;
  ASSERT_TRUE(w->Notify(wakes.Wake()));
  ASSERT_TRUE(Eventually([&] { return wakes.calls.load() > 0; }, seconds(10)));
  EXPECT_FALSE(wakes.on_callers_thread.load()) << "called inside Notify";
  EXPECT_FALSE(wakes.Registered()) << "a called wake-up stays registered";
  auto granted = Answered([&] { return w->Try(); });
  ASSERT_TRUE(granted.ok() && granted->granted) << granted.status().ToString();
  EXPECT_EQ(stopped.calls.load(), 0);
  EXPECT_TRUE(backend_->Release(key, waiter).ok());
}

TEST_F(ZooKeeperNotifyTest, StopNotifyAndDestructionLeaveNothingRegistered) {
  const std::string key = UniqueKey("dropped");
  const OwnerId holder = NewOwner();
  Hold(key, holder);
  auto stopped_then_dropped = Queued(key, NewOwner());
  auto dropped = Queued(key, NewOwner());
  Wakes a, b;
  ASSERT_TRUE(stopped_then_dropped->Notify(a.Wake()));
  ASSERT_TRUE(dropped->Notify(b.Wake()));
  EXPECT_TRUE(a.Registered() && b.Registered());
  stopped_then_dropped->StopNotify();
  stopped_then_dropped->StopNotify();  // idempotent
  EXPECT_FALSE(a.Registered());
  stopped_then_dropped.reset();
  dropped.reset();  // without StopNotify
  EXPECT_FALSE(b.Registered()) << "the destructor kept the wake-up";

  ASSERT_TRUE(backend_->Release(key, holder).ok());
  std::this_thread::sleep_for(kQuiet);
  EXPECT_EQ(a.calls.load() + b.calls.load(), 0);
}

// 500 waiters on one key, on one backend: no thread each, and the release
// wakes only the one whose turn it is (the others watch the node just
// ahead of theirs, or, near the head, every node ahead, which a release of
// the holder does not all remove).
TEST_F(ZooKeeperNotifyTest, FiveHundredWaitersTakeNoThreadsAndAreWokenInTurn) {
  constexpr int kWaiters = 500;
  const std::string key = UniqueKey("five-hundred");
  const OwnerId holder = NewOwner();
  Hold(key, holder);
  const int threads_before = ThreadsOfThisProcess();
  std::vector<OwnerId> owners;
  std::vector<std::unique_ptr<Acquisition>> waiting;
  std::vector<std::unique_ptr<Wakes>> wakes;
  for (int i = 0; i < kWaiters; ++i) {
    owners.push_back(NewOwner());
    waiting.push_back(Queued(key, owners.back()));
    wakes.push_back(std::make_unique<Wakes>());
    ASSERT_TRUE(waiting.back()->Notify(wakes.back()->Wake()));
  }
  EXPECT_EQ(ThreadsOfThisProcess(), threads_before) << "a thread per pending acquisition";
  auto woken = [&] {
    std::vector<int> out;
    for (int i = 0; i < kWaiters; ++i) {
      if (wakes[i]->calls.load() > 0) out.push_back(i);
    }
    return out;
  };
  std::this_thread::sleep_for(kQuiet);
  EXPECT_TRUE(woken().empty());

  // Two hand-offs: each wakes the next in line, and only it.
  ASSERT_TRUE(backend_->Release(key, holder).ok());
  for (int turn = 0; turn < 2; ++turn) {
    ASSERT_TRUE(
        Eventually([&] { return woken().size() > static_cast<std::size_t>(turn); }, seconds(10)));
    std::this_thread::sleep_for(kQuiet);
    std::vector<int> in_turn;
    for (int i = 0; i <= turn; ++i) in_turn.push_back(i);
    EXPECT_EQ(woken(), in_turn);
    auto granted = Answered([&] { return waiting[turn]->Try(); });
    ASSERT_TRUE(granted.ok() && granted->granted) << granted.status().ToString();
    ASSERT_TRUE(backend_->Release(key, owners[turn]).ok());
  }
  for (auto& w : waiting) w->StopNotify();
  for (auto& w : waiting) w->Abandon();
}

// Through the client: an asynchronous waiter makes one attempt, is told of
// the release, and makes one more, which is granted. Polling (what the core
// does when Notify says false) would have made an attempt every few ms.
TEST(ZooKeeperNotifyClientTest, AnAsyncWaiterIsGrantedWithoutPolling) {
  auto plan = std::make_shared<dlock::testing::FaultPlan>();
  auto holder = Client::Connect(FixtureUri());
  ASSERT_TRUE(holder.ok()) << holder.status().ToString();
  auto waiter = Client::FromBackend(
      std::make_unique<dlock::testing::FaultyBackend>(OpenZooKeeper(FixtureOptions()), plan));
  const std::string key = UniqueKey("async");
  AcquireOptions opts;
  opts.ttl = seconds(30);
  opts.wait = seconds(30);
  auto lease = (*holder)->Acquire(key, opts);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();

  // Shared with the callback: an assertion that returns early leaves it
  // nothing dangling.
  auto answer = std::make_shared<std::promise<Result<Lease>>>();
  waiter->AcquireAsync(key, opts, [answer](Result<Lease> l) { answer->set_value(std::move(l)); });
  ASSERT_TRUE(Eventually([&] { return plan->Notifies() >= 1; }, seconds(10)));
  const TimePoint quiet_from = MonotonicClock::now();
  const int tries = plan->Tries();
  std::this_thread::sleep_for(milliseconds(500));
  // The core's own timer refreshes the place every second (a third of its
  // queue ttl); nothing else may attempt.
  auto refreshes = [&] { return (MonotonicClock::now() - quiet_from) / seconds(1); };
  EXPECT_LE(plan->Tries() - tries, refreshes()) << "the waiter polled the store";

  ASSERT_TRUE(lease->Release().ok());
  auto f = answer->get_future();
  ASSERT_EQ(f.wait_for(seconds(10)), std::future_status::ready);
  auto granted = f.get();
  ASSERT_TRUE(granted.ok()) << granted.status().ToString();
  EXPECT_EQ(plan->BlindNotifies(), 0);
  EXPECT_LE(plan->Tries() - tries, refreshes() + 1);
  EXPECT_TRUE(granted->Release().ok());
}

}  // namespace
}  // namespace dlock::zookeeper
