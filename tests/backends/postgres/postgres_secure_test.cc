// The PostgreSQL store against a server secured as operators secure one
// (scripts/servers/postgres.sh start-secure): TLS only, scram-sha-256 and a
// client certificate naming the role. Each way a connection can be wrong
// gives its own code and one line; a role with only the grants dlock needs
// (dlock_app) can lock, wait and fence; a role without them (dlock_none)
// is refused with kPermissionDenied; certificate files are read at each
// connect.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "backends/postgres/pg_util.h"
#include "backends/postgres/postgres_backend.h"
#include "core/credentials.h"
#include "core/registry.h"
#include "core/uri.h"
#include "dlock/client.h"
#include "dlock/fence_postgres.h"
#include "postgres_test_util.h"

namespace dlock::postgres {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing_pg::ServerUri;
using testing_pg::Unique;

std::string ServerDir() {
  const char* dir = std::getenv("DLOCK_TEST_SERVER_DIR");
  return dir != nullptr ? dir : "";
}

std::string UriFile(const std::string& name) {
  std::ifstream in(ServerDir() + "/" + name);
  std::string uri;
  std::getline(in, uri);
  return uri;
}

// `uri` with every `from` replaced by `to`.
std::string Replace(std::string uri, const std::string& from, const std::string& to) {
  for (std::size_t at = uri.find(from); at != std::string::npos; at = uri.find(from, at + to.size())) {
    uri.replace(at, from.size(), to);
  }
  return uri;
}

Result<std::unique_ptr<Backend>> Open(const std::string& uri) {
  internal::BackendParams params;
  params.clock = DefaultClock();
  params.connect_timeout = seconds(10);
  return internal::OpenBackend(uri, params);
}

// A libpq connection of the application's own, from a dlock URI: what a
// program using fence::Postgres does.
testing_pg::PgConn ConnectLikeTheApplication(const std::string& text) {
  auto uri = internal::ParseUri(text);
  EXPECT_TRUE(uri.ok());
  EXPECT_TRUE(internal::ResolveCredentials(*uri).ok());
  auto options = OptionsFromUri(*uri);
  EXPECT_TRUE(options.ok()) << options.status().ToString();
  auto conn = Connect(options->conninfo, std::chrono::steady_clock::now() + seconds(10), "test");
  EXPECT_TRUE(conn.ok()) << conn.status().ToString();
  return testing_pg::PgConn(conn.ok() ? conn->release() : nullptr);
}

class PostgresSecureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DLOCK_REQUIRE_SERVER();
    ASSERT_FALSE(UriFile("app_uri").empty()) << "not the secured fixture (start-secure)";
    // The owner opens once: dlock's tables exist from then on, and the
    // default privileges the fixture set give them to dlock_app.
    auto owner = Open(ServerUri());
    ASSERT_TRUE(owner.ok()) << owner.status().ToString();
    auto conn = ConnectLikeTheApplication(ServerUri());
    ASSERT_TRUE(conn);
    ASSERT_TRUE(fence::Postgres::EnsureSchema(conn.get()).ok());
  }
};

TEST_F(PostgresSecureTest, EachWrongConnectionHasItsCodeAndOneLine) {
  const std::string uri = ServerUri();
  const std::string dir = ServerDir();
  const std::string port = uri.substr(uri.find("localhost:") + 10, uri.find("/dlock?") - uri.find("localhost:") - 10);
  const std::string password_file = "password_file=" + dir + "/dlock.password";
  struct Case {
    std::string what, uri;
    StatusCode code;
    std::string says;
  };
  const Case cases[] = {
      {"a CA that did not sign the server's certificate", Replace(uri, "/ca.pem", "/other-ca.pem"),
       StatusCode::kPermissionDenied, "certificate verify failed"},
      {"a host name the certificate does not name", Replace(uri, "localhost", "127.0.0.1"),
       StatusCode::kPermissionDenied, "does not match host name"},
      {"an expired client certificate", Replace(uri, "/client.", "/expired-client."),
       StatusCode::kPermissionDenied, "certificate expired"},
      {"a client certificate from another CA", Replace(uri, "/client.", "/other-client."),
       StatusCode::kPermissionDenied, "unknown ca"},
      {"no client certificate", uri.substr(0, uri.find("&cert=")) + "&" + password_file,
       StatusCode::kPermissionDenied, "client certificate"},
      {"a certificate naming another role", Replace(uri, "/client.", "/app."),
       StatusCode::kPermissionDenied, "authentication failed"},
      {"a wrong password", Replace(uri, "/dlock.password", "/dlock_app.password"),
       StatusCode::kPermissionDenied, "password authentication failed"},
      {"plaintext", "postgres://dlock@localhost:" + port + "/dlock?sslmode=disable&" + password_file,
       StatusCode::kPermissionDenied, "no encryption"},
      {"a CA file that is not there", Replace(uri, "/ca.pem", "/missing.pem"),
       StatusCode::kInvalidArgument, "missing.pem"},
      {"cacert= on top of sslrootcert=", uri + "&sslrootcert=" + dir + "/ca.pem",
       StatusCode::kInvalidArgument, "same file"},
  };
  const std::string password = UriFile("dlock.password");
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto b = Open(c.uri);
    ASSERT_FALSE(b.ok());
    const std::string message = b.status().message();
    EXPECT_EQ(b.status().code(), c.code) << message;
    EXPECT_NE(message.find(c.says), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_EQ(message.find(password), std::string::npos) << "the password in: " << message;
  }
}

TEST_F(PostgresSecureTest, TheMinimalRoleLocksWaitsAndFences) {
  const std::string app = UriFile("app_uri");
  auto holder = Client::Connect(app);
  auto waiter = Client::Connect(app);
  ASSERT_TRUE(holder.ok()) << holder.status().ToString();
  ASSERT_TRUE(waiter.ok()) << waiter.status().ToString();
  const std::string key = Unique("secure/minimal");
  auto first = (*holder)->Acquire(key, {.ttl = seconds(30)});
  ASSERT_TRUE(first.ok()) << first.status().ToString();

  // A waiter is woken by the release (LISTEN/NOTIFY need no grants).
  Result<Lease> second = Status(StatusCode::kInternal, "not run");
  std::jthread wait([&] { second = (*waiter)->Acquire(key, {.ttl = seconds(30), .wait = seconds(20)}); });
  // Released once the waiter is in the queue, so that it is the release's
  // notification that wakes it.
  auto observer = Open(app);
  bool queued = false;
  for (int i = 0; i < 200 && observer.ok() && !queued; ++i) {
    auto waiters = (*observer)->Waiters(key);
    queued = waiters.ok() && !waiters->empty();
    if (!queued) std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_TRUE(queued) << "the waiter never queued";
  const FencingToken first_token = first->token();
  EXPECT_TRUE(first->Release().ok());
  wait.join();
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_GT(second->token(), first_token);

  // The fence, on the application's own connection as the same role.
  auto conn = ConnectLikeTheApplication(app);
  ASSERT_TRUE(conn);
  EXPECT_TRUE(fence::Postgres::Write(conn.get(), key, second->token(), [] { return Status::Ok(); }).ok());
  const Status stale = fence::Postgres::Write(conn.get(), key, first_token, [] { return Status::Ok(); });
  EXPECT_EQ(stale.code(), StatusCode::kStaleToken) << stale.ToString();
}

TEST_F(PostgresSecureTest, ARoleWithoutTheGrantsIsPermissionDenied) {
  auto b = Open(UriFile("none_uri"));
  const Status refused =
      b.ok() ? (*b)->TryAcquire({Unique("secure/none"), OwnerId(1, 1), milliseconds(5000)}).status()
             : b.status();
  EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied) << refused.ToString();
  auto conn = ConnectLikeTheApplication(UriFile("none_uri"));
  ASSERT_TRUE(conn);
  const Status fenced =
      fence::Postgres::Write(conn.get(), Unique("secure/none"), 5, [] { return Status::Ok(); });
  EXPECT_EQ(fenced.code(), StatusCode::kPermissionDenied) << fenced.ToString();
}

TEST_F(PostgresSecureTest, CertificatesAreReadAtEachConnect) {
  // A copy of the client's files that the test can rotate.
  const std::string dir = ServerDir() + "/" + Unique("rotate");
  std::filesystem::create_directory(dir);
  const auto copy = [&](const std::string& from, const std::string& to) {
    std::filesystem::copy_file(ServerDir() + "/" + from, dir + "/" + to,
                               std::filesystem::copy_options::overwrite_existing);
    std::filesystem::permissions(dir + "/" + to, std::filesystem::perms::owner_read |
                                                     std::filesystem::perms::owner_write);
  };
  copy("client.pem", "me.pem");
  copy("client.key", "me.key");
  const std::string uri =
      Replace(Replace(ServerUri(), ServerDir() + "/client.pem", dir + "/me.pem"),
              ServerDir() + "/client.key", dir + "/me.key");
  auto before = Open(uri);
  ASSERT_TRUE(before.ok()) << before.status().ToString();

  copy("expired-client.pem", "me.pem");  // rotated to one the server refuses
  copy("expired-client.key", "me.key");
  auto refused = Open(uri);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied) << refused.status().ToString();

  copy("client.pem", "me.pem");  // and back to a good one
  copy("client.key", "me.key");
  EXPECT_TRUE(Open(uri).ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dlock::postgres
