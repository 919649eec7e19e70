// The client's PlaceKeeper (src/core/place_keeper.h): on a store that
// KeepsPlaces, the places of a client's waiting asynchronous acquisitions
// are kept by one KeepPlaces call per tick, not by an attempt per waiter;
// a place found gone makes its acquisition attempt at once; a store
// without KeepPlaces is refreshed by attempts as before. Simulated time:
// the test moves the clock tick by tick and waits (in real time, for the
// driver's workers) for what each tick must cause.
#include <atomic>
#include <future>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "core/acquire_step.h"
#include "dlock/client.h"
#include "dlock/testing/faulty_backend.h"
#include "dlock/testing/in_memory_backend.h"
#include "dlock/testing/simulated_clock.h"
#include "eventually.h"

namespace dlock {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::FaultPlan;
using testing::FaultyBackend;
using testing::InMemoryBackend;
using testing::InMemoryOptions;
using testing::InMemoryStore;
using testing::SimulatedClock;
using testing_support::Eventually;

// How often the keeper ticks: a third of the places' life.
constexpr Duration kTick = internal::kQueueTtl / 3;

// Longer than any answer here takes on a loaded machine; the simulated
// clock does not move meanwhile, so no answer depends on it.
constexpr milliseconds kPatience(60'000);

class PlaceKeeperTest : public ::testing::Test {
 protected:
  std::unique_ptr<Client> NewClient(bool keeps_places = true, unsigned async_threads = 2,
                                    bool notices_lapses = false) {
    auto inner = std::make_unique<InMemoryBackend>(
        store_, InMemoryOptions{.keeps_places = keeps_places,
                                .notices_lapsed_places = notices_lapses});
    ClientOptions options;
    options.clock = clock_;
    options.async_threads = async_threads;
    return Client::FromBackend(std::make_unique<FaultyBackend>(std::move(inner), plan_), options);
  }

  // A holder that never renews nor releases: its lease ends at `ttl`.
  void HoldFor(milliseconds ttl) {
    auto held = store_->TryAcquire(LeaseRequest{"k", OwnerId(9, 9), ttl});
    ASSERT_TRUE(held.ok() && held->granted);
  }

  // Starts `n` waiters on "k"; returns once each waits (on a watch).
  void StartWaiters(Client& client, int n) {
    for (int i = 0; i < n; ++i) {
      pending_.push_back(client.AcquireAsync("k", {.ttl = seconds(30), .wait = seconds(300)},
                                             [this](Result<Lease> lease) { Answered(lease); }));
    }
    ASSERT_TRUE(
        Eventually([&] { return store_->Watches() == static_cast<std::size_t>(n); }, kPatience));
  }

  void Answered(Result<Lease>& lease) {
    if (lease.ok()) {
      ++granted_;
    } else if (lease.status().code() == StatusCode::kCancelled) {
      ++cancelled_;
    }
  }

  // One tick of the keeper; returns once its first KeepPlaces call is made.
  void Tick() {
    const int before = plan_->KeepPlacesCalls();
    clock_->Advance(kTick);
    ASSERT_TRUE(Eventually([&] { return plan_->KeepPlacesCalls() > before; }, kPatience))
        << "no KeepPlaces call at the tick";
  }

  std::shared_ptr<SimulatedClock> clock_ = std::make_shared<SimulatedClock>();
  std::shared_ptr<InMemoryStore> store_ = std::make_shared<InMemoryStore>(clock_);
  std::shared_ptr<FaultPlan> plan_ = std::make_shared<FaultPlan>();
  std::vector<PendingAcquire> pending_;
  std::atomic<int> granted_{0}, cancelled_{0};
};

TEST_F(PlaceKeeperTest, OneCallPerTickKeepsEveryPlaceWithoutAnAttempt) {
  HoldFor(seconds(60));
  auto client = NewClient();
  constexpr int kWaiters = 200;
  StartWaiters(*client, kWaiters);
  const int tries = plan_->Tries();
  // Six ticks: twice the life of a place that nothing refreshed.
  for (int tick = 1; tick <= 6; ++tick) {
    Tick();
    ASSERT_EQ(plan_->KeepPlacesCalls(), tick);
  }
  EXPECT_EQ(plan_->Tries(), tries) << "waiters attempted while nothing was released";
  EXPECT_EQ(plan_->PlacesAsked(), 6 * kWaiters);
  EXPECT_EQ(store_->Waiters("k").size(), static_cast<std::size_t>(kWaiters))
      << "places lapsed although kept";
  client.reset();
  EXPECT_EQ(cancelled_.load(), kWaiters);
}

TEST_F(PlaceKeeperTest, ManyPlacesGoInBatches) {
  HoldFor(seconds(60));
  auto client = NewClient();
  constexpr int kWaiters = 600;
  StartWaiters(*client, kWaiters);
  Tick();
  ASSERT_TRUE(Eventually([&] { return plan_->PlacesAsked() == kWaiters; }, kPatience));
  EXPECT_EQ(plan_->KeepPlacesCalls(), 3);  // 256 + 256 + 88
  EXPECT_EQ(plan_->LargestKeep(), 256);
}

TEST_F(PlaceKeeperTest, APlaceAnsweredNotFoundMakesItsAcquisitionAttemptAtOnce) {
  HoldFor(seconds(60));
  auto client = NewClient();
  StartWaiters(*client, 3);
  const int tries = plan_->Tries();
  // The store's places are alive: only the keeper's answer says otherwise.
  plan_->SetKeepPlacesError(NotFoundError("injected: no such place"));
  Tick();
  EXPECT_TRUE(Eventually([&] { return plan_->Tries() == tries + 3; }, kPatience))
      << "tries went from " << tries << " to " << plan_->Tries();
  plan_->SetKeepPlacesError(std::nullopt);
  // Each waits again, its place taken again by its attempt.
  ASSERT_TRUE(Eventually([&] { return store_->Watches() == 3; }, kPatience));
  EXPECT_EQ(plan_->Tries(), tries + 3);
  EXPECT_EQ(store_->Waiters("k").size(), 3U);
}

TEST_F(PlaceKeeperTest, AnUnknownOutcomeChangesNothing) {
  HoldFor(seconds(60));
  auto client = NewClient();
  StartWaiters(*client, 3);
  const int tries = plan_->Tries();
  plan_->SetKeepPlacesError(UnavailableError("injected: no answer"));
  Tick();
  plan_->SetKeepPlacesError(std::nullopt);
  Tick();
  Tick();
  Tick();  // four ticks: past the places' life unless the last three kept them
  EXPECT_EQ(plan_->Tries(), tries);
  EXPECT_EQ(store_->Waiters("k").size(), 3U);
}

TEST_F(PlaceKeeperTest, APlaceThatLapsedIsTakenAgain) {
  HoldFor(seconds(60));
  auto client = NewClient();
  StartWaiters(*client, 3);
  // The store unreachable for longer than a place lives: the places lapse.
  plan_->SetKeepPlacesError(UnavailableError("injected: no answer"));
  for (int i = 0; i < 4; ++i) Tick();
  ASSERT_TRUE(store_->Waiters("k").empty());
  plan_->SetKeepPlacesError(std::nullopt);
  Tick();  // the store answers kNotFound: each attempts, and queues again
  EXPECT_TRUE(Eventually([&] { return store_->Waiters("k").size() == 3; }, kPatience));
}

TEST_F(PlaceKeeperTest, AStoreThatKeepsNoPlacesIsRefreshedByAttempts) {
  HoldFor(seconds(60));
  auto client = NewClient(/*keeps_places=*/false);
  StartWaiters(*client, 5);
  const int tries = plan_->Tries();
  for (int tick = 1; tick <= 2; ++tick) {
    clock_->Advance(kTick);
    // A waiter may arm its timer for this tick only after the clock got
    // there (its attempt ran late on a worker): Advance(0) runs it then.
    // Done once each has tried and waits again (its watch back): the next
    // tick's time is set before the watch, so no waiter reads the clock
    // after the test moves it (a waiter that did would wait a tick longer).
    EXPECT_TRUE(Eventually(
        [&] {
          clock_->Advance(Duration::zero());
          return plan_->Tries() == tries + 5 * tick && store_->Watches() == 5;
        },
        kPatience))
        << "tick " << tick << ": tries went from " << tries << " to " << plan_->Tries()
        << ", " << store_->Watches() << " waiting";
  }
  EXPECT_EQ(plan_->KeepPlacesCalls(), 0);
}

TEST_F(PlaceKeeperTest, TheHoldersLeaseEndStillWakesAWaiter) {
  HoldFor(seconds(5));  // a holder that died: nothing is released
  auto client = NewClient();
  StartWaiters(*client, 3);
  clock_->Advance(seconds(5));
  EXPECT_TRUE(Eventually([&] { return granted_.load() >= 1; }, kPatience));
}

// Behind a live place and no holder, a waiter looks again kQueueTtl after
// its refusal, unless the store notices lapses (Backend::
// NoticesLapsedPlaces, forwarded by the FaultyBackend in between).
TEST_F(PlaceKeeperTest, BehindAPlaceOnlyAStoreThatMissesLapsesGetsALook) {
  for (const bool notices : {false, true}) {
    SCOPED_TRACE(notices ? "the store notices lapses" : "the store misses lapses");
    const std::string key = notices ? "noticed" : "missed";
    // A waiter ahead, on a key nobody holds: queued while a holder held it.
    ASSERT_TRUE(store_->TryAcquire(LeaseRequest{key, OwnerId(9, 9), seconds(60)})->granted);
    LeaseRequest ahead{key, OwnerId(8, 8), seconds(60), internal::kQueueTtl};
    ASSERT_FALSE(store_->TryAcquire(ahead)->granted);
    ASSERT_TRUE(store_->Release(key, OwnerId(9, 9)).ok());
    auto client = NewClient(/*keeps_places=*/true, /*async_threads=*/2, notices);
    const std::size_t watches = store_->Watches();
    pending_.push_back(client->AcquireAsync(key, {.ttl = seconds(30), .wait = seconds(300)},
                                            [this](Result<Lease> lease) { Answered(lease); }));
    ASSERT_TRUE(Eventually([&] { return store_->Watches() == watches + 1; }, kPatience));
    const int tries = plan_->Tries();
    // Six ticks, the place ahead kept alive all along: twice the look's time.
    for (int tick = 0; tick < 6; ++tick) {
      ASSERT_TRUE(store_->KeepPlace(ahead).ok());
      Tick();
    }
    if (notices) {
      EXPECT_EQ(plan_->Tries(), tries) << "a waiter looked again behind a place";
    } else {
      // One look at least: the first is due at the third tick; a second
      // may fall past the sixth when the first ran late on a worker (it
      // counts from the clock when it ran).
      EXPECT_TRUE(Eventually([&] { return plan_->Tries() >= tries + 1; }, kPatience))
          << "no look in twice the look's time: tries went from " << tries << " to "
          << plan_->Tries();
    }
    client.reset();
  }
}

TEST_F(PlaceKeeperTest, CancelledAcquisitionsAreKeptNoMore) {
  HoldFor(seconds(60));
  // One worker: a job posted after the tick's runs after it.
  auto client = NewClient(/*keeps_places=*/true, /*async_threads=*/1);
  StartWaiters(*client, 10);
  Tick();
  for (PendingAcquire& p : pending_) p.Cancel();
  ASSERT_TRUE(Eventually([&] { return cancelled_.load() == 10; }, kPatience));
  EXPECT_TRUE(store_->Waiters("k").empty());
  for (int i = 0; i < 3; ++i) {
    clock_->Advance(kTick);
    // Queued behind whatever the tick posted: once it is answered, that ran.
    auto after = client->AcquireFuture("free", {.ttl = seconds(30), .wait = seconds(0)});
    ASSERT_EQ(after.wait_for(kPatience), std::future_status::ready);
    ASSERT_TRUE(after.get().ok());
  }
  EXPECT_EQ(plan_->KeepPlacesCalls(), 1);
}

TEST_F(PlaceKeeperTest, ClosingTheClientEndsTheKeeping) {
  HoldFor(seconds(60));
  auto client = NewClient();
  StartWaiters(*client, 10);
  Tick();
  client.reset();
  EXPECT_EQ(cancelled_.load(), 10);
  EXPECT_TRUE(store_->Waiters("k").empty());
  const int calls = plan_->KeepPlacesCalls();
  clock_->Advance(kTick * 3);
  EXPECT_EQ(plan_->KeepPlacesCalls(), calls);
}

// With its place kept for it, a waiter still looks again within kQueueTtl
// when its refusal named no holder: a place ahead blocks it, and if that
// waiter died, only an attempt after its place lapsed finds the key free
// (a store need not notify a lapse). Behind a holder, the holder's lease
// end is the bound.
TEST(AcquireProgressTest, AKeptPlaceRefusedWithNoHolderLooksAgainWithinAQueueTtl) {
  const TimePoint now = TimePoint{} + seconds(100);
  const TimePoint deadline = now + seconds(60);
  internal::AcquireProgress progress("k", AcquireOptions{}, true, deadline,
                                     internal::PlaceKeeping::kByKeeper);
  const internal::NextStep behind_place = progress.After(Attempt{}, now);
  ASSERT_EQ(behind_place.kind, internal::NextStep::Kind::kWait);
  EXPECT_EQ(behind_place.until, now + internal::kQueueTtl);
  Attempt behind_holder;
  behind_holder.holder_ttl_remaining = seconds(20);
  const internal::NextStep step = progress.After(behind_holder, now);
  ASSERT_EQ(step.kind, internal::NextStep::Kind::kWait);
  EXPECT_EQ(step.until, now + seconds(20));
}

// A store that tells a waiter when a place ahead ends needs no such look:
// the waiter rests until the store wakes it, or its deadline.
TEST(AcquireProgressTest, AStoreThatNoticesLapsesIsNotAskedAgainBehindAPlace) {
  const TimePoint now = TimePoint{} + seconds(100);
  const TimePoint deadline = now + seconds(60);
  internal::AcquireProgress progress("k", AcquireOptions{}, true, deadline,
                                     internal::PlaceKeeping::kByKeeperLapsesNoticed);
  const internal::NextStep behind_place = progress.After(Attempt{}, now);
  ASSERT_EQ(behind_place.kind, internal::NextStep::Kind::kWait);
  EXPECT_EQ(behind_place.until, deadline);
  EXPECT_TRUE(behind_place.store_answered);
}

}  // namespace
}  // namespace dlock
