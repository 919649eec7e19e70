// Core behaviour on the simulated clock and the in-memory store: renewal,
// loss detection, waiting, release, tokens. Nothing here sleeps.
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "backends/sqlite/sqlite_backend.h"
#include "dlock/client.h"
#include "dlock/testing/faulty_backend.h"
#include "dlock/testing/in_memory_backend.h"
#include "dlock/testing/simulated_clock.h"

namespace dlock {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::FaultPlan;
using testing::FaultyBackend;
using testing::InMemoryBackend;
using testing::InMemoryStore;
using testing::SimulatedClock;

// A counter-based Random, so owner ids are distinct and runs replay.
class SeqRandom final : public Random {
 public:
  std::uint64_t Next() override { return ++n_; }

 private:
  std::atomic<std::uint64_t> n_{0x1000};
};

// The same behaviours on every store that can run on the simulated clock:
// the in-memory test double, and SQLite with its store clock driven by the
// simulated one (so its expiry is judged in simulated milliseconds).
class ClientTest : public ::testing::TestWithParam<std::string> {
 protected:
  ClientTest()
      : clock_(std::make_shared<SimulatedClock>()),
        memory_(std::make_shared<InMemoryStore>(clock_)),
        plan_(std::make_shared<FaultPlan>()) {
    if (GetParam() == "sqlite") {
      char tmpl[] = "/tmp/dlock-client-test.XXXXXX";
      dir_ = mkdtemp(tmpl);
    }
  }
  ~ClientTest() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // A backend on the store under test (a new connection each time).
  std::unique_ptr<Backend> NewBackend() {
    if (GetParam() == "memory") return std::make_unique<InMemoryBackend>(memory_);
    sqlite::SqliteOptions o;
    o.path = dir_ + "/locks.db";
    o.store_clock = [clock = clock_] {
      return sqlite::BootTime{
          "simulated-boot",
          std::chrono::duration_cast<milliseconds>(clock->Now().time_since_epoch()).count()};
    };
    auto b = sqlite::Open(o);
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    return std::move(*b);
  }

  // The store itself, for what no client would do (drop a lease behind its
  // owner's back, as a failover might).
  Backend& Store() {
    if (!store_) store_ = NewBackend();
    return *store_;
  }

  // A client on the store, behind a fault wrapper driven by plan_.
  std::unique_ptr<Client> NewClient(std::unique_ptr<Backend> backend = nullptr) {
    ClientOptions o;
    o.clock = clock_;
    o.random = random_;
    if (!backend) backend = NewBackend();
    return Client::FromBackend(std::make_unique<FaultyBackend>(std::move(backend), plan_), o);
  }

  static AcquireOptions Ttl(milliseconds ttl, milliseconds drift = milliseconds(100)) {
    AcquireOptions o;
    o.ttl = ttl;
    o.wait = milliseconds(0);
    o.drift_margin = drift;
    return o;
  }

  std::shared_ptr<SimulatedClock> clock_;
  std::shared_ptr<InMemoryStore> memory_;
  std::shared_ptr<FaultPlan> plan_;
  std::shared_ptr<SeqRandom> random_ = std::make_shared<SeqRandom>();
  std::string dir_;
  std::unique_ptr<Backend> store_;
};

INSTANTIATE_TEST_SUITE_P(Stores, ClientTest, ::testing::Values("memory", "sqlite"),
                         [](const auto& info) { return info.param; });

TEST_P(ClientTest, ValidUntilIsSendTimePlusTtlMinusDrift) {
  auto client = NewClient();
  const TimePoint t0 = clock_->Now();
  auto lease = client->TryAcquire("k", Ttl(seconds(30), milliseconds(250)));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ(lease->valid_until(), t0 + seconds(30) - milliseconds(250));
  EXPECT_EQ(lease->key(), "k");
  EXPECT_EQ(lease->token(), 1u);
  EXPECT_FALSE(lease->owner().empty());
  EXPECT_TRUE(lease->Check().ok());
}

TEST_P(ClientTest, RenewedLeaseSurvivesHundredTimesItsTtl) {
  auto client = NewClient();
  auto lease = client->TryAcquire("k", Ttl(seconds(3)));
  ASSERT_TRUE(lease.ok());
  clock_->Advance(seconds(300));
  EXPECT_TRUE(lease->Check().ok()) << lease->Check().ToString();
  EXPECT_FALSE(lease->stop_token().stop_requested());
  // Renewed at ttl/3: about 300 renewals, each one extending valid_until.
  EXPECT_GE(plan_->RenewBatches(), 299);
  EXPECT_LE(plan_->RenewBatches(), 301);
  EXPECT_GT(lease->valid_until(), clock_->Now() + seconds(1));
  // Nobody else can take it meanwhile.
  auto other = NewClient()->TryAcquire("k", Ttl(seconds(3)));
  EXPECT_EQ(other.status().code(), StatusCode::kLockHeld);
}

TEST_P(ClientTest, AllLeasesOfAClientAreRenewedInOneBatchPerTick) {
  auto client = NewClient();
  std::vector<Lease> leases;
  for (int i = 0; i < 10; ++i) {
    auto l = client->TryAcquire("k" + std::to_string(i), Ttl(seconds(3)));
    ASSERT_TRUE(l.ok());
    leases.push_back(std::move(*l));
  }
  clock_->Advance(seconds(30));
  // Renewed every second: one store call per tick (30), not one per lease
  // per tick (300).
  EXPECT_LE(plan_->RenewBatches(), 31);
  EXPECT_GE(plan_->RenewBatches(), 29);
  for (auto& l : leases) EXPECT_TRUE(l.Check().ok());
}

TEST_P(ClientTest, LeasesAcquiredAtDifferentTimesShareRenewalCalls) {
  auto client = NewClient();
  std::vector<Lease> leases;
  // Ten leases acquired 100 ms apart: renewing each one exactly at its own
  // ttl/3 would cost ten calls per second. Leases due soon ride along.
  for (int i = 0; i < 10; ++i) {
    auto l = client->TryAcquire("k" + std::to_string(i), Ttl(seconds(3)));
    ASSERT_TRUE(l.ok());
    leases.push_back(std::move(*l));
    clock_->Advance(milliseconds(100));
  }
  const int before = plan_->RenewBatches();
  clock_->Advance(seconds(30));
  EXPECT_LE(plan_->RenewBatches() - before, 60);
  for (auto& l : leases) EXPECT_TRUE(l.Check().ok());
}

TEST_P(ClientTest, FailingRenewalsLoseTheLeaseExactlyAtValidUntil) {
  auto client = NewClient();
  std::atomic<int> lost_calls{0};
  std::optional<TimePoint> lost_at;
  AcquireOptions o = Ttl(seconds(30), milliseconds(300));
  o.on_lost = [&](const Status& why) {
    ++lost_calls;
    lost_at = clock_->Now();
    EXPECT_EQ(why.code(), StatusCode::kLeaseLost);
  };
  auto lease = client->TryAcquire("k", o);
  ASSERT_TRUE(lease.ok());
  const TimePoint valid_until = lease->valid_until();
  plan_->SetRenewError(UnavailableError("partitioned"));

  clock_->AdvanceTo(valid_until - std::chrono::nanoseconds(1));
  EXPECT_TRUE(lease->Check().ok()) << "lost before valid_until";
  EXPECT_EQ(lost_calls, 0);
  EXPECT_FALSE(lease->stop_token().stop_requested());
  EXPECT_EQ(lease->valid_until(), valid_until) << "a failed renewal must not extend";

  clock_->AdvanceTo(valid_until);
  EXPECT_EQ(lost_calls, 1);
  ASSERT_TRUE(lost_at.has_value());
  EXPECT_EQ(*lost_at, valid_until) << "reported late";
  EXPECT_TRUE(lease->stop_token().stop_requested());
  EXPECT_EQ(lease->Check().code(), StatusCode::kLeaseLost);

  // Renewals recovering later change nothing: lost stays lost, the callback
  // does not run again, and release reports the loss.
  plan_->SetRenewError(std::nullopt);
  clock_->Advance(seconds(120));
  EXPECT_EQ(lost_calls, 1);
  EXPECT_EQ(lease->Check().code(), StatusCode::kLeaseLost);
  EXPECT_EQ(lease->Release().code(), StatusCode::kLeaseLost);
}

TEST_P(ClientTest, ClientBelievesItLostTheLeaseBeforeTheStoreFreesIt) {
  auto a = NewClient();
  auto lease = a->TryAcquire("k", Ttl(seconds(10), milliseconds(200)));
  ASSERT_TRUE(lease.ok());
  plan_->SetRenewError(UnavailableError("partitioned"));
  clock_->AdvanceTo(lease->valid_until());
  ASSERT_EQ(lease->Check().code(), StatusCode::kLeaseLost);
  // At the moment the client gives up, the store still has the lease: the
  // drift margin is the gap in which nobody holds it.
  plan_->SetRenewError(std::nullopt);
  plan_->SetAcquireError(std::nullopt);
  auto b = NewClient()->TryAcquire("k", Ttl(seconds(10)));
  EXPECT_EQ(b.status().code(), StatusCode::kLockHeld);
  clock_->Advance(milliseconds(200));
  auto c = NewClient()->TryAcquire("k", Ttl(seconds(10)));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_GT(c->token(), lease->token());
}

TEST_P(ClientTest, StoreNamingAnotherOwnerLosesTheLeaseAtTheNextRenewal) {
  auto a = NewClient();
  int lost_calls = 0;
  AcquireOptions o = Ttl(seconds(3));
  o.on_lost = [&](const Status&) { ++lost_calls; };
  auto lease = a->TryAcquire("k", o);
  ASSERT_TRUE(lease.ok());
  // The store loses our lease (as after a failover): someone else gets it.
  ASSERT_TRUE(Store().Release("k", lease->owner()).ok());
  auto b = NewClient()->TryAcquire("k", Ttl(seconds(3)));
  ASSERT_TRUE(b.ok());
  clock_->Advance(seconds(1));  // the first renewal, at ttl/3
  EXPECT_EQ(lost_calls, 1);
  EXPECT_EQ(lease->Check().code(), StatusCode::kLeaseLost);
  // Releasing the lost lease must not delete b's lock.
  EXPECT_EQ(lease->Release().code(), StatusCode::kLeaseLost);
  EXPECT_TRUE(b->Check().ok());
  auto c = NewClient()->TryAcquire("k", Ttl(seconds(3)));
  EXPECT_EQ(c.status().code(), StatusCode::kLockHeld);
}

TEST_P(ClientTest, RenewalAnsweredAfterValidUntilStillLosesTheLease) {
  // A store call that takes longer than the time left: the store extends
  // the lease, but the client must not resurrect one it may have reported
  // lost. It gives the key back instead.
  class SlowRenew final : public Backend {
   public:
    SlowRenew(std::unique_ptr<Backend> inner, std::shared_ptr<SimulatedClock> c)
        : inner_(std::move(inner)), clock_(std::move(c)) {}
    Result<Attempt> TryAcquire(const LeaseRequest& r) override { return inner_->TryAcquire(r); }
    Status Release(std::string_view k, const OwnerId& o) override { return inner_->Release(k, o); }
    std::vector<Status> Renew(std::span<const LeaseRequest> l) override {
      auto r = inner_->Renew(l);
      clock_->Advance(seconds(5));  // the reply is slow
      return r;
    }
    Result<std::vector<HolderInfo>> List(std::string_view p) override { return inner_->List(p); }
    std::string Describe() const override { return "slow"; }

   private:
    std::unique_ptr<Backend> inner_;
    std::shared_ptr<SimulatedClock> clock_;
  };
  auto client = NewClient(std::make_unique<SlowRenew>(NewBackend(), clock_));
  int lost_calls = 0;
  AcquireOptions o = Ttl(seconds(6));
  o.on_lost = [&](const Status&) { ++lost_calls; };
  auto lease = client->TryAcquire("k", o);
  ASSERT_TRUE(lease.ok());
  clock_->Advance(seconds(2));  // renewal sent at 2 s, answered at 7 s > 5.9 s
  EXPECT_EQ(lost_calls, 1);
  EXPECT_EQ(lease->Check().code(), StatusCode::kLeaseLost);
  auto other = NewClient()->TryAcquire("k", Ttl(seconds(3)));
  EXPECT_TRUE(other.ok()) << "the late-renewed lease was not given back";
}

TEST_P(ClientTest, TokensStrictlyIncreaseAcrossReleasesAndExpiries) {
  auto client = NewClient();
  FencingToken last = 0;
  for (int i = 0; i < 50; ++i) {
    auto lease = client->TryAcquire("k", Ttl(seconds(1)));
    ASSERT_TRUE(lease.ok()) << i << ": " << lease.status().ToString();
    EXPECT_GT(lease->token(), last);
    last = lease->token();
    if (i % 2 == 0) {
      ASSERT_TRUE(lease->Release().ok());
    } else {
      // Let it expire at the store instead: renewals fail, time runs out.
      plan_->SetRenewError(UnavailableError("down"));
      clock_->Advance(seconds(2));
      plan_->SetRenewError(std::nullopt);
      EXPECT_EQ(lease->Check().code(), StatusCode::kLeaseLost);
    }
  }
}

TEST_P(ClientTest, ReleaseIsOwnerCheckedAndIdempotent) {
  auto client = NewClient();
  auto lease = client->TryAcquire("k", Ttl(seconds(30)));
  ASSERT_TRUE(lease.ok());
  // The store refuses a release by anybody else.
  EXPECT_EQ(Store().Release("k", OwnerId(1, 2)).code(), StatusCode::kNotOwner);
  EXPECT_EQ(NewClient()->TryAcquire("k", Ttl(seconds(30))).status().code(),
            StatusCode::kLockHeld);
  EXPECT_TRUE(lease->Release().ok());
  EXPECT_TRUE(lease->Release().ok()) << "second release";
  EXPECT_EQ(lease->Check().code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(lease->stop_token().stop_requested()) << "release is not loss";
  EXPECT_TRUE(NewClient()->TryAcquire("k", Ttl(seconds(30))).ok());
}

TEST_P(ClientTest, ReleasedLeaseIsNoLongerRenewed) {
  auto client = NewClient();
  auto lease = client->TryAcquire("k", Ttl(seconds(3)));
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(lease->Release().ok());
  clock_->Advance(seconds(30));
  EXPECT_EQ(plan_->RenewBatches(), 0);
}

TEST_P(ClientTest, DestroyingALeaseReleasesIt) {
  auto client = NewClient();
  {
    auto lease = client->TryAcquire("k", Ttl(seconds(30)));
    ASSERT_TRUE(lease.ok());
  }
  EXPECT_TRUE(NewClient()->TryAcquire("k", Ttl(seconds(30))).ok());
}

TEST_P(ClientTest, MoveAssignmentReleasesTheOverwrittenLease) {
  auto client = NewClient();
  auto a = client->TryAcquire("a", Ttl(seconds(30)));
  auto b = client->TryAcquire("b", Ttl(seconds(30)));
  ASSERT_TRUE(a.ok() && b.ok());
  *a = std::move(*b);
  EXPECT_EQ(a->key(), "b");
  EXPECT_FALSE(static_cast<bool>(*b));
  EXPECT_EQ(b->Release().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(NewClient()->TryAcquire("a", Ttl(seconds(30))).ok());
  EXPECT_EQ(NewClient()->TryAcquire("b", Ttl(seconds(30))).status().code(),
            StatusCode::kLockHeld);
}

TEST_P(ClientTest, LeaseOutlivesItsClientAndIsStillRenewed) {
  Lease lease;
  {
    auto client = NewClient();
    auto l = client->TryAcquire("k", Ttl(seconds(3)));
    ASSERT_TRUE(l.ok());
    lease = std::move(*l);
  }
  clock_->Advance(seconds(30));
  EXPECT_TRUE(lease.Check().ok());
  EXPECT_TRUE(lease.Release().ok());
}

TEST_P(ClientTest, CallbackMayDropTheLastLease) {
  std::optional<Lease> lease;
  int calls = 0;
  {
    auto client = NewClient();
    AcquireOptions o = Ttl(seconds(3));
    o.on_lost = [&](const Status&) {
      ++calls;
      lease.reset();  // destroys the last reference to the client core
    };
    auto l = client->TryAcquire("k", o);
    ASSERT_TRUE(l.ok());
    lease.emplace(std::move(*l));
  }
  plan_->SetRenewError(UnavailableError("down"));
  clock_->Advance(seconds(10));
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(lease.has_value());
}

TEST_P(ClientTest, TryAcquireOnAHeldKeySaysHeldWithTheTimeLeft) {
  auto a = NewClient()->TryAcquire("k", Ttl(seconds(30)));
  ASSERT_TRUE(a.ok());
  auto b = NewClient()->TryAcquire("k", Ttl(seconds(30)));
  EXPECT_EQ(b.status().code(), StatusCode::kLockHeld);
  EXPECT_NE(b.status().message().find("'k' is held by another owner (its lease has 30s left)"),
            std::string::npos)
      << b.status().message();
}

TEST_P(ClientTest, AcquireGivesUpAtItsDeadline) {
  auto holder = NewClient()->TryAcquire("k", Ttl(seconds(30)));
  ASSERT_TRUE(holder.ok());
  auto waiter = NewClient();
  const TimePoint start = clock_->Now();
  std::optional<Result<Lease>> result;
  std::jthread t([&] {
    AcquireOptions o = Ttl(seconds(30));
    o.wait = milliseconds(200);
    result.emplace(waiter->Acquire("k", o));
  });
  // The waiter polls; move time in small steps until it gives up.
  while (true) {
    clock_->AwaitSleepers(1);
    clock_->Advance(milliseconds(10));
    if (clock_->Now() >= start + milliseconds(200)) break;
  }
  t.join();
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(result->status().message().find("after 200ms"), std::string::npos)
      << result->status().message();
}

// A waiter that saw the key held, whose last attempt (cut short by the
// deadline) got no answer, timed out: the store was reachable.
TEST_P(ClientTest, AWaitThatSawTheHolderEndsAsATimeoutEvenIfItsLastTryFailed) {
  auto holder = NewClient()->TryAcquire("k", Ttl(seconds(30)));
  ASSERT_TRUE(holder.ok());
  auto waiter = NewClient();
  std::optional<Result<Lease>> result;
  std::jthread t([&] {
    AcquireOptions o = Ttl(seconds(30));
    o.wait = milliseconds(200);
    result.emplace(waiter->Acquire("k", o));
  });
  clock_->AwaitSleepers(1);  // it saw the holder and waits
  plan_->SetAcquireError(UnavailableError("no answer in time"));
  clock_->Advance(milliseconds(200));
  t.join();
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(result->status().message().find("the last attempt had no answer: no answer in time"),
            std::string::npos)
      << result->status().message();
}

// A store that never answered during the wait is reported as such.
TEST_P(ClientTest, AWaitThatNeverReachedTheStoreReportsTheStore) {
  plan_->SetAcquireError(UnavailableError("connection refused"));
  auto waiter = NewClient();
  std::optional<Result<Lease>> result;
  std::jthread t([&] {
    AcquireOptions o = Ttl(seconds(30));
    o.wait = milliseconds(200);
    result.emplace(waiter->Acquire("k", o));
  });
  const TimePoint start = clock_->Now();
  while (clock_->Now() < start + milliseconds(200)) {
    clock_->AwaitSleepers(1);
    clock_->Advance(milliseconds(10));
  }
  t.join();
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->status().code(), StatusCode::kUnavailable) << result->status().ToString();
}

TEST_P(ClientTest, WaitingAcquireGetsTheKeyAfterRelease) {
  auto holder = NewClient()->TryAcquire("k", Ttl(seconds(30)));
  ASSERT_TRUE(holder.ok());
  auto waiter = NewClient();
  std::optional<Result<Lease>> result;
  std::jthread t([&] {
    AcquireOptions o = Ttl(seconds(30));
    o.wait = seconds(10);
    result.emplace(waiter->Acquire("k", o));
  });
  clock_->AwaitSleepers(1);  // it found the key held and went to sleep
  ASSERT_TRUE(holder->Release().ok());
  // Wake it: polling is capped at 50 ms.
  clock_->Advance(milliseconds(50));
  t.join();
  ASSERT_TRUE(result.has_value());
  ASSERT_TRUE(result->ok()) << result->status().ToString();
  EXPECT_GT((*result)->token(), holder->token());
}

TEST_P(ClientTest, WaitingAcquireCanBeCancelled) {
  auto holder = NewClient()->TryAcquire("k", Ttl(seconds(30)));
  ASSERT_TRUE(holder.ok());
  auto waiter = NewClient();
  std::stop_source cancel;
  std::optional<Result<Lease>> result;
  std::jthread t([&] {
    AcquireOptions o = Ttl(seconds(30));
    o.wait = seconds(10);
    o.cancel = cancel.get_token();
    result.emplace(waiter->Acquire("k", o));
  });
  clock_->AwaitSleepers(1);
  cancel.request_stop();
  t.join();
  EXPECT_EQ(result->status().code(), StatusCode::kCancelled);
}

TEST_P(ClientTest, LostAcquireReplyIsReconciledByOwner) {
  auto client = NewClient();
  plan_->LoseAcquireReplies(1);  // granted at the store, reply lost
  AcquireOptions o = Ttl(seconds(30));
  o.wait = seconds(1);
  std::optional<Result<Lease>> result;
  std::jthread t([&] { result.emplace(client->Acquire("k", o)); });
  clock_->AwaitSleepers(1);
  clock_->Advance(milliseconds(5));
  t.join();
  ASSERT_TRUE(result->ok()) << result->status().ToString();
  // The retry found its own grant: the same token, not a second one.
  EXPECT_EQ((*result)->token(), 1u);
}

TEST_P(ClientTest, LostAcquireReplyWithoutRetryLeavesNothingHeld) {
  auto client = NewClient();
  plan_->LoseAcquireReplies(1);
  auto r = client->TryAcquire("k", Ttl(seconds(30)));
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  // The ghost grant was released, so the key is free now, not in 30 s.
  EXPECT_TRUE(NewClient()->TryAcquire("k", Ttl(seconds(30))).ok());
}

TEST_P(ClientTest, BadInputIsRefusedWithAClearMessage) {
  auto client = NewClient();
  struct Case {
    std::string key;
    AcquireOptions options;
    std::string message;
  };
  AcquireOptions ok = Ttl(seconds(30));
  AcquireOptions zero_ttl = ok, big_ttl = ok, neg_wait = ok, big_drift = ok;
  AcquireOptions endless_wait = ok, endless_hold = ok;
  zero_ttl.ttl = milliseconds(0);
  big_ttl.ttl = std::chrono::hours(25);
  neg_wait.wait = milliseconds(-1);
  endless_wait.wait = std::chrono::hours(2'600'000);  // once wrapped the deadline
  endless_hold.max_hold = std::chrono::hours(2'600'000);
  big_drift.drift_margin = seconds(30);
  std::vector<Case> cases = {
      {"", ok, "key is empty"},
      {std::string(1025, 'x'), ok, "key is 1025 bytes"},
      {std::string("a\0b", 3), ok, "NUL"},
      {"k", zero_ttl, "ttl 0ms is out of range: a ttl is 10ms to 24h"},
      {"k", big_ttl, "ttl 25h is out of range"},
      {"k", neg_wait, "wait -1ms is out of range"},
      {"k", endless_wait, "is out of range: 0 (a single attempt) to 8760h"},
      {"k", endless_hold, "is out of range: more than 0, up to 8760h"},
      {"k", big_drift, "drift margin"},
  };
  for (const auto& c : cases) {
    auto r = client->Acquire(c.key, c.options);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.message;
    EXPECT_NE(r.status().message().find(c.message), std::string::npos)
        << r.status().message();
  }
  auto longest = client->Acquire(std::string(1024, 'x'), ok);
  EXPECT_TRUE(longest.ok()) << longest.status().ToString();
  EXPECT_EQ(Store().List("")->size(), 1u) << "a refused acquire left something held";
}

TEST_P(ClientTest, ListShowsHoldersWithTokensAndTimeLeft) {
  auto client = NewClient();
  auto a = client->TryAcquire("jobs/a", Ttl(seconds(30)));
  auto b = client->TryAcquire("jobs/b", Ttl(seconds(10)));
  auto c = client->TryAcquire("other", Ttl(seconds(10)));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  clock_->Advance(seconds(1));
  auto list = client->List("jobs/");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].key, "jobs/a");
  EXPECT_EQ((*list)[0].owner, a->owner());
  EXPECT_EQ((*list)[0].token, a->token());
  EXPECT_GT((*list)[0].ttl_remaining, seconds(28));
  EXPECT_EQ((*list)[1].key, "jobs/b");
}


// Session-based stores (ZooKeeper): Backend::Liveness bounds valid_until by
// what the store promised about the session, whatever Renew answers.
class SessionLivenessTest : public ::testing::Test {
 protected:
  // The in-memory store behind a session: Renew is answered from "state"
  // (the in-memory store), and heard_at moves only when the test says the
  // session's heartbeat was answered.
  class SessionBackend final : public Backend {
   public:
    SessionBackend(std::shared_ptr<InMemoryStore> store, SessionLivenessTest* test)
        : inner_(std::move(store)), test_(test) {}
    Result<Attempt> TryAcquire(const LeaseRequest& r) override {
      if (test_->heartbeat_follows_calls_) test_->heard_at_ = test_->clock_->Now();
      return inner_.TryAcquire(r);
    }
    Status Release(std::string_view k, const OwnerId& o) override { return inner_.Release(k, o); }
    std::vector<Status> Renew(std::span<const LeaseRequest> l) override {
      ++test_->renew_calls_;
      if (test_->heartbeat_follows_calls_) test_->heard_at_ = test_->clock_->Now();
      return inner_.Renew(l);
    }
    Result<std::vector<HolderInfo>> List(std::string_view p) override { return inner_.List(p); }
    std::string Describe() const override { return "session://"; }
    std::optional<SessionLiveness> Liveness() override {
      return SessionLiveness{test_->session_timeout_, test_->heard_at_};
    }

   private:
    InMemoryBackend inner_;
    SessionLivenessTest* test_;
  };

  std::unique_ptr<Client> NewClient() {
    ClientOptions o;
    o.clock = clock_;
    o.random = random_;
    return Client::FromBackend(std::make_unique<SessionBackend>(memory_, this), o);
  }

  static AcquireOptions Ttl(milliseconds ttl) {
    AcquireOptions o;
    o.ttl = ttl;
    o.wait = milliseconds(0);
    return o;
  }

  std::shared_ptr<SimulatedClock> clock_ = std::make_shared<SimulatedClock>();
  std::shared_ptr<InMemoryStore> memory_ = std::make_shared<InMemoryStore>(clock_);
  std::shared_ptr<SeqRandom> random_ = std::make_shared<SeqRandom>();
  milliseconds session_timeout_{3000};
  TimePoint heard_at_{};
  bool heartbeat_follows_calls_ = true;
  int renew_calls_ = 0;
};

TEST_F(SessionLivenessTest, ValidUntilFollowsTheNegotiatedSessionTimeout) {
  // ttl 30 s, but the store only promised a 3 s session: the lease is valid
  // for 3 s minus the margin that 3 s calls for, and renewed every second.
  auto client = NewClient();
  const TimePoint t0 = clock_->Now();
  auto lease = client->TryAcquire("k", Ttl(seconds(30)));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ(lease->valid_until(), t0 + milliseconds(3000 - 32));
  clock_->Advance(milliseconds(999));
  EXPECT_EQ(renew_calls_, 0);
  clock_->Advance(milliseconds(1));
  EXPECT_EQ(renew_calls_, 1);
  EXPECT_EQ(lease->valid_until(), t0 + seconds(1) + milliseconds(3000 - 32));
}

TEST_F(SessionLivenessTest, TtlShorterThanTheSessionStillGoverns) {
  session_timeout_ = seconds(10);
  auto client = NewClient();
  const TimePoint t0 = clock_->Now();
  auto lease = client->TryAcquire("k", Ttl(seconds(1)));
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease->valid_until(), t0 + milliseconds(1000 - 12));
}

TEST_F(SessionLivenessTest, AnsweredHeartbeatsKeepTheLeaseForManySessionTimeouts) {
  auto client = NewClient();
  auto lease = client->TryAcquire("k", Ttl(seconds(30)));
  ASSERT_TRUE(lease.ok());
  clock_->Advance(seconds(300));  // 100 session timeouts
  EXPECT_TRUE(lease->Check().ok()) << lease->Check().ToString();
}

TEST_F(SessionLivenessTest, RenewOkWithoutAFreshAnswerDoesNotExtendTheLease) {
  // A Renew answered from the session's state says OK, but the store has
  // not been heard from since t0 (a partition the client has not noticed):
  // the lease is lost when the session may have expired, not later.
  auto client = NewClient();
  int lost_calls = 0;
  AcquireOptions o = Ttl(seconds(30));
  o.on_lost = [&](const Status&) { ++lost_calls; };
  const TimePoint t0 = clock_->Now();
  auto lease = client->TryAcquire("k", o);
  ASSERT_TRUE(lease.ok());
  heartbeat_follows_calls_ = false;
  clock_->AdvanceTo(t0 + milliseconds(3000 - 32) - std::chrono::nanoseconds(1));
  EXPECT_TRUE(lease->Check().ok());
  EXPECT_GE(renew_calls_, 2) << "renewals came no sooner when the promise ran short";
  clock_->AdvanceTo(t0 + milliseconds(3000 - 32));
  EXPECT_EQ(lost_calls, 1);
  EXPECT_EQ(lease->Check().code(), StatusCode::kLeaseLost);
}

TEST_F(SessionLivenessTest, LateHeartbeatRecoversBeforeValidUntil) {
  // The heartbeat answer comes late but in time: renewal halfway to
  // valid_until picks it up and the lease lives on.
  auto client = NewClient();
  const TimePoint t0 = clock_->Now();
  auto lease = client->TryAcquire("k", Ttl(seconds(30)));
  ASSERT_TRUE(lease.ok());
  heartbeat_follows_calls_ = false;
  clock_->AdvanceTo(t0 + milliseconds(2500));
  heard_at_ = t0 + milliseconds(2400);  // answered now, sent at 2.4 s
  clock_->Advance(seconds(1));
  EXPECT_TRUE(lease->Check().ok()) << lease->Check().ToString();
  EXPECT_EQ(lease->valid_until(), t0 + milliseconds(2400 + 3000 - 32));
}

}  // namespace
}  // namespace dlock

namespace dlock {
namespace {

TEST_P(ClientTest, MaxHoldStopsRenewalsAndTheLeaseIsLostAtValidUntil) {
  auto client = NewClient();
  int lost_calls = 0;
  Status why;
  AcquireOptions o = Ttl(seconds(3), milliseconds(100));
  o.max_hold = seconds(10);
  o.on_lost = [&](const Status& s) {
    ++lost_calls;
    why = s;
  };
  const TimePoint start = clock_->Now();
  auto lease = client->TryAcquire("k", o);
  ASSERT_TRUE(lease.ok());
  clock_->AdvanceTo(start + seconds(10));
  EXPECT_TRUE(lease->Check().ok()) << "lost before max hold";
  // The last renewal was at or before +10 s; it lapses within one ttl after.
  clock_->AdvanceTo(start + seconds(13));
  EXPECT_EQ(lost_calls, 1);
  EXPECT_EQ(lease->Check().code(), StatusCode::kLeaseLost);
  EXPECT_NE(why.message().find("max hold"), std::string::npos) << why.message();
  // And the store gives the key to somebody else.
  clock_->Advance(milliseconds(200));
  EXPECT_TRUE(NewClient()->TryAcquire("k", Ttl(seconds(3))).ok());
}

TEST_P(ClientTest, AcquireAllTakesKeysInOneOrderAndAllOrNothing) {
  auto client = NewClient();
  AcquireOptions o = Ttl(seconds(30));
  auto all = client->AcquireAll({"b", "a", "c", "a"}, o);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].key(), "a");
  EXPECT_EQ((*all)[1].key(), "b");
  EXPECT_EQ((*all)[2].key(), "c");
  for (auto& l : *all) ASSERT_TRUE(l.Release().ok());

  // "c" is held elsewhere: nothing may stay held after the failure.
  auto other = NewClient()->TryAcquire("c", o);
  ASSERT_TRUE(other.ok());
  auto failed = client->AcquireAll({"a", "b", "c"}, o);  // wait 0
  EXPECT_EQ(failed.status().code(), StatusCode::kDeadlineExceeded);
  auto third = NewClient();
  EXPECT_TRUE(third->TryAcquire("a", o).ok()) << "a was left held";
  EXPECT_TRUE(third->TryAcquire("b", o).ok()) << "b was left held";
  EXPECT_EQ(client->AcquireAll({}, o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dlock

namespace dlock {
namespace {

TEST_P(ClientTest, LockDelayHoldsBackTheKeyAfterAnUncleanEndOnly) {
  auto a = NewClient();
  AcquireOptions o = Ttl(seconds(2), milliseconds(100));
  o.lock_delay = seconds(5);
  const TimePoint start = clock_->Now();
  auto lease = a->TryAcquire("k", o);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  plan_->SetRenewError(UnavailableError("holder cut off"));
  plan_->SetReleaseError(UnavailableError("holder cut off"));
  // The store's lease ends at +2 s; the key stays closed until +7 s.
  clock_->AdvanceTo(start + seconds(2) + milliseconds(1));
  plan_->SetRenewError(std::nullopt);
  plan_->SetReleaseError(std::nullopt);
  auto b = NewClient();
  EXPECT_EQ(b->TryAcquire("k", Ttl(seconds(2))).status().code(), StatusCode::kLockHeld);
  clock_->AdvanceTo(start + seconds(7) - milliseconds(1));
  EXPECT_EQ(b->TryAcquire("k", Ttl(seconds(2))).status().code(), StatusCode::kLockHeld);
  clock_->AdvanceTo(start + seconds(7));
  auto after = b->TryAcquire("k", Ttl(seconds(2)));
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  ASSERT_TRUE(after->Release().ok());
  // A clean release has no delay.
  auto clean = a->TryAcquire("k", o);
  ASSERT_TRUE(clean.ok());
  ASSERT_TRUE(clean->Release().ok());
  EXPECT_TRUE(b->TryAcquire("k", Ttl(seconds(2))).ok());
}

TEST_P(ClientTest, RunOnceRunsTheJobOnceAndAgainOnlyAfterAFailure) {
  auto client = NewClient();
  AcquireOptions o = Ttl(seconds(30));
  int runs = 0;
  auto failing = client->RunOnce("reconcile/2026-11-29", o, [&] {
    ++runs;
    return UnavailableError("the job failed");
  });
  EXPECT_EQ(failing.status().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(*client->IsDone("reconcile/2026-11-29"));
  auto first = client->RunOnce("reconcile/2026-11-29", o, [&] {
    ++runs;
    return Status::Ok();
  });
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(*first);
  auto second = NewClient()->RunOnce("reconcile/2026-11-29", o, [&] {
    ++runs;
    return Status::Ok();
  });
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(*second) << "ran twice";
  EXPECT_EQ(runs, 2);
}

TEST_P(ClientTest, ALostLeaseCannotMarkItsRunDone) {
  auto client = NewClient();
  auto lease = client->TryAcquire("job", Ttl(seconds(3)));
  ASSERT_TRUE(lease.ok());
  plan_->SetRenewError(UnavailableError("cut off"));
  clock_->Advance(seconds(4));
  EXPECT_EQ(client->MarkDone(*lease).code(), StatusCode::kLeaseLost);
  EXPECT_FALSE(*client->IsDone("job"));
}

TEST_P(ClientTest, LockDelayOnAStoreThatCannotEnforceItIsRefused) {
  class NoDelay final : public Backend {
   public:
    explicit NoDelay(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
    Result<Attempt> TryAcquire(const LeaseRequest& r) override { return inner_->TryAcquire(r); }
    Status Release(std::string_view k, const OwnerId& o) override { return inner_->Release(k, o); }
    std::vector<Status> Renew(std::span<const LeaseRequest> l) override { return inner_->Renew(l); }
    Result<std::vector<HolderInfo>> List(std::string_view p) override { return inner_->List(p); }
    std::string Describe() const override { return "nodelay://"; }

   private:
    std::unique_ptr<Backend> inner_;
  };
  auto client = NewClient(std::make_unique<NoDelay>(NewBackend()));
  AcquireOptions o = Ttl(seconds(3));
  o.lock_delay = seconds(1);
  auto r = client->TryAcquire("k", o);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("lock-delay is not supported by nodelay://"),
            std::string::npos);
}

// A store that applies its own TTL granularity, as etcd does (whole seconds,
// at least 2 s): it grants and renews for the rounded TTL and says so.
class RoundingBackend final : public Backend {
 public:
  explicit RoundingBackend(std::shared_ptr<InMemoryStore> store) : inner_(std::move(store)) {}
  static milliseconds Round(milliseconds ttl) {
    const auto secs = std::chrono::ceil<seconds>(ttl);
    return std::max<milliseconds>(secs, seconds(2));
  }
  Result<Attempt> TryAcquire(const LeaseRequest& request) override {
    LeaseRequest rounded = request;
    rounded.ttl = Round(request.ttl);
    auto a = inner_.TryAcquire(rounded);
    if (a.ok() && a->granted) a->granted_ttl = rounded.ttl;
    return a;
  }
  Status Release(std::string_view key, const OwnerId& owner) override {
    return inner_.Release(key, owner);
  }
  std::vector<Status> Renew(std::span<const LeaseRequest> leases) override {
    std::vector<LeaseRequest> rounded(leases.begin(), leases.end());
    for (auto& r : rounded) {
      // The core must ask for the granted TTL, not the original request.
      EXPECT_EQ(r.ttl, Round(r.ttl)) << "renewal asked for an ungranted TTL";
      r.ttl = Round(r.ttl);
    }
    ++renew_batches;
    return inner_.Renew(rounded);
  }
  Result<std::vector<HolderInfo>> List(std::string_view prefix) override {
    return inner_.List(prefix);
  }
  std::string Describe() const override { return "rounding://"; }

  std::atomic<int> renew_batches{0};

 private:
  InMemoryBackend inner_;
};

TEST(GrantedTtlTest, TheStoresTtlDrivesValidUntilAndRenewal) {
  auto clock = std::make_shared<SimulatedClock>();
  auto store = std::make_shared<InMemoryStore>(clock);
  auto backend = std::make_unique<RoundingBackend>(store);
  RoundingBackend* raw = backend.get();
  ClientOptions o;
  o.clock = clock;
  o.random = std::make_shared<SeqRandom>();
  auto client = Client::FromBackend(std::move(backend), o);

  const TimePoint t0 = clock->Now();
  AcquireOptions a;
  a.ttl = milliseconds(300);  // below the store's minimum
  auto lease = client->TryAcquire("k", a);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ(lease->ttl(), seconds(2));
  // Default drift follows the granted TTL: 2 s / 100 + 2 ms.
  EXPECT_EQ(lease->valid_until(), t0 + seconds(2) - milliseconds(22));

  // Renewed at 2 s / 3, not at 100 ms: 15 calls in 10 s, and held throughout.
  clock->Advance(seconds(10));
  EXPECT_GE(raw->renew_batches.load(), 14);
  EXPECT_LE(raw->renew_batches.load(), 16);
  EXPECT_TRUE(lease->Check().ok()) << lease->Check().ToString();
  EXPECT_GT(lease->valid_until(), clock->Now() + seconds(1));
}

TEST(GrantedTtlTest, ExplicitDriftIsKeptWithAGrantedTtl) {
  auto clock = std::make_shared<SimulatedClock>();
  auto store = std::make_shared<InMemoryStore>(clock);
  ClientOptions o;
  o.clock = clock;
  o.random = std::make_shared<SeqRandom>();
  auto client = Client::FromBackend(std::make_unique<RoundingBackend>(store), o);
  const TimePoint t0 = clock->Now();
  AcquireOptions a;
  a.ttl = milliseconds(1500);
  a.drift_margin = milliseconds(100);
  auto lease = client->TryAcquire("k", a);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ(lease->ttl(), seconds(2));
  EXPECT_EQ(lease->valid_until(), t0 + seconds(2) - milliseconds(100));
}

TEST(GrantedTtlTest, StoresThatReportNothingKeepTheRequestedTtl) {
  auto clock = std::make_shared<SimulatedClock>();
  auto store = std::make_shared<InMemoryStore>(clock);
  ClientOptions o;
  o.clock = clock;
  o.random = std::make_shared<SeqRandom>();
  auto client = Client::FromBackend(std::make_unique<InMemoryBackend>(store), o);
  AcquireOptions a;
  a.ttl = milliseconds(300);
  auto lease = client->TryAcquire("k", a);
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease->ttl(), milliseconds(300));
}

// Records what the core asks of the store.
class RecordingBackend final : public Backend {
 public:
  explicit RecordingBackend(std::shared_ptr<InMemoryStore> store) : inner_(std::move(store)) {}
  Result<Attempt> TryAcquire(const LeaseRequest& request) override {
    deadlines.push_back(request.deadline);
    return inner_.TryAcquire(request);
  }
  Status Release(std::string_view key, const OwnerId& owner) override {
    return inner_.Release(key, owner);
  }
  std::vector<Status> Renew(std::span<const LeaseRequest> leases) override {
    return inner_.Renew(leases);
  }
  Result<std::vector<HolderInfo>> List(std::string_view prefix) override {
    return inner_.List(prefix);
  }
  std::string Describe() const override { return "recording://"; }

  std::vector<TimePoint> deadlines;

 private:
  InMemoryBackend inner_;
};

TEST(RequestDeadlineTest, AWaitingAcquireTellsTheStoreItsDeadline) {
  auto clock = std::make_shared<SimulatedClock>();
  auto backend = std::make_unique<RecordingBackend>(std::make_shared<InMemoryStore>(clock));
  RecordingBackend* raw = backend.get();
  ClientOptions o;
  o.clock = clock;
  o.random = std::make_shared<SeqRandom>();
  auto client = Client::FromBackend(std::move(backend), o);
  const TimePoint t0 = clock->Now();
  AcquireOptions a;
  a.ttl = seconds(3);
  a.wait = seconds(7);
  auto waited = client->Acquire("k1", a);
  ASSERT_TRUE(waited.ok());
  auto single = client->TryAcquire("k2", a);
  ASSERT_TRUE(single.ok());
  ASSERT_EQ(raw->deadlines.size(), 2u);
  EXPECT_EQ(raw->deadlines[0], t0 + seconds(7));
  EXPECT_EQ(raw->deadlines[1], TimePoint::max()) << "a single attempt has no deadline of its own";
}

// A session-based store: its grants run from the session's last keep-alive.
class SessionBackend final : public Backend {
 public:
  SessionBackend(std::shared_ptr<InMemoryStore> store, std::shared_ptr<SimulatedClock> clock)
      : inner_(std::move(store)), clock_(std::move(clock)) {}
  Result<Attempt> TryAcquire(const LeaseRequest& request) override {
    auto a = inner_.TryAcquire(request);
    if (a.ok() && a->granted) a->valid_from = confirmed_at;
    return a;
  }
  Status Release(std::string_view key, const OwnerId& owner) override {
    return inner_.Release(key, owner);
  }
  std::vector<Status> Renew(std::span<const LeaseRequest> leases) override {
    confirmed_at = clock_->Now();
    ++renew_batches;
    return inner_.Renew(leases);
  }
  Result<std::vector<HolderInfo>> List(std::string_view prefix) override {
    return inner_.List(prefix);
  }
  std::string Describe() const override { return "session://"; }

  TimePoint confirmed_at{};
  int renew_batches = 0;

 private:
  InMemoryBackend inner_;
  std::shared_ptr<SimulatedClock> clock_;
};

TEST(ValidFromTest, AGrantUnderAnOlderSessionRunsFromItsLastKeepAlive) {
  auto clock = std::make_shared<SimulatedClock>();
  auto backend =
      std::make_unique<SessionBackend>(std::make_shared<InMemoryStore>(clock), clock);
  SessionBackend* raw = backend.get();
  ClientOptions o;
  o.clock = clock;
  o.random = std::make_shared<SeqRandom>();
  auto client = Client::FromBackend(std::move(backend), o);
  raw->confirmed_at = clock->Now();
  clock->Advance(milliseconds(700));
  AcquireOptions a;
  a.ttl = seconds(3);
  a.drift_margin = milliseconds(100);
  auto lease = client->TryAcquire("k", a);
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease->valid_until(), raw->confirmed_at + seconds(3) - milliseconds(100));
  // The first renewal is due a third of the TTL after the keep-alive, not
  // after the grant: by 300 ms from now.
  clock->Advance(milliseconds(300));
  EXPECT_GE(raw->renew_batches, 1);
  EXPECT_GT(lease->valid_until(), raw->confirmed_at + seconds(3) - milliseconds(101));
  clock->Advance(seconds(30));
  EXPECT_TRUE(lease->Check().ok()) << lease->Check().ToString();
}

TEST(ValidFromTest, AValidFromAfterTheSendTimeIsIgnored) {
  auto clock = std::make_shared<SimulatedClock>();
  auto backend =
      std::make_unique<SessionBackend>(std::make_shared<InMemoryStore>(clock), clock);
  SessionBackend* raw = backend.get();
  ClientOptions o;
  o.clock = clock;
  o.random = std::make_shared<SeqRandom>();
  auto client = Client::FromBackend(std::move(backend), o);
  const TimePoint t0 = clock->Now();
  raw->confirmed_at = t0 + seconds(1);  // a store's clock must not extend it
  AcquireOptions a;
  a.ttl = seconds(3);
  a.drift_margin = milliseconds(100);
  auto lease = client->TryAcquire("k", a);
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease->valid_until(), t0 + seconds(3) - milliseconds(100));
}

}  // namespace
}  // namespace dlock
