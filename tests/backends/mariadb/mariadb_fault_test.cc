// The MariaDB backend when the server misbehaves: our sessions are killed,
// the server restarts cleanly or after a crash (SIGKILL), stops answering
// (SIGSTOP) or goes away. These drive the fixture server through
// $DLOCK_TEST_SERVER_SCRIPT (scripts/servers/mariadb.sh restart|crash|
// pause|resume|down|up $DLOCK_TEST_SERVER_DIR).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/registry.h"
#include "dlock/client.h"
#include "eventually.h"
#include "mariadb_test_util.h"
#include "timing.h"

namespace dlock {
namespace {

using std::chrono::milliseconds;
using testing_mariadb::AdminConnect;
using testing_mariadb::Query;
using testing_mariadb::Server;
using testing_mariadb::ServerUri;
using testing_mariadb::Unique;
using testing_support::Eventually;
using testing_support::MeasureSlowest;
using Steady = std::chrono::steady_clock;

class MariaDbFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DLOCK_REQUIRE_MARIADB();
    if (std::getenv("DLOCK_TEST_SERVER_SCRIPT") == nullptr) {
      GTEST_SKIP() << "needs the fixture server (DLOCK_TEST_SERVER_SCRIPT)";
    }
  }
  // Whatever a test did to the server, the next one finds it up.
  void TearDown() override {
    if (std::getenv("DLOCK_TEST_SERVER_SCRIPT") != nullptr) {
      (void)Server("resume");
      (void)Server("up");
    }
  }

  static Result<std::unique_ptr<Backend>> OpenRaw(milliseconds connect_timeout) {
    internal::BackendParams params;
    params.clock = DefaultClock();
    params.connect_timeout = connect_timeout;
    return internal::OpenBackend(ServerUri(), params);
  }

  static std::unique_ptr<Client> NewClient(milliseconds connect_timeout = milliseconds(2000)) {
    auto b = OpenRaw(connect_timeout);
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    return b.ok() ? Client::FromBackend(std::move(*b)) : nullptr;
  }

  static AcquireOptions Opts(milliseconds ttl, milliseconds wait = milliseconds(0)) {
    AcquireOptions o;
    o.ttl = ttl;
    o.wait = wait;
    return o;
  }

  // A TTL a lease can be renewed within on this machine now, loaded or not:
  // ten times the slowest of three new clients with a grant, at least 2 s.
  static milliseconds SafeTtl() {
    bool probed = true;
    const Duration session = MeasureSlowest(3, [&] {
      auto probe = NewClient();
      probed = probed && probe && probe->TryAcquire(Unique("probe"), Opts(milliseconds(600))).ok();
    });
    EXPECT_TRUE(probed) << "a probe could not connect or acquire";
    return std::max(milliseconds(2000), 10 * std::chrono::duration_cast<milliseconds>(session));
  }
};

TEST_F(MariaDbFaultTest, KilledSessionsAreReplacedAndTheLeaseKept) {
  auto client = NewClient();
  auto waiter = NewClient();
  ASSERT_TRUE(client && waiter);
  const std::string key = Unique("kill");
  const milliseconds ttl = SafeTtl();
  auto lease = client->TryAcquire(key, Opts(ttl));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  std::optional<Result<Lease>> waited;
  std::atomic<bool> waited_done{false};
  std::jthread t([&] {
    waited.emplace(waiter->Acquire(key, Opts(ttl, 20 * ttl)));
    waited_done = true;
  });
  // Every session of the dlock user but this one: operations, waits. All
  // three open before any is killed: the wait session comes with the
  // waiter's first wait, which a loaded machine may take a while to reach.
  auto admin = AdminConnect();
  std::string killed;
  EXPECT_TRUE(testing_support::Eventually(
      [&] {
        killed = Query(admin.get(),
                       "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = 'dlock' "
                       "AND ID <> CONNECTION_ID()");
        return std::stoi(killed) >= 3;
      },
      10 * ttl))
      << "sessions open: " << killed << ", want the holder's, the waiter's and its wait one";
  Query(admin.get(), "BEGIN NOT ATOMIC FOR s IN (SELECT ID FROM information_schema.PROCESSLIST "
                     "WHERE USER = 'dlock' AND ID <> CONNECTION_ID()) DO KILL CONNECTION s.ID; "
                     "END FOR; END");
  EXPECT_GE(std::stoi(killed), 3) << "holder, waiter and the waiter's wait sessions";
  // Several TTLs later the lease is still held: renewals reconnected.
  std::this_thread::sleep_for(3 * ttl);
  EXPECT_TRUE(lease->Check().ok()) << lease->Check().ToString();
  EXPECT_FALSE(waited_done.load()) << "the waiter got a held key";
  const FencingToken token = lease->token();
  const Status released = lease->Release();
  t.join();  // before any ASSERT: a joinable thread left behind aborts the binary
  ASSERT_TRUE(released.ok()) << released.ToString();
  ASSERT_TRUE(waited->ok()) << waited->status().ToString();
  EXPECT_GT((*waited)->token(), token);
}

// InnoDB rows outlive a clean restart: a lease longer than the restart is
// still held, renewals reconnect, and tokens go on from the sequence.
TEST_F(MariaDbFaultTest, CleanRestartKeepsALongLeaseAndTokensGrow) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  const std::string key = Unique("restart");
  auto lease = client->TryAcquire(key, Opts(milliseconds(20'000)));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  const FencingToken before = lease->token();
  ASSERT_TRUE(Server("restart"));
  EXPECT_TRUE(Eventually([&] { return lease->Renew().ok(); }, milliseconds(15'000), milliseconds(100)))
      << "no renewal got through after the restart";
  EXPECT_TRUE(lease->Check().ok()) << lease->Check().ToString();
  ASSERT_TRUE(lease->Release().ok());
  auto again = client->TryAcquire(key, Opts(milliseconds(5000)));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_GT(again->token(), before);
  EXPECT_TRUE(again->Release().ok());
}

// A crash (SIGKILL, recovery on start) loses no committed grant: the
// holder is still the holder, and no token is reissued for a key, although
// the token sequence's cached values are lost with the process: not for a
// key whose row stayed (its counter), nor for a key that gets a new row
// (the sequence resumes above every value it handed out).
TEST_F(MariaDbFaultTest, ACrashKeepsCommittedGrantsAndTokensOnlyGoUp) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  const std::string key = Unique("crash");
  std::vector<FencingToken> last;
  for (int i = 0; i < 4; ++i) {
    auto l = client->TryAcquire(key + std::to_string(i), Opts(milliseconds(20'000)));
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    last.push_back(l->token());
    EXPECT_TRUE(l->Release().ok());
  }
  auto held = client->TryAcquire(key + "4", Opts(milliseconds(20'000)));  // held across the crash
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  const FencingToken held_token = held->token();
  // Every new row's first token so far came from the sequence: the largest
  // is at most the largest token handed out.
  const FencingToken drawn = std::max(held_token, *std::max_element(last.begin(), last.end()));
  ASSERT_TRUE(Server("crash"));
  // Crash recovery may still be running when the port opens.
  std::unique_ptr<Client> other;
  EXPECT_TRUE(Eventually([&] {
    auto b = OpenRaw(milliseconds(2000));
    if (b.ok()) other = Client::FromBackend(std::move(*b));
    return other != nullptr;
  }, milliseconds(30'000), milliseconds(200)));
  ASSERT_NE(other, nullptr);
  auto list = other->List(key + "4");
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 1u) << "a committed grant was lost in the crash";
  EXPECT_EQ((*list)[0].token, held_token);
  for (int i = 0; i < 4; ++i) {
    auto l = other->TryAcquire(key + std::to_string(i), Opts(milliseconds(5000)));
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    EXPECT_GT(l->token(), last[i]) << "a token came back after the crash, key " << i;
    EXPECT_TRUE(l->Release().ok());
  }
  auto fresh = other->TryAcquire(key + "-new", Opts(milliseconds(5000)));
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_GT(fresh->token(), drawn) << "the sequence went back after the crash";
  EXPECT_TRUE(fresh->Release().ok());
}

// A server that takes connections and never answers (SIGSTOP): every call
// gives up within its bound, kUnavailable (its outcome unknown), and the
// lease is reported lost at its valid_until; once the server answers again
// the same client works.
TEST_F(MariaDbFaultTest, AHungServerMakesCallsUnavailableInTimeThenRecovers) {
  auto client = NewClient(milliseconds(500));
  ASSERT_NE(client, nullptr);
  const std::string key = Unique("hung");
  std::atomic<bool> lost{false};
  AcquireOptions o = Opts(milliseconds(1500));
  o.on_lost = [&](const Status&) { lost = true; };
  auto lease = client->TryAcquire(key, o);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  ASSERT_TRUE(Server("pause"));
  const auto start = Steady::now();
  auto attempt = client->TryAcquire(Unique("other"), Opts(milliseconds(5000)));
  const auto took = Steady::now() - start;
  ASSERT_FALSE(attempt.ok());
  EXPECT_EQ(attempt.status().code(), StatusCode::kUnavailable) << attempt.status().ToString();
  EXPECT_LT(took, milliseconds(3000)) << "a call outlived its 500 ms bound by far";
  EXPECT_TRUE(Eventually([&] { return lost.load(); }, milliseconds(5000)))
      << "the lease was not reported lost while the server hung";
  ASSERT_TRUE(Server("resume"));
  EXPECT_TRUE(Eventually([&] {
    auto again = client->TryAcquire(key, Opts(milliseconds(5000)));
    return again.ok() && again->Release().ok();
  }, milliseconds(15'000), milliseconds(100)))
      << "the client did not recover once the server answered";
}

// The server away (stopped): calls are kUnavailable in one line naming the
// server and never the password; once it is back, they work again.
TEST_F(MariaDbFaultTest, AStoppedServerIsUnavailableThenRecovers) {
  auto client = NewClient(milliseconds(500));
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->TryAcquire(Unique("warm"), Opts(milliseconds(1000))).ok());
  ASSERT_TRUE(Server("down"));
  auto refused = client->TryAcquire(Unique("down"), Opts(milliseconds(5000)));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable) << refused.status().ToString();
  EXPECT_EQ(refused.status().message().find('\n'), std::string::npos);
  auto uri = internal::ParseUri(ServerUri());
  ASSERT_TRUE(uri.ok());
  EXPECT_EQ(refused.status().message().find(uri->password), std::string::npos);
  ASSERT_TRUE(Server("up"));
  EXPECT_TRUE(Eventually([&] {
    auto l = client->TryAcquire(Unique("up"), Opts(milliseconds(5000)));
    return l.ok() && l->Release().ok();
  }, milliseconds(15'000), milliseconds(100)));
}

}  // namespace
}  // namespace dlock
