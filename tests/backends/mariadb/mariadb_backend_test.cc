// The MariaDB backend against a real server (the CTest fixture started by
// scripts/servers/mariadb.sh): schema, footprint, FIFO queue, wake-ups by
// user locks, lock-delay, sharing, batched renewal, the sweep.
//
// Hand-off timings are asserted on measured bounds (tests/timing.h);
// everything else asserts only the order of events.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "backends/mariadb/mariadb_backend.h"
#include "core/registry.h"
#include "dlock/client.h"
#include "eventually.h"
#include "mariadb_test_util.h"
#include "timing.h"

namespace dlock::mariadb {
namespace {

using std::chrono::milliseconds;
using testing_mariadb::AdminConnect;
using testing_mariadb::Query;
using testing_mariadb::ServerUri;
using testing_mariadb::Unique;
using testing_mariadb::WithParam;
using testing_support::Eventually;
using testing_support::FastPath;
using Steady = std::chrono::steady_clock;

// A waiter that is not woken still tries again: the core re-arms a wait at
// least every third of its queue ttl (3 s, src/core/client_core.cc). A wake
// is prompt only if it beats that.
constexpr milliseconds kRearmEvery{1000};
// Below this a wake is prompt whatever the measured round trip says.
constexpr milliseconds kPromptFloor{50};

class MariaDbBackendTest : public ::testing::Test {
 protected:
  void SetUp() override { DLOCK_REQUIRE_MARIADB(); }

  static Result<std::unique_ptr<Backend>> OpenUri(const std::string& uri,
                                                  milliseconds connect_timeout = milliseconds(5000)) {
    internal::BackendParams params;
    params.clock = DefaultClock();
    params.connect_timeout = connect_timeout;
    return internal::OpenBackend(uri, params);
  }

  static std::unique_ptr<Backend> Raw(const std::string& uri = ServerUri()) {
    auto b = OpenUri(uri);
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    return b.ok() ? std::move(*b) : nullptr;
  }

  static std::unique_ptr<Client> NewClient(const std::string& uri = ServerUri()) {
    auto backend = Raw(uri);
    return backend ? Client::FromBackend(std::move(backend)) : nullptr;
  }

  static AcquireOptions Opts(milliseconds ttl, milliseconds wait = milliseconds(0)) {
    AcquireOptions o;
    o.ttl = ttl;
    o.wait = wait;
    return o;
  }

  // Until `key` has `n` waiters with a place in the queue.
  static bool WaitForWaiters(Backend& b, const std::string& key, std::size_t n) {
    return Eventually([&] {
      auto w = b.Waiters(key);
      return w.ok() && w->size() == n;
    });
  }

  // The server's count of procedure calls so far (every dlock operation
  // but a listing is one).
  static long long Calls(MYSQL* admin) {
    return std::stoll(Query(admin, "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS "
                                   "WHERE VARIABLE_NAME = 'COM_CALL_PROCEDURE'"));
  }

  static void DropSchema(MYSQL* admin, const std::string& table) {
    for (const char* t : {"", "_keys", "_sharers", "_queue", "_done", "_breaks"}) {
      Query(admin, "DROP TABLE IF EXISTS `" + table + t + "`");
    }
    Query(admin, "DROP SEQUENCE IF EXISTS `" + table + "_tokens`");
    for (const char* p : {"_acquire", "_release", "_renew", "_mark_done", "_record_break", "_sweep",
                          "_sweep_from"}) {
      Query(admin, "DROP PROCEDURE IF EXISTS `" + table + p + "`");
    }
  }
};

TEST_F(MariaDbBackendTest, ManyClientsCreateAFreshSchemaAtOnce) {
  const std::string table = Unique("fresh");
  const std::string uri = WithParam(ServerUri(), "table=" + table);
  std::vector<std::jthread> threads;
  std::atomic<int> opened{0};
  std::mutex mu;
  std::vector<std::string> errors;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      auto b = OpenUri(uri);
      std::lock_guard l(mu);
      if (b.ok()) {
        ++opened;
      } else {
        errors.push_back(b.status().ToString());
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(opened.load(), 8) << (errors.empty() ? "" : errors.front());
  auto admin = AdminConnect();
  EXPECT_EQ(Query(admin.get(), "SELECT TABLE_COMMENT FROM information_schema.TABLES WHERE "
                               "TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '" + table + "'"),
            "dlock schema 1");
  auto b = Raw(uri);
  ASSERT_NE(b, nullptr);
  auto a = b->TryAcquire({"k", OwnerId(1, 1), milliseconds(5000)});
  ASSERT_TRUE(a.ok() && a->granted) << a.status().ToString();
  EXPECT_EQ(a->token, 1u) << "a fresh sequence starts at 1";
  b.reset();
  DropSchema(admin.get(), table);
}

TEST_F(MariaDbBackendTest, ATableThatIsNotDlocksIsRefused) {
  const std::string table = Unique("theirs");
  auto admin = AdminConnect();
  Query(admin.get(), "CREATE TABLE `" + table + "_queue` (id INT PRIMARY KEY) COMMENT='orders'");
  auto b = OpenUri(WithParam(ServerUri(), "table=" + table));
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kFailedPrecondition) << b.status().ToString();
  EXPECT_NE(b.status().message().find(table + "_queue"), std::string::npos) << b.status().message();
  EXPECT_NE(b.status().message().find("?table="), std::string::npos) << b.status().message();
  DropSchema(admin.get(), table);
}

// The footprint: a released key's row stays for the next grant (one upsert
// of one row) until the sweep deletes it, seconds later, and its next grant
// still has a larger token, even when the row's counter had run ahead of
// the sequence the key's next row starts from.
TEST_F(MariaDbBackendTest, AFreedKeysRowIsSweptAndItsNextTokenIsHigher) {
  auto b = Raw();
  ASSERT_NE(b, nullptr);
  const std::string key = Unique("gone");
  FencingToken last = 0;
  for (int i = 0; i < 3; ++i) {
    auto g = b->TryAcquire({key, OwnerId(9, 100 + i), milliseconds(5000)});
    ASSERT_TRUE(g.ok() && g->granted) << g.status().ToString();
    EXPECT_GT(g->token, last);
    last = g->token;
    EXPECT_EQ(*b->StoredObjects(key), 1u) << "the key's row, with its holder";
    ASSERT_TRUE(b->Release(key, OwnerId(9, 100 + i)).ok());
  }
  // A row's counter may run ahead of the sequence (counter + 1 per grant):
  // the sweep must raise the sequence above it before the row goes.
  auto admin = AdminConnect();
  std::string hex;
  for (unsigned char c : key) {
    static constexpr char kDigits[] = "0123456789abcdef";
    hex += kDigits[c >> 4];
    hex += kDigits[c & 15];
  }
  last += 1'000'000;
  Query(admin.get(), "UPDATE dlock_locks SET token = " + std::to_string(last) +
                         " WHERE lock_key = X'" + hex + "'");
  Result<std::uint64_t> left = 0;
  EXPECT_TRUE(Eventually([&] {
    (void)b->Ping();  // in use: the sweep runs
    return (left = b->StoredObjects(key)).ok() && *left == 0;
  }, milliseconds(30'000), milliseconds(200)))
      << (left.ok() ? std::to_string(*left) + " left" : left.status().ToString());
  auto again = b->TryAcquire({key, OwnerId(9, 200), milliseconds(5000)});
  ASSERT_TRUE(again.ok() && again->granted) << again.status().ToString();
  EXPECT_GT(again->token, last) << "the token went down after the row was swept";
  EXPECT_TRUE(b->Release(key, OwnerId(9, 200)).ok());
}

// The lean forms: an uncontended grant of a key whose row exists is one
// statement, and so is its release; no procedure is called.
TEST_F(MariaDbBackendTest, AnUncontendedCycleTakesNoProcedure) {
  auto b = Raw();
  ASSERT_NE(b, nullptr);
  const std::string key = Unique("lean");
  ASSERT_TRUE(b->TryAcquire({key, OwnerId(3, 1), milliseconds(5000)})->granted);  // makes the row
  ASSERT_TRUE(b->Release(key, OwnerId(3, 1)).ok());
  auto admin = AdminConnect();
  const long long before = Calls(admin.get());
  for (std::uint64_t i = 2; i < 7; ++i) {
    auto g = b->TryAcquire({key, OwnerId(3, i), milliseconds(5000)});
    ASSERT_TRUE(g.ok() && g->granted) << g.status().ToString();
    ASSERT_TRUE(b->Release(key, OwnerId(3, i)).ok());
  }
  EXPECT_EQ(Calls(admin.get()) - before, 0);
}

// A hand-off wakes the next waiter at once: its wait ends when the
// holder's wake-up name goes, not at its next re-arm (1 s).
TEST_F(MariaDbBackendTest, AReleaseWakesTheNextWaiterAtOnce) {
  auto holder = NewClient();
  auto waiter = NewClient();
  ASSERT_TRUE(holder && waiter);
  const auto bound = FastPath(
      testing_support::GrantAndReleaseCost(*waiter, Unique("probe"), milliseconds(5000)),
      kPromptFloor, kRearmEvery);
  auto admin = AdminConnect();
  // Round 0 warms up: the waiter's first wait opens its wait connection;
  // it is not measured.
  for (int round = 0; round < 4; ++round) {
    const std::string key = Unique("handoff");
    auto first = holder->TryAcquire(key, Opts(milliseconds(30'000)));
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    std::optional<Result<Lease>> second;
    Steady::time_point got;
    std::jthread t([&] {
      second.emplace(waiter->Acquire(key, Opts(milliseconds(5000), milliseconds(20'000))));
      got = Steady::now();
    });
    auto raw = Raw();
    EXPECT_TRUE(raw && WaitForWaiters(*raw, key, 1)) << "the waiter never queued";
    // Released once a session waits in GET_LOCK (another test's waiter on
    // this server may be the one seen: then this round is timed as before).
    EXPECT_TRUE(testing_support::Eventually(
        [&] {
          return Query(admin.get(),
                       "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = 'dlock' "
                       "AND STATE = 'User lock'") != "0";
        },
        milliseconds(10'000), milliseconds(10)))
        << "round " << round << ": the waiter never waited in GET_LOCK";
    const auto released = Steady::now();
    EXPECT_TRUE(first->Release().ok());
    t.join();
    ASSERT_TRUE(second->ok()) << second->status().ToString();
    if (round > 0) {
      EXPECT_LT(got - released, bound.limit) << "round " << round << ": " << bound;
    }
    EXPECT_GT((*second)->token(), first->token());
    EXPECT_TRUE((*second)->Release().ok());
  }
}

// A holder whose process died leaves its lease until it expires; its
// waiter, woken when the holder's session went, must then wait for the
// lease to run out without spinning, and gets the key soon after.
TEST_F(MariaDbBackendTest, AWaiterOnADeadHolderWaitsOutItsLeaseWithoutSpinning) {
  const std::string key = Unique("dead");
  const milliseconds ttl(2000);
  auto holder = Raw();
  ASSERT_NE(holder, nullptr);
  // The server starts the lease when it gets the request, after this.
  const auto granted = Steady::now();
  auto g = holder->TryAcquire({key, OwnerId(7, 7), ttl});
  ASSERT_TRUE(g.ok() && g->granted) << g.status().ToString();
  auto waiter = NewClient();
  ASSERT_NE(waiter, nullptr);
  auto admin = AdminConnect();
  std::optional<Result<Lease>> second;
  Steady::time_point got;
  const long long calls_before = Calls(admin.get());
  std::jthread t([&] {
    second.emplace(waiter->Acquire(key, Opts(milliseconds(5000), milliseconds(20'000))));
    got = Steady::now();
  });
  auto raw = Raw();
  EXPECT_TRUE(raw && WaitForWaiters(*raw, key, 1));
  holder.reset();  // its session ends: the name goes, the lease stays
  t.join();
  ASSERT_TRUE(second->ok()) << second->status().ToString();
  EXPECT_GE(got - granted, ttl) << "granted before the dead holder's lease ran out";
  EXPECT_LT(got - granted, ttl + kRearmEvery + milliseconds(500)) << "woke late";
  const long long calls = Calls(admin.get()) - calls_before;
  EXPECT_LT(calls, 30) << "the waiter spun instead of waiting for the lease";
  EXPECT_GT((*second)->token(), g->token);
  EXPECT_TRUE((*second)->Release().ok());
}

// FIFO: waiters are served in arrival order, whoever releases.
TEST_F(MariaDbBackendTest, WaitersAreServedInArrivalOrder) {
  const std::string key = Unique("fifo");
  auto holder = NewClient();
  ASSERT_NE(holder, nullptr);
  auto first = holder->TryAcquire(key, Opts(milliseconds(30'000)));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto raw = Raw();
  ASSERT_NE(raw, nullptr);
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 4; ++i) clients.push_back(NewClient());
  std::vector<std::jthread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      auto lease = clients[i]->Acquire(key, Opts(milliseconds(10'000), milliseconds(30'000)));
      EXPECT_TRUE(lease.ok()) << lease.status().ToString();
      {
        std::lock_guard l(mu);
        order.push_back(i);
      }
      if (lease.ok()) {
        EXPECT_TRUE(lease->Release().ok());
      }
    });
    EXPECT_TRUE(WaitForWaiters(*raw, key, static_cast<std::size_t>(i + 1))) << "waiter " << i;
  }
  EXPECT_TRUE(first->Release().ok());
  for (auto& t : threads) t.join();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
}

// A waiter that gives up leaves the queue at once, and the one behind it
// moves up; a waiter that dies (its acquisition dropped) leaves when its
// place lapses, and the one behind it is woken then, not stuck.
TEST_F(MariaDbBackendTest, AWaiterThatDiesLetsTheNextOneInWhenItsPlaceLapses) {
  auto b = Raw();
  ASSERT_NE(b, nullptr);
  const std::string key = Unique("lapse");
  ASSERT_TRUE(b->TryAcquire({key, OwnerId(1, 1), milliseconds(30'000)})->granted);
  // Its place lives 2 s: long enough, on a loaded machine, to still count
  // at the first attempt below.
  LeaseRequest dying{key, OwnerId(2, 2), milliseconds(5000), milliseconds(2000)};
  auto dead = b->Begin(dying);
  auto refused = dead->Try();
  ASSERT_TRUE(refused.ok() && !refused->granted) << refused.status().ToString();
  LeaseRequest next{key, OwnerId(3, 3), milliseconds(5000), milliseconds(30'000)};
  auto live = b->Begin(next);
  ASSERT_FALSE(live->Try()->granted);
  dead.reset();  // dies: no Abandon
  ASSERT_TRUE(b->Release(key, OwnerId(1, 1)).ok());
  EXPECT_FALSE(live->Try()->granted) << "the dead waiter's place still counts until it lapses";
  EXPECT_TRUE(Eventually([&] {
    auto r = live->Try();
    return r.ok() && r->granted;
  }, milliseconds(10'000), milliseconds(50)));
  EXPECT_TRUE(b->Release(key, OwnerId(3, 3)).ok());
}

// Each Try, Wait and Abandon of one acquisition may come from another
// thread (the asynchronous API resumes an acquisition anywhere).
TEST_F(MariaDbBackendTest, AnAcquisitionMayMoveBetweenThreads) {
  auto b = Raw();
  ASSERT_NE(b, nullptr);
  const std::string key = Unique("move");
  ASSERT_TRUE(b->TryAcquire({key, OwnerId(1, 1), milliseconds(30'000)})->granted);
  auto a = b->Begin({key, OwnerId(2, 2), milliseconds(5000), milliseconds(3000)});
  std::jthread([&] { EXPECT_FALSE(a->Try()->granted); }).join();
  std::jthread releaser([&] {
    std::this_thread::sleep_for(milliseconds(200));
    EXPECT_TRUE(b->Release(key, OwnerId(1, 1)).ok());
  });
  std::jthread([&] { EXPECT_TRUE(a->Wait(DefaultClock()->Now() + milliseconds(5000), {})); }).join();
  releaser.join();
  std::jthread([&] { EXPECT_TRUE(a->Try()->granted); }).join();
  EXPECT_TRUE(b->Release(key, OwnerId(2, 2)).ok());
  auto c = b->Begin({key, OwnerId(3, 3), milliseconds(5000), milliseconds(3000)});
  ASSERT_TRUE(b->TryAcquire({key, OwnerId(4, 4), milliseconds(30'000)})->granted);
  std::jthread([&] { EXPECT_FALSE(c->Try()->granted); }).join();
  std::jthread([&] { c->Abandon(); }).join();
  EXPECT_TRUE(b->Waiters(key)->empty());
  EXPECT_TRUE(b->Release(key, OwnerId(4, 4)).ok());
}

// A waiting acquire is cancelled at once, though its connection is blocked
// in GET_LOCK on the server.
TEST_F(MariaDbBackendTest, AWaitIsCancelledAtOnce) {
  auto holder = NewClient();
  auto waiter = NewClient();
  ASSERT_TRUE(holder && waiter);
  const std::string key = Unique("cancel");
  auto first = holder->TryAcquire(key, Opts(milliseconds(30'000)));
  ASSERT_TRUE(first.ok());
  std::stop_source stop;
  AcquireOptions o = Opts(milliseconds(5000), milliseconds(60'000));
  o.cancel = stop.get_token();
  std::optional<Result<Lease>> got;
  Steady::time_point ended;
  std::jthread t([&] {
    got.emplace(waiter->Acquire(key, o));
    ended = Steady::now();
  });
  auto raw = Raw();
  EXPECT_TRUE(raw && WaitForWaiters(*raw, key, 1));
  std::this_thread::sleep_for(milliseconds(100));
  const auto asked = Steady::now();
  stop.request_stop();
  t.join();
  ASSERT_FALSE(got->ok());
  EXPECT_EQ(got->status().code(), StatusCode::kCancelled) << got->status().ToString();
  EXPECT_LT(ended - asked, kRearmEvery) << "the cancel waited out the wait";
  EXPECT_TRUE(raw->Waiters(key)->empty()) << "a cancelled waiter left its place";
  EXPECT_TRUE(first->Release().ok());
}

// Lock-delay by the server's clock: after an expiry nobody is granted the
// key until expiry + lock_delay, not even by a late release; a clean
// release has no delay.
TEST_F(MariaDbBackendTest, LockDelayHoldsAnExpiredKeyButNotAReleasedOne) {
  auto b = Raw();
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(b->SupportsLockDelay());
  const std::string key = Unique("delay");
  LeaseRequest first{key, OwnerId(1, 1), milliseconds(200)};
  // Long enough that the checks inside it all come before its end on a
  // loaded machine.
  first.lock_delay = milliseconds(5000);
  auto g1 = b->TryAcquire(first);
  ASSERT_TRUE(g1.ok() && g1->granted) << g1.status().ToString();
  std::this_thread::sleep_for(milliseconds(400));  // expired, inside the delay
  auto refused = b->TryAcquire({key, OwnerId(2, 2), milliseconds(5000)});
  ASSERT_TRUE(refused.ok()) << refused.status().ToString();
  EXPECT_FALSE(refused->granted) << "granted inside the lock-delay";
  EXPECT_GT(refused->holder_ttl_remaining, milliseconds(0));
  EXPECT_LE(refused->holder_ttl_remaining, milliseconds(5000));
  EXPECT_TRUE(b->Release(key, OwnerId(1, 1)).ok());
  EXPECT_FALSE(b->TryAcquire({key, OwnerId(2, 2), milliseconds(5000)})->granted)
      << "a late release cut the lock-delay short";
  EXPECT_TRUE(Eventually(
      [&] {
        auto r = b->TryAcquire({key, OwnerId(3, 3), milliseconds(5000)});
        return r.ok() && r->granted;
      },
      milliseconds(15'000), milliseconds(100)));
  ASSERT_TRUE(b->Release(key, OwnerId(3, 3)).ok());
  auto g3 = b->TryAcquire({key, OwnerId(4, 4), milliseconds(5000)});
  ASSERT_TRUE(g3.ok() && g3->granted) << "a clean release has no delay";
  EXPECT_GT(g3->token, g1->token);
  EXPECT_TRUE(b->Release(key, OwnerId(4, 4)).ok());
}

// Shared holders are each a row of their own: renewed in one batch with
// other keys, released, listed and marked done on their own.
TEST_F(MariaDbBackendTest, SharedHoldersAreEachTheirOwn) {
  auto b = Raw();
  ASSERT_NE(b, nullptr);
  const std::string key = Unique("permits");
  auto req = [&](std::uint64_t i) {
    LeaseRequest r{key, OwnerId(i, i), milliseconds(5000)};
    r.limit = 3;
    r.label = "permit-" + std::to_string(i);
    return r;
  };
  for (std::uint64_t i = 1; i <= 3; ++i) ASSERT_TRUE(b->TryAcquire(req(i))->granted) << i;
  EXPECT_FALSE(b->TryAcquire(req(4))->granted);
  auto renewed = b->Renew(std::vector<LeaseRequest>{req(1), req(2), req(4)});
  ASSERT_EQ(renewed.size(), 3u);
  EXPECT_TRUE(renewed[0].ok()) << renewed[0].ToString();
  EXPECT_TRUE(renewed[1].ok()) << renewed[1].ToString();
  EXPECT_EQ(renewed[2].code(), StatusCode::kNotOwner);
  auto list = b->List(key);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[1].label, "permit-2");
  EXPECT_TRUE(b->MarkDone(key, OwnerId(2, 2), kDefaultDoneRetention).ok()) << "a sharer is a holder";
  ASSERT_TRUE(b->Release(key, OwnerId(1, 1)).ok());
  EXPECT_TRUE(b->TryAcquire(req(4))->granted);
  for (std::uint64_t i : {2, 3, 4}) EXPECT_TRUE(b->Release(key, OwnerId(i, i)).ok());
}

// Renewal is one round trip for all of a client's leases, whatever their
// number.
TEST_F(MariaDbBackendTest, ABatchOfRenewalsIsOneCall) {
  auto b = Raw();
  ASSERT_NE(b, nullptr);
  std::vector<LeaseRequest> leases;
  for (int i = 0; i < 25; ++i) {
    leases.push_back({Unique("batch"), OwnerId(5, 500 + i), milliseconds(5000)});
    ASSERT_TRUE(b->TryAcquire(leases.back())->granted);
  }
  auto admin = AdminConnect();
  const long long before = Calls(admin.get());
  auto renewed = b->Renew(leases);
  EXPECT_EQ(Calls(admin.get()) - before, 1);
  for (const Status& s : renewed) EXPECT_TRUE(s.ok()) << s.ToString();
  for (const LeaseRequest& l : leases) EXPECT_TRUE(b->Release(l.key, l.owner).ok());
}

// What a holder that crashed leaves (its holding, the key's row) and a dead
// waiter's place are deleted by the sweep of any backend in use.
TEST_F(MariaDbBackendTest, TheSweepDeletesWhatACrashedHolderLeft) {
  const std::string key = Unique("crashed");
  {
    auto crashed = Raw();
    ASSERT_NE(crashed, nullptr);
    ASSERT_TRUE(crashed->TryAcquire({key, OwnerId(6, 6), milliseconds(300)})->granted);
    auto w = crashed->Begin({key, OwnerId(6, 7), milliseconds(300), milliseconds(300)});
    ASSERT_FALSE(w->Try()->granted);
  }
  auto b = Raw();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(*b->StoredObjects(key), 2u) << "the key's row with its holder, and the place";
  Result<std::uint64_t> left = 0;
  EXPECT_TRUE(Eventually([&] {
    (void)b->Ping();  // in use: the sweep runs
    return (left = b->StoredObjects(key)).ok() && *left == 0;
  }, milliseconds(30'000), milliseconds(200)))
      << (left.ok() ? std::to_string(*left) + " left" : left.status().ToString());
}

// Regression (footprint.sh at a million keys): under a stream of distinct
// keys the sweep fell behind and the table grew without bound (each call
// read all three tables into a UNION; every backend swept the same rows at
// once, waiting on each other's row locks), and calls whose caller had
// given up at its deadline ran on in the server, a new connection each,
// until it refused logins. Now one backend sweeps a store at a time, a call
// visits a stretch of the key range, and the server stops it at the
// deadline.
TEST_F(MariaDbBackendTest, ManyReleasedKeysAreSweptByOneSweeperWithinItsDeadline) {
  constexpr int kBackends = 4;
  constexpr int kKeysEach = 1250;
  constexpr milliseconds kSweepEvery{5000};    // mariadb_backend.cc
  constexpr milliseconds kCallDeadline{5000};  // OpenUri's connect timeout
  constexpr milliseconds kKillLatency{1000};   // the server's timer, our poll
  const std::string prefix = Unique("swept") + "/";
  std::vector<std::unique_ptr<Backend>> backends;
  for (int i = 0; i < kBackends; ++i) {
    backends.push_back(Raw());
    ASSERT_NE(backends.back(), nullptr);
  }
  // The server's sweep calls, watched while the keys are cycled and swept.
  std::atomic<bool> watching{true};
  std::atomic<long long> oldest_ms{0};
  std::atomic<int> most_at_once{0};
  std::jthread watcher([&] {
    auto watch = AdminConnect();
    while (watching) {
      // A procedure's session shows the statement it is at, its variables
      // as NAME_CONST: only the sweep has p_after and v_key. The sweeper's
      // name ('dlock sweep …') is left out: another backend's try for it,
      // refused at once, may be seen beside a sweep, and so may the last
      // sweeper letting go of it as the next starts.
      std::istringstream seen(Query(
          watch.get(), "SELECT CONCAT(COUNT(*), ' ', COALESCE(MAX(TIME_MS), 0)) "
                       "FROM information_schema.PROCESSLIST WHERE (INFO LIKE '%sweep%' "
                       "OR INFO LIKE '%''p\\_after''%' OR INFO LIKE '%''v\\_key''%') "
                       "AND INFO NOT LIKE '%\\_LOCK(%dlock sweep%' "
                       "AND ID <> CONNECTION_ID()"));
      int at_once = 0;
      double ms = 0;
      seen >> at_once >> ms;
      most_at_once = std::max(most_at_once.load(), at_once);
      oldest_ms = std::max(oldest_ms.load(), static_cast<long long>(ms));
      std::this_thread::sleep_for(milliseconds(20));
    }
  });
  const Steady::time_point start = Steady::now();
  {
    std::vector<std::jthread> cyclers;
    for (int b = 0; b < kBackends; ++b) {
      cyclers.emplace_back([&, b] {
        for (int i = 0; i < kKeysEach; ++i) {
          const std::string key = prefix + std::to_string(b) + "/" + std::to_string(i);
          const OwnerId owner(11, static_cast<std::uint64_t>(b * kKeysEach + i + 1));
          auto g = backends[b]->TryAcquire({key, owner, milliseconds(30'000)});
          ASSERT_TRUE(g.ok() && g->granted) << key << ": " << g.status().ToString();
          ASSERT_TRUE(backends[b]->Release(key, owner).ok()) << key;
        }
      });
    }
  }
  const Steady::time_point released = Steady::now();
  const auto cycling = std::chrono::ceil<milliseconds>(released - start);
  // Gone by the next round (which may start a whole period after the last
  // release) plus the time the rows took to make: a sweep that keeps up
  // deletes them faster than they were made.
  const milliseconds bound = kSweepEvery + cycling + kKillLatency;
  Result<std::uint64_t> left = 0;
  EXPECT_TRUE(Eventually([&] {
    return (left = backends[0]->StoredObjects(prefix)).ok() && *left == 0;
  }, bound, milliseconds(100)))
      << (left.ok() ? std::to_string(*left) + " rows left" : left.status().ToString()) << " "
      << bound.count() << " ms after the last release (the cycles took " << cycling.count()
      << " ms)";
  watching = false;
  watcher.join();
  EXPECT_LE(most_at_once.load(), 1) << "several backends swept the store at once";
  EXPECT_LE(oldest_ms.load(), (kCallDeadline + kKillLatency).count())
      << "a sweep call outlived its deadline";
}

// Ping is the floor `dlock bench` measures a cycle against: one durable
// single-row write, which never shows as a lock.
TEST_F(MariaDbBackendTest, PingWritesOneRowThatIsNoLock) {
  auto b = Raw();
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(b->Ping().ok());
  EXPECT_TRUE(b->Ping().ok());
  auto held = b->List("");
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  for (const HolderInfo& h : *held) EXPECT_NE(h.key.front(), '\0');
  EXPECT_EQ(*b->StoredObjects(std::string(1, '\0')), 0u) << "the ping row is not counted";
}

// A user without rights on the tables is refused in one line (77), and the
// message names the server, never the password.
TEST_F(MariaDbBackendTest, AUserWithoutGrantsIsRefused) {
  auto admin = AdminConnect();
  const std::string user = Unique("nogrant");
  Query(admin.get(), "CREATE USER '" + user + "'@'%' IDENTIFIED BY 'pw-" + user + "'");
  auto uri = internal::ParseUri(ServerUri());
  ASSERT_TRUE(uri.ok());
  const std::string text = "mysql://" + user + ":pw-" + user + "@" + uri->hosts + uri->path;
  auto b = OpenUri(text);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kPermissionDenied) << b.status().ToString();
  EXPECT_EQ(b.status().message().find("pw-"), std::string::npos);
  auto wrong = OpenUri("mysql://" + user + ":wrong@" + uri->hosts + uri->path);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kPermissionDenied) << wrong.status().ToString();
  Query(admin.get(), "DROP USER '" + user + "'@'%'");
}

}  // namespace
}  // namespace dlock::mariadb
