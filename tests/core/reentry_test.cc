// Reentrant acquires (AcquireOptions::reentrant) on the simulated clock:
// handles, hold counts, who may re-enter, and what a loss does to them.
#include <atomic>
#include <thread>

#include <gtest/gtest.h>

#include "dlock/client.h"
#include "simulated_store.h"

namespace dlock {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

class ReentryTest : public ::testing::Test, protected testing::SimulatedStore {
 protected:
  static AcquireOptions Reentrant(milliseconds ttl = seconds(3)) {
    AcquireOptions o = Ttl(ttl);
    o.reentrant = true;
    return o;
  }
  // The store's holders of `key`, as another client sees them.
  std::size_t HoldersAtStore(const std::string& key) {
    auto holders = observer_->List(key);
    EXPECT_TRUE(holders.ok()) << holders.status().ToString();
    return holders.ok() ? holders->size() : 0;
  }

  std::unique_ptr<Client> client_ = NewClient();
  std::unique_ptr<Client> observer_ = NewClient();
};

TEST_F(ReentryTest, AReentryIsAnotherHandleOnTheSameHolding) {
  auto first = client_->TryAcquire("k", Reentrant());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = client_->TryAcquire("k", Reentrant());
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->token(), first->token());
  EXPECT_EQ(second->owner(), first->owner());
  EXPECT_EQ(first->hold_count(), 2u);
  EXPECT_EQ(second->hold_count(), 2u);
  EXPECT_EQ(HoldersAtStore("k"), 1u) << "a re-entry must not ask the store";
  EXPECT_EQ(client_->Metrics().grants, 1u);

  ASSERT_TRUE(first->Release().ok());
  EXPECT_EQ(first->Check().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(first->hold_count(), 0u);
  EXPECT_TRUE(second->Check().ok());
  EXPECT_EQ(second->hold_count(), 1u);
  EXPECT_EQ(observer_->TryAcquire("k", Ttl(seconds(3))).status().code(), StatusCode::kLockHeld)
      << "the store was released while a handle still held the key";
  EXPECT_TRUE(first->Release().ok()) << "a second release of one handle";
  EXPECT_EQ(second->hold_count(), 1u) << "released one handle twice";

  ASSERT_TRUE(second->Release().ok());
  EXPECT_EQ(HoldersAtStore("k"), 0u);
  auto next = observer_->TryAcquire("k", Ttl(seconds(3)));
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_GT(next->token(), first->token());
}

TEST_F(ReentryTest, TheHoldingIsRenewedWhileAnyHandleHoldsIt) {
  auto first = client_->TryAcquire("k", Reentrant());
  ASSERT_TRUE(first.ok());
  {
    auto second = client_->TryAcquire("k", Reentrant());
    ASSERT_TRUE(second.ok());
    ASSERT_TRUE(first->Release().ok());
    clock->Advance(seconds(60));  // twenty ttls
    EXPECT_TRUE(second->Check().ok()) << second->Check().ToString();
    EXPECT_EQ(HoldersAtStore("k"), 1u);
  }  // destroying the last handle releases the store's lock
  EXPECT_EQ(HoldersAtStore("k"), 0u);
}

TEST_F(ReentryTest, NobodyReentersUnlessBothAcquiresAskForIt) {
  auto plain = client_->TryAcquire("plain", Ttl(seconds(3)));
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(client_->TryAcquire("plain", Ttl(seconds(3))).status().code(), StatusCode::kLockHeld);
  EXPECT_EQ(client_->TryAcquire("plain", Reentrant()).status().code(), StatusCode::kLockHeld);
  auto reentrant = client_->TryAcquire("re", Reentrant());
  ASSERT_TRUE(reentrant.ok());
  EXPECT_EQ(client_->TryAcquire("re", Ttl(seconds(3))).status().code(), StatusCode::kLockHeld);
  EXPECT_EQ(reentrant->hold_count(), 1u);
}

TEST_F(ReentryTest, AnotherThreadOrClientWaitsLikeAnyoneElse) {
  auto held = client_->TryAcquire("k", Reentrant());
  ASSERT_TRUE(held.ok());
  std::atomic<int> code{-1};
  std::thread other([&] {
    code = static_cast<int>(client_->TryAcquire("k", Reentrant()).status().code());
  });
  other.join();
  EXPECT_EQ(code, static_cast<int>(StatusCode::kLockHeld));
  EXPECT_EQ(observer_->TryAcquire("k", Reentrant()).status().code(), StatusCode::kLockHeld);
  EXPECT_EQ(held->hold_count(), 1u);
}

TEST_F(ReentryTest, AHandleMayBeReleasedFromAnotherThread) {
  auto held = client_->TryAcquire("k", Reentrant());
  ASSERT_TRUE(held.ok());
  Lease moved = std::move(*held);
  std::thread releaser([&] { EXPECT_TRUE(moved.Release().ok()); });
  releaser.join();
  EXPECT_EQ(HoldersAtStore("k"), 0u);
}

TEST_F(ReentryTest, AReentryMustAskInTheSameMode) {
  auto held = client_->TryAcquire("k", Reentrant());
  ASSERT_TRUE(held.ok());
  AcquireOptions shared = Reentrant();
  shared.shared = true;
  auto as_reader = client_->TryAcquire("k", shared);
  EXPECT_EQ(as_reader.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(as_reader.status().message().find("exclusive"), std::string::npos)
      << as_reader.status().ToString();
  AcquireOptions permits = Reentrant();
  permits.permits = 2;
  EXPECT_EQ(client_->TryAcquire("k", permits).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(held->hold_count(), 1u);

  auto reader = client_->TryAcquire("r", shared);
  ASSERT_TRUE(reader.ok());
  auto again = client_->TryAcquire("r", shared);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->hold_count(), 2u);
}

TEST_F(ReentryTest, ALossReachesEveryHandleAndEachCallbackOnce) {
  std::atomic<int> first_calls{0}, second_calls{0}, released_calls{0};
  AcquireOptions o = Reentrant();
  o.on_lost = [&](const Status&) { ++first_calls; };
  auto first = client_->TryAcquire("k", o);
  o.on_lost = [&](const Status&) { ++second_calls; };
  auto second = client_->TryAcquire("k", o);
  o.on_lost = [&](const Status&) { ++released_calls; };
  auto released = client_->TryAcquire("k", o);
  ASSERT_TRUE(first.ok() && second.ok() && released.ok());
  ASSERT_TRUE(released->Release().ok());

  plan->SetRenewError(UnavailableError("partitioned"));
  clock->AdvanceTo(first->valid_until());
  EXPECT_EQ(first_calls, 1);
  EXPECT_EQ(second_calls, 1);
  EXPECT_EQ(released_calls, 0) << "a released handle's callback ran";
  EXPECT_TRUE(second->stop_token().stop_requested());
  EXPECT_EQ(first->Check().code(), StatusCode::kLeaseLost);
  EXPECT_EQ(second->Check().code(), StatusCode::kLeaseLost);

  // A reentrant acquire after the loss asks the store again: a new holding.
  plan->SetRenewError(std::nullopt);
  clock->Advance(seconds(5));  // the store's lease runs out too
  auto fresh = client_->TryAcquire("k", Reentrant());
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_GT(fresh->token(), first->token());
  EXPECT_EQ(fresh->hold_count(), 1u);
  EXPECT_EQ(first->Release().code(), StatusCode::kLeaseLost);
  EXPECT_EQ(second->Release().code(), StatusCode::kLeaseLost);
  EXPECT_TRUE(fresh->Check().ok()) << "releasing the lost handles touched the new holding";
}

TEST_F(ReentryTest, AcquireAllReentersTheKeysAlreadyHeld) {
  auto held = client_->TryAcquire("b", Reentrant());
  ASSERT_TRUE(held.ok());
  auto all = client_->AcquireAll({"a", "b", "c"}, Reentrant());
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[1].token(), held->token());
  EXPECT_EQ(held->hold_count(), 2u);
  all->clear();
  EXPECT_EQ(held->hold_count(), 1u);
  EXPECT_EQ(HoldersAtStore(""), 1u);
}

}  // namespace
}  // namespace dlock
