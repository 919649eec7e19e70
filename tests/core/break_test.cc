// Client::Break on the simulated clock: who is evicted, the token that
// orders the break, and what the evicted holder sees.
#include <atomic>
#include <set>

#include <gtest/gtest.h>

#include "dlock/client.h"
#include "dlock/fence.h"
#include "simulated_store.h"

namespace dlock {
namespace {

using std::chrono::seconds;

class BreakTest : public ::testing::Test, protected testing::SimulatedStore {
 protected:
  std::unique_ptr<Client> holder_ = NewClient();
  std::unique_ptr<Client> operator_ = NewClient();
};

TEST_F(BreakTest, TheEvictedHolderLosesItsLeaseAndItsWritesAreRefused) {
  std::atomic<int> lost{0};
  AcquireOptions o = Ttl(seconds(3));
  o.on_lost = [&](const Status&) { ++lost; };
  auto lease = holder_->TryAcquire("k", o);
  ASSERT_TRUE(lease.ok());
  fence::Memory fence;
  ASSERT_TRUE(fence.Admit("k", lease->token()).ok());

  auto report = operator_->Break("k");
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_EQ(report->evicted.size(), 1u);
  EXPECT_EQ(report->evicted[0].owner, lease->owner());
  EXPECT_EQ(report->evicted[0].token, lease->token());
  EXPECT_GT(report->token, lease->token());

  // The fence that has seen the break's token refuses the holder's.
  ASSERT_TRUE(fence.Admit("k", report->token).ok());
  EXPECT_EQ(fence.Admit("k", lease->token()).code(), StatusCode::kStaleToken);
  // The holder learns it at its next renewal: lost, reported once.
  clock->Advance(seconds(2));
  EXPECT_EQ(lease->Check().code(), StatusCode::kLeaseLost);
  EXPECT_TRUE(lease->stop_token().stop_requested());
  EXPECT_EQ(lost, 1);
  // The key is free, and the next grant comes after the break.
  auto next = operator_->TryAcquire("k", Ttl(seconds(3)));
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_GT(next->token(), report->token);
}

TEST_F(BreakTest, ABreakByOwnerLeavesTheOtherReadersAlone) {
  AcquireOptions shared = Ttl(seconds(3));
  shared.shared = true;
  auto first = holder_->TryAcquire("k", shared);
  auto second = operator_->TryAcquire("k", shared);
  ASSERT_TRUE(first.ok() && second.ok());
  BreakOptions only;
  only.owners = {first->owner()};
  auto report = NewClient()->Break("k", only);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_EQ(report->evicted.size(), 1u);
  EXPECT_EQ(report->evicted[0].owner, first->owner());
  EXPECT_GT(report->token, std::max(first->token(), second->token()));
  clock->Advance(seconds(2));
  EXPECT_EQ(first->Check().code(), StatusCode::kLeaseLost);
  EXPECT_TRUE(second->Check().ok()) << second->Check().ToString();
}

TEST_F(BreakTest, AKeyNobodyHoldsIsLeftAlone) {
  auto held = holder_->TryAcquire("k", Ttl(seconds(3)));
  ASSERT_TRUE(held.ok());
  BreakOptions stranger;
  stranger.owners = {OwnerId(1, 2)};
  auto report = operator_->Break("k", stranger);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->evicted.empty());
  EXPECT_EQ(report->token, 0u);
  report = operator_->Break("free");
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->evicted.empty());
  clock->Advance(seconds(2));
  EXPECT_TRUE(held->Check().ok()) << "a break aimed elsewhere touched the holder";
  // A longer key that starts with the broken one is another key.
  auto longer = holder_->TryAcquire("k/2", Ttl(seconds(3)));
  ASSERT_TRUE(longer.ok());
  ASSERT_TRUE(held->Release().ok());
  report = operator_->Break("k");
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->evicted.empty()) << report->evicted.size();
}

TEST_F(BreakTest, BadInputIsRefusedBeforeAnythingIsBroken) {
  auto held = holder_->TryAcquire("k", Ttl(seconds(3)));
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(operator_->Break("").status().code(), StatusCode::kInvalidArgument);
  BreakOptions bad;
  bad.label = std::string("line\nbreak");
  EXPECT_EQ(operator_->Break("k", bad).status().code(), StatusCode::kInvalidArgument);
  BreakOptions too_long;
  too_long.keep_record = kMaxRetention + std::chrono::milliseconds(1);
  EXPECT_EQ(operator_->Break("k", too_long).status().code(), StatusCode::kInvalidArgument);
  clock->Advance(seconds(2));
  EXPECT_TRUE(held->Check().ok());
}

TEST_F(BreakTest, AnEvictionIsRecordedWhenTheBreakFailsAfterIt) {
  auto lease = holder_->TryAcquire("k", Ttl(seconds(3)));
  ASSERT_TRUE(lease.ok());
  plan->SetAcquireError(PermissionDeniedError("this user may not lock k"));
  auto report = operator_->Break("k");
  EXPECT_EQ(report.status().code(), StatusCode::kPermissionDenied);
  plan->SetAcquireError(std::nullopt);
  auto records = operator_->Breaks("k");
  ASSERT_TRUE(records.ok()) << records.status().ToString();
  ASSERT_EQ(records->size(), 1u) << "the eviction left no record";
  EXPECT_EQ((*records)[0].owner, lease->owner());
  EXPECT_EQ((*records)[0].break_token, 0u);
  clock->Advance(seconds(2));
  EXPECT_EQ(lease->Check().code(), StatusCode::kLeaseLost) << "the eviction did not stand";
}

TEST(RetentionTest, ForEverAndOneMillisecondToTenYearsAreAccepted) {
  using std::chrono::milliseconds;
  EXPECT_TRUE(ValidateRetention(kKeepDoneForever).ok());
  EXPECT_TRUE(ValidateRetention(milliseconds(1)).ok());
  EXPECT_TRUE(ValidateRetention(kMaxRetention).ok());
  for (milliseconds bad : {milliseconds(0), milliseconds(-1), kMaxRetention + milliseconds(1),
                           kKeepDoneForever - milliseconds(1)}) {
    const Status s = ValidateRetention(bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad.count();
    EXPECT_NE(s.message().find("accepted: 1 ms to 10 years"), std::string::npos) << s.message();
  }
}

TEST_F(BreakTest, EachEvictionLeavesARecordUntilItsRetentionEnds) {
  AcquireOptions reader = Ttl(seconds(3));
  reader.shared = true;
  reader.label = "nightly on host-a";
  auto first = holder_->TryAcquire("jobs/a", reader);
  auto second = NewClient()->TryAcquire("jobs/a", reader);
  auto elsewhere = holder_->TryAcquire("other", Ttl(seconds(3)));
  ASSERT_TRUE(first.ok() && second.ok() && elsewhere.ok());
  BreakOptions o;
  o.label = "dlock break by ops@bastion";
  o.keep_record = std::chrono::hours(1);
  auto report = operator_->Break("jobs/a", o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->recorded.ok()) << report->recorded.ToString();
  auto b = operator_->Breaks("other");
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->empty()) << "a key nobody broke has a record";

  auto records = operator_->Breaks("jobs/");
  ASSERT_TRUE(records.ok()) << records.status().ToString();
  ASSERT_EQ(records->size(), 2u);
  std::set<OwnerId> owners;
  for (const BreakRecord& r : *records) {
    owners.insert(r.owner);
    EXPECT_EQ(r.key, "jobs/a");
    EXPECT_EQ(r.label, "nightly on host-a");
    EXPECT_EQ(r.by, "dlock break by ops@bastion");
    EXPECT_EQ(r.break_token, report->token);
    EXPECT_EQ(r.token, r.owner == first->owner() ? first->token() : second->token());
    EXPECT_GT(r.at_unix_ms, 0);
  }
  EXPECT_EQ(owners, (std::set<OwnerId>{first->owner(), second->owner()}));
  clock->Advance(std::chrono::hours(1));
  records = operator_->Breaks("jobs/");
  ASSERT_TRUE(records.ok());
  EXPECT_TRUE(records->empty()) << "a record outlived its retention";
}

TEST_F(BreakTest, ABreakStandsWhenItsRecordCannotBeKept) {
  auto lease = holder_->TryAcquire("k", Ttl(seconds(3)));
  ASSERT_TRUE(lease.ok());
  plan->record_error = FailedPreconditionError("memory:// keeps no break records");
  auto report = operator_->Break("k");
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->evicted.size(), 1u);
  EXPECT_GT(report->token, lease->token());
  EXPECT_EQ(report->recorded.code(), StatusCode::kFailedPrecondition);
  clock->Advance(seconds(2));
  EXPECT_EQ(lease->Check().code(), StatusCode::kLeaseLost);
  BreakOptions never;
  never.keep_record = std::chrono::milliseconds(0);
  EXPECT_EQ(operator_->Break("k", never).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dlock
