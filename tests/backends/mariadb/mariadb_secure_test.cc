// The MariaDB store against a server secured as operators secure one
// (scripts/servers/mariadb.sh start-secure): TLS only, and a password AND
// a client certificate whose subject names the user. Each way a connection
// can be wrong gives its own code and one line; a user with only the grants
// dlock needs (dlock_app: rows and procedures) can lock, wait and fence; a
// user without them (dlock_none) is refused with kPermissionDenied;
// certificate files are read at each connect.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "core/registry.h"
#include "dlock/client.h"
#include "dlock/fence_mariadb.h"
#include "mariadb_test_util.h"

namespace dlock::mariadb {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing_mariadb::AdminConnect;
using testing_mariadb::ServerFile;
using testing_mariadb::ServerUri;
using testing_mariadb::Unique;

std::string ServerDir() {
  const char* dir = std::getenv("DLOCK_TEST_SERVER_DIR");
  return dir != nullptr ? dir : "";
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

class MariaDbSecureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DLOCK_REQUIRE_MARIADB();
    ASSERT_FALSE(ServerFile("app_uri").empty()) << "not the secured fixture (start-secure)";
    // The owner opens once: dlock's tables and procedures exist from then
    // on, and dlock_app's grants on the database cover them.
    auto owner = Open(ServerUri());
    ASSERT_TRUE(owner.ok()) << owner.status().ToString();
    auto conn = AdminConnect(ServerUri());
    ASSERT_TRUE(conn);
    ASSERT_TRUE(fence::MariaDb::EnsureSchema(conn.get()).ok());
  }
};

TEST_F(MariaDbSecureTest, EachWrongConnectionHasItsCodeAndOneLine) {
  const std::string uri = ServerUri();
  const std::string dir = ServerDir();
  const std::string port = ServerFile("port");
  const std::string password_file = "password_file=" + dir + "/dlock.password";
  struct Case {
    std::string what, uri;
    StatusCode code;
    std::vector<std::string> says;  // the message holds one of these
  };
  const Case cases[] = {
      {"a CA that did not sign the server's certificate", Replace(uri, "/ca.pem", "/other-ca.pem"),
       StatusCode::kPermissionDenied, {"self-signed certificate"}},
      {"a host name the certificate does not name", Replace(uri, "localhost", "127.0.0.1"),
       StatusCode::kPermissionDenied, {"Validation of SSL server certificate failed"}},
      {"an expired client certificate", Replace(uri, "/client.", "/expired-client."),
       // Connector/C reads the server's alert, or only its hanging up.
       StatusCode::kPermissionDenied, {"certificate expired", "client certificate"}},
      {"a client certificate from another CA", Replace(uri, "/client.", "/other-client."),
       StatusCode::kPermissionDenied, {"unknown ca", "client certificate"}},
      {"no client certificate", uri.substr(0, uri.find("&cert=")) + "&" + password_file,
       StatusCode::kPermissionDenied, {"Access denied for user 'dlock'"}},
      {"a certificate naming another user", Replace(uri, "/client.", "/app."),
       StatusCode::kPermissionDenied, {"Access denied for user 'dlock'"}},
      {"a wrong password", Replace(uri, "/dlock.password", "/dlock_app.password"),
       StatusCode::kPermissionDenied, {"Access denied for user 'dlock'"}},
      {"plaintext", "mysql://dlock@127.0.0.1:" + port + "/dlock?" + password_file,
       StatusCode::kPermissionDenied, {"Access denied"}},
      {"a CA file that is not there", Replace(uri, "/ca.pem", "/missing.pem"),
       StatusCode::kInvalidArgument, {"missing.pem"}},
      {"a key file that is not a key", Replace(uri, "/client.key", "/dlock.password"),
       StatusCode::kInvalidArgument, {"dlock.password"}},
  };
  const std::string password = ServerFile("dlock.password");
  ASSERT_FALSE(password.empty());
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto b = Open(c.uri);
    ASSERT_FALSE(b.ok());
    const std::string message = b.status().message();
    EXPECT_EQ(b.status().code(), c.code) << message;
    EXPECT_TRUE(std::any_of(c.says.begin(), c.says.end(),
                            [&](const std::string& s) { return message.find(s) != std::string::npos; }))
        << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_EQ(message.find(password), std::string::npos) << "the password in: " << message;
  }
}

TEST_F(MariaDbSecureTest, TheMinimalUserLocksWaitsAndFences) {
  const std::string app = ServerFile("app_uri");
  auto holder = Client::Connect(app);
  auto waiter = Client::Connect(app);
  ASSERT_TRUE(holder.ok()) << holder.status().ToString();
  ASSERT_TRUE(waiter.ok()) << waiter.status().ToString();
  const std::string key = Unique("secure/minimal");
  auto first = (*holder)->Acquire(key, {.ttl = seconds(30)});
  ASSERT_TRUE(first.ok()) << first.status().ToString();

  // A waiter is woken by the release (user locks need no grants).
  Result<Lease> second = Status(StatusCode::kInternal, "not run");
  std::jthread wait([&] { second = (*waiter)->Acquire(key, {.ttl = seconds(30), .wait = seconds(20)}); });
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

  // The fence, on the application's own connection as the same user.
  auto conn = AdminConnect(app);
  ASSERT_TRUE(conn);
  EXPECT_TRUE(fence::MariaDb::Write(conn.get(), key, second->token(), [] { return Status::Ok(); }).ok());
  const Status stale = fence::MariaDb::Write(conn.get(), key, first_token, [] { return Status::Ok(); });
  EXPECT_EQ(stale.code(), StatusCode::kStaleToken) << stale.ToString();
}

TEST_F(MariaDbSecureTest, AUserWithoutTheGrantsIsPermissionDenied) {
  auto b = Open(ServerFile("none_uri"));
  const Status refused =
      b.ok() ? (*b)->TryAcquire({Unique("secure/none"), OwnerId(1, 1), milliseconds(5000)}).status()
             : b.status();
  EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied) << refused.ToString();
}

TEST_F(MariaDbSecureTest, CertificatesAreReadAtEachConnect) {
  // A copy of the client's files that the test can rotate.
  const std::string dir = ServerDir() + "/" + Unique("rotate");
  std::filesystem::create_directory(dir);
  const auto copy = [&](const std::string& from, const std::string& to) {
    std::filesystem::copy_file(ServerDir() + "/" + from, dir + "/" + to,
                               std::filesystem::copy_options::overwrite_existing);
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
}  // namespace dlock::mariadb
