// The wait-for graph (dlock/waits.h), read-write locks, semaphores and
// elections in the core, on the in-memory store and the simulated clock.
#include <gtest/gtest.h>

#include "dlock/client.h"
#include "dlock/testing/in_memory_backend.h"
#include "dlock/testing/simulated_clock.h"
#include "dlock/waits.h"

namespace dlock {
namespace {

using std::chrono::milliseconds;
using testing::InMemoryBackend;
using testing::InMemoryStore;
using testing::SimulatedClock;

HolderInfo Holds(std::string key, std::uint64_t session, std::uint64_t n, milliseconds ttl,
                 milliseconds left) {
  HolderInfo h;
  h.key = std::move(key);
  h.owner = OwnerId(session, n);
  h.token = n;
  h.ttl = ttl;
  h.ttl_remaining = left;
  h.label = "p" + std::to_string(session);
  return h;
}

WaiterInfo Waits(std::string key, std::uint64_t session, std::uint64_t n) {
  WaiterInfo w;
  w.key = std::move(key);
  w.owner = OwnerId(session, n);
  w.label = "p" + std::to_string(session);
  return w;
}

TEST(AnalyzeWaits, NamesATwoPartyCycleAndItsMembers) {
  std::vector<HolderInfo> holders = {Holds("a", 1, 10, milliseconds(900), milliseconds(800)),
                                     Holds("b", 2, 20, milliseconds(900), milliseconds(850))};
  std::vector<WaiterInfo> waiters = {Waits("b", 1, 11), Waits("a", 2, 21)};
  WaitReport r = AnalyzeWaits(holders, waiters);
  ASSERT_EQ(r.cycles.size(), 1u);
  EXPECT_EQ(r.cycles[0], (std::vector<std::uint64_t>{1, 2}));
  ASSERT_EQ(r.verdicts.size(), 2u);
  for (const auto& v : r.verdicts) {
    EXPECT_EQ(v.kind, WaitVerdict::Kind::kInCycle) << v.waiter.key;
    ASSERT_EQ(v.blocked_by.size(), 1u);
  }
  EXPECT_EQ(r.verdicts[0].blocked_by[0].owner.session(), 2u);
  EXPECT_EQ(r.parties.size(), 2u);
}

TEST(AnalyzeWaits, AChainBehindASlowHolderIsNotACycle) {
  // 1 waits for 2, 2 waits for 3, 3 holds and waits for nobody.
  std::vector<HolderInfo> holders = {Holds("a", 2, 20, milliseconds(900), milliseconds(100)),
                                     Holds("b", 3, 30, milliseconds(900), milliseconds(890))};
  std::vector<WaiterInfo> waiters = {Waits("a", 1, 11), Waits("b", 2, 21)};
  WaitReport r = AnalyzeWaits(holders, waiters);
  EXPECT_TRUE(r.cycles.empty());
  ASSERT_EQ(r.verdicts.size(), 2u);
  EXPECT_EQ(r.verdicts[0].kind, WaitVerdict::Kind::kBehindHolder);
  EXPECT_FALSE(RenewalsArriving(r.verdicts[0].blocked_by[0])) << "renewed 800ms ago of 900";
  EXPECT_TRUE(RenewalsArriving(r.verdicts[1].blocked_by[0]));
}

TEST(AnalyzeWaits, ThreePartyRingInWaitOrderAndABystander) {
  std::vector<HolderInfo> holders = {Holds("a", 1, 10, milliseconds(0), milliseconds(5)),
                                     Holds("b", 2, 20, milliseconds(0), milliseconds(5)),
                                     Holds("c", 3, 30, milliseconds(0), milliseconds(5))};
  // 1 -> 3 (waits c), 3 -> 2 (waits b), 2 -> 1 (waits a); 4 waits for a too.
  std::vector<WaiterInfo> waiters = {Waits("c", 1, 11), Waits("b", 3, 31), Waits("a", 2, 21),
                                     Waits("a", 4, 41)};
  WaitReport r = AnalyzeWaits(holders, waiters);
  ASSERT_EQ(r.cycles.size(), 1u);
  EXPECT_EQ(r.cycles[0], (std::vector<std::uint64_t>{1, 3, 2}));
  EXPECT_EQ(r.verdicts[3].kind, WaitVerdict::Kind::kBehindHolder)
      << "waiting for a party in a cycle is not being in it";
}

TEST(AnalyzeWaits, SelfWaitsAndFreeKeys) {
  // A party waiting for a key only it holds (two threads of one client) is
  // no edge; a key nobody holds is a queue wait.
  std::vector<HolderInfo> holders = {Holds("a", 1, 10, milliseconds(0), milliseconds(5))};
  std::vector<WaiterInfo> waiters = {Waits("a", 1, 11), Waits("z", 2, 21)};
  WaitReport r = AnalyzeWaits(holders, waiters);
  EXPECT_TRUE(r.cycles.empty());
  EXPECT_EQ(r.verdicts[0].kind, WaitVerdict::Kind::kBehindQueue);
  EXPECT_EQ(r.verdicts[1].kind, WaitVerdict::Kind::kBehindQueue);
}

class SharingTest : public ::testing::Test {
 protected:
  SharingTest()
      : clock_(std::make_shared<SimulatedClock>()),
        store_(std::make_shared<InMemoryStore>(clock_)) {}

  std::unique_ptr<Client> NewClient(std::uint64_t session, std::string label = "") {
    ClientOptions o;
    o.clock = clock_;
    o.session = session;
    o.label = std::move(label);
    return Client::FromBackend(std::make_unique<InMemoryBackend>(store_), o);
  }
  static AcquireOptions Opts(milliseconds ttl = milliseconds(3000)) {
    AcquireOptions o;
    o.ttl = ttl;
    o.wait = milliseconds(0);
    return o;
  }

  std::shared_ptr<SimulatedClock> clock_;
  std::shared_ptr<InMemoryStore> store_;
};

TEST_F(SharingTest, OwnerIdsCarryTheClientsSessionAndLabel) {
  auto c = NewClient(0xabc, "worker-1");
  auto l = c->TryAcquire("k", Opts());
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->owner().session(), 0xabcu);
  EXPECT_EQ(c->Session(), 0xabcu);
  auto list = c->List("k");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].label, "worker-1");
}

TEST_F(SharingTest, ReadersAndWriterThroughTheClient) {
  auto c = NewClient(1);
  AcquireOptions read = Opts();
  read.shared = true;
  auto r1 = c->TryAcquire("rw", read);
  auto r2 = c->TryAcquire("rw", read);
  ASSERT_TRUE(r1.ok() && r2.ok());
  EXPECT_EQ(c->TryAcquire("rw", Opts()).status().code(), StatusCode::kLockHeld);
  // Renewals keep both readers alive through many ttls.
  clock_->Advance(milliseconds(10'000));
  EXPECT_TRUE(r1->Check().ok());
  EXPECT_TRUE(r2->Check().ok());
  ASSERT_TRUE(r1->Release().ok());
  ASSERT_TRUE(r2->Release().ok());
  auto w = c->TryAcquire("rw", Opts());
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_GT(w->token(), r2->token());
}

TEST_F(SharingTest, BadSharingOptionsAreRefused) {
  auto c = NewClient(1);
  AcquireOptions o = Opts();
  o.permits = 0;
  EXPECT_EQ(c->TryAcquire("k", o).status().code(), StatusCode::kInvalidArgument);
  o.permits = 70'000;
  EXPECT_EQ(c->TryAcquire("k", o).status().code(), StatusCode::kInvalidArgument);
  o.permits = 2;
  o.shared = true;
  EXPECT_EQ(c->TryAcquire("k", o).status().code(), StatusCode::kInvalidArgument);
  o = Opts();
  o.label = std::string("bad\nlabel");
  EXPECT_EQ(c->TryAcquire("k", o).status().code(), StatusCode::kInvalidArgument);
  o.label = std::string(300, 'x');
  EXPECT_EQ(c->TryAcquire("k", o).status().code(), StatusCode::kInvalidArgument);
  o = Opts();
  o.permits = 2;
  EXPECT_EQ(c->Campaign("k", o).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(c->List().value().empty()) << "a refused request left something held";
}

TEST_F(SharingTest, StoresThatCannotShareRefuseClearly) {
  class Exclusive final : public Backend {
   public:
    explicit Exclusive(std::shared_ptr<InMemoryStore> s) : inner_(std::move(s)) {}
    Result<Attempt> TryAcquire(const LeaseRequest& r) override { return inner_.TryAcquire(r); }
    Status Release(std::string_view k, const OwnerId& o) override { return inner_.Release(k, o); }
    std::vector<Status> Renew(std::span<const LeaseRequest> l) override { return inner_.Renew(l); }
    Result<std::vector<HolderInfo>> List(std::string_view p) override { return inner_.List(p); }
    std::string Describe() const override { return "exclusive://"; }

   private:
    InMemoryBackend inner_;
  };
  ClientOptions o;
  o.clock = clock_;
  auto c = Client::FromBackend(std::make_unique<Exclusive>(store_), o);
  AcquireOptions read = Opts();
  read.shared = true;
  auto r = c->TryAcquire("k", read);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("exclusive://"), std::string::npos) << r.status().message();
  EXPECT_EQ(c->Waiters().status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(SharingTest, ACycleBuiltThroughTheBackendIsNamedASlowHolderIsNot) {
  // Parties 1 and 2 each hold one key and queue for the other's; party 3
  // waits behind party 4, which holds and renews.
  auto c1 = NewClient(1, "one"), c2 = NewClient(2, "two"), c3 = NewClient(3, "three"),
       c4 = NewClient(4, "four");
  auto a = c1->TryAcquire("a", Opts());
  auto b = c2->TryAcquire("b", Opts());
  auto c = c4->TryAcquire("c", Opts());
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  InMemoryBackend raw(store_);
  auto queue = [&](const std::string& key, std::uint64_t session) {
    LeaseRequest r{key, OwnerId(session, 99), milliseconds(3000), milliseconds(3000)};
    r.label = "raw";
    auto at = raw.TryAcquire(r);
    ASSERT_TRUE(at.ok());
    EXPECT_FALSE(at->granted);
  };
  queue("b", 1);
  queue("a", 2);
  queue("c", 3);
  clock_->Advance(milliseconds(1500));  // c is renewed meanwhile
  auto holders = c1->List();
  auto waiters = c1->Waiters();
  ASSERT_TRUE(holders.ok() && waiters.ok());
  WaitReport r = AnalyzeWaits(*holders, *waiters);
  ASSERT_EQ(r.cycles.size(), 1u);
  EXPECT_EQ(r.cycles[0], (std::vector<std::uint64_t>{1, 2}));
  ASSERT_EQ(r.verdicts.size(), 3u);
  for (const auto& v : r.verdicts) {
    if (v.waiter.key == "c") {
      EXPECT_EQ(v.kind, WaitVerdict::Kind::kBehindHolder);
      ASSERT_EQ(v.blocked_by.size(), 1u);
      EXPECT_EQ(v.blocked_by[0].label, "four");
      EXPECT_TRUE(RenewalsArriving(v.blocked_by[0]));
      ASSERT_TRUE(v.blocked_by[0].held_for.has_value());
      EXPECT_EQ(*v.blocked_by[0].held_for, milliseconds(1500));
      ASSERT_TRUE(v.waiter.waited_for.has_value());
    } else {
      EXPECT_EQ(v.kind, WaitVerdict::Kind::kInCycle) << v.waiter.key;
    }
  }
  // The waiting records do not outlive their waiters: unrefreshed, they go.
  clock_->Advance(milliseconds(3000));
  EXPECT_TRUE(c1->Waiters().value().empty());
}

TEST_F(SharingTest, ElectionOnTheSimulatedClock) {
  auto a = NewClient(1), b = NewClient(2);
  AcquireOptions o = Opts();
  o.label = "a:8080";
  auto term = a->Campaign("leader", o);
  ASSERT_TRUE(term.ok()) << term.status().ToString();
  auto seen = b->CurrentLeader("leader");
  ASSERT_TRUE(seen.ok() && seen->has_value());
  EXPECT_EQ((*seen)->label, "a:8080");
  EXPECT_EQ((*seen)->term, term->token());
  // No newer term within the wait: the current leader comes back.
  auto same = b->AwaitLeader("leader", term->token(), milliseconds(0));
  ASSERT_TRUE(same.ok() && same->has_value());
  EXPECT_EQ((*same)->term, term->token());
  // The leader's lease lapses (its renewals fail is not needed: it resigns).
  ASSERT_TRUE(term->Release().ok());
  auto none = b->CurrentLeader("leader");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  o.label = "b:8080";
  auto next = b->Campaign("leader", o);
  ASSERT_TRUE(next.ok());
  EXPECT_GT(next->token(), term->token());
  // A key that merely starts with the election key is not its leader.
  auto other = a->TryAcquire("leader/x", Opts());
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(b->CurrentLeader("leader").value()->term, next->token());
}

}  // namespace
}  // namespace dlock
