// rediss:// against the secured fixture (scripts/servers/redis.sh
// start-secure: TLS only, client certificates required, ACL users) and
// rediss+sentinel:// against a secured Sentinel topology.
#include <cstdio>
#include <filesystem>
#include <optional>
#include <regex>
#include <thread>

#include "backends/redis/redis_fence_conn.h"
#include "dlock/fence_redis.h"
#include "eventually.h"
#include "redis_test_util.h"
#include "timing.h"

namespace dlock::redis::testing {
namespace {

using std::chrono::milliseconds;
namespace fs = std::filesystem;

std::string ServerDir() {
  const char* d = std::getenv("DLOCK_TEST_SERVER_DIR");
  return d != nullptr ? d : "";
}

class RedisSecure : public ::testing::Test {
 protected:
  void SetUp() override {
    uri_ = FixtureUri();
    dir_ = ServerDir();
    if (uri_.empty() || dir_.empty()) GTEST_SKIP() << "no secured Redis fixture (run through ctest)";
    port_ = std::to_string(PortOf(uri_));
  }
  // The fixture's URI with its files and user replaced.
  std::string Uri(const std::string& host, const std::string& query,
                  const std::string& user = "dlock") const {
    return "rediss://" + user + "@" + host + ":" + port_ + "/0?" + query;
  }
  std::string File(const std::string& name) const { return dir_ + "/" + name; }
  std::string Files(const std::string& ca, const std::string& client) const {
    std::string q = "cacert=" + File(ca);
    if (!client.empty()) q += "&cert=" + File(client + ".pem") + "&key=" + File(client + ".key");
    return q;
  }
  std::string Password(const std::string& user = "dlock") const {
    return "&password_file=" + File(user + ".password");
  }
  std::string uri_, dir_, port_;
};

TEST_F(RedisSecure, MinimalAclUserLocksWaitsAndFences) {
  auto a = NewClient(uri_);
  auto b = NewClient(uri_);
  ASSERT_TRUE(a && b) << "cannot open " << uri_;
  const std::string key = UniqueKey("secure");
  const auto bound = testing_support::FastPath(
      testing_support::GrantAndReleaseCost(*b, key + "/probe", milliseconds(10'000)),
      milliseconds(250), milliseconds(1000));
  // A waiter woken by the release's message over the TLS subscriber: the
  // lease (10 s) and the queue refresh are far longer than the bound. The
  // first round is not timed: its waiter opens the subscriber connection
  // (a TLS handshake and a login), which a release during it would wait
  // for. Each release waits until the waiter is queued.
  std::optional<Result<Lease>> waited;
  for (int round = 0; round < 2; ++round) {
    auto held = a->TryAcquire(key, Opts(milliseconds(10'000)));
    ASSERT_TRUE(held.ok()) << held.status().ToString();
    std::atomic<std::int64_t> granted_ns{0};
    waited.reset();
    std::thread waiter([&] {
      waited.emplace(b->Acquire(key, Opts(milliseconds(10'000), milliseconds(10'000))));
      granted_ns = NowNs();
    });
    EXPECT_TRUE(testing_support::Eventually(
        [&] {
          auto queued = a->Waiters(key);
          return queued.ok() && queued->size() == 1;
        },
        milliseconds(10'000), milliseconds(20)))
        << "the waiter did not queue";
    const std::int64_t released_ns = NowNs();
    EXPECT_TRUE(held->Release().ok());
    waiter.join();
    ASSERT_TRUE(waited->ok()) << waited->status().ToString();
    const double bound_ms = std::chrono::duration<double, std::milli>(bound.limit).count();
    if (round == 0) {
      ASSERT_TRUE((*waited)->Release().ok());
    } else {
      EXPECT_LT(static_cast<double>(granted_ns - released_ns) / 1e6, bound_ms) << bound;
    }
  }

  // The Redis fence over TLS, as the same user.
  ConnectOptions o;
  o.user = "dlock";
  o.password = ReadFirstLine(File("dlock.password"));
  o.has_password = true;
  o.tls = {true, File("ca.pem"), File("client.pem"), File("client.key")};
  auto conn = Connection::Open({"localhost", std::stoi(port_)}, o, false, true, "fence");
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  const FencingToken token = (*waited)->token();
  EXPECT_TRUE(FenceSet(**conn, key, token, "app:" + key, "v1", milliseconds(2000)).ok());
  Status stale = FenceSet(**conn, key, token - 1, "app:" + key, "v0", milliseconds(2000));
  EXPECT_EQ(stale.code(), StatusCode::kStaleToken) << stale.ToString();
  auto highest = FenceHighest(**conn, key, milliseconds(2000));
  ASSERT_TRUE(highest.ok()) << highest.status().ToString();
  EXPECT_EQ(*highest, token);
  // Outside the user's keys: refused.
  Status outside = FenceSet(**conn, key, token, "other:" + key, "v", milliseconds(2000));
  EXPECT_EQ(outside.code(), StatusCode::kPermissionDenied) << outside.ToString();
  EXPECT_TRUE((*waited)->Release().ok());
}

// The asynchronous API's batches and the listings, as the minimal-ACL user,
// on a server that lost its scripts (SCRIPT FLUSH, as after a restart):
// the pipeline is sent again with its first call by EVAL. Before, it asked
// SCRIPT LOAD, which that user may not run: every batch, list and keep
// failed with kPermissionDenied until something else cached the script.
TEST_F(RedisSecure, BatchesAndListsOfTheMinimalAclUserSurviveAScriptFlush) {
  auto b = OpenRaw(uri_);
  ASSERT_NE(b, nullptr) << "cannot open " << uri_;
  ConnectOptions admin;
  admin.user = "admin";
  admin.password = ReadFirstLine(File("admin.password"));
  admin.has_password = true;
  admin.tls = {true, File("ca.pem"), File("client.pem"), File("client.key")};
  auto flusher = Connection::Open({"localhost", std::stoi(port_)}, admin, false, true, "flush");
  ASSERT_TRUE(flusher.ok()) << flusher.status().ToString();
  auto flush = [&] {
    auto r = (*flusher)->Call({"SCRIPT", "FLUSH"}, milliseconds(2000), "flush");
    ASSERT_TRUE(r.ok() && (*r)->type != REDIS_REPLY_ERROR);
  };
  std::vector<LeaseRequest> requests;
  for (int i = 0; i < 3; ++i) {
    requests.push_back({UniqueKey("flushed/" + std::to_string(i)), OwnerId(1, i + 1),
                        milliseconds(10'000)});
  }
  flush();
  for (const Result<Attempt>& got : b->TryAcquireMany(requests)) {
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_TRUE(got->granted);
  }
  flush();
  auto listed = b->List(UniqueKey("flushed/"));
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_EQ(listed->size(), requests.size());
  flush();
  for (const Status& released : b->ReleaseMany(requests)) EXPECT_TRUE(released.ok()) << released.ToString();
}

TEST_F(RedisSecure, ThePublicFenceOpensFromTheStoreUri) {
  auto client = NewClient(uri_);
  ASSERT_TRUE(client);
  const std::string key = UniqueKey("public-fence");
  auto earlier = client->TryAcquire(key, Opts(milliseconds(10'000)));
  ASSERT_TRUE(earlier.ok()) << earlier.status().ToString();
  const FencingToken stale = earlier->token();
  ASSERT_TRUE(earlier->Release().ok());
  auto lease = client->TryAcquire(key, Opts(milliseconds(10'000)));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  auto fence = fence::RedisConnection::Open(uri_);  // TLS, ACL user, password file
  ASSERT_TRUE(fence.ok()) << fence.status().ToString();
  EXPECT_TRUE((*fence)->Set(key, lease->token(), "app:" + key, "v1").ok());
  const Status refused = (*fence)->Set(key, stale, "app:" + key, "v0");
  EXPECT_EQ(refused.code(), StatusCode::kStaleToken) << refused.ToString();
  auto highest = (*fence)->Highest(key);
  ASSERT_TRUE(highest.ok()) << highest.status().ToString();
  EXPECT_EQ(*highest, lease->token());
  EXPECT_TRUE(lease->Release().ok());

  // The same refusals as the store's own connections.
  auto wrong_ca = fence::RedisConnection::Open(Uri("localhost", Files("other-ca.pem", "client") + Password()));
  EXPECT_EQ(wrong_ca.status().code(), StatusCode::kPermissionDenied) << wrong_ca.status().ToString();
  auto plaintext = fence::RedisConnection::Open("redis://localhost:" + port_ + "/0?cacert=" + File("ca.pem"));
  EXPECT_EQ(plaintext.status().code(), StatusCode::kInvalidArgument) << plaintext.status().ToString();
}

TEST_F(RedisSecure, EachRefusalHasItsCodeAndNamesItsCause) {
  struct Case {
    std::string name, uri;
    StatusCode code;
    std::string says;
  };
  const std::string ok_files = Files("ca.pem", "client");
  const Case cases[] = {
      {"wrong CA", Uri("localhost", Files("other-ca.pem", "client") + Password()),
       StatusCode::kPermissionDenied, "certificate for localhost did not verify"},
      {"wrong host", Uri("127.0.0.1", ok_files + Password()), StatusCode::kPermissionDenied,
       "IP address mismatch"},
      {"expired client certificate",
       Uri("localhost", Files("ca.pem", "expired-client") + Password()),
       StatusCode::kPermissionDenied, "certificate expired"},
      {"client certificate of another CA",
       Uri("localhost", Files("ca.pem", "other-client") + Password()),
       StatusCode::kPermissionDenied, "unknown ca"},
      {"no client certificate", Uri("localhost", Files("ca.pem", "") + Password()),
       StatusCode::kPermissionDenied, "certificate required"},
      {"wrong password", Uri("localhost", ok_files, "dlock:wrong-pw-789"),
       StatusCode::kPermissionDenied, "wrong user name or password"},
      {"plaintext on the TLS port",
       "redis://dlock@localhost:" + port_ + "/0?" + Password().substr(1),
       StatusCode::kUnavailable, "a TLS port? then use rediss://"},
      {"cacert= on redis://", "redis://localhost:" + port_ + "/0?cacert=" + File("ca.pem"),
       StatusCode::kInvalidArgument, "use rediss://"},
      {"not a PEM file", Uri("localhost", "cacert=" + File("dlock.password") + Password()),
       StatusCode::kInvalidArgument, "cacert= file"},
      {"key of another certificate",
       Uri("localhost", "cacert=" + File("ca.pem") + "&cert=" + File("client.pem") +
                            "&key=" + File("other-client.key") + Password()),
       StatusCode::kInvalidArgument, "is not the key of cert="},
  };
  // Never a hang: within the connect timeout, plus a margin from what an
  // accepted handshake costs here now, short of a second connect timeout
  // (a retry).
  constexpr milliseconds kConnectTimeout{2000};  // OpenRaw's
  const Duration handshake = testing_support::MeasureSlowest(2, [&] {
    EXPECT_NE(OpenRaw(Uri("localhost", ok_files + Password())), nullptr);
  });
  const auto margin = testing_support::FastPath(handshake, milliseconds(500), kConnectTimeout);
  for (const Case& c : cases) {
    Status error;
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(OpenRaw(c.uri, &error), nullptr) << c.name;
    EXPECT_LT(std::chrono::steady_clock::now() - start, kConnectTimeout + margin.limit)
        << c.name << "; margin " << margin;
    EXPECT_EQ(error.code(), c.code) << c.name << ": " << error.ToString();
    EXPECT_NE(error.message().find(c.says), std::string::npos) << c.name << ": " << error.ToString();
    EXPECT_EQ(error.message().find('\n'), std::string::npos) << c.name << ": " << error.ToString();
    EXPECT_EQ(error.message().find("wrong-pw-789"), std::string::npos) << error.ToString();
  }
}

TEST_F(RedisSecure, AUserWithoutKeyRightsIsRefused) {
  Status error;
  auto backend = OpenRaw(Uri("localhost", Files("ca.pem", "client") + Password("nokeys"), "nokeys"),
                         &error);
  ASSERT_NE(backend, nullptr) << error.ToString();  // it may log in
  auto a = backend->TryAcquire({UniqueKey("nokeys"), OwnerId(1, 1), milliseconds(1000)});
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kPermissionDenied) << a.status().ToString();
  EXPECT_NE(a.status().message().find("NOPERM"), std::string::npos) << a.status().ToString();
}

// The certificate files are read at each connect: an open backend keeps
// working on its connection while the file is replaced; a new connect sees
// the new file; the old file back, connects work again.
TEST_F(RedisSecure, CertificateFilesAreReadAtEachConnect) {
  const fs::path tmp = fs::path(dir_) / "rotating";
  fs::create_directories(tmp);
  fs::copy_file(File("client.pem"), tmp / "client.pem", fs::copy_options::overwrite_existing);
  fs::copy_file(File("client.key"), tmp / "client.key", fs::copy_options::overwrite_existing);
  const std::string uri = Uri("localhost", "cacert=" + File("ca.pem") + "&cert=" +
                                               (tmp / "client.pem").string() + "&key=" +
                                               (tmp / "client.key").string() + Password());
  Status error;
  auto open = OpenRaw(uri, &error);
  ASSERT_NE(open, nullptr) << error.ToString();
  // Rotated to a certificate the server does not trust (another CA).
  fs::copy_file(File("other-client.pem"), tmp / "client.pem", fs::copy_options::overwrite_existing);
  fs::copy_file(File("other-client.key"), tmp / "client.key", fs::copy_options::overwrite_existing);
  EXPECT_EQ(OpenRaw(uri, &error), nullptr);
  EXPECT_EQ(error.code(), StatusCode::kPermissionDenied) << error.ToString();
  auto a = open->TryAcquire({UniqueKey("rotate"), OwnerId(1, 1), milliseconds(1000)});
  EXPECT_TRUE(a.ok() && a->granted) << a.status().ToString();
  // Rotated back to a good one: the next connect uses it.
  fs::copy_file(File("client.pem"), tmp / "client.pem", fs::copy_options::overwrite_existing);
  fs::copy_file(File("client.key"), tmp / "client.key", fs::copy_options::overwrite_existing);
  EXPECT_NE(OpenRaw(uri, &error), nullptr) << error.ToString();
  fs::remove_all(tmp);
}

// ------------------------------------------------------------ Sentinel

TEST(RedisSecureSentinel, LocksThroughSentinelsWithTheirOwnPassword) {
  Topology t("start-secure-sentinel");
  ASSERT_TRUE(t.ok()) << "could not start the secured sentinel topology: " << t.why();
  auto client = NewClient(t.uri());
  ASSERT_TRUE(client) << "cannot open " << t.uri();
  auto held = client->TryAcquire(UniqueKey("sentinel"), Opts(milliseconds(5000)));
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  EXPECT_GT(held->token(), 0u);
  EXPECT_TRUE(held->Release().ok());

  // Without the sentinels' password: refused, and told where it goes.
  const std::string without =
      std::regex_replace(t.uri(), std::regex("&sentinel_password_file=[^&]*"), "");
  Status error;
  EXPECT_EQ(OpenRaw(without, &error), nullptr);
  EXPECT_EQ(error.code(), StatusCode::kPermissionDenied) << error.ToString();
  EXPECT_NE(error.message().find("sentinel_password_file="), std::string::npos)
      << error.ToString();
}

}  // namespace
}  // namespace dlock::redis::testing
