// Backend::KeepPlaces on ZooKeeper, against the ensemble fixture: a waiter
// kept by it keeps its node with no attempt while one that is not kept
// lapses; a place that is no longer kept lapses in turn; an owner with no
// place, or holding the key, is kNotFound and its holding is not touched;
// and keeping asks nothing of the ensemble (it answers while the client is
// cut off from it). The backend runs on a simulated clock, so the queue's
// time moves only when the test moves it, whatever the machine's load.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backends/zookeeper/zk_path.h"
#include "backends/zookeeper/zk_session.h"
#include "backends/zookeeper/zookeeper_backend.h"
#include "dlock/testing/simulated_clock.h"
#include "eventually.h"
#include "harness/proxy.h"
#include "zk_fixture.h"
#include "zk_requests.h"

namespace dlock::zookeeper {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing_support::Eventually;
using namespace dlock::zookeeper::testing;

constexpr milliseconds kQueueTtl{3000};
// How long the ensemble has to show what the keeper did.
constexpr milliseconds kSettle{30000};

std::string UniqueKey(std::string_view name) { return RunKey("zk-keep-test", name); }

// Whether `owner` has a node under `key`'s lock path, seen by a session of
// the test's own (after a sync: it may read from another member).
class Looker {
 public:
  Looker() {
    auto s = Session::Start(FixtureOptions().hosts, seconds(10), DefaultClock(), {}, {});
    EXPECT_TRUE(s.ok());
    if (s.ok()) session_ = std::move(*s);
    if (session_) {
      EXPECT_EQ(session_->WaitConnected(seconds(10)), Session::State::kConnected);
    }
  }
  bool HasNode(const std::string& key, const OwnerId& owner) {
    if (!session_) return false;
    const std::string path = *LockPath(FixtureOptions().chroot, key);
    auto sync = session_->Sync(path);
    auto op = session_->Children(path);
    const Reply* r = op->Wait(seconds(5));
    if (r == nullptr || r->rc != ZOK) return false;
    for (const LockNode& n : SortedContenders(r->children)) {
      if (n.guid == GuidOf(owner)) return true;
    }
    return false;
  }

 private:
  std::unique_ptr<Session> session_;
};

class ZooKeeperKeepPlacesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ZkOptions o = FixtureOptions();
    o.clock = clock_;
    backend_ = OpenZooKeeper(o);
    ASSERT_TRUE(backend_->KeepsPlaces());
  }
  // Held for longer than any test moves the clock.
  void Hold(const std::string& key, const OwnerId& owner) {
    LeaseRequest r = Req(key, owner);
    r.ttl = std::chrono::hours(24);
    auto held = Answered([&] { return backend_->TryAcquire(r); });
    ASSERT_TRUE(held.ok() && held->granted) << held.status().ToString();
  }
  std::unique_ptr<Acquisition> Queued(const std::string& key, const OwnerId& owner) {
    std::unique_ptr<Acquisition> a = backend_->Begin(Req(key, owner, kQueueTtl));
    auto first = Answered([&] { return a->Try(); });
    EXPECT_TRUE(first.ok() && !first->granted) << first.status().ToString();
    return a;
  }
  Status Keep(const LeaseRequest& waiter) {
    std::vector<Status> got = backend_->KeepPlaces({&waiter, 1});
    return got.size() == 1 ? got[0] : InternalError("answers for 1 waiter: " + std::to_string(got.size()));
  }

  std::shared_ptr<dlock::testing::SimulatedClock> clock_ =
      std::make_shared<dlock::testing::SimulatedClock>();
  std::unique_ptr<ZooKeeperBackend> backend_;
  Looker zk_;
};

// Two waiters queued together; the clock moves a third of the queue ttl at
// a time, and only `kept` is kept after each step. `dropped` lapses (so the
// keeper has reaped a place that ran out), `kept` is still queued, with no
// attempt since its first. Then `kept` is no longer kept, and lapses too.
TEST_F(ZooKeeperKeepPlacesTest, AKeptPlaceOutlivesItsQueueTtlAndLapsesOnceNoLongerKept) {
  const std::string key = UniqueKey("kept");
  const OwnerId holder = NewOwner(), kept = NewOwner(), dropped = NewOwner();
  Hold(key, holder);
  auto kept_acq = Queued(key, kept);
  auto dropped_acq = Queued(key, dropped);
  ASSERT_TRUE(zk_.HasNode(key, kept) && zk_.HasNode(key, dropped));

  const LeaseRequest keep = Req(key, kept, kQueueTtl);
  int steps = 0, refused = 0;
  const bool lapsed = Eventually([&] {
    clock_->Advance(kQueueTtl / 3);
    ++steps;
    refused += !Keep(keep).ok();
    return !zk_.HasNode(key, dropped);
  }, kSettle, milliseconds(50));
  ASSERT_TRUE(lapsed) << "a place not kept was never reaped";
  EXPECT_GE(steps, 3) << "reaped before its queue ttl had passed";
  EXPECT_EQ(refused, 0) << "of " << steps << " keeps";
  EXPECT_TRUE(zk_.HasNode(key, kept)) << "a kept place was reaped";
  EXPECT_TRUE(Keep(keep).ok());

  clock_->Advance(kQueueTtl + milliseconds(1));
  ASSERT_TRUE(Eventually([&] { return !zk_.HasNode(key, kept); }, kSettle))
      << "a place no longer kept outlived its queue ttl";
  EXPECT_EQ(Keep(keep).code(), StatusCode::kNotFound);
  EXPECT_TRUE(backend_->Release(key, holder).ok());
}

// kNotFound for an owner with no place, and for one that holds the key,
// whose lease KeepPlaces neither extends nor cuts: not renewed, it is
// reaped at its ttl as ever, however long the place asked to be kept.
TEST_F(ZooKeeperKeepPlacesTest, NoPlaceOrAHoldingIsNotFoundAndTheHoldingIsUntouched) {
  const std::string key = UniqueKey("held");
  const OwnerId holder = NewOwner(), stranger = NewOwner();
  EXPECT_EQ(Keep(Req(key, stranger, kQueueTtl)).code(), StatusCode::kNotFound);

  // Granted through an acquisition that had waited: its contender is now
  // Granted, not a place.
  std::unique_ptr<Acquisition> a = backend_->Begin(Req(key, holder, kQueueTtl));
  auto granted = Answered([&] { return a->Try(); });
  ASSERT_TRUE(granted.ok() && granted->granted) << granted.status().ToString();
  EXPECT_EQ(Keep(Req(key, holder, std::chrono::hours(1))).code(), StatusCode::kNotFound);
  EXPECT_TRUE(backend_->Renew(std::vector{Req(key, holder)})[0].ok());
  EXPECT_TRUE(zk_.HasNode(key, holder));

  clock_->Advance(Req(key, holder).ttl + milliseconds(1));
  EXPECT_TRUE(Eventually([&] { return !zk_.HasNode(key, holder); }, kSettle))
      << "the holding was extended by keeping a place";
}

// One answer per waiter, in order; a mix of kept and not found.
TEST_F(ZooKeeperKeepPlacesTest, EachWaiterGetsItsOwnAnswerInOrder) {
  const std::string key = UniqueKey("order");
  const OwnerId holder = NewOwner(), w1 = NewOwner(), w2 = NewOwner();
  Hold(key, holder);
  auto a1 = Queued(key, w1);
  auto a2 = Queued(key, w2);
  const std::vector<LeaseRequest> asked = {Req(key, w1, kQueueTtl), Req(key, NewOwner(), kQueueTtl),
                                           Req(key, w2, kQueueTtl), Req(key, holder, kQueueTtl)};
  const std::vector<Status> got = backend_->KeepPlaces(asked);
  ASSERT_EQ(got.size(), asked.size());
  EXPECT_TRUE(got[0].ok()) << got[0].ToString();
  EXPECT_EQ(got[1].code(), StatusCode::kNotFound);
  EXPECT_TRUE(got[2].ok()) << got[2].ToString();
  EXPECT_EQ(got[3].code(), StatusCode::kNotFound) << "the holder has a holding, not a place";
  a1->Abandon();
  a2->Abandon();
  EXPECT_TRUE(backend_->Release(key, holder).ok());
}

// Cut off from the ensemble (a proxy that forwards nothing), the client
// still keeps its places at once: no request is made for them. A round
// trip would have answered kUnavailable after the attempt's bound.
TEST(ZooKeeperKeepPlacesCutOffTest, KeepingAPlaceAsksNothingOfTheEnsemble) {
  ZkOptions o = FixtureOptions();
  const std::string first = o.hosts.substr(0, o.hosts.find(','));
  const auto colon = first.rfind(':');
  auto proxy = harness::FaultProxy::Start(first.substr(0, colon), std::stoi(first.substr(colon + 1)));
  ASSERT_TRUE(proxy.ok()) << proxy.status().ToString();
  o.hosts = "127.0.0.1:" + std::to_string((*proxy)->port());
  o.session_timeout = seconds(20);
  auto backend = OpenZooKeeper(o);
  auto holder = OpenZooKeeper(FixtureOptions());
  const std::string key = UniqueKey("cut-off");
  const OwnerId held_by = NewOwner(), waiter = NewOwner();
  auto held = Answered([&] { return holder->TryAcquire(Req(key, held_by)); });
  ASSERT_TRUE(held.ok() && held->granted) << held.status().ToString();
  std::unique_ptr<Acquisition> a = backend->Begin(Req(key, waiter, kQueueTtl));
  auto queued = Answered([&] { return a->Try(); });
  ASSERT_TRUE(queued.ok() && !queued->granted) << queued.status().ToString();

  (*proxy)->SetMode(harness::FaultProxy::Mode::kPartition);
  const LeaseRequest keep = Req(key, waiter, kQueueTtl);
  const std::vector<Status> got = backend->KeepPlaces({&keep, 1});
  (*proxy)->SetMode(harness::FaultProxy::Mode::kPass);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].ok()) << got[0].ToString();
  a->Abandon();
  EXPECT_TRUE(holder->Release(key, held_by).ok());
}

}  // namespace
}  // namespace dlock::zookeeper
