// Client metrics on the simulated clock and the in-memory store: what each
// call records, losses by cause, the hook, and turning recording off.
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "dlock/client.h"
#include "dlock/metrics.h"
#include "dlock/testing/in_memory_backend.h"
#include "simulated_store.h"

namespace dlock {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::InMemoryBackend;

std::size_t Code(StatusCode c) { return static_cast<std::size_t>(c); }
std::size_t Cause(LossCause c) { return static_cast<std::size_t>(c); }

class MetricsTest : public ::testing::Test, protected testing::SimulatedStore {
 protected:
  // A client whose hook keeps every event.
  std::unique_ptr<Client> HookedClient() {
    ClientOptions o;
    o.on_metric = [this](const MetricEvent& e) {
      std::lock_guard lock(mu_);
      events_.push_back(e);
    };
    return NewClient(std::move(o));
  }
  std::vector<MetricEvent> Events() {
    std::lock_guard lock(mu_);
    return events_;
  }

  std::mutex mu_;
  std::vector<MetricEvent> events_;
};

TEST_F(MetricsTest, AGrantAndItsReleaseAreTimedOnTheClientsClock) {
  auto client = NewClient();
  auto lease = client->TryAcquire("k", Ttl(seconds(3)));
  ASSERT_TRUE(lease.ok());
  clock->Advance(seconds(5));  // renewed at every ttl/3 meanwhile
  ASSERT_TRUE(lease->Release().ok());

  const ClientMetrics m = client->Metrics();
  EXPECT_EQ(m.grants, 1u);
  EXPECT_EQ(m.releases, 1u);
  EXPECT_EQ(m.acquire.count, 1u);
  EXPECT_EQ(m.acquire.sum_seconds, 0.0) << "the simulated clock stood still";
  ASSERT_EQ(m.hold.count, 1u);
  EXPECT_DOUBLE_EQ(m.hold.sum_seconds, 5.0);
  // 5 s falls in (2.5, 10]: the bucket bounded by 10.
  EXPECT_EQ(m.hold.counts[14], 1u);
  EXPECT_GE(m.renewal.count, 4u);
  EXPECT_EQ(m.renewals_failed, 0u);
  for (std::uint64_t n : m.store_errors) EXPECT_EQ(n, 0u);
  for (std::uint64_t n : m.leases_lost) EXPECT_EQ(n, 0u);
}

TEST_F(MetricsTest, TryAcquireOnAHeldKeyIsAFailedAcquireWithoutAWait) {
  auto holder = NewClient()->TryAcquire("k", Ttl(seconds(30)));
  ASSERT_TRUE(holder.ok());
  auto client = NewClient();
  EXPECT_EQ(client->TryAcquire("k", Ttl(seconds(30))).status().code(), StatusCode::kLockHeld);
  const ClientMetrics m = client->Metrics();
  EXPECT_EQ(m.grants, 0u);
  EXPECT_EQ(m.acquires_failed[Code(StatusCode::kLockHeld)], 1u);
  EXPECT_EQ(m.wait.count, 0u) << "a single attempt does not wait";
  EXPECT_EQ(m.store_errors[Code(StatusCode::kLockHeld)], 0u) << "a lock answer is no error";
}

TEST_F(MetricsTest, AWaitRunsFromTheFirstRefusalAndTheHandoffFromTheLastWake) {
  auto holder = NewClient()->TryAcquire("k", Ttl(seconds(30)));
  ASSERT_TRUE(holder.ok());
  auto waiter = HookedClient();
  std::optional<Result<Lease>> result;
  std::jthread t([&] {
    AcquireOptions o = Ttl(seconds(30));
    o.wait = seconds(10);
    result.emplace(waiter->Acquire("k", o));
  });
  clock->AwaitSleepers(1);  // refused, and asleep
  ASSERT_TRUE(holder->Release().ok());
  clock->Advance(milliseconds(50));  // the poll cap: it wakes and is granted
  t.join();
  ASSERT_TRUE(result.has_value() && result->ok());

  const ClientMetrics m = waiter->Metrics();
  ASSERT_EQ(m.wait.count, 1u);
  ASSERT_EQ(m.handoff.count, 1u);
  EXPECT_GT(m.wait.sum_seconds, 0.0);
  EXPECT_LE(m.wait.sum_seconds, 0.050);
  // Refused on its first attempt, so the wait is the whole acquire; the
  // hand-off is the part after the last wake.
  EXPECT_DOUBLE_EQ(m.wait.sum_seconds, m.acquire.sum_seconds);
  EXPECT_LE(m.handoff.sum_seconds, m.wait.sum_seconds);
  std::vector<MetricEvent::Kind> kinds;
  for (const auto& e : Events()) kinds.push_back(e.kind);
  EXPECT_EQ(kinds, (std::vector{MetricEvent::Kind::kWait, MetricEvent::Kind::kGrant,
                                MetricEvent::Kind::kHandoff}));
}

TEST_F(MetricsTest, GivingUpCountsTheWholeWaitAndTheDeadline) {
  auto holder = NewClient()->TryAcquire("k", Ttl(seconds(30)));
  ASSERT_TRUE(holder.ok());
  auto waiter = NewClient();
  std::optional<Result<Lease>> result;
  std::atomic<bool> done{false};  // `result` is read only after the join
  std::jthread t([&] {
    AcquireOptions o = Ttl(seconds(30));
    o.wait = seconds(1);
    result.emplace(waiter->Acquire("k", o));
    done = true;
  });
  clock->AwaitSleepers(1);
  while (!done) clock->Advance(milliseconds(50));
  t.join();
  ASSERT_EQ(result->status().code(), StatusCode::kDeadlineExceeded);
  const ClientMetrics m = waiter->Metrics();
  EXPECT_EQ(m.acquires_failed[Code(StatusCode::kDeadlineExceeded)], 1u);
  EXPECT_EQ(m.grants, 0u);
  ASSERT_EQ(m.wait.count, 1u);
  EXPECT_GE(m.wait.sum_seconds, 1.0);
  EXPECT_EQ(m.handoff.count, 0u) << "no grant, no hand-off";
}

TEST_F(MetricsTest, AnUnreachableStoreLosesTheLeaseAsExpired) {
  auto client = NewClient();
  auto lease = client->TryAcquire("k", Ttl(seconds(3)));
  ASSERT_TRUE(lease.ok());
  plan->SetRenewError(UnavailableError("partitioned"));
  clock->AdvanceTo(lease->valid_until());
  ASSERT_EQ(lease->Check().code(), StatusCode::kLeaseLost);
  EXPECT_EQ(lease->Release().code(), StatusCode::kLeaseLost);

  const ClientMetrics m = client->Metrics();
  EXPECT_EQ(m.leases_lost[Cause(LossCause::kExpired)], 1u);
  EXPECT_GE(m.renewals_failed, 1u);
  EXPECT_EQ(m.store_errors[Code(StatusCode::kUnavailable)], m.renewals_failed);
  EXPECT_EQ(m.releases, 0u) << "releasing a lost lease is not a release";
  EXPECT_EQ(m.hold.count, 1u);
}

TEST_F(MetricsTest, AStoreNamingAnotherOwnerIsCountedAsNotOwner) {
  auto client = NewClient();
  auto lease = client->TryAcquire("k", Ttl(seconds(3)));
  ASSERT_TRUE(lease.ok());
  InMemoryBackend behind_its_back(store);
  ASSERT_TRUE(behind_its_back.Release("k", lease->owner()).ok());
  clock->Advance(seconds(1));  // the first renewal
  ASSERT_EQ(lease->Check().code(), StatusCode::kLeaseLost);
  const ClientMetrics m = client->Metrics();
  EXPECT_EQ(m.leases_lost[Cause(LossCause::kNotOwner)], 1u);
  EXPECT_EQ(m.renewals_failed, 1u);
  EXPECT_EQ(m.store_errors[Code(StatusCode::kNotOwner)], 0u);
}

TEST_F(MetricsTest, AMaxHoldRunningOutIsCountedAsMaxHold) {
  auto client = NewClient();
  AcquireOptions o = Ttl(seconds(3));
  o.max_hold = seconds(4);
  auto lease = client->TryAcquire("k", o);
  ASSERT_TRUE(lease.ok());
  clock->Advance(seconds(8));
  ASSERT_EQ(lease->Check().code(), StatusCode::kLeaseLost);
  EXPECT_EQ(client->Metrics().leases_lost[Cause(LossCause::kMaxHold)], 1u);
}

TEST_F(MetricsTest, TheHookSeesEachEventWithItsKey) {
  auto client = HookedClient();
  auto lease = client->TryAcquire("orders/42", Ttl(seconds(30)));
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(lease->Release().ok());
  const auto events = Events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, MetricEvent::Kind::kGrant);
  EXPECT_EQ(events[1].kind, MetricEvent::Kind::kRelease);
  for (const auto& e : events) EXPECT_EQ(e.key, "orders/42");
}

TEST_F(MetricsTest, RecordingTurnedOffRecordsNothingAndCallsNoHook) {
  ClientOptions o;
  o.record_metrics = false;
  std::atomic<int> calls{0};
  o.on_metric = [&](const MetricEvent&) { ++calls; };
  auto client = NewClient(std::move(o));
  auto lease = client->TryAcquire("k", Ttl(seconds(3)));
  ASSERT_TRUE(lease.ok());
  clock->Advance(seconds(2));
  ASSERT_TRUE(lease->Release().ok());
  const ClientMetrics m = client->Metrics();
  EXPECT_EQ(m.grants + m.releases + m.acquire.count + m.hold.count + m.renewal.count, 0u);
  EXPECT_EQ(calls, 0);
}

}  // namespace
}  // namespace dlock
