// Acquisition::Notify on etcd: a waiter is woken by the going of the key
// just ahead of it, on the client's one shared watch stream's thread, and by
// nothing else; a release between Try and Notify is not lost; StopNotify and
// destruction leave no watch behind, at the client or at etcd; and many
// pending asynchronous acquisitions take no thread and no stream of their
// own, and are not tried again until woken.
#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "dlock/testing/faulty_backend.h"
#include "etcd_test_util.h"
#include "eventually.h"
#include "threads.h"

namespace dlock::etcd::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing_support::Eventually;

// Long enough for any wake-up that is coming on a loaded machine (under
// TSan too); a missing one fails the test rather than hanging it.
constexpr milliseconds kPatience{20000};
// How long a waiter must stay unwoken to show nothing woke it: longer than
// the core's polling backoff (50 ms) many times over, shorter than the
// core's refresh of a waiter's place (a third of its 3 s queue TTL).
constexpr milliseconds kQuiet{400};

LeaseRequest Req(const std::string& name, OwnerId owner) {
  LeaseRequest r;
  r.key = name;
  r.owner = owner;
  r.ttl = seconds(5);
  return r;
}

LeaseRequest Queued(const std::string& name, OwnerId owner) {
  LeaseRequest r = Req(name, owner);
  r.queue_ttl = seconds(30);
  return r;
}

OwnerId NewOwner() {
  static std::atomic<std::uint64_t> n{1};
  return OwnerId(DefaultRandom()->Next() | 1, n++);
}

using dlock::testing_support::ThreadsOfThisProcess;

// One acquisition's wake-ups. Shared with the callback, so that a late one
// finds it alive.
struct Wakes {
  std::mutex mu;
  std::condition_variable cv;
  int count = 0;
  bool on_callers_thread = false;
  std::thread::id caller = std::this_thread::get_id();

  static std::function<void()> Into(const std::shared_ptr<Wakes>& w) {
    return [w] {
      std::lock_guard l(w->mu);
      ++w->count;
      w->on_callers_thread |= std::this_thread::get_id() == w->caller;
      w->cv.notify_all();
    };
  }
  bool Await(Duration limit) {
    std::unique_lock l(mu);
    return cv.wait_for(l, limit, [&] { return count > 0; });
  }
  int Count() {
    std::lock_guard l(mu);
    return count;
  }
};

// A holder and a waiting acquisition of one name, on backends of their own.
struct Contended {
  std::string name;
  std::unique_ptr<EtcdBackend> holder = NewBackend();
  std::unique_ptr<EtcdBackend> waiter = NewBackend();
  OwnerId h = NewOwner();
  std::unique_ptr<Acquisition> acquisition;

  explicit Contended(std::string_view n) : name(UniqueName(n)) {
    EXPECT_TRUE(holder->TryAcquire(Req(name, h))->granted);
    acquisition = waiter->Begin(Queued(name, NewOwner()));
    Result<Attempt> first = acquisition->Try();
    EXPECT_TRUE(first.ok() && !first->granted) << first.status().ToString();
  }
};

TEST(EtcdNotifyTest, AWaiterIsWokenByTheReleaseAheadOfItAndByNothingElse) {
  Contended c("notify-release");
  auto wakes = std::make_shared<Wakes>();
  ASSERT_TRUE(c.acquisition->Notify(Wakes::Into(wakes))) << "the store could not tell";
  EXPECT_FALSE(wakes->Await(kQuiet)) << "woken while the key ahead was still held";
  EXPECT_EQ(c.waiter->Notices().registered, 1U);

  ASSERT_TRUE(c.holder->Release(c.name, c.h).ok());
  ASSERT_TRUE(wakes->Await(kPatience)) << "not woken by the release";
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(wakes->Count(), 1) << "woken more than once";
  EXPECT_FALSE(wakes->on_callers_thread);
  EXPECT_EQ(c.waiter->Notices().registered, 0U) << "a watch that fired is still registered";

  Result<Attempt> again = c.acquisition->Try();
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->granted);
}

// The deletion comes after the Try read the queue and before the watch
// exists: the watch's check against the Try's read catches it.
TEST(EtcdNotifyTest, AReleaseBetweenTryAndNotifyIsNotLost) {
  for (int i = 0; i < 3; ++i) {  // the gap is closed whichever member serves the watch
    Contended c("notify-gap");
    ASSERT_TRUE(c.holder->Release(c.name, c.h).ok());
    auto wakes = std::make_shared<Wakes>();
    ASSERT_TRUE(c.acquisition->Notify(Wakes::Into(wakes)));
    ASSERT_TRUE(wakes->Await(kPatience)) << "the release before Notify was lost";
    EXPECT_FALSE(wakes->on_callers_thread) << "woken inside Notify";
    Result<Attempt> again = c.acquisition->Try();
    ASSERT_TRUE(again.ok() && again->granted) << again.status().ToString();
  }
}

TEST(EtcdNotifyTest, StopNotifyAndDestructionLeaveNoWatchBehind) {
  const std::string name = UniqueName("notify-stop");
  auto holder = NewBackend();
  auto backend = NewBackend();
  const OwnerId h = NewOwner();
  ASSERT_TRUE(holder->TryAcquire(Req(name, h))->granted);
  std::vector<std::unique_ptr<Acquisition>> waiting;
  std::vector<std::shared_ptr<Wakes>> wakes;
  for (int i = 0; i < 3; ++i) {
    waiting.push_back(backend->Begin(Queued(name, NewOwner())));
    auto tried = waiting.back()->Try();
    ASSERT_TRUE(tried.ok() && !tried->granted) << tried.status().ToString();
    wakes.push_back(std::make_shared<Wakes>());
    ASSERT_TRUE(waiting.back()->Notify(Wakes::Into(wakes.back())));
  }
  EXPECT_EQ(backend->Notices().registered, 3U);
  EXPECT_EQ(backend->Notices().streams, 1U) << "one stream carries every watch";
  ASSERT_TRUE(Eventually([&] { return backend->Notices().open_at_store == 3; }))
      << "etcd has " << backend->Notices().open_at_store << " watches open";

  waiting[0]->StopNotify();
  waiting[0]->StopNotify();  // idempotent
  waiting[0].reset();
  waiting[1].reset();  // dropped while notifying
  waiting[2]->Abandon();
  EXPECT_EQ(backend->Notices().registered, 0U);
  EXPECT_TRUE(Eventually([&] { return backend->Notices().open_at_store == 0; }))
      << "etcd still has " << backend->Notices().open_at_store << " watches open";

  ASSERT_TRUE(holder->Release(name, h).ok());
  std::this_thread::sleep_for(kQuiet);
  for (auto& w : wakes) EXPECT_EQ(w->Count(), 0) << "a stopped wake-up ran";
}

// Each waiter watches only the key just ahead of it: a hand-off wakes the
// next waiter and no other, however many wait.
TEST(EtcdNotifyTest, AHandOffWakesOnlyTheNextWaiter) {
  constexpr int kWaiters = 50;
  const std::string name = UniqueName("notify-one");
  auto holder = NewBackend();
  auto backend = NewBackend();
  const OwnerId h = NewOwner();
  ASSERT_TRUE(holder->TryAcquire(Req(name, h))->granted);
  std::vector<OwnerId> owners;
  std::vector<std::unique_ptr<Acquisition>> waiting;
  std::vector<std::shared_ptr<Wakes>> wakes;
  for (int i = 0; i < kWaiters; ++i) {
    owners.push_back(NewOwner());
    waiting.push_back(backend->Begin(Queued(name, owners.back())));
    auto tried = waiting.back()->Try();
    ASSERT_TRUE(tried.ok() && !tried->granted) << tried.status().ToString();
    wakes.push_back(std::make_shared<Wakes>());
    ASSERT_TRUE(waiting.back()->Notify(Wakes::Into(wakes.back())));
  }
  auto woken = [&] {
    int n = 0;
    for (auto& w : wakes) n += w->Count();
    return n;
  };
  ASSERT_TRUE(holder->Release(name, h).ok());
  for (int turn = 0; turn < 3; ++turn) {
    ASSERT_TRUE(wakes[turn]->Await(kPatience)) << "waiter " << turn << " not woken";
    std::this_thread::sleep_for(kQuiet);
    EXPECT_EQ(woken(), turn + 1) << "a hand-off woke more than the next waiter";
    auto granted = waiting[turn]->Try();
    ASSERT_TRUE(granted.ok() && granted->granted) << granted.status().ToString();
    ASSERT_TRUE(backend->Release(name, owners[turn]).ok());
  }
  for (auto& a : waiting) a->Abandon();
}

struct AsyncWaiters {
  std::shared_ptr<::dlock::testing::FaultPlan> plan =
      std::make_shared<::dlock::testing::FaultPlan>();
  EtcdBackend* etcd = nullptr;  // owned by the client
  std::unique_ptr<Client> client;

  AsyncWaiters() {
    auto backend = NewBackend();
    etcd = backend.get();
    client = Client::FromBackend(
        std::make_unique<::dlock::testing::FaultyBackend>(std::move(backend), plan));
  }
};

AcquireOptions Waiting() {
  AcquireOptions o;
  o.ttl = seconds(20);
  o.wait = seconds(100);
  return o;
}

// Without Notify the core polls a refused waiter every 50 ms at most; with
// it, the waiter is tried again when its watch fires, and not before (the
// core's own refresh of its place comes a second after its attempt).
TEST(EtcdNotifyTest, APendingAsyncAcquireIsTriedAgainOnlyWhenWoken) {
  const std::string name = UniqueName("notify-async");
  auto holder = NewClient();
  AsyncWaiters w;
  auto held = holder->Acquire(name, Waiting());
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  auto pending = w.client->AcquireFuture(name, Waiting());
  ASSERT_TRUE(Eventually([&] { return w.plan->Tries() >= 1; }));
  std::this_thread::sleep_for(kQuiet);
  EXPECT_EQ(w.plan->Tries(), 1) << "tried again with nothing released: polled";
  ASSERT_TRUE(held->Release().ok());
  ASSERT_EQ(pending.wait_for(kPatience), std::future_status::ready);
  auto lease = pending.get();
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ(w.plan->Tries(), 2) << "woken once, granted at the next try";
  EXPECT_EQ(w.plan->Notifies(), 1);
  EXPECT_EQ(w.plan->BlindNotifies(), 0);
}

// 500 acquisitions wait at once on one client: one watch stream carries
// them all and the client's threads do not grow.
TEST(EtcdNotifyTest, ManyPendingAsyncAcquisitionsShareOneStreamAndNoThreads) {
  constexpr int kKeys = 500;
  const std::string prefix = UniqueName("notify-many");
  auto holder = NewClient();
  AsyncWaiters w;
  std::vector<Lease> held;
  for (int i = 0; i < kKeys; ++i) {
    auto lease = holder->Acquire(prefix + "/" + std::to_string(i), Waiting());
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    held.push_back(std::move(*lease));
  }
  {
    // Warm: the client's worker threads and the watch stream exist.
    auto warm_held = holder->Acquire(UniqueName("notify-warm"), Waiting());
    ASSERT_TRUE(warm_held.ok()) << warm_held.status().ToString();
    auto warm = w.client->AcquireFuture(warm_held->key(), Waiting());
    ASSERT_TRUE(Eventually([&] { return w.plan->Notifies() >= 1; }));
    ASSERT_TRUE(warm_held->Release().ok());
    ASSERT_EQ(warm.wait_for(kPatience), std::future_status::ready);
  }
  const int threads_before = ThreadsOfThisProcess();

  struct Answers {
    std::atomic<int> granted{0}, answered{0};
    std::promise<void> all;
  };
  auto answers = std::make_shared<Answers>();
  for (int i = 0; i < kKeys; ++i) {
    w.client->AcquireAsync(held[i].key(), Waiting(), [answers](Result<Lease> lease) {
      if (lease.ok()) ++answers->granted;
      if (answers->answered.fetch_add(1) + 1 == kKeys) answers->all.set_value();
    });
  }
  // All waiting (but the few whose place the core is refreshing just now).
  ASSERT_TRUE(Eventually([&] { return w.etcd->Notices().registered + 10 >= kKeys; }, kPatience))
      << w.etcd->Notices().registered << " of " << kKeys << " waiters registered";
  EXPECT_LE(ThreadsOfThisProcess() - threads_before, 2) << "threads grew with the waiters";
  EXPECT_EQ(w.etcd->Notices().streams, 1U) << "one watch stream carries every waiter";
  for (Lease& lease : held) ASSERT_TRUE(lease.Release().ok());
  ASSERT_EQ(answers->all.get_future().wait_for(kPatience), std::future_status::ready);
  EXPECT_EQ(answers->granted.load(), kKeys);
  EXPECT_EQ(w.plan->BlindNotifies(), 0) << "of " << w.plan->Notifies() << " notifications";
  EXPECT_TRUE(Eventually([&] { return w.etcd->Notices().open_at_store == 0; }));
}

}  // namespace
}  // namespace dlock::etcd::testing
