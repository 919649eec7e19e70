// The PostgreSQL backend when the server misbehaves: our session is killed,
// the server restarts cleanly or after a crash, or it is away longer than a
// lease. These drive the fixture server through $DLOCK_TEST_SERVER_SCRIPT
// (scripts/servers/postgres.sh restart|crash|down|up $DLOCK_TEST_SERVER_DIR).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include <unistd.h>

#include <gtest/gtest.h>

#include "core/registry.h"
#include "dlock/client.h"
#include "eventually.h"
#include "postgres_test_util.h"
#include "timing.h"

namespace dlock {
namespace {

using std::chrono::milliseconds;
using testing_pg::AdminConnect;
using testing_pg::Query;
using testing_pg::ServerUri;
using testing_pg::Unique;
using testing_pg::WithParam;
using testing_support::FastPath;
using testing_support::MeasureSlowest;

// Runs the fixture's server script with `verb`; false if it failed.
bool Server(const std::string& verb) {
  const char* script = std::getenv("DLOCK_TEST_SERVER_SCRIPT");
  const char* dir = std::getenv("DLOCK_TEST_SERVER_DIR");
  if (script == nullptr || dir == nullptr) return false;
  const std::string command = "bash '" + std::string(script) + "' " + verb + " '" + dir + "'";
  return std::system(command.c_str()) == 0;
}

class PostgresFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DLOCK_REQUIRE_SERVER();
    if (std::getenv("DLOCK_TEST_SERVER_SCRIPT") == nullptr) {
      GTEST_SKIP() << "needs the fixture server (DLOCK_TEST_SERVER_SCRIPT)";
    }
  }

  static std::unique_ptr<Client> NewClient(const std::string& uri = ServerUri(),
                                           milliseconds connect_timeout = milliseconds(2000)) {
    internal::BackendParams params;
    params.clock = DefaultClock();
    params.connect_timeout = connect_timeout;
    auto b = internal::OpenBackend(uri, params);
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    return b.ok() ? Client::FromBackend(std::move(*b)) : nullptr;
  }

  static AcquireOptions Opts(milliseconds ttl, milliseconds wait = milliseconds(0)) {
    AcquireOptions o;
    o.ttl = ttl;
    o.wait = wait;
    return o;
  }
};

TEST_F(PostgresFaultTest, KilledSessionIsReplacedAndTheLeaseKept) {
  const std::string app = Unique("dlock_kill");
  auto client = NewClient(WithParam(ServerUri(), "application_name=" + app));
  auto waiter = NewClient(WithParam(ServerUri(), "application_name=" + app));
  const std::string key = Unique("kill");
  // The lease must outlive a reconnection on this machine, loaded or not:
  // its TTL is ten times the slowest of three new sessions with a grant
  // here now, and at least 2 s (one quiet probe says little about a busy
  // machine's next second).
  bool probed = true;
  const Duration session = MeasureSlowest(3, [&] {
    auto probe = NewClient(ServerUri());
    probed = probed && probe && probe->TryAcquire(Unique("probe"), Opts(milliseconds(600))).ok();
  });
  ASSERT_TRUE(probed) << "a probe could not connect or acquire";
  const milliseconds ttl =
      std::max(milliseconds(2000), 10 * std::chrono::duration_cast<milliseconds>(session));
  auto lease = client->TryAcquire(key, Opts(ttl));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  // A waiter on the key keeps a LISTEN session open, so both kinds of
  // session are killed below.
  std::optional<Result<Lease>> waited;
  std::atomic<bool> waited_done{false};
  std::jthread t([&] {
    waited.emplace(waiter->Acquire(key, Opts(ttl, 20 * ttl)));
    waited_done = true;
  });
  // All three sessions open before any is killed: the LISTEN session comes
  // with the waiter's first wait, which a loaded machine may take a while
  // to reach.
  auto admin = AdminConnect();
  const std::string of_app = " FROM pg_stat_activity WHERE application_name = '" + app + "'";
  std::string open;
  EXPECT_TRUE(testing_support::Eventually(
      [&] { return std::stoi(open = Query(admin.get(), "SELECT count(*)" + of_app)) >= 3; },
      10 * ttl))
      << "sessions open: " << open << ", want the holder's, the waiter's and its LISTEN one";
  const std::string killed = Query(admin.get(), "SELECT count(pg_terminate_backend(pid))" + of_app);
  EXPECT_GE(std::stoi(killed), 3) << "holder, waiter and the waiter's LISTEN sessions";

  // Several TTLs later the lease is still held: renewals reconnected.
  std::this_thread::sleep_for(3 * ttl);
  EXPECT_TRUE(lease->Check().ok()) << lease->Check().ToString();
  EXPECT_FALSE(waited_done.load()) << "the waiter got a held key";
  const FencingToken token = lease->token();
  // Join before any ASSERT: a joinable thread left behind aborts the binary.
  const Status released = lease->Release();
  t.join();
  ASSERT_TRUE(released.ok()) << released.ToString();
  ASSERT_TRUE(waited->ok()) << waited->status().ToString();
  EXPECT_GT((*waited)->token(), token);
}

// A renewal may take the time its lease has left to open a new session,
// not only its own short budget (a tenth of the TTL): under load a new
// session can take longer than that, and one cut off there would be
// started again from nothing at every retry. Here every session of the
// client takes at least a second to open (post_auth_delay), against a
// 900 ms budget.
TEST_F(PostgresFaultTest, ARenewalWaitsForASlowNewSessionWhileTheLeaseLasts) {
  const auto slow_uri = [](const std::string& app) {
    return WithParam(WithParam(ServerUri(), "application_name=" + app),
                     "options=-c%20post_auth_delay%3D1");
  };
  constexpr milliseconds kTtl{9000};  // a budget of 900 ms, short of any new session
  // What such a session costs here now (a loaded machine: several seconds):
  // the client may wait three times that to connect.
  bool probed = true;
  const auto session = std::chrono::duration_cast<milliseconds>(MeasureSlowest(2, [&] {
    auto probe = NewClient(slow_uri(Unique("dlock_slow_probe")), milliseconds(30'000));
    probed = probed && probe && probe->TryAcquire(Unique("probe"), Opts(kTtl)).ok();
  }));
  ASSERT_TRUE(probed) << "a probe could not connect or acquire";
  if (2 * session > kTtl) {
    GTEST_SKIP() << "a new session takes " << session.count() << " ms here now: no " << kTtl.count()
                 << " ms lease can outlast a reconnection and still test the budget";
  }
  const std::string app = Unique("dlock_slow_session");
  auto client = NewClient(slow_uri(app), std::max(milliseconds(2000), 3 * session));
  ASSERT_NE(client, nullptr);
  auto lease = client->TryAcquire(Unique("slow_session"), Opts(kTtl));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  // The holder's session ended, its server process gone (the server is on
  // this machine): the client finds its socket closed at the next call.
  auto admin = AdminConnect();
  const std::string of_app = " FROM pg_stat_activity WHERE application_name = '" + app + "'";
  std::istringstream pids(Query(admin.get(), "SELECT string_agg(pid::text, ' ')" + of_app));
  Query(admin.get(), "SELECT pg_terminate_backend(pid)" + of_app);
  int ended = 0;
  for (std::string pid; pids >> pid; ++ended) {
    ASSERT_TRUE(testing_support::Eventually(
        [&] { return access(("/proc/" + pid).c_str(), F_OK) != 0; }, milliseconds(10'000)))
        << "server process " << pid << " did not end";
  }
  ASSERT_GE(ended, 1) << "no session of the holder";
  const auto started = std::chrono::steady_clock::now();
  const Status renewed = lease->Renew();
  const auto took = std::chrono::steady_clock::now() - started;
  EXPECT_TRUE(renewed.ok()) << renewed.ToString();
  EXPECT_GE(took, milliseconds(1000)) << "the renewal did not open a new session";
  EXPECT_TRUE(lease->Release().ok());
}

TEST_F(PostgresFaultTest, CleanRestartKeepsALongLeaseAndTokensGrow) {
  auto client = NewClient();
  const std::string key = Unique("restart");
  constexpr milliseconds kTtl{8000};
  auto lease = client->TryAcquire(key, Opts(kTtl));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  const FencingToken before = lease->token();
  ASSERT_TRUE(Server("restart"));
  const auto up = std::chrono::steady_clock::now();
  // A renewal reaches the new server: the store's time left is more than
  // any renewal sent before the restart ended could leave by now. Bounded
  // by the lease itself, which is lost without one.
  Result<std::vector<HolderInfo>> holders = std::vector<HolderInfo>{};
  const bool renewed = testing_support::Eventually(
      [&] {
        const auto asked = std::chrono::steady_clock::now();
        holders = client->List(key);
        return holders.ok() && holders->size() == 1 &&
               (*holders)[0].ttl_remaining > kTtl - (asked - up);
      },
      kTtl, milliseconds(50));
  ASSERT_TRUE(holders.ok()) << holders.status().ToString();
  ASSERT_EQ(holders->size(), 1u);
  EXPECT_TRUE(renewed) << "not renewed after the restart: " << (*holders)[0].ttl_remaining.count()
                       << " ms left";
  ASSERT_TRUE(lease->Check().ok()) << lease->Check().ToString();
  EXPECT_EQ((*holders)[0].owner, lease->owner()) << "client and store disagree on the holder";
  ASSERT_TRUE(lease->Release().ok());
  auto next = client->TryAcquire(key, Opts(milliseconds(1000)));
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_GT(next->token(), before);
}

TEST_F(PostgresFaultTest, ServerAwayLongerThanTheLeaseMakesItLostAtValidUntil) {
  auto client = NewClient();
  const std::string key = Unique("away");
  std::atomic<std::int64_t> lost_at_ns{0};
  AcquireOptions o = Opts(milliseconds(500));
  o.on_lost = [&](const Status&) { lost_at_ns = MonotonicClock::now().time_since_epoch().count(); };
  auto lease = client->TryAcquire(key, o);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  const FencingToken before = lease->token();
  // How late a timer fires here now: what the loss's report waits for
  // besides the renewal attempt in flight.
  const Duration timer_late = MeasureSlowest(5, [] {
    std::this_thread::sleep_for(milliseconds(1));
  }) - milliseconds(1);
  ASSERT_TRUE(Server("down"));
  const TimePoint valid_until = lease->valid_until();
  // Down well past valid_until, and on until the loss is reported (a
  // loaded machine may run the renewal loop late).
  std::this_thread::sleep_for(milliseconds(1200));
  testing_support::Eventually([&] { return lost_at_ns.load() != 0; }, milliseconds(5000));
  const TimePoint up_at = MonotonicClock::now();
  ASSERT_TRUE(Server("up"));
  ASSERT_NE(lost_at_ns.load(), 0) << "a lease that could not be renewed was not reported lost";
  const auto lost_at = TimePoint(std::chrono::nanoseconds(lost_at_ns.load()));
  EXPECT_GE(lost_at, valid_until);
  // Late by at most one renewal attempt's time limit (ttl/10, at least 20 ms)
  // plus a timer's lateness; one noticed only once the server was back (a
  // renewal answered late) would be later than that.
  constexpr milliseconds kAttemptLimit{50};
  const auto prompt =
      FastPath(timer_late, milliseconds(100), up_at - valid_until - kAttemptLimit);
  EXPECT_LT(lost_at - valid_until, kAttemptLimit + prompt.limit) << prompt;
  EXPECT_EQ(lease->Check().code(), StatusCode::kLeaseLost);
  // The store agrees: the key is free (expired) and the next token is larger.
  auto next = NewClient()->TryAcquire(key, Opts(milliseconds(1000)));
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_GT(next->token(), before);
}

TEST_F(PostgresFaultTest, TokensNeverGoBackAfterACrash) {
  auto client = NewClient();
  const std::string key = Unique("crash");
  // A release commits without waiting for its WAL flush (decisions.md), so
  // the crash may undo the last one: the key is then held until that lease
  // ends, and the acquisition after the crash waits out a few of them.
  constexpr milliseconds kTtl{2000};
  FencingToken last = 0;
  for (int i = 0; i < 20; ++i) {
    auto lease = client->TryAcquire(key, Opts(kTtl));
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    last = lease->token();
    ASSERT_TRUE(lease->Release().ok());
  }
  // Immediate shutdown: no checkpoint, crash recovery from the WAL.
  ASSERT_TRUE(Server("crash"));
  std::optional<Result<Lease>> after;
  for (int i = 0; i < 3 && !(after && after->ok()); ++i) {
    // The first call after the crash may find its session gone.
    after.emplace(client->Acquire(key, Opts(milliseconds(10'000), 3 * kTtl)));
  }
  ASSERT_TRUE(after->ok()) << after->status().ToString();
  EXPECT_GT((*after)->token(), last);
}

}  // namespace
}  // namespace dlock
