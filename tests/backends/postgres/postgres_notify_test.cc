// Asynchronous waiters on PostgreSQL: Acquisition::Notify over the backend's
// Listener (pg_listener.h). The listener's own thread runs the callbacks;
// a notification wakes only the owner it names; one that comes between an
// attempt and its Notify is not lost; nothing stays registered once a
// waiter stops; and pending acquisitions cost no threads and no polling.
//
//   listener level: a Listener of its own, fed NOTIFYs by hand
//   backend level:  Begin / Try / Notify on the backend
//   client level:   AcquireAsync over a backend that counts what it is asked
#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "backends/postgres/pg_listener.h"
#include "backends/postgres/postgres_backend.h"
#include "core/registry.h"
#include "core/uri.h"
#include "dlock/client.h"
#include "eventually.h"
#include "postgres_test_util.h"
#include "threads.h"

namespace dlock::postgres {
namespace {

using std::chrono::milliseconds;
using testing_pg::AdminConnect;
using testing_pg::Query;
using testing_pg::ServerUri;
using testing_pg::Unique;
using testing_support::Eventually;
using Steady = std::chrono::steady_clock;

// Longer than any wake-up may take on a loaded machine.
constexpr milliseconds kPatience{20'000};

using dlock::testing_support::ThreadsOfThisProcess;

// Counts one waiter's wake-ups and where they ran.
struct Wakes {
  std::atomic<int> count{0};
  std::atomic<bool> on_caller_thread{false};
  std::thread::id caller = std::this_thread::get_id();

  std::function<void()> Callback() {
    return [this] {
      if (std::this_thread::get_id() == caller) on_caller_thread = true;
      ++count;
    };
  }
  bool Reach(int n) {
    return Eventually([&] { return count.load() >= n; }, kPatience, milliseconds(1));
  }
};

// A Listener of its own (on a table name nobody else uses) and NOTIFYs sent
// by hand, as a release or a grant would send them.
class ListenerUnderTest {
 public:
  explicit ListenerUnderTest(std::uint64_t key_hash)
      : table_(Unique("notify")),
        key_hash_(key_hash),
        listener_(Conninfo(), table_, milliseconds(5000), "test"),
        admin_(AdminConnect()) {}

  Listener& operator*() { return listener_; }
  Listener* operator->() { return &listener_; }

  Listener::Waiter NewWaiter(const std::string& owner) {
    return {key_hash_, listener_.NewWaiterId(), owner};
  }
  // One refused attempt, as PostgresAcquisition::Try tells it.
  void Refused(const Listener::Waiter& waiter) {
    listener_.BeforeAttempt(waiter);
    listener_.AfterRefused(waiter);
  }
  // "<hash> <owner>[ <ttl_ms>]" on the key's channel.
  void Send(const std::string& rest) {
    Query(admin_.get(), "SELECT pg_notify('" + ChannelName(table_, key_hash_) + "', '" +
                            KeyHashText(key_hash_) + " " + rest + "')");
  }

 private:
  static ConnInfo Conninfo() {
    auto uri = internal::ParseUri(ServerUri());
    EXPECT_TRUE(uri.ok());
    auto options = OptionsFromUri(*uri);
    EXPECT_TRUE(options.ok()) << options.status().ToString();
    return options->conninfo;
  }

  const std::string table_;
  const std::uint64_t key_hash_;
  Listener listener_;
  testing_pg::PgConn admin_;
};

class PostgresNotifyTest : public ::testing::Test {
 protected:
  void SetUp() override { DLOCK_REQUIRE_SERVER(); }

  static std::unique_ptr<Backend> Raw() {
    internal::BackendParams params;
    params.clock = DefaultClock();
    params.connect_timeout = milliseconds(5000);
    auto b = internal::OpenBackend(ServerUri(), params);
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    return b.ok() ? std::move(*b) : nullptr;
  }

  // The key's first waiter, refused once and through its first Notify
  // (which LISTENs, then wakes it to try again, covered). Later waiters
  // find the channel LISTENed: their attempts are covered from the first.
  static void Settle(ListenerUnderTest& l, const Listener::Waiter& w, Wakes& wakes) {
    l.Refused(w);
    ASSERT_TRUE(l->Notify(w, wakes.Callback()));
    ASSERT_TRUE(wakes.Reach(1)) << "the first Notify was not answered once LISTENed";
  }
};

// ------------------------------------------------------------ listener level

TEST_F(PostgresNotifyTest, ANotificationWakesOnlyTheOwnerItNames) {
  ListenerUnderTest l(KeyHash(Unique("k")));
  const auto a = l.NewWaiter("1-1"), b = l.NewWaiter("2-2"), marker = l.NewWaiter("9-9");
  Wakes a_wakes, b_wakes, marker_wakes;
  Settle(l, a, a_wakes);
  for (const auto* w : {&a, &b, &marker}) l.Refused(*w);
  ASSERT_TRUE(l->Notify(a, a_wakes.Callback()));
  ASSERT_TRUE(l->Notify(b, b_wakes.Callback()));
  ASSERT_TRUE(l->Notify(marker, marker_wakes.Callback()));
  // One connection delivers in order: once the marker is woken, the
  // notification naming a has been read and handled too.
  l.Send("1-1");
  l.Send("9-9");
  ASSERT_TRUE(marker_wakes.Reach(1));
  EXPECT_EQ(a_wakes.count.load(), 2);
  EXPECT_EQ(b_wakes.count.load(), 0) << "woken by the notification naming another owner";
  l.Send("2-2");
  EXPECT_TRUE(b_wakes.Reach(1));
  EXPECT_FALSE(a_wakes.on_caller_thread || b_wakes.on_caller_thread)
      << "a wake ran inside Notify";
  // Naming nobody (a shared head, or no queue): all.
  l.Refused(a);
  l.Refused(b);
  ASSERT_TRUE(l->Notify(a, a_wakes.Callback()));
  ASSERT_TRUE(l->Notify(b, b_wakes.Callback()));
  l.Send("");
  EXPECT_TRUE(a_wakes.Reach(3));
  EXPECT_TRUE(b_wakes.Reach(2));
  for (const auto* w : {&a, &b, &marker}) l->Forget(*w);
  EXPECT_EQ(l->PendingWakes(), 0u);
}

// A blocking Wait() is as targeted as Notify(): a notification naming one
// owner ends that owner's wait only, one naming nobody every wait. (Each
// release used to end the Wait() of every waiter of the key in the
// process, and all but the head were then refused: a herd.)
TEST_F(PostgresNotifyTest, ANotificationEndsOnlyTheBlockingWaitOfTheOwnerItNames) {
  ListenerUnderTest l(KeyHash(Unique("k")));
  const auto a = l.NewWaiter("1-1"), b = l.NewWaiter("2-2");
  Wakes a_wakes;
  Settle(l, a, a_wakes);
  l.Refused(a);
  l.Refused(b);
  std::atomic<bool> a_waited{false};
  {
    std::jthread waiting([&](std::stop_token stop) {
      (void)l->Wait(a, Steady::now() + kPatience, stop);
      a_waited = true;
    });
    l.Send("1-1");
    ASSERT_TRUE(Eventually([&] { return l->Notified(a); }, kPatience)) << "1-1 was not told";
    // Both waits were judged under one lock: b's is final.
    EXPECT_FALSE(l->Notified(b)) << "the notification naming 1-1 ended the wait of 2-2";
    EXPECT_TRUE(Eventually([&] { return a_waited.load(); }, kPatience)) << "1-1 waits on";
  }
  l.Send("");
  EXPECT_TRUE(Eventually([&] { return l->Notified(b); }, kPatience))
      << "a notification naming nobody did not end every wait";
  l->Forget(a);
  l->Forget(b);
}

// The release comes after the attempt began but before the Notify: the
// Notify must answer at once, or the waiter sleeps out its refresh.
TEST_F(PostgresNotifyTest, ANotificationBetweenAttemptAndNotifyIsNotLost) {
  ListenerUnderTest l(KeyHash(Unique("k")));
  const auto a = l.NewWaiter("1-1"), marker = l.NewWaiter("9-9");
  Wakes a_wakes, marker_wakes;
  Settle(l, a, a_wakes);
  l.Refused(marker);
  ASSERT_TRUE(l->Notify(marker, marker_wakes.Callback()));
  l.Refused(a);   // the attempt
  l.Send("1-1");  // its release
  l.Send("9-9");  // ... read once the marker is woken
  ASSERT_TRUE(marker_wakes.Reach(1));
  ASSERT_EQ(a_wakes.count.load(), 1);
  ASSERT_TRUE(l->Notify(a, a_wakes.Callback()));  // only now
  EXPECT_TRUE(a_wakes.Reach(2)) << "the release between attempt and Notify was lost";
  l->Forget(a);
  l->Forget(marker);
}

// A grant tells the next in line when the new lease ends: a waiter
// registered by Notify is woken then, not before.
TEST_F(PostgresNotifyTest, TheNextInLineIsWokenWhenTheNewLeaseEnds) {
  ListenerUnderTest l(KeyHash(Unique("k")));
  const auto a = l.NewWaiter("1-1");
  Wakes wakes;
  Settle(l, a, wakes);
  l.Refused(a);
  ASSERT_TRUE(l->Notify(a, wakes.Callback()));
  constexpr milliseconds kLease{300};
  const auto sent = Steady::now();
  l.Send("1-1 " + std::to_string(kLease.count()));
  ASSERT_TRUE(wakes.Reach(2)) << "not woken at the lease's end";
  EXPECT_GE(Steady::now() - sent, kLease) << "woken before the lease could end";
  l->Forget(a);
}

TEST_F(PostgresNotifyTest, StopNotifyThenForgetLeaveNothingRegistered) {
  ListenerUnderTest l(KeyHash(Unique("k")));
  const auto a = l.NewWaiter("1-1"), marker = l.NewWaiter("9-9");
  Wakes a_wakes, marker_wakes;
  Settle(l, a, a_wakes);
  l.Refused(a);
  ASSERT_TRUE(l->Notify(a, a_wakes.Callback()));
  EXPECT_EQ(l->PendingWakes(), 1u);
  l->StopNotify(a);
  l->StopNotify(a);  // idempotent
  EXPECT_EQ(l->PendingWakes(), 0u);
  l.Refused(marker);
  ASSERT_TRUE(l->Notify(marker, marker_wakes.Callback()));
  l.Send("1-1");
  l.Send("9-9");
  ASSERT_TRUE(marker_wakes.Reach(1));
  EXPECT_EQ(a_wakes.count.load(), 1) << "woken after StopNotify";
  // What the acquisition's destructor does (Forget), with a wake arranged.
  l.Refused(a);
  ASSERT_TRUE(l->Notify(a, a_wakes.Callback()));
  l->Forget(a);
  l->Forget(marker);
  EXPECT_EQ(l->PendingWakes(), 0u);
  EXPECT_FALSE(l->Notify(a, a_wakes.Callback())) << "a forgotten waiter was registered";
  EXPECT_EQ(l->PendingWakes(), 0u);
}

// ------------------------------------------------------------- backend level

TEST_F(PostgresNotifyTest, AReleaseBetweenTryAndNotifyIsNotLost) {
  auto b = Raw();
  ASSERT_NE(b, nullptr);
  const std::string key = Unique("between");
  const OwnerId holder(1, 1), waiter(2, 2);
  ASSERT_TRUE(b->TryAcquire({key, holder, milliseconds(30'000)})->granted);
  auto acquisition = b->Begin({key, waiter, milliseconds(30'000), milliseconds(3000)});
  ASSERT_FALSE(acquisition->Try()->granted);
  Wakes wakes;
  ASSERT_TRUE(acquisition->Notify(wakes.Callback()));
  ASSERT_TRUE(wakes.Reach(1)) << "the first Notify was not answered once LISTENed";
  ASSERT_FALSE(acquisition->Try()->granted);
  ASSERT_TRUE(b->Release(key, holder).ok());
  // Let the release's NOTIFY arrive before the Notify (not asserted: either
  // way it must wake).
  std::this_thread::sleep_for(milliseconds(200));
  ASSERT_TRUE(acquisition->Notify(wakes.Callback()));
  ASSERT_TRUE(wakes.Reach(2)) << "the release between Try and Notify was lost";
  EXPECT_FALSE(wakes.on_caller_thread) << "a wake ran inside Notify";
  auto granted = acquisition->Try();
  ASSERT_TRUE(granted.ok() && granted->granted) << granted.status().ToString();
  ASSERT_TRUE(b->Release(key, waiter).ok());
}

// The destructor drops the registration: the release's wake-up does not
// run into a freed acquisition.
TEST_F(PostgresNotifyTest, ADroppedAcquisitionIsNotWoken) {
  auto b = Raw();
  ASSERT_NE(b, nullptr);
  const std::string key = Unique("dropped");
  const OwnerId holder(1, 1), waiter(2, 2);
  ASSERT_TRUE(b->TryAcquire({key, holder, milliseconds(30'000)})->granted);
  auto acquisition = b->Begin({key, waiter, milliseconds(30'000), milliseconds(3000)});
  ASSERT_FALSE(acquisition->Try()->granted);
  Wakes wakes;
  ASSERT_TRUE(acquisition->Notify(wakes.Callback()));
  ASSERT_TRUE(wakes.Reach(1));
  ASSERT_FALSE(acquisition->Try()->granted);
  ASSERT_TRUE(acquisition->Notify(wakes.Callback()));
  acquisition->StopNotify();
  acquisition.reset();
  ASSERT_TRUE(b->Release(key, holder).ok());  // names the dropped waiter
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_EQ(wakes.count.load(), 1);
}

// -------------------------------------------------------------- client level

// What the core asked of the store's acquisitions.
struct Counts {
  std::atomic<int> tries{0}, notifies{0}, blind{0}, wakes{0};
};

class CountedAcquisition final : public Acquisition {
 public:
  CountedAcquisition(std::unique_ptr<Acquisition> inner, std::shared_ptr<Counts> counts)
      : inner_(std::move(inner)), counts_(std::move(counts)) {}
  Result<Attempt> Try() override {
    ++counts_->tries;
    return inner_->Try();
  }
  bool Wait(TimePoint until, std::stop_token stop) override { return inner_->Wait(until, stop); }
  bool Notify(std::function<void()> wake) override {
    ++counts_->notifies;
    const bool told = inner_->Notify([counts = counts_, wake = std::move(wake)] {
      ++counts->wakes;
      wake();
    });
    if (!told) ++counts_->blind;
    return told;
  }
  void StopNotify() override { inner_->StopNotify(); }
  void Abandon() override { inner_->Abandon(); }

 private:
  std::unique_ptr<Acquisition> inner_;
  std::shared_ptr<Counts> counts_;
};

class CountedBackend final : public Backend {
 public:
  CountedBackend(std::unique_ptr<Backend> inner, std::shared_ptr<Counts> counts)
      : inner_(std::move(inner)), counts_(std::move(counts)) {}
  Result<Attempt> TryAcquire(const LeaseRequest& r) override { return inner_->TryAcquire(r); }
  std::unique_ptr<Acquisition> Begin(const LeaseRequest& r) override {
    return std::make_unique<CountedAcquisition>(inner_->Begin(r), counts_);
  }
  Status Release(std::string_view key, const OwnerId& owner) override {
    return inner_->Release(key, owner);
  }
  std::vector<Status> Renew(std::span<const LeaseRequest> leases) override {
    return inner_->Renew(leases);
  }
  Result<std::vector<HolderInfo>> List(std::string_view prefix) override {
    return inner_->List(prefix);
  }
  std::string Describe() const override { return inner_->Describe(); }
  bool SupportsLockDelay() const override { return inner_->SupportsLockDelay(); }
  bool SupportsSharing() const override { return inner_->SupportsSharing(); }
  // A waiter's place is kept as the store keeps it, not by an attempt the
  // counts would take for polling: a loaded machine may reach the refresh.
  std::vector<Status> KeepPlaces(std::span<const LeaseRequest> waiters) override {
    return inner_->KeepPlaces(waiters);
  }
  bool KeepsPlaces() const override { return inner_->KeepsPlaces(); }

 private:
  std::unique_ptr<Backend> inner_;
  std::shared_ptr<Counts> counts_;
};

AcquireOptions Waiting() {
  AcquireOptions o;
  o.ttl = milliseconds(30'000);
  o.wait = milliseconds(100'000);
  return o;
}

// Without Notify the core polls every ≤ 50 ms; with it, the waiter is tried
// once when refused, and once more when the release wakes it.
TEST_F(PostgresNotifyTest, AnAsyncWaiterIsWokenByTheReleaseNotByPolling) {
  auto holder = Client::FromBackend(Raw());
  auto counts = std::make_shared<Counts>();
  auto waiters = Client::FromBackend(std::make_unique<CountedBackend>(Raw(), counts));
  const std::string key = Unique("no-poll");
  auto held = holder->Acquire(key, Waiting());
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  auto future = waiters->AcquireFuture(key, Waiting());
  // Refused, LISTENed and woken to try again covered, refused, notified.
  ASSERT_TRUE(Eventually([&] { return counts->notifies.load() >= 2; }, kPatience));
  const int tries = counts->tries.load();
  // A while without a release: no attempt (the place is kept apart).
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_EQ(counts->tries.load(), tries) << "the pending acquisition polled";
  ASSERT_TRUE(held->Release().ok());
  ASSERT_EQ(future.wait_for(kPatience), std::future_status::ready);
  auto lease = future.get();
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ(counts->tries.load(), tries + 1) << "tried other than when woken";
  EXPECT_EQ(counts->blind.load(), 0);
  EXPECT_EQ(counts->wakes.load(), 2) << "the LISTEN's, then the release's";
  ASSERT_TRUE(lease->Release().ok());
}

// 500 pending acquisitions of one key: no thread more than one, and each
// hand-off wakes the next in line only, not all 500.
TEST_F(PostgresNotifyTest, ManyPendingAcquisitionsOfOneKeyCostNoThreadsAndWakeOneEach) {
  constexpr int kPending = 500;
  auto holder = Client::FromBackend(Raw());
  auto counts = std::make_shared<Counts>();
  auto waiters = Client::FromBackend(std::make_unique<CountedBackend>(Raw(), counts));
  const std::string key = Unique("many");
  // Warm up: the client's threads and the listener's, and the key's channel.
  auto held = holder->Acquire(key, Waiting());
  ASSERT_TRUE(held.ok());
  auto first = waiters->AcquireFuture(key, Waiting());
  ASSERT_TRUE(Eventually([&] { return counts->notifies.load() >= 2; }, kPatience));
  ASSERT_TRUE(held->Release().ok());
  ASSERT_EQ(first.wait_for(kPatience), std::future_status::ready);
  auto first_lease = first.get();
  ASSERT_TRUE(first_lease.ok());
  const int threads = ThreadsOfThisProcess();
  std::mutex mu;
  std::vector<Lease> granted;
  const int notifies_before = counts->notifies.load();
  for (int i = 0; i < kPending; ++i) {
    waiters->AcquireAsync(key, Waiting(), [&](Result<Lease> lease) {
      std::lock_guard lock(mu);
      if (lease.ok()) granted.push_back(std::move(*lease));
    });
  }
  ASSERT_TRUE(Eventually(
      [&] { return counts->notifies.load() - notifies_before >= kPending; }, kPatience));
  EXPECT_LE(ThreadsOfThisProcess() - threads, 0) << "threads grew with pending acquisitions";
  EXPECT_EQ(counts->blind.load(), 0);
  auto granted_count = [&] {
    std::lock_guard lock(mu);
    return granted.size();
  };
  std::optional<Lease> releasing = std::move(*first_lease);
  for (std::size_t handoff = 1; handoff <= 3; ++handoff) {
    const int wakes = counts->wakes.load();
    ASSERT_TRUE(releasing->Release().ok());
    ASSERT_TRUE(Eventually([&] { return granted_count() >= handoff; }, kPatience));
    // The head, and now and then a nudge: not the herd.
    EXPECT_LE(counts->wakes.load() - wakes, 3) << "hand-off " << handoff;
    std::lock_guard lock(mu);
    releasing = std::move(granted.back());
  }
  EXPECT_EQ(counts->blind.load(), 0);
  waiters.reset();  // cancels the rest, each leaving the queue
  ASSERT_TRUE(releasing->Release().ok());
}

}  // namespace
}  // namespace dlock::postgres
