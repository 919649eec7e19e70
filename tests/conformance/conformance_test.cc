// One suite, every store: the Backend contract (include/dlock/backend.h) and
// the client's promises, checked against a real store in real time.
//
// The store comes from $DLOCK_TEST_URI, or from the file named by
// $DLOCK_TEST_URI_FILE (written by a server fixture, tests/servers/); with
// neither, a fresh SQLite file. TTLs are short (hundreds of ms) so that
// expiry happens within the test; nothing asserts on how long anything took,
// only on the order of events that the contract fixes.
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "core/registry.h"
#include "core/uri.h"
#include "dlock/client.h"
#include "dlock/testing/faulty_backend.h"
#include "conformance_store.h"
#include "eventually.h"
#include "timing.h"
#include "sharing_cases.h"

namespace dlock {
namespace {

using std::chrono::milliseconds;
using testing::FaultPlan;
using testing::FaultyBackend;

// One attempt, made again (up to five times) when the store did not answer
// it in time: on a busy machine a server may miss an attempt's bound, and
// the core's Acquire makes such an attempt again too. Attempts are safe to
// repeat (backend.h: the same owner finds its own grant; a client gives
// back a grant whose reply it lost); what is checked is the answer.
template <typename Call>
auto Answered(Call attempt) -> decltype(attempt()) {
  auto r = attempt();
  for (int i = 1; i < 5 && !r.ok() && r.status().code() == StatusCode::kUnavailable; ++i) {
    r = attempt();
  }
  return r;
}

Result<Attempt> TryAnswered(Acquisition& a) {
  return Answered([&] { return a.Try(); });
}

Result<Attempt> TryAnswered(Backend& b, const LeaseRequest& request) {
  return Answered([&] { return b.TryAcquire(request); });
}

Result<Lease> TryAnswered(Client& client, const std::string& key, const AcquireOptions& o) {
  return Answered([&] { return client.TryAcquire(key, o); });
}

class ConformanceTest : public ::testing::Test {
 protected:
  // A store that does not open stops each test here.
  void SetUp() override {
    static const bool opens = RawBackend() != nullptr;
    ASSERT_TRUE(opens) << "the store " << StoreUri() << " does not open";
  }

  std::unique_ptr<Backend> RawBackend() { return OpenStore(); }

  std::unique_ptr<Client> NewClient(std::shared_ptr<FaultPlan> plan = nullptr) {
    auto backend = RawBackend();
    if (!backend) return nullptr;
    if (plan) backend = std::make_unique<FaultyBackend>(std::move(backend), plan);
    return Client::FromBackend(std::move(backend));
  }

  static AcquireOptions Opts(milliseconds ttl, milliseconds wait = milliseconds(0)) {
    AcquireOptions o;
    o.ttl = ttl;
    o.wait = wait;
    return o;
  }

  static LeaseRequest Req(const std::string& key, OwnerId owner, milliseconds ttl) {
    return LeaseRequest{key, owner, ttl};
  }
};

TEST_F(ConformanceTest, TokensStrictlyIncreaseAcrossReleases) {
  auto client = NewClient();
  ASSERT_TRUE(client);
  const std::string key = UniqueKey("tokens");
  FencingToken last = 0;
  for (int i = 0; i < 20; ++i) {
    auto lease = TryAnswered(*client, key, Opts(milliseconds(5000)));
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    EXPECT_GT(lease->token(), last);
    last = lease->token();
    ASSERT_TRUE(lease->Release().ok());
  }
}

TEST_F(ConformanceTest, HeldKeyIsRefusedWithTheHoldersTimeLeft) {
  auto a = RawBackend();
  auto b = RawBackend();
  ASSERT_TRUE(a && b);
  const std::string key = UniqueKey("held");
  auto first = TryAnswered(*a, Req(key, OwnerId(1, 1), milliseconds(5000)));
  ASSERT_TRUE(first.ok() && first->granted) << first.status().ToString();
  auto second = TryAnswered(*b, Req(key, OwnerId(2, 2), milliseconds(5000)));
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_FALSE(second->granted);
  EXPECT_LE(second->holder_ttl_remaining, milliseconds(5000));
  EXPECT_TRUE(a->Release(key, OwnerId(1, 1)).ok());
}

TEST_F(ConformanceTest, SameOwnerRetryGetsTheSameGrantBack) {
  auto b = RawBackend();
  ASSERT_TRUE(b);
  const std::string key = UniqueKey("retry");
  auto first = TryAnswered(*b, Req(key, OwnerId(7, 7), milliseconds(5000)));
  auto again = TryAnswered(*b, Req(key, OwnerId(7, 7), milliseconds(5000)));
  ASSERT_TRUE(first.ok() && again.ok());
  ASSERT_TRUE(first->granted && again->granted);
  EXPECT_EQ(first->token, again->token);
  EXPECT_TRUE(b->Release(key, OwnerId(7, 7)).ok());
}

TEST_F(ConformanceTest, ReleaseIsOwnerCheckedAndIdempotent) {
  auto b = RawBackend();
  ASSERT_TRUE(b);
  const std::string key = UniqueKey("release");
  ASSERT_TRUE(TryAnswered(*b, Req(key, OwnerId(1, 1), milliseconds(5000)))->granted);
  EXPECT_EQ(b->Release(key, OwnerId(9, 9)).code(), StatusCode::kNotOwner);
  EXPECT_FALSE(TryAnswered(*b, Req(key, OwnerId(2, 2), milliseconds(5000)))->granted)
      << "a refused release dropped the lock";
  EXPECT_TRUE(b->Release(key, OwnerId(1, 1)).ok());
  EXPECT_TRUE(b->Release(key, OwnerId(1, 1)).ok()) << "second release";
  EXPECT_TRUE(b->Release(UniqueKey("never-held"), OwnerId(1, 1)).ok());
}

TEST_F(ConformanceTest, RenewBatchReportsEachLease) {
  auto b = RawBackend();
  ASSERT_TRUE(b);
  const std::string k1 = UniqueKey("renew1"), k2 = UniqueKey("renew2"), k3 = UniqueKey("renew3");
  const OwnerId me(5, 5), other(6, 6);
  ASSERT_TRUE(TryAnswered(*b, Req(k1, me, milliseconds(5000)))->granted);
  ASSERT_TRUE(TryAnswered(*b, Req(k2, me, milliseconds(5000)))->granted);
  ASSERT_TRUE(TryAnswered(*b, Req(k3, me, milliseconds(5000)))->granted);
  // k2 changes hands behind our back.
  ASSERT_TRUE(b->Release(k2, me).ok());
  ASSERT_TRUE(TryAnswered(*b, Req(k2, other, milliseconds(5000)))->granted);
  std::vector<LeaseRequest> batch = {Req(k1, me, milliseconds(5000)),
                                     Req(k2, me, milliseconds(5000)),
                                     Req(k3, me, milliseconds(5000))};
  auto results = b->Renew(batch);
  ASSERT_EQ(results.size(), 3u);
  EXPECT_TRUE(results[0].ok()) << results[0].ToString();
  EXPECT_EQ(results[1].code(), StatusCode::kNotOwner) << results[1].ToString();
  EXPECT_TRUE(results[2].ok()) << results[2].ToString();
  for (const auto& k : {k1, k3}) EXPECT_TRUE(b->Release(k, me).ok());
  EXPECT_TRUE(b->Release(k2, other).ok());
}

TEST_F(ConformanceTest, RenewedLeaseOutlivesManyTtls) {
  auto client = NewClient();
  ASSERT_TRUE(client);
  // Each renewal must have time to get through on this machine, loaded or
  // not: the TTL is 20 times what the slowest of a few grants and releases
  // takes here now (one sample can be a quiet moment), and at least 1 s.
  // The probes time the store, not the pauses a busy machine gives the
  // renewal thread: beside a Redis Cluster failover and a CPU hog a 300 ms
  // lease once saw its renewals all answered too late.
  Status probed;
  const Duration slowest = testing_support::MeasureSlowest(3, [&] {
    auto probe = TryAnswered(*client, UniqueKey("probe"), Opts(milliseconds(5000)));
    probed = probe.ok() ? probe->Release() : probe.status();
  });
  ASSERT_TRUE(probed.ok()) << probed.ToString();
  const milliseconds ttl =
      std::max(milliseconds(1000), 20 * std::chrono::duration_cast<milliseconds>(slowest));
  auto lease = TryAnswered(*client, UniqueKey("outlive"), Opts(ttl));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  std::this_thread::sleep_for(5 * ttl);
  EXPECT_TRUE(lease->Check().ok()) << lease->Check().ToString() << " (ttl " << ttl.count()
                                   << " ms)";
  auto other = TryAnswered(*NewClient(), lease->key(), Opts(ttl));
  EXPECT_EQ(other.status().code(), StatusCode::kLockHeld);
  EXPECT_TRUE(lease->Release().ok());
}

TEST_F(ConformanceTest, ExpiredLeaseIsLostBeforeTheNextHolderIsGranted) {
  // A holder whose renewals cannot get through: its client must report the
  // lease lost before the store grants the key to anybody else.
  auto plan = std::make_shared<FaultPlan>();
  auto a = NewClient(plan);
  std::atomic<bool> told{false};
  AcquireOptions o = Opts(milliseconds(400));
  o.on_lost = [&](const Status&) { told = true; };
  const std::string key = UniqueKey("expire");
  auto held = TryAnswered(*a, key, o);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  plan->SetRenewError(UnavailableError("injected partition"));
  plan->SetReleaseError(UnavailableError("injected partition"));

  auto b = NewClient();
  auto next = b->Acquire(key, Opts(milliseconds(400), milliseconds(10'000)));
  const TimePoint granted_at = MonotonicClock::now();
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_GT(next->token(), held->token());
  // What the old holder believes is its valid_until: Check() says lost from
  // then on. It must come before the new grant.
  EXPECT_EQ(held->Check().code(), StatusCode::kLeaseLost);
  EXPECT_LT(held->valid_until(), granted_at) << "two holders believed they held the key";
  // on_lost runs on the client's renewal thread, which a busy machine may
  // schedule late: it must come, not necessarily before the new grant.
  EXPECT_TRUE(testing_support::Eventually([&] { return told.load(); }, milliseconds(10'000),
                                          milliseconds(1)))
      << "the old holder was not told";
}

TEST_F(ConformanceTest, WaitingAcquireGetsTheKeyAfterRelease) {
  auto a = NewClient();
  auto b = NewClient();
  const std::string key = UniqueKey("handoff");
  auto first = TryAnswered(*a, key, Opts(milliseconds(10'000)));
  ASSERT_TRUE(first.ok());
  std::optional<Result<Lease>> second;
  std::jthread waiter([&] { second.emplace(b->Acquire(key, Opts(milliseconds(10'000), milliseconds(10'000)))); });
  std::this_thread::sleep_for(milliseconds(100));  // let it start waiting (not asserted)
  ASSERT_TRUE(first->Release().ok());
  waiter.join();
  ASSERT_TRUE(second->ok()) << second->status().ToString();
  EXPECT_GT((*second)->token(), first->token());
}

TEST_F(ConformanceTest, WaitGivesUpAtItsDeadline) {
  auto a = NewClient();
  const std::string key = UniqueKey("deadline");
  auto first = TryAnswered(*a, key, Opts(milliseconds(10'000)));
  ASSERT_TRUE(first.ok());
  // Connected first (a TLS handshake and a login on a secured store are not
  // what the wait bounds), and the wait several grants long: under a
  // sanitizer one round trip to a secured etcd can take longer than 200 ms,
  // and a wait that ends inside its only attempt reports the store, not the
  // deadline.
  auto b = NewClient();
  const auto start = std::chrono::steady_clock::now();
  auto probe = TryAnswered(*b, UniqueKey("deadline-probe"), Opts(milliseconds(10'000)));
  ASSERT_TRUE(probe.ok()) << probe.status().ToString();
  ASSERT_TRUE(probe->Release().ok());
  const auto cycle = std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start);
  const milliseconds wait = std::max(milliseconds(200), 5 * cycle);
  auto second = b->Acquire(key, Opts(milliseconds(10'000), wait));
  EXPECT_EQ(second.status().code(), StatusCode::kDeadlineExceeded)
      << second.status().ToString() << " (wait " << wait.count() << " ms)";
}

TEST_F(ConformanceTest, LostAcquireReplyIsReconciled) {
  auto plan = std::make_shared<FaultPlan>();
  auto client = NewClient(plan);
  const std::string key = UniqueKey("lost-reply");
  plan->LoseAcquireReplies(1);
  auto r = client->TryAcquire(key, Opts(milliseconds(10'000)));
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  // Given up: the ghost grant was released, the key is free at once.
  auto free_now = TryAnswered(*NewClient(), key, Opts(milliseconds(10'000)));
  ASSERT_TRUE(free_now.ok()) << free_now.status().ToString();
  ASSERT_TRUE(free_now->Release().ok());
  // Retried: the retry finds its own grant.
  plan->LoseAcquireReplies(1);
  auto retried = client->Acquire(key, Opts(milliseconds(10'000), milliseconds(5000)));
  ASSERT_TRUE(retried.ok()) << retried.status().ToString();
  EXPECT_EQ(TryAnswered(*NewClient(), key, Opts(milliseconds(10'000))).status().code(),
            StatusCode::kLockHeld);
}

TEST_F(ConformanceTest, KeysThatArePrefixesOfEachOtherAreIndependent) {
  auto client = NewClient();
  const std::string a = UniqueKey("p"), ab = UniqueKey("p/b"), weird = UniqueKey("p%_ *\xff");
  auto l1 = TryAnswered(*client, a, Opts(milliseconds(10'000)));
  auto l2 = TryAnswered(*client, ab, Opts(milliseconds(10'000)));
  auto l3 = TryAnswered(*client, weird, Opts(milliseconds(10'000)));
  ASSERT_TRUE(l1.ok() && l2.ok() && l3.ok());
  auto list = client->List(a);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[0].key, a);
  EXPECT_EQ((*list)[0].owner, l1->owner());
  EXPECT_EQ((*list)[0].token, l1->token());
  ASSERT_TRUE(l1->Release().ok());
  EXPECT_EQ(TryAnswered(*NewClient(), ab, Opts(milliseconds(1000))).status().code(),
            StatusCode::kLockHeld);
}

TEST_F(ConformanceTest, ConcurrentClientsNeverOverlap) {
  const std::string key = UniqueKey("mutex");
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::mutex mu;
  std::vector<FencingToken> grant_order;
  auto worker = [&] {
    auto client = NewClient();
    for (int i = 0; i < 25; ++i) {
      auto lease = client->Acquire(key, Opts(milliseconds(5000), milliseconds(30'000)));
      ASSERT_TRUE(lease.ok()) << lease.status().ToString();
      if (inside.fetch_add(1) != 0) ++overlaps;
      {
        std::lock_guard l(mu);
        grant_order.push_back(lease->token());
      }
      inside.fetch_sub(1);
      ASSERT_TRUE(lease->Release().ok());
    }
  };
  std::vector<std::jthread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  EXPECT_EQ(overlaps.load(), 0);
  ASSERT_EQ(grant_order.size(), 100u);
  for (std::size_t i = 1; i < grant_order.size(); ++i) {
    EXPECT_GT(grant_order[i], grant_order[i - 1]) << "at grant " << i;
  }
}


// ---- #10: read-write locks, semaphores, waiter records, labels, election.
// Stores that cannot share a key say so (SupportsSharing) and skip; the
// others must follow the sharing rule of backend.h.

LeaseRequest Shared(const std::string& key, OwnerId owner, std::uint32_t limit,
                    milliseconds queue_ttl = milliseconds(0)) {
  LeaseRequest r{key, owner, milliseconds(10'000), queue_ttl};
  r.limit = limit;
  r.label = "conformance";
  return r;
}

TEST_F(ConformanceTest, ReadersShareAndExcludeAWriter) {
  auto b = RawBackend();
  ASSERT_TRUE(b);
  if (!b->SupportsSharing()) GTEST_SKIP() << b->Describe() << " does not share keys";
  const std::string key = UniqueKey("rw");
  auto r1 = TryAnswered(*b, Shared(key, OwnerId(1, 1), kSharedLimit));
  auto r2 = TryAnswered(*b, Shared(key, OwnerId(2, 2), kSharedLimit));
  ASSERT_TRUE(r1.ok() && r2.ok()) << r1.status().ToString() << r2.status().ToString();
  ASSERT_TRUE(r1->granted && r2->granted) << "two readers must share";
  EXPECT_GT(r2->token, r1->token) << "each reader has its own token";
  auto w = TryAnswered(*b, Shared(key, OwnerId(3, 3), 1));
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_FALSE(w->granted) << "a writer was let in with readers";
  auto list = b->List(key);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_EQ(list->size(), 2u) << "one entry per reader";
  ASSERT_TRUE(b->Release(key, OwnerId(1, 1)).ok());
  EXPECT_FALSE(TryAnswered(*b, Shared(key, OwnerId(3, 3), 1))->granted) << "one reader is left";
  ASSERT_TRUE(b->Release(key, OwnerId(2, 2)).ok());
  auto w2 = TryAnswered(*b, Shared(key, OwnerId(3, 3), 1));
  ASSERT_TRUE(w2.ok() && w2->granted) << "the writer, once the readers left";
  EXPECT_GT(w2->token, r2->token);
  EXPECT_FALSE(TryAnswered(*b, Shared(key, OwnerId(4, 4), kSharedLimit))->granted)
      << "a reader was let in with a writer";
  EXPECT_TRUE(b->Release(key, OwnerId(3, 3)).ok());
}

TEST_F(ConformanceTest, AQueuedWriterIsNotStarvedByNewReaders) {
  auto b = RawBackend();
  ASSERT_TRUE(b);
  if (!b->SupportsSharing()) GTEST_SKIP() << b->Describe() << " does not share keys";
  const std::string key = UniqueKey("rw-fair");
  ASSERT_TRUE(TryAnswered(*b, Shared(key, OwnerId(1, 1), kSharedLimit))->granted);
  // The writer waits (it takes a place in the queue)...
  auto writer = b->Begin(Shared(key, OwnerId(2, 2), 1, milliseconds(10'000)));
  auto w = TryAnswered(*writer);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_FALSE(w->granted);
  // ...so readers arriving after it wait too, though the key is read-held.
  std::vector<std::unique_ptr<Acquisition>> readers;
  for (std::uint64_t i = 10; i < 13; ++i) {
    readers.push_back(b->Begin(Shared(key, OwnerId(i, i), kSharedLimit, milliseconds(10'000))));
    auto late = TryAnswered(*readers.back());
    ASSERT_TRUE(late.ok()) << late.status().ToString();
    EXPECT_FALSE(late->granted) << "a reader overtook a waiting writer";
  }
  ASSERT_TRUE(b->Release(key, OwnerId(1, 1)).ok());
  auto w2 = TryAnswered(*writer);
  ASSERT_TRUE(w2.ok() && w2->granted) << "the writer comes first";
  ASSERT_TRUE(b->Release(key, OwnerId(2, 2)).ok());
  // Then the queued readers, together.
  for (auto& reader : readers) {
    auto r = TryAnswered(*reader);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->granted);
  }
  for (std::uint64_t i = 10; i < 13; ++i) EXPECT_TRUE(b->Release(key, OwnerId(i, i)).ok());
}

// The table in sharing_cases.h, which the core's DecideQueue follows too:
// every arrival is one owner with an acquisition of its own.
TEST_F(ConformanceTest, SharingFollowsTheTableOfCases) {
  auto b = RawBackend();
  ASSERT_TRUE(b);
  if (!b->SupportsSharing()) GTEST_SKIP() << b->Describe() << " does not share keys";
  for (const testing::SharingCase& c : testing::SharingCases()) {
    const std::string key = UniqueKey(std::string("table/") + c.name);
    std::vector<std::unique_ptr<Acquisition>> arrivals;
    std::vector<bool> holds;
    auto owner = [](std::size_t i) { return OwnerId(0x7a, 100 + i); };
    auto attempt = [&](std::size_t who, bool want, std::size_t step) {
      auto r = TryAnswered(*arrivals[who]);
      ASSERT_TRUE(r.ok()) << c.name << ", step " << step << ": " << r.status().ToString();
      EXPECT_EQ(r->granted, want) << c.name << ", step " << step << " (arrival " << who << ")";
      holds[who] = r->granted;
    };
    for (std::size_t s = 0; s < c.steps.size(); ++s) {
      const testing::SharingStep& step = c.steps[s];
      if (step.kind == testing::SharingStep::Kind::kArrive) {
        arrivals.push_back(b->Begin(Shared(key, owner(arrivals.size()), step.limit,
                                           milliseconds(10'000))));
        holds.push_back(false);
        attempt(arrivals.size() - 1, step.granted, s);
      } else if (step.kind == testing::SharingStep::Kind::kRetry) {
        attempt(step.who, step.granted, s);
      } else if (holds[step.who]) {
        EXPECT_TRUE(b->Release(key, owner(step.who)).ok()) << c.name << ", step " << s;
        holds[step.who] = false;
      } else {
        arrivals[step.who]->Abandon();
      }
    }
    for (std::size_t i = 0; i < arrivals.size(); ++i) {
      if (holds[i]) {
        EXPECT_TRUE(b->Release(key, owner(i)).ok());
      } else {
        arrivals[i]->Abandon();
      }
    }
  }
}

TEST_F(ConformanceTest, SemaphoreAdmitsExactlyNHolders) {
  auto b = RawBackend();
  ASSERT_TRUE(b);
  if (!b->SupportsSharing()) GTEST_SKIP() << b->Describe() << " does not share keys";
  const std::string key = UniqueKey("sem");
  FencingToken last = 0;
  for (std::uint64_t i = 1; i <= 3; ++i) {
    auto g = TryAnswered(*b, Shared(key, OwnerId(i, i), 3));
    ASSERT_TRUE(g.ok() && g->granted) << "permit " << i << " " << g.status().ToString();
    EXPECT_GT(g->token, last);
    last = g->token;
  }
  auto fourth = TryAnswered(*b, Shared(key, OwnerId(4, 4), 3));
  ASSERT_TRUE(fourth.ok());
  EXPECT_FALSE(fourth->granted) << "a fourth holder of three permits";
  auto again = TryAnswered(*b, Shared(key, OwnerId(2, 2), 3));
  ASSERT_TRUE(again.ok() && again->granted) << "a holder's retry is its own grant";
  ASSERT_TRUE(b->Release(key, OwnerId(2, 2)).ok());
  auto now_in = TryAnswered(*b, Shared(key, OwnerId(4, 4), 3));
  ASSERT_TRUE(now_in.ok() && now_in->granted);
  EXPECT_GT(now_in->token, last);
  auto renewed = b->Renew(std::vector<LeaseRequest>{Shared(key, OwnerId(1, 1), 3),
                                                    Shared(key, OwnerId(2, 2), 3)});
  ASSERT_EQ(renewed.size(), 2u);
  EXPECT_TRUE(renewed[0].ok()) << renewed[0].ToString();
  EXPECT_EQ(renewed[1].code(), StatusCode::kNotOwner) << "a released permit renewed";
  for (std::uint64_t i : {1, 3, 4}) EXPECT_TRUE(b->Release(key, OwnerId(i, i)).ok());
}

TEST_F(ConformanceTest, SemaphoreClientsNeverExceedThePermits) {
  auto probe = RawBackend();
  ASSERT_TRUE(probe);
  if (!probe->SupportsSharing()) GTEST_SKIP() << "the store does not share keys";
  const std::string key = UniqueKey("sem-clients");
  std::atomic<int> inside{0}, most{0};
  auto worker = [&] {
    auto client = NewClient();
    AcquireOptions o = Opts(milliseconds(5000), milliseconds(30'000));
    o.permits = 2;
    for (int i = 0; i < 10; ++i) {
      auto lease = client->Acquire(key, o);
      ASSERT_TRUE(lease.ok()) << lease.status().ToString();
      int now = inside.fetch_add(1) + 1;
      int prev = most.load();
      while (now > prev && !most.compare_exchange_weak(prev, now)) {
      }
      std::this_thread::sleep_for(milliseconds(2));
      inside.fetch_sub(1);
      ASSERT_TRUE(lease->Release().ok());
    }
  };
  std::vector<std::jthread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  EXPECT_LE(most.load(), 2);
  EXPECT_GE(most.load(), 1);
}

TEST_F(ConformanceTest, WaitersAreRecordedAndLeaveWithTheirWaiter) {
  auto b = RawBackend();
  ASSERT_TRUE(b);
  const std::string key = UniqueKey("waiters");
  ASSERT_TRUE(TryAnswered(*b, Shared(key, OwnerId(1, 1), 1))->granted);
  auto waiter = b->Begin(Shared(key, OwnerId(2, 2), 1, milliseconds(10'000)));
  auto queued = TryAnswered(*waiter);
  ASSERT_TRUE(queued.ok() && !queued->granted);
  auto waiters = b->Waiters(key);
  if (!waiters.ok() && waiters.status().code() == StatusCode::kFailedPrecondition) {
    waiter->Abandon();
    (void)b->Release(key, OwnerId(1, 1));
    GTEST_SKIP() << waiters.status().ToString();
  }
  ASSERT_TRUE(waiters.ok()) << waiters.status().ToString();
  ASSERT_EQ(waiters->size(), 1u);
  EXPECT_EQ((*waiters)[0].key, key);
  EXPECT_EQ((*waiters)[0].owner, OwnerId(2, 2));
  EXPECT_EQ((*waiters)[0].label, "conformance");
  // A waiter that gives up leaves at once.
  waiter->Abandon();
  waiters = b->Waiters(key);
  ASSERT_TRUE(waiters.ok());
  EXPECT_TRUE(waiters->empty()) << "a waiter that left is still listed";
  // A waiter that dies (drops its acquisition without abandoning it) leaves
  // when its place expires.
  // Its place (2 s; two thirds of it on Redis) must outlast the listing
  // below, which scans the whole keyspace on some stores.
  auto dying = b->Begin(Shared(key, OwnerId(3, 3), 1, milliseconds(2000)));
  ASSERT_FALSE(TryAnswered(*dying)->granted);
  ASSERT_EQ(b->Waiters(key)->size(), 1u);
  dying.reset();
  // A store sweeps expired places on its own clock (etcd's leases in
  // whole seconds), so allow what a busy machine needs.
  EXPECT_TRUE(testing_support::Eventually(
      [&] {
        waiters = b->Waiters(key);
        return waiters.ok() && waiters->empty();
      },
      milliseconds(12'000), milliseconds(50)))
      << "a dead waiter's record outlived its place by 10 s: "
      << (waiters.ok() ? std::to_string(waiters->size()) + " waiters listed"
                       : waiters.status().ToString());
  EXPECT_TRUE(b->Release(key, OwnerId(1, 1)).ok());
}

TEST_F(ConformanceTest, ListShowsLabelTtlAndHolding) {
  auto b = RawBackend();
  ASSERT_TRUE(b);
  const std::string key = UniqueKey("label");
  LeaseRequest r = Shared(key, OwnerId(8, 8), 1);
  r.label = "worker-7 on host x";
  ASSERT_TRUE(TryAnswered(*b, r)->granted);
  auto list = b->List(key);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 1u);
  const HolderInfo& h = (*list)[0];
  EXPECT_EQ(h.label, "worker-7 on host x");
  EXPECT_EQ(h.limit, 1u);
  EXPECT_GT(h.ttl_remaining, milliseconds(0));
  if (h.ttl > milliseconds(0)) {
    EXPECT_GE(h.ttl, h.ttl_remaining);
  }
  if (h.held_for) {
    EXPECT_GE(*h.held_for, milliseconds(0));
  }
  EXPECT_TRUE(b->Release(key, OwnerId(8, 8)).ok());
}

// Run-once records (Backend::IsDone / MarkDone): only the key's holder may
// mark it done; a mark is seen by every client, outlives the holding, and
// belongs to that key alone.
TEST_F(ConformanceTest, OnlyTheHolderMarksARunDone) {
  auto backend = RawBackend();
  auto other = RawBackend();
  ASSERT_TRUE(backend && other);
  const std::string key = UniqueKey("once/job");
  auto done = backend->IsDone(key);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_FALSE(*done);

  // Nobody holds it: nobody may mark it.
  const OwnerId stranger(0x51, 1);
  EXPECT_EQ(backend->MarkDone(key, stranger, kDefaultDoneRetention).code(), StatusCode::kNotOwner);
  // Another client holds it: this client's waiter may not. (Whether another
  // client may mark it with the holder's owner id is the store's: an owner id
  // is the credential on SQLite, PostgreSQL and Redis, a session's node or
  // key on etcd and ZooKeeper, whose tests check that they refuse.)
  const OwnerId holder(0x52, 2), waiter(0x53, 3);
  auto granted = TryAnswered(*other, Req(key, holder, milliseconds(10'000)));
  ASSERT_TRUE(granted.ok() && granted->granted) << granted.status().ToString();
  LeaseRequest waiting = Req(key, waiter, milliseconds(10'000));
  waiting.queue_ttl = milliseconds(5'000);
  auto acquisition = backend->Begin(waiting);
  auto queued = TryAnswered(*acquisition);
  ASSERT_TRUE(queued.ok() && !queued->granted) << queued.status().ToString();
  EXPECT_EQ(backend->MarkDone(key, waiter, kDefaultDoneRetention).code(), StatusCode::kNotOwner) << "a waiter";
  acquisition->Abandon();  // leaves the queue
  ASSERT_TRUE(other->Release(key, holder).ok());

  // The holder marks it; every client then sees it done.
  const OwnerId b(0x54, 4);
  granted = TryAnswered(*backend, Req(key, b, milliseconds(10'000)));
  ASSERT_TRUE(granted.ok() && granted->granted) << granted.status().ToString();
  Status marked = backend->MarkDone(key, b, kDefaultDoneRetention);
  EXPECT_TRUE(marked.ok()) << marked.ToString();
  EXPECT_TRUE(backend->MarkDone(key, b, kDefaultDoneRetention).ok()) << "marking again is harmless";
  EXPECT_TRUE(*backend->IsDone(key));
  EXPECT_TRUE(*other->IsDone(key)) << "seen from another client";
  // Released: the mark stays, and the released owner can mark no more.
  ASSERT_TRUE(backend->Release(key, b).ok());
  EXPECT_EQ(backend->MarkDone(key, b, kDefaultDoneRetention).code(), StatusCode::kNotOwner);
  EXPECT_TRUE(*other->IsDone(key)) << "the mark outlives the holding";
  EXPECT_FALSE(*other->IsDone(key + "/x")) << "a longer key has its own record";
  EXPECT_FALSE(*other->IsDone(key.substr(0, key.rfind('/')))) << "so has a shorter one";
}

// A run-once record lasts its retention: done until then, not done after
// (the key runs again), a fresh mark starts the retention again, and the
// record then leaves the store (at once, or with the store's next record or
// sweep, which another key's record brings about here).
TEST_F(ConformanceTest, ARunOnceRecordEndsWithItsRetention) {
  auto backend = RawBackend();
  ASSERT_TRUE(backend);
  const std::string prefix = UniqueKey("retention") + "/";
  const std::string key = prefix + "a";
  const milliseconds keep(2000);
  std::uint64_t marks = 0;
  auto mark = [&](const std::string& k) {
    const OwnerId owner(0x61, ++marks);
    auto granted = TryAnswered(*backend, Req(k, owner, milliseconds(10'000)));
    ASSERT_TRUE(granted.ok() && granted->granted) << granted.status().ToString();
    const auto start = std::chrono::steady_clock::now();
    Status marked = backend->MarkDone(k, owner, keep);
    ASSERT_TRUE(marked.ok()) << marked.ToString();
    Result<bool> done = backend->IsDone(k);
    ASSERT_TRUE(done.ok()) << done.status().ToString();
    if (!*done) {
      EXPECT_GE(std::chrono::steady_clock::now() - start, keep) << "ended before its retention";
    }
    EXPECT_TRUE(backend->Release(k, owner).ok());
  };
  auto not_done = [&](const std::string& k) {
    return testing_support::Eventually(
        [&] {
          Result<bool> done = backend->IsDone(k);
          return done.ok() && !*done;
        },
        milliseconds(30'000));
  };
  mark(key);
  EXPECT_TRUE(not_done(key)) << "still done long after its retention";
  mark(key);  // marked again: done again
  EXPECT_TRUE(not_done(key));
  mark(prefix + "b");  // the store's next record (or a sweep after its release)
  Result<std::uint64_t> left = 0;
  EXPECT_TRUE(testing_support::Eventually(
      [&] { return (left = backend->StoredObjects(key)).ok() && *left == 0; },
      milliseconds(60'000)))
      << "the expired record stayed: "
      << (left.ok() ? std::to_string(*left) : left.status().ToString());
}

TEST_F(ConformanceTest, AReentrantHoldingIsOneStoreLockUntilItsLastHandle) {
  auto client = NewClient();
  auto other = NewClient();
  ASSERT_TRUE(client && other);
  const std::string key = UniqueKey("reentrant");
  AcquireOptions o = Opts(milliseconds(10'000));
  o.reentrant = true;
  auto first = TryAnswered(*client, key, o);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = TryAnswered(*client, key, o);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->token(), first->token());
  EXPECT_EQ(second->hold_count(), 2u);
  auto holders = other->List(key);
  ASSERT_TRUE(holders.ok()) << holders.status().ToString();
  EXPECT_EQ(std::count_if(holders->begin(), holders->end(),
                          [&](const HolderInfo& h) { return h.key == key; }),
            1);

  ASSERT_TRUE(first->Release().ok());
  EXPECT_EQ(TryAnswered(*other, key, Opts(milliseconds(10'000))).status().code(),
            StatusCode::kLockHeld)
      << "released at the store while a handle still held it";
  ASSERT_TRUE(second->Release().ok());
  auto next = TryAnswered(*other, key, Opts(milliseconds(10'000)));
  ASSERT_TRUE(next.ok()) << "not released with the last handle: " << next.status().ToString();
  EXPECT_GT(next->token(), first->token());
  EXPECT_TRUE(next->Release().ok());
}

TEST_F(ConformanceTest, ABreakEvictsTheHolderAndOrdersItselfAfterIt) {
  auto holder = NewClient();
  auto breaker = NewClient();
  ASSERT_TRUE(holder && breaker);
  const std::string key = UniqueKey("break");
  auto lease = TryAnswered(*holder, key, Opts(milliseconds(10'000)));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();

  auto report = breaker->Break(key);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_EQ(report->evicted.size(), 1u);
  EXPECT_EQ(report->evicted[0].owner, lease->owner());
  EXPECT_EQ(report->evicted[0].token, lease->token());
  if (lease->token_ordered()) {
    EXPECT_GT(report->token, lease->token());
  }
  // The holder learns it when it next asks the store (a session store may
  // tell its client a moment later: asked again until then).
  Status renewed;
  EXPECT_TRUE(testing_support::Eventually(
      [&] { return (renewed = lease->Renew()).code() == StatusCode::kLeaseLost; },
      milliseconds(10'000)))
      << "the evicted holder still renews: " << renewed.ToString();
  auto next = TryAnswered(*breaker, key, Opts(milliseconds(10'000)));
  ASSERT_TRUE(next.ok()) << "the key is not free after the break: " << next.status().ToString();
  if (next->token_ordered()) {
    EXPECT_GT(next->token(), report->token);
  }
  EXPECT_TRUE(next->Release().ok());
}

// The audit trail of a break: a record per evicted holding, in the store,
// that another client reads. The store's clock and this host's are the same
// machine's here; a minute either way only guards against a unit mistake.
TEST_F(ConformanceTest, ABreakIsRecordedInTheStore) {
  auto holder = NewClient();
  auto breaker = NewClient();
  auto reader = NewClient();
  ASSERT_TRUE(holder && breaker && reader);
  const std::string key = UniqueKey("recorded-break");
  AcquireOptions o = Opts(milliseconds(10'000));
  o.label = "nightly on host-a";
  auto lease = TryAnswered(*holder, key, o);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  const auto unix_ms = [] {
    return std::chrono::duration_cast<milliseconds>(
               std::chrono::system_clock::now().time_since_epoch()).count();
  };
  const std::int64_t before_ms = unix_ms();
  BreakOptions b;
  b.label = "conformance break by ops";
  auto report = breaker->Break(key, b);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  const std::int64_t after_ms = unix_ms();
  EXPECT_TRUE(report->recorded.ok()) << report->recorded.ToString();

  auto records = Answered([&] { return reader->Breaks(key); });
  ASSERT_TRUE(records.ok()) << records.status().ToString();
  ASSERT_EQ(records->size(), 1u);
  const BreakRecord& r = records->front();
  EXPECT_EQ(r.key, key);
  EXPECT_EQ(r.owner, lease->owner());
  EXPECT_EQ(r.token, lease->token());
  EXPECT_EQ(r.label, "nightly on host-a");
  EXPECT_EQ(r.by, "conformance break by ops");
  EXPECT_EQ(r.break_token, report->token);
  EXPECT_GE(r.at_unix_ms, before_ms - 60'000);
  EXPECT_LE(r.at_unix_ms, after_ms + 60'000);
  auto unrelated = Answered([&] { return reader->Breaks(UniqueKey("never-broken")); });
  ASSERT_TRUE(unrelated.ok()) << unrelated.status().ToString();
  EXPECT_TRUE(unrelated->empty()) << "a key nobody broke has " << unrelated->size() << " records";
  auto by_prefix = Answered([&] { return reader->Breaks(UniqueKey("recorded-")); });
  ASSERT_TRUE(by_prefix.ok()) << by_prefix.status().ToString();
  EXPECT_EQ(by_prefix->size(), 1u) << "a prefix of the key does not find its record";
}

// A record is gone from the listing once its retention ends, and from the
// store soon after (ZooKeeper and the SQL stores delete what a read or the
// next record finds past its end; etcd and Redis expire it themselves).
TEST_F(ConformanceTest, BreakRecordsGoWhenTheirRetentionEnds) {
  auto holder = NewClient();
  auto breaker = NewClient();
  auto counter = RawBackend();
  ASSERT_TRUE(holder && breaker && counter);
  const std::string key = UniqueKey("short-record");
  auto lease = TryAnswered(*holder, key, Opts(milliseconds(10'000)));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  BreakOptions b;
  b.keep_record = milliseconds(1000);  // etcd: its shortest lease, whole seconds
  auto report = breaker->Break(key, b);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_TRUE(report->recorded.ok()) << report->recorded.ToString();
  Result<std::vector<BreakRecord>> left = std::vector<BreakRecord>{};
  EXPECT_TRUE(testing_support::Eventually(
      [&] { return (left = breaker->Breaks(key)).ok() && left->empty(); }, milliseconds(60'000)))
      << "the record outlived its retention: "
      << (left.ok() ? std::to_string(left->size()) + " left" : left.status().ToString());
  // Another record is written, as the next break would: the stores that
  // delete old records on the way do it then.
  auto other = TryAnswered(*holder, key + "-next", Opts(milliseconds(10'000)));
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  ASSERT_TRUE(breaker->Break(key + "-next").ok());
  Result<std::uint64_t> stored = 0;
  EXPECT_TRUE(testing_support::Eventually(
      [&] {
        (void)breaker->Breaks(key);
        return (stored = counter->StoredObjects(key)).ok() && *stored == 1;
      },
      milliseconds(60'000)))
      << "want only the next key's record left under the prefix, have "
      << (stored.ok() ? std::to_string(*stored) : stored.status().ToString());
}

// The footprint: keys that were held, handed over, shared and held with a
// lock-delay leave nothing in the store once released (a store's fixed
// objects, such as one token counter for all keys, are not counted), and a
// key taken again afterwards is granted a token above its last. ZooKeeper
// deletes an emptied parent node on its own schedule: asked until then.
TEST_F(ConformanceTest, ReleasedKeysLeaveNothingBehind) {
  auto a = NewClient();
  auto b = NewClient();
  auto counter = RawBackend();
  ASSERT_TRUE(a && b && counter);
  const std::string prefix = UniqueKey("footprint") + "/";
  if (Result<std::uint64_t> none = counter->StoredObjects(prefix); !none.ok()) {
    FAIL() << "the store cannot count what it keeps: " << none.status().ToString();
  }
  std::map<std::string, FencingToken> last;
  {  // A holding is counted, or the zero below would prove nothing.
    auto held = TryAnswered(*a, prefix + "counted", Opts(milliseconds(10'000)));
    ASSERT_TRUE(held.ok()) << held.status().ToString();
    Result<std::uint64_t> counted = counter->StoredObjects(prefix);
    ASSERT_TRUE(counted.ok()) << counted.status().ToString();
    EXPECT_GE(*counted, 1u) << "a held key was not counted";
    last[prefix + "counted"] = held->token();
    EXPECT_TRUE(held->Release().ok());
  }
  auto hold_and_release = [&](Client& client, const std::string& key, AcquireOptions o) {
    auto lease = TryAnswered(client, key, o);
    ASSERT_TRUE(lease.ok()) << key << ": " << lease.status().ToString();
    last[key] = std::max(last[key], lease->token());
    EXPECT_TRUE(lease->Release().ok());
  };
  for (int i = 0; i < 20; ++i) hold_and_release(*a, prefix + std::to_string(i), Opts(milliseconds(10'000)));
  AcquireOptions delayed = Opts(milliseconds(10'000));
  delayed.lock_delay = milliseconds(2000);
  hold_and_release(*a, prefix + "delayed", delayed);
  {  // handed over to a waiter
    const std::string key = prefix + "handoff";
    auto first = TryAnswered(*a, key, Opts(milliseconds(10'000)));
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    std::optional<Result<Lease>> second;
    std::jthread waiter([&] { second.emplace(b->Acquire(key, Opts(milliseconds(10'000), milliseconds(30'000)))); });
    EXPECT_TRUE(testing_support::Eventually(
        [&] { return a->Waiters(key).ok() && !a->Waiters(key)->empty(); }, milliseconds(10'000)))
        << "the waiter never queued";
    EXPECT_TRUE(first->Release().ok());
    waiter.join();
    ASSERT_TRUE(second->ok()) << second->status().ToString();
    last[key] = (*second)->token();
    EXPECT_TRUE((*second)->Release().ok());
  }
  if (counter->SupportsSharing()) {
    AcquireOptions reader = Opts(milliseconds(10'000));
    reader.shared = true;
    const std::string key = prefix + "shared";
    auto r1 = TryAnswered(*a, key, reader);
    auto r2 = TryAnswered(*b, key, reader);
    ASSERT_TRUE(r1.ok() && r2.ok()) << r1.status().ToString() << r2.status().ToString();
    last[key] = std::max(r1->token(), r2->token());
    EXPECT_TRUE(r1->Release().ok());
    EXPECT_TRUE(r2->Release().ok());
  }
  Result<std::uint64_t> stored = 0;
  EXPECT_TRUE(testing_support::Eventually(
      [&] { return (stored = counter->StoredObjects(prefix)).ok() && *stored == 0; },
      milliseconds(30'000)))
      << "left behind: " << (stored.ok() ? std::to_string(*stored) : stored.status().ToString());
  for (const auto& [key, token] : last) {
    auto again = TryAnswered(*b, key, Opts(milliseconds(10'000)));
    ASSERT_TRUE(again.ok()) << key << ": " << again.status().ToString();
    if (again->token_ordered()) {
      EXPECT_GT(again->token(), token) << key;
    }
    EXPECT_TRUE(again->Release().ok());
  }
}

TEST_F(ConformanceTest, ElectionTermsIncreaseAndObserversSeeTheLeader) {
  auto a = NewClient();
  auto b = NewClient();
  auto observer = NewClient();
  const std::string key = UniqueKey("election");
  auto none = observer->CurrentLeader(key);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_FALSE(none->has_value());
  AcquireOptions o = Opts(milliseconds(5000), milliseconds(10'000));
  o.label = "10.0.0.1:8080";
  auto term1 = a->Campaign(key, o);
  ASSERT_TRUE(term1.ok()) << term1.status().ToString();
  auto seen = observer->CurrentLeader(key);
  ASSERT_TRUE(seen.ok() && seen->has_value()) << seen.status().ToString();
  EXPECT_EQ((*seen)->term, term1->token());
  EXPECT_EQ((*seen)->label, "10.0.0.1:8080");
  EXPECT_EQ((*seen)->owner, term1->owner());
  // A second candidate waits; the observer waits for a newer term.
  std::optional<Result<Lease>> term2;
  o.label = "10.0.0.2:8080";
  std::jthread candidate([&] { term2.emplace(b->Campaign(key, o)); });
  std::optional<Result<std::optional<Leader>>> next;
  std::jthread watcher([&] {
    next.emplace(observer->AwaitLeader(key, term1->token(), milliseconds(20'000)));
  });
  std::this_thread::sleep_for(milliseconds(200));  // not asserted
  ASSERT_TRUE(term1->Release().ok());  // resign
  candidate.join();
  watcher.join();
  ASSERT_TRUE(term2->ok()) << term2->status().ToString();
  EXPECT_GT((*term2)->token(), term1->token());
  ASSERT_TRUE(next->ok() && next->value().has_value()) << next->status().ToString();
  EXPECT_EQ(next->value()->term, (*term2)->token());
  EXPECT_EQ(next->value()->label, "10.0.0.2:8080");
  EXPECT_TRUE((*term2)->Release().ok());
}

}  // namespace
}  // namespace dlock

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // Never the password: the URI as every dlock message prints it.
  auto uri = dlock::internal::ParseUri(dlock::StoreUri());
  std::cout << "conformance store: " << (uri.ok() ? uri->Redacted() : "(unparseable URI)")
            << std::endl;
  return RUN_ALL_TESTS();
}
