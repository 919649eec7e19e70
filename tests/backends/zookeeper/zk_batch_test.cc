// TryAcquireMany and ReleaseMany on ZooKeeper, against the ensemble fixture,
// through a fault proxy that delays every byte: a batch costs about what
// one call does, not one call per request (its requests are all in flight
// at once), and each answer is what the call on its own gives. With the
// proxy forwarding nothing, a batch ends within an attempt's bound, every
// request kUnavailable, and what a lost release leaves is deleted once the
// ensemble is reached again.
#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backends/zookeeper/zookeeper_backend.h"
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

// Each chunk, each way: a round trip is at least twice this.
constexpr milliseconds kDelay{100};
constexpr int kKeys = 40;
// A batch in flight at once takes a few round trips in all; one request
// after another would take kKeys times what one takes.
constexpr int kMostSingleCalls = 5;

std::string UniqueKey(std::string_view name) { return RunKey("zk-batch-test", name); }

Duration Since(TimePoint start) { return MonotonicClock::now() - start; }

// A backend whose only way to the ensemble is a fault proxy to one member.
struct Proxied {
  Proxied() {
    ZkOptions o = FixtureOptions();
    const std::string first = o.hosts.substr(0, o.hosts.find(','));
    const auto colon = first.rfind(':');
    auto p = harness::FaultProxy::Start(first.substr(0, colon), std::stoi(first.substr(colon + 1)));
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    if (p.ok()) proxy = std::move(*p);
    o.hosts = "127.0.0.1:" + std::to_string(proxy ? proxy->port() : 1);
    o.session_timeout = seconds(30);
    backend = OpenZooKeeper(o);
  }
  std::unique_ptr<harness::FaultProxy> proxy;
  std::unique_ptr<ZooKeeperBackend> backend;
};

TEST(ZooKeeperBatchTest, ABatchIsInFlightAtOnceAndEachAnswerIsItsOwn) {
  Proxied z;
  ASSERT_TRUE(z.proxy && z.backend->BatchesCalls());
  auto other = OpenZooKeeper(FixtureOptions());
  const std::string held = UniqueKey("held");
  const OwnerId holder = NewOwner(), again = NewOwner();
  auto h = other->TryAcquire(Req(held, holder));
  ASSERT_TRUE(h.ok() && h->granted) << h.status().ToString();
  // The session opened, and `again` holds a key of its own.
  const std::string mine = UniqueKey("mine");
  auto first = z.backend->TryAcquire(Req(mine, again));
  ASSERT_TRUE(first.ok() && first->granted) << first.status().ToString();

  z.proxy->SetMode(harness::FaultProxy::Mode::kDelay, kDelay);
  // One fresh key, on its own: what a batch is measured against.
  const OwnerId single = NewOwner();
  TimePoint start = MonotonicClock::now();
  auto one = z.backend->TryAcquire(Req(UniqueKey("single"), single));
  const Duration one_attempt = Since(start);
  ASSERT_TRUE(one.ok() && one->granted) << one.status().ToString();
  start = MonotonicClock::now();
  ASSERT_TRUE(z.backend->Release(UniqueKey("single"), single).ok());
  const Duration one_release = Since(start);

  std::vector<LeaseRequest> batch;
  for (int i = 0; i < kKeys; ++i) batch.push_back(Req(UniqueKey("k/" + std::to_string(i)), NewOwner()));
  batch.push_back(Req(held, NewOwner()));  // held by another client: refused
  batch.push_back(Req(mine, again));       // held by this owner already: the same grant
  batch.push_back(Req("", NewOwner()));    // no lock path: refused before sending
  start = MonotonicClock::now();
  auto got = z.backend->TryAcquireMany(batch);
  const Duration attempts = Since(start);
  ASSERT_EQ(got.size(), batch.size());
  std::set<FencingToken> tokens;
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(got[i].ok()) << got[i].status().ToString();
    EXPECT_TRUE(got[i]->granted);
    tokens.insert(got[i]->token);
  }
  EXPECT_EQ(tokens.size(), static_cast<std::size_t>(kKeys)) << "tokens are the nodes' own czxids";
  ASSERT_TRUE(got[kKeys].ok()) << got[kKeys].status().ToString();
  EXPECT_FALSE(got[kKeys]->granted) << "a held key was granted in a batch";
  ASSERT_TRUE(got[kKeys + 1].ok() && got[kKeys + 1]->granted);
  EXPECT_EQ(got[kKeys + 1]->token, first->token);
  EXPECT_EQ(got[kKeys + 2].status().code(), StatusCode::kInvalidArgument);
  EXPECT_LT(attempts, kMostSingleCalls * one_attempt)
      << "the batch's attempts went one after another";

  std::vector<LeaseRequest> releases(batch.begin(), batch.begin() + kKeys);
  releases.push_back(Req(held, NewOwner()));  // not the holder: kNotOwner
  start = MonotonicClock::now();
  auto released = z.backend->ReleaseMany(releases);
  const Duration all_released = Since(start);
  ASSERT_EQ(released.size(), releases.size());
  for (int i = 0; i < kKeys; ++i) EXPECT_TRUE(released[i].ok()) << released[i].ToString();
  EXPECT_EQ(released[kKeys].code(), StatusCode::kNotOwner);
  // The refused attempt's node is gone, and so, in time, is every released
  // key's lock path.
  EXPECT_LT(all_released, kMostSingleCalls * (one_release + one_attempt))
      << "the batch's releases went one after another";
  z.proxy->SetMode(harness::FaultProxy::Mode::kPass);
  EXPECT_TRUE(Eventually([&] {
    auto left = other->StoredObjects(UniqueKey("k/"));
    return left.ok() && *left == 0;
  }, seconds(20))) << "released keys left nodes or paths behind";
  auto left_held = other->List(held);
  ASSERT_TRUE(left_held.ok());
  EXPECT_EQ(left_held->size(), 1u);
  EXPECT_TRUE(other->Release(held, holder).ok());
  EXPECT_TRUE(z.backend->Release(mine, again).ok());
}

// Cut off from the ensemble: a batch of attempts, and one of releases, end
// within about one attempt's bound, each kUnavailable; once the ensemble
// is reached again, nothing of the released holdings is left.
TEST(ZooKeeperBatchTest, ALostConnectionAnswersUnavailableForEachWithinOneBound) {
  Proxied z;
  ASSERT_TRUE(z.proxy);
  std::vector<LeaseRequest> held;
  for (int i = 0; i < 10; ++i) held.push_back(Req(UniqueKey("cut/" + std::to_string(i)), NewOwner()));
  auto granted = z.backend->TryAcquireMany(held);
  for (const auto& g : granted) ASSERT_TRUE(g.ok() && g->granted) << g.status().ToString();

  z.proxy->SetMode(harness::FaultProxy::Mode::kPartition);
  std::vector<LeaseRequest> fresh;
  for (int i = 0; i < kKeys; ++i) fresh.push_back(Req(UniqueKey("lost/" + std::to_string(i)), NewOwner()));
  TimePoint start = MonotonicClock::now();
  auto attempts = z.backend->TryAcquireMany(fresh);
  const Duration attempts_took = Since(start);
  start = MonotonicClock::now();
  auto releases = z.backend->ReleaseMany(held);
  const Duration releases_took = Since(start);
  for (const auto& a : attempts) EXPECT_EQ(a.status().code(), StatusCode::kUnavailable);
  for (const auto& r : releases) EXPECT_EQ(r.code(), StatusCode::kUnavailable) << r.ToString();
  // One bound (1 s) each, not one per request; twice over for a slow machine.
  EXPECT_LT(attempts_took, seconds(3)) << "the attempts waited one bound each";
  EXPECT_LT(releases_took, seconds(3)) << "the releases waited one bound each";

  z.proxy->SetMode(harness::FaultProxy::Mode::kPass);
  auto other = OpenZooKeeper(FixtureOptions());
  EXPECT_TRUE(Eventually([&] {
    auto left = other->StoredObjects(UniqueKey("cut/"));
    auto lost = other->StoredObjects(UniqueKey("lost/"));
    return left.ok() && *left == 0 && lost.ok() && *lost == 0;
  }, seconds(30))) << "a lost batch left nodes behind";
}

}  // namespace
}  // namespace dlock::zookeeper
