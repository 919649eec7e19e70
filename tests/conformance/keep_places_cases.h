// The KeepPlaces contract of include/dlock/backend.h as cases, run on every
// store whose backend KeepsPlaces: by the conformance suite on the real
// stores, and by tests/core/keep_places_test.cc on the in-memory one.
//
// Each case opens its own backends (one per party, as separate clients
// would) through `open`, on a key of its own. Real time, with places of a
// second or two; what is checked is the order of events the contract
// fixes, never how long anything took.
#ifndef DLOCK_TESTS_CONFORMANCE_KEEP_PLACES_CASES_H_
#define DLOCK_TESTS_CONFORMANCE_KEEP_PLACES_CASES_H_

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/acquire_step.h"
#include "dlock/backend.h"
#include "dlock/clock.h"
#include "eventually.h"

namespace dlock::testing {

using OpenBackend = std::function<std::unique_ptr<Backend>()>;

// KeepPlaces, asked again (up to five times) while any answer is
// kUnavailable: a loaded server may miss a call's bound, and keeping a place
// twice is keeping it.
inline std::vector<Status> KeepAnswered(Backend& b, const std::vector<LeaseRequest>& waiters) {
  std::vector<Status> got = b.KeepPlaces(waiters);
  auto unknown = [&] {
    for (const Status& s : got) {
      if (s.code() == StatusCode::kUnavailable) return true;
    }
    return got.size() != waiters.size();
  };
  for (int i = 1; i < 5 && unknown(); ++i) got = b.KeepPlaces(waiters);
  return got;
}

inline Status KeepOne(Backend& b, const LeaseRequest& waiter) {
  std::vector<Status> got = KeepAnswered(b, {waiter});
  if (got.size() != 1) {
    return InternalError("KeepPlaces gave " + std::to_string(got.size()) + " answers to 1 entry");
  }
  return got[0];
}

// Try, asked again while the store does not answer, as the core would.
inline Result<Attempt> TryUntilAnswered(Acquisition& a) {
  Result<Attempt> r = a.Try();
  for (int i = 1; i < 5 && !r.ok() && r.status().code() == StatusCode::kUnavailable; ++i) {
    r = a.Try();
  }
  return r;
}

inline Result<Attempt> GrantUntilAnswered(Backend& b, const LeaseRequest& request) {
  Result<Attempt> r = b.TryAcquire(request);
  for (int i = 1; i < 5 && !r.ok() && r.status().code() == StatusCode::kUnavailable; ++i) {
    r = b.TryAcquire(request);
  }
  return r;
}

inline LeaseRequest Waiter(const std::string& key, OwnerId owner,
                           std::chrono::milliseconds queue_ttl) {
  LeaseRequest r{key, owner, std::chrono::milliseconds(20'000), queue_ttl};
  r.label = "conformance";
  return r;
}

// `owner`'s holding of `key` as List shows it, if any.
inline std::optional<HolderInfo> HoldingOf(Backend& b, const std::string& key, OwnerId owner) {
  Result<std::vector<HolderInfo>> held = b.List(key);
  if (!held.ok()) return std::nullopt;
  for (const HolderInfo& h : *held) {
    if (h.key == key && h.owner == owner) return h;
  }
  return std::nullopt;
}

// A waiter whose place only KeepPlaces keeps, for longer than its
// queue_ttl, is still ahead of a waiter that came after: when the key is
// released, the later one is refused and the first is granted. (Were the
// place not kept, it would have lapsed and the later waiter would be first.)
inline void KeptPlaceStaysAheadOfALaterWaiter(const OpenBackend& open, const std::string& key) {
  using std::chrono::milliseconds;
  const milliseconds queue_ttl(2000);
  auto holder_store = open(), first_store = open(), later_store = open();
  ASSERT_TRUE(holder_store && first_store && later_store);
  const LeaseRequest holder{key, OwnerId(1, 1), milliseconds(20'000)};
  auto held = GrantUntilAnswered(*holder_store, holder);
  ASSERT_TRUE(held.ok() && held->granted) << held.status().ToString();
  const LeaseRequest first = Waiter(key, OwnerId(2, 2), queue_ttl);
  auto first_waiter = first_store->Begin(first);
  auto queued = TryUntilAnswered(*first_waiter);
  ASSERT_TRUE(queued.ok() && !queued->granted) << queued.status().ToString();
  // Kept by KeepPlaces alone for one and a half queue_ttl. A gap between
  // two keeps as long as queue_ttl (a stalled machine) proves nothing.
  const auto since = MonotonicClock::now();
  auto last_kept = since;
  Duration longest_gap{0};
  Status kept;
  auto keep = [&] {
    const Status again = KeepOne(*first_store, first);
    if (kept.ok()) kept = again;
    longest_gap = std::max(longest_gap, MonotonicClock::now() - last_kept);
    last_kept = MonotonicClock::now();
  };
  while (MonotonicClock::now() - since < queue_ttl * 3 / 2) {
    std::this_thread::sleep_for(queue_ttl / 5);
    keep();
  }
  const LeaseRequest later = Waiter(key, OwnerId(3, 3), queue_ttl);
  auto later_waiter = later_store->Begin(later);
  auto refused = TryUntilAnswered(*later_waiter);
  keep();
  const Status released = holder_store->Release(key, holder.owner);
  auto later_turn = TryUntilAnswered(*later_waiter);
  // Another client's release may reach the first waiter's view a moment
  // later (a ZooKeeper follower applies it after the leader answered; a
  // waiter is told by its watch, not asked at once): its turn is asked
  // again until granted, for half a queue_ttl — while the later waiter's
  // place, taken just before, certainly lasts, so that a first place that
  // had lapsed could not be granted meanwhile.
  std::optional<Result<Attempt>> turn;
  testing_support::Eventually(
      [&] {
        turn = TryUntilAnswered(*first_waiter);
        return !turn->ok() || (*turn)->granted;
      },
      queue_ttl / 2, milliseconds(50));
  auto first_turn = *std::move(turn);
  // A granted acquisition is over: its holding goes by Release.
  auto leave = [](Backend& b, Acquisition& a, const LeaseRequest& r, const Result<Attempt>& turn) {
    if (turn.ok() && turn->granted) {
      (void)b.Release(r.key, r.owner);
    } else {
      a.Abandon();
    }
  };
  leave(*later_store, *later_waiter, later, later_turn);
  leave(*first_store, *first_waiter, first, first_turn);
  if (longest_gap >= queue_ttl) {
    GTEST_SKIP() << "the machine stalled " << std::chrono::duration<double>(longest_gap).count()
                 << " s between two keeps, longer than the place's queue_ttl";
  }
  EXPECT_TRUE(kept.ok()) << kept.ToString();
  ASSERT_TRUE(refused.ok() && !refused->granted) << refused.status().ToString();
  ASSERT_TRUE(released.ok()) << released.ToString();
  ASSERT_TRUE(later_turn.ok() && first_turn.ok())
      << later_turn.status().ToString() << " / " << first_turn.status().ToString();
  EXPECT_FALSE(later_turn->granted) << "a waiter that came later went first";
  EXPECT_TRUE(first_turn->granted) << "the waiter whose place was kept was not granted";
}

// KeepPlaces for an owner that holds the key answers kNotFound and leaves
// the holding as it was: not extended to the queue_ttl asked for, not cut
// to it. A store that counts its time in whole seconds may show a second
// more or less.
inline void KeepPlacesNeverTouchesAHolding(const OpenBackend& open, const std::string& key) {
  using std::chrono::milliseconds;
  auto store = open();
  ASSERT_TRUE(store);
  const LeaseRequest holding{key, OwnerId(1, 1), milliseconds(10'000)};
  auto held = GrantUntilAnswered(*store, holding);
  ASSERT_TRUE(held.ok() && held->granted) << held.status().ToString();
  const auto listed_at = MonotonicClock::now();
  const std::optional<HolderInfo> before = HoldingOf(*store, key, holding.owner);
  ASSERT_TRUE(before) << "List does not show the holding";
  // Once with a queue_ttl far beyond the lease (an extension would show),
  // once with one far below it (a cut would).
  for (const milliseconds queue_ttl : {milliseconds(60'000), milliseconds(1000)}) {
    LeaseRequest as_waiter = Waiter(key, holding.owner, queue_ttl);
    as_waiter.ttl = queue_ttl;
    std::vector<Status> kept = KeepAnswered(*store, {as_waiter});
    ASSERT_EQ(kept.size(), 1u);
    EXPECT_EQ(kept[0].code(), StatusCode::kNotFound) << kept[0].ToString();
  }
  const std::optional<HolderInfo> after = HoldingOf(*store, key, holding.owner);
  const auto elapsed = std::chrono::ceil<milliseconds>(MonotonicClock::now() - listed_at);
  EXPECT_TRUE(store->Release(key, holding.owner).ok());
  ASSERT_TRUE(after) << "KeepPlaces ended a holding";
  EXPECT_EQ(after->token, before->token);
  const milliseconds slack(1000);
  EXPECT_LE(after->ttl_remaining, before->ttl_remaining + slack) << "KeepPlaces extended a holding";
  EXPECT_GE(after->ttl_remaining, before->ttl_remaining - elapsed - slack)
      << "KeepPlaces shortened a holding";
}

// kNotFound for an owner with no place: one that never queued, on a key
// with a queue or on one nobody used, and one that left; one answer per
// entry, in order; and asking does not make a place.
inline void KeepPlacesAnswersNotFoundWithoutAPlace(const OpenBackend& open,
                                                   const std::string& key) {
  using std::chrono::milliseconds;
  const milliseconds queue_ttl(10'000);
  auto store = open();
  ASSERT_TRUE(store);
  const LeaseRequest holder{key, OwnerId(1, 1), milliseconds(20'000)};
  auto held = GrantUntilAnswered(*store, holder);
  ASSERT_TRUE(held.ok() && held->granted) << held.status().ToString();
  const LeaseRequest queued = Waiter(key, OwnerId(2, 2), queue_ttl);
  auto waiter = store->Begin(queued);
  auto refused = TryUntilAnswered(*waiter);
  ASSERT_TRUE(refused.ok() && !refused->granted) << refused.status().ToString();
  const LeaseRequest stranger = Waiter(key, OwnerId(3, 3), queue_ttl);
  const LeaseRequest elsewhere = Waiter(key + "/unused", OwnerId(2, 2), queue_ttl);
  std::vector<Status> kept = KeepAnswered(*store, {stranger, queued, elsewhere});
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_EQ(kept[0].code(), StatusCode::kNotFound) << kept[0].ToString();
  EXPECT_TRUE(kept[1].ok()) << kept[1].ToString();
  EXPECT_EQ(kept[2].code(), StatusCode::kNotFound) << kept[2].ToString();
  Result<std::vector<WaiterInfo>> waiters = store->Waiters(key);
  if (waiters.ok()) {
    ASSERT_EQ(waiters->size(), 1u) << "KeepPlaces made a place for an owner that had none";
    EXPECT_EQ((*waiters)[0].owner, queued.owner);
  }
  waiter->Abandon();
  kept = KeepAnswered(*store, {queued});
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].code(), StatusCode::kNotFound) << "a place kept after its waiter left";
  EXPECT_TRUE(store->Release(key, holder.owner).ok());
}

// Waits, as the core's asynchronous waiter does, until `waiter`'s store
// says another Try may succeed or `rest` passes (the core's own bound:
// the holder's lease end, or kQueueTtl when the attempt named no holder),
// keeping `request`'s place meanwhile as the core's PlaceKeeper would. A
// store that cannot notify is polled, as the core polls it. False when
// `until` came first. `longest_gap` gets the longest time between keeps.
inline bool WaitKeeping(Backend& store, Acquisition& waiter, const LeaseRequest& request,
                        TimePoint rest, TimePoint until, Duration& longest_gap) {
  struct Woken {
    std::mutex mu;
    std::condition_variable cv;
    bool woken = false;
  };
  auto woken = std::make_shared<Woken>();
  const bool notifies = waiter.Notify([woken] {
    std::lock_guard lock(woken->mu);
    woken->woken = true;
    woken->cv.notify_all();
  });
  auto last_kept = MonotonicClock::now();
  std::unique_lock lock(woken->mu);
  while (!woken->woken && MonotonicClock::now() < until) {
    woken->cv.wait_for(lock, request.queue_ttl / 5, [&] { return woken->woken; });
    // Polled, or the core's bound: try again.
    if (!notifies || MonotonicClock::now() >= rest) woken->woken = true;
    if (woken->woken) break;
    lock.unlock();
    // kNotFound: the place is gone, or first on a free key; the core's
    // PlaceKeeper makes the waiter attempt at once.
    const bool attempt_now = KeepOne(store, request).code() == StatusCode::kNotFound;
    longest_gap = std::max(longest_gap, MonotonicClock::now() - last_kept);
    last_kept = MonotonicClock::now();
    lock.lock();
    if (attempt_now) woken->woken = true;
  }
  const bool got = woken->woken;
  lock.unlock();
  if (notifies) waiter.StopNotify();
  return got;
}

// A waiter ahead that dies (never attempts again, never leaves) has its
// place lapse; the waiter behind it, whose place is kept without attempts,
// is granted the free key by the attempt the store's Notify, its
// KeepPlaces answer, or the core's bound (kQueueTtl after a refusal that
// named no holder, unless the store NoticesLapsedPlaces) brings: a Try
// after a lapse must not find the lapsed place still ahead.
inline void ALapsedPlaceAheadWakesTheWaiterBehindIt(const OpenBackend& open,
                                                   const std::string& key) {
  using std::chrono::milliseconds;
  auto holder_store = open(), dead_store = open(), waiter_store = open();
  ASSERT_TRUE(holder_store && dead_store && waiter_store);
  const LeaseRequest holder{key, OwnerId(1, 1), milliseconds(20'000)};
  auto held = GrantUntilAnswered(*holder_store, holder);
  ASSERT_TRUE(held.ok() && held->granted) << held.status().ToString();
  // A short lease too: a store that hands the key on at a release may
  // have handed it to the dead waiter, whose lease must then run out.
  LeaseRequest dead = Waiter(key, OwnerId(2, 2), milliseconds(1000));
  dead.ttl = milliseconds(1000);
  auto dead_waiter = dead_store->Begin(dead);
  auto dead_queued = TryUntilAnswered(*dead_waiter);
  ASSERT_TRUE(dead_queued.ok() && !dead_queued->granted) << dead_queued.status().ToString();
  const LeaseRequest behind = Waiter(key, OwnerId(3, 3), milliseconds(2000));
  auto waiter = waiter_store->Begin(behind);
  auto turn = TryUntilAnswered(*waiter);
  ASSERT_TRUE(turn.ok() && !turn->granted) << turn.status().ToString();
  ASSERT_TRUE(holder_store->Release(key, holder.owner).ok());
  // Far beyond the dead place's queue_ttl: reaching it means nobody woke
  // the waiter. It bounds how long a failure takes, not a success.
  const auto until = MonotonicClock::now() + milliseconds(20'000);
  Duration longest_gap{0};
  // The core's bound; a store that notices lapses (its Notify, or its
  // KeepPlaces) gets none behind a place.
  auto rest_after = [&](const Attempt& refused) {
    if (refused.holder_ttl_remaining > milliseconds(0)) {
      return MonotonicClock::now() + refused.holder_ttl_remaining;
    }
    return waiter_store->NoticesLapsedPlaces() ? until
                                               : MonotonicClock::now() + internal::kQueueTtl;
  };
  while (turn.ok() && !turn->granted &&
         WaitKeeping(*waiter_store, *waiter, behind, rest_after(*turn), until, longest_gap)) {
    turn = TryUntilAnswered(*waiter);
  }
  const bool granted = turn.ok() && turn->granted;
  if (granted) {
    EXPECT_TRUE(waiter_store->Release(key, behind.owner).ok());
  } else {
    waiter->Abandon();
  }
  dead_waiter->Abandon();
  if (longest_gap >= behind.queue_ttl) {
    GTEST_SKIP() << "the machine stalled " << std::chrono::duration<double>(longest_gap).count()
                 << " s between two keeps, longer than the place's queue_ttl";
  }
  ASSERT_TRUE(turn.ok()) << turn.status().ToString();
  EXPECT_TRUE(granted) << "20 s after the release, the waiter behind a dead waiter's lapsed "
                          "place was still refused";
}

}  // namespace dlock::testing

#endif  // DLOCK_TESTS_CONFORMANCE_KEEP_PLACES_CASES_H_
