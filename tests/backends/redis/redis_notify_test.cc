// Waits without a thread (Acquisition::Notify, for the asynchronous API) on
// the fixture's Redis server: a pending acquisition sends nothing until the
// release wakes it, a release before Notify is not lost, a dropped watch
// leaves nothing behind, and many pending acquisitions share the
// subscriber's one thread.
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "backends/redis/redis_keys.h"
#include "backends/redis/redis_subscriber.h"
#include "dlock/testing/faulty_backend.h"
#include "eventually.h"
#include "redis_test_util.h"
#include "threads.h"

namespace dlock::redis {
namespace {

using std::chrono::milliseconds;
using namespace dlock::redis::testing;

constexpr milliseconds kPatience{10'000};

using dlock::testing_support::ThreadsOfThisProcess;

// What one or more wake callbacks saw.
struct Wakes {
  std::mutex mu;
  std::condition_variable cv;
  int calls = 0;
  // Called on the thread that called Notify: from inside it (another
  // thread may call at once, before Notify returns).
  bool called_inside_notify = false;

  std::function<void()> Callback() {
    return [this, notifying = std::this_thread::get_id()] {
      std::lock_guard lock(mu);
      ++calls;
      called_inside_notify |= std::this_thread::get_id() == notifying;
      cv.notify_all();
    };
  }
  bool Notify(Acquisition& a) { return a.Notify(Callback()); }
  bool AwaitCalls(int n, milliseconds limit = kPatience) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, limit, [&] { return calls >= n; });
  }
  int Calls() {
    std::lock_guard lock(mu);
    return calls;
  }
};

class RedisNotify : public ::testing::Test {
 protected:
  void SetUp() override {
    uri_ = FixtureUri();
    if (uri_.empty()) GTEST_SKIP() << "no Redis fixture (run through ctest)";
    admin_ = Admin(PortOf(uri_));
    ASSERT_TRUE(admin_ && admin_->err == 0);
  }
  long long ScriptCalls() {
    const std::string text = ReplyString(Cmd(admin_.get(), {"INFO", "commandstats"}).get());
    const std::string tag = "cmdstat_evalsha:calls=";
    const std::size_t at = text.find(tag);
    return at == std::string::npos ? 0 : std::atoll(text.c_str() + at + tag.size());
  }
  // A waiter in the queue whose subscription was confirmed before its
  // last refused attempt, as the core leaves it before each Notify: the
  // first Notify, without a ticket if the channel was not subscribed yet,
  // wakes once it is.
  std::unique_ptr<Acquisition> Queue(Backend& backend, const LeaseRequest& request) {
    auto acquisition = backend.Begin(request);
    auto first = acquisition->Try();
    EXPECT_TRUE(first.ok() && !first->granted);
    Wakes subscribed;
    EXPECT_TRUE(subscribed.Notify(*acquisition));
    if (!subscribed.AwaitCalls(1, milliseconds(500))) acquisition->StopNotify();
    auto second = acquisition->Try();
    EXPECT_TRUE(second.ok() && !second->granted);
    return acquisition;
  }
  std::string uri_;
  ContextPtr admin_;
};

// The queue_ttl of a waiter these tests drive by hand, which nothing keeps:
// its place (two thirds of it) outlasts the test on a loaded machine.
constexpr milliseconds kUnkeptPlace{30'000};

// Without Notify the core would poll (an attempt every ≤ 50 ms); with it,
// the pending acquisition sends nothing until the release, whose grant it
// then takes without a round trip of its own.
TEST_F(RedisNotify, APendingAcquisitionSendsNothingUntilTheReleaseWakesIt) {
  auto b = OpenRaw(uri_);
  ASSERT_NE(b, nullptr);
  const std::string key = UniqueKey("notify/woken");
  const OwnerId holder(1, 1), waiter(2, 2);
  auto held = b->TryAcquire({key, holder, milliseconds(10'000)});
  ASSERT_TRUE(held.ok() && held->granted);
  Wakes wakes;  // outlives the acquisition
  auto waiting = Queue(*b, {key, waiter, milliseconds(10'000), kUnkeptPlace});
  ASSERT_TRUE(wakes.Notify(*waiting)) << "the store could not notify: the core would poll";
  const long long calls_before = ScriptCalls();
  EXPECT_FALSE(wakes.AwaitCalls(1, milliseconds(500))) << "woken with the key still held";
  EXPECT_EQ(ScriptCalls(), calls_before);
  ASSERT_TRUE(b->Release(key, holder).ok());
  ASSERT_TRUE(wakes.AwaitCalls(1));
  auto got = waiting->Try();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->granted);
  EXPECT_EQ(got->token, held->token + 1);
  EXPECT_EQ(ScriptCalls(), calls_before + 1) << "only the release: the grant was handed over";
  EXPECT_EQ(wakes.Calls(), 1);
  EXPECT_FALSE(wakes.called_inside_notify);
  ASSERT_TRUE(b->Release(key, waiter).ok());
}

// The release (and its grant message) comes after the refused attempt but
// before Notify: the ticket taken before the attempt still wakes the
// waiter, from the subscriber's thread, and the grant is still its own.
TEST_F(RedisNotify, AReleaseBetweenTryAndNotifyIsNotLost) {
  auto b = OpenRaw(uri_);
  ASSERT_NE(b, nullptr);
  const std::string key = UniqueKey("notify/between");
  const OwnerId holder(1, 1), waiter(2, 2);
  auto held = b->TryAcquire({key, holder, milliseconds(10'000)});
  ASSERT_TRUE(held.ok() && held->granted);
  Wakes wakes;  // outlives the acquisition
  auto waiting = Queue(*b, {key, waiter, milliseconds(10'000), kUnkeptPlace});
  const long long calls_before = ScriptCalls();
  ASSERT_TRUE(b->Release(key, holder).ok());
  // Time for the subscriber to have read the grant message already.
  std::this_thread::sleep_for(milliseconds(200));
  ASSERT_TRUE(wakes.Notify(*waiting));
  ASSERT_TRUE(wakes.AwaitCalls(1)) << "the release before Notify was lost";
  EXPECT_FALSE(wakes.called_inside_notify) << "woken from inside Notify";
  auto got = waiting->Try();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->granted);
  EXPECT_EQ(got->token, held->token + 1);
  EXPECT_EQ(ScriptCalls(), calls_before + 1) << "only the release: the grant was handed over";
  ASSERT_TRUE(b->Release(key, waiter).ok());
}

// A watch stopped, or dropped with its acquisition, is never called, and
// the subscriber keeps nothing of it.
TEST_F(RedisNotify, StopNotifyAndDestructionLeaveNothingRegistered) {
  auto b = OpenRaw(uri_);
  ASSERT_NE(b, nullptr);
  const std::string key = UniqueKey("notify/stopped");
  const OwnerId holder(1, 1), stopped(2, 2), dropped(3, 3);
  ASSERT_TRUE(b->TryAcquire({key, holder, milliseconds(10'000)})->granted);
  Wakes wakes;  // outlives the acquisitions
  auto first = Queue(*b, {key, stopped, milliseconds(10'000), kUnkeptPlace});
  auto second = Queue(*b, {key, dropped, milliseconds(10'000), kUnkeptPlace});
  ASSERT_TRUE(wakes.Notify(*first));
  ASSERT_TRUE(wakes.Notify(*second));
  first->StopNotify();
  first->StopNotify();  // idempotent
  second.reset();       // without StopNotify: the destructor drops the watch
  // Messages for both (the release grants `stopped`, the head).
  ASSERT_TRUE(b->Release(key, holder).ok());
  Cmd(admin_.get(), {"PUBLISH", WakeChannel(0, key), dropped.ToString()});
  EXPECT_FALSE(wakes.AwaitCalls(1, milliseconds(500)));
  first->Abandon();
  ASSERT_TRUE(b->Release(key, dropped).ok());
}

// The Subscriber itself: a watch stopped before or after its time came
// (then waiting to be called) leaves no entry.
TEST_F(RedisNotify, TheSubscriberKeepsNoStoppedWatch) {
  // What the callbacks use outlives the subscriber.
  Wakes wakes;
  std::mutex mu;
  std::string grant;
  std::atomic<int> told{0};
  std::atomic<bool> called{false};
  const Endpoint server{"127.0.0.1", PortOf(uri_)};
  Subscriber subscriber(
      [server] { return Connection::Open(server, ConnectOptions{}, false, false, "test"); });
  const std::string channel = "dlock-test-notify/" + UniqueKey("subscriber");
  // Ticketless: its time comes once the channel is subscribed.
  const std::uint64_t first =
      subscriber.Watch(channel, std::nullopt, "me", [&](std::string_view) { wakes.Callback()(); });
  ASSERT_NE(first, 0u);
  ASSERT_TRUE(wakes.AwaitCalls(1));
  std::optional<Subscriber::Ticket> ticket = subscriber.Current(channel);
  ASSERT_TRUE(ticket);
  const std::uint64_t watching =
      subscriber.Watch(channel, ticket, "me", [&](std::string_view) { wakes.Callback()(); });
  EXPECT_EQ(subscriber.Watches(), 1u);
  subscriber.Unwatch(watching);
  subscriber.Unwatch(watching);
  subscriber.Unwatch(first);  // called already: nothing to do
  EXPECT_EQ(subscriber.Watches(), 0u);
  // A message for "me" after the ticket: a watch made now is over (at
  // once, or when the reader reads it), and is called with the grant.
  Cmd(admin_.get(), {"PUBLISH", channel, "me:7:1"});
  ASSERT_NE(subscriber.Watch(channel, ticket, "me",
                             [&](std::string_view g) {
                               std::lock_guard lock(mu);
                               grant = g;
                               ++told;
                             }),
            0u);
  ASSERT_TRUE(testing_support::Eventually([&] { return told.load() == 1; }));
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(grant, "7:1");
  }
  EXPECT_EQ(subscriber.Watches(), 0u);
  // One stopped before it could be called is not called after.
  const std::uint64_t over =
      subscriber.Watch(channel, ticket, "me", [&](std::string_view) { called = true; });
  subscriber.Unwatch(over);
  const bool before = called.load();
  EXPECT_EQ(subscriber.Watches(), 0u);
  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_EQ(called.load(), before);
  EXPECT_EQ(wakes.Calls(), 1);
}

// 500 acquisitions of one key pending on one backend: no thread of their
// own, and the release wakes the head alone.
TEST_F(RedisNotify, FiveHundredPendingAcquisitionsUseNoExtraThreadsAndOneIsWoken) {
  constexpr int kWaiters = 500;
  auto b = OpenRaw(uri_);
  ASSERT_NE(b, nullptr);
  const std::string key = UniqueKey("notify/many");
  const OwnerId holder(1, 1);
  ASSERT_TRUE(b->TryAcquire({key, holder, milliseconds(30'000)})->granted);
  std::vector<std::shared_ptr<Wakes>> wakes;  // outlive the acquisitions
  std::vector<std::unique_ptr<Acquisition>> waiting;
  waiting.push_back(Queue(*b, {key, OwnerId(2, 0), milliseconds(30'000), milliseconds(30'000)}));
  const int threads_before = ThreadsOfThisProcess();
  for (int i = 0; i < kWaiters; ++i) {
    if (i > 0) {
      waiting.push_back(b->Begin({key, OwnerId(2, static_cast<std::uint64_t>(i)),
                                  milliseconds(30'000), milliseconds(30'000)}));
      auto refused = waiting.back()->Try();
      ASSERT_TRUE(refused.ok() && !refused->granted);
    }
    wakes.push_back(std::make_shared<Wakes>());
    ASSERT_TRUE(wakes.back()->Notify(*waiting.back())) << i;
  }
  EXPECT_EQ(ThreadsOfThisProcess(), threads_before);
  ASSERT_TRUE(b->Release(key, holder).ok());
  ASSERT_TRUE(wakes[0]->AwaitCalls(1));
  std::this_thread::sleep_for(milliseconds(300));
  int woken = 0;
  for (const auto& w : wakes) woken += w->Calls();
  EXPECT_EQ(woken, 1) << "a release woke more than the head";
  auto got = waiting[0]->Try();
  ASSERT_TRUE(got.ok() && got->granted);
  for (auto& w : waiting) {
    w->StopNotify();
    w->Abandon();
  }
}

// Through a Client: an asynchronous acquire is woken, never polled, and
// every Notify is given (none blind).
TEST_F(RedisNotify, AnAsynchronousAcquireIsWokenNotPolled) {
  auto holder = NewClient(uri_);
  auto plan = std::make_shared<dlock::testing::FaultPlan>();
  auto inner = OpenRaw(uri_);
  ASSERT_TRUE(holder && inner);
  auto client =
      Client::FromBackend(std::make_unique<dlock::testing::FaultyBackend>(std::move(inner), plan));
  const std::string key = UniqueKey("notify/async");
  auto held = holder->Acquire(key, Opts(milliseconds(20'000)));
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  auto pending = client->AcquireFuture(key, Opts(milliseconds(20'000), milliseconds(20'000)));
  // The first Notify waits for the subscription; the second for the release.
  ASSERT_TRUE(testing_support::Eventually([&] { return plan->Notifies() >= 2; }, kPatience));
  // The core's own timer brings an attempt 1 s after the last (the
  // place's refresh); a polled one would come every 50 ms at most.
  const int tries = plan->Tries();
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_EQ(plan->Tries(), tries) << "the pending acquire was polled";
  ASSERT_TRUE(held->Release().ok());
  ASSERT_EQ(pending.wait_for(kPatience), std::future_status::ready);
  auto lease = pending.get();
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_GT(lease->token(), held->token());
  EXPECT_EQ(plan->BlindNotifies(), 0);
  EXPECT_TRUE(lease->Release().ok());
}

}  // namespace
}  // namespace dlock::redis
