// mysql:// and mariadb:// URIs: what is taken, and a one-line
// kInvalidArgument naming the part that is wrong and what is accepted for
// everything else, before any connection is made. No server needed.
#include <string>

#include <gtest/gtest.h>

#include "backends/mariadb/mariadb_backend.h"
#include "core/registry.h"
#include "core/uri.h"

namespace dlock::mariadb {
namespace {

Result<MariaDbOptions> Parse(const std::string& text) {
  auto uri = internal::ParseUri(text);
  if (!uri.ok()) return uri.status();
  return OptionsFromUri(*uri);
}

// The error for `text`: kInvalidArgument in one line holding every `parts`
// and never the password.
void ExpectRefused(const std::string& text, std::initializer_list<std::string> parts) {
  auto o = Parse(text);
  ASSERT_FALSE(o.ok()) << text;
  const std::string m = o.status().message();
  EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  EXPECT_EQ(m.find("s3cret"), std::string::npos) << m;
  for (const std::string& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' in: " << m;
}

TEST(MariaDbUri, TakesHostPortDatabaseUserAndTable) {
  auto o = Parse("mysql://alice:s3cret@db1:3307/app?table=my_locks_2");
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->connect.host, "db1");
  EXPECT_EQ(o->connect.port, 3307u);
  EXPECT_EQ(o->connect.database, "app");
  EXPECT_EQ(o->connect.user, "alice");
  EXPECT_EQ(o->connect.password, "s3cret");
  EXPECT_TRUE(o->connect.has_password);
  EXPECT_FALSE(o->connect.tls);
  EXPECT_EQ(o->table, "my_locks_2");
  EXPECT_EQ(o->connect.describe.find("s3cret"), std::string::npos) << o->connect.describe;

  auto d = Parse("mariadb://[::1]/app");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->connect.host, "::1");
  EXPECT_EQ(d->connect.port, 3306u);
  EXPECT_EQ(d->table, kDefaultTable);
  auto s = Parse("mysql://u@/app?socket=/run/mysqld/mysqld.sock");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->connect.socket, "/run/mysqld/mysqld.sock");
}

TEST(MariaDbUri, TlsFilesTurnOnCheckedTls) {
  auto o = Parse("mysql://u@localhost:3306/app?cacert=/c/ca.pem&cert=/c/a.pem&key=/c/a.key");
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_TRUE(o->connect.tls);
  EXPECT_EQ(o->connect.tls_files.ca_file, "/c/ca.pem");
  EXPECT_EQ(o->connect.tls_files.cert_file, "/c/a.pem");
  EXPECT_EQ(o->connect.tls_files.key_file, "/c/a.key");
  auto system_cas = Parse("mysql://u@db/app?tls=verify-full");
  ASSERT_TRUE(system_cas.ok()) << system_cas.status().ToString();
  EXPECT_TRUE(system_cas->connect.tls);
  ExpectRefused("mysql://u:s3cret@db/app?tls=off", {"tls=off", "verify-full"});
  ExpectRefused("mysql://u:s3cret@db/app?cert=/c/a.pem", {"cert=", "key="});
  ExpectRefused("mysql://u@db/app?cacert=", {"cacert=", "empty"});
  ExpectRefused("mysql://u@/app?socket=/s.sock&cacert=/ca.pem", {"Unix socket", "TCP"});
}

TEST(MariaDbUri, EachBadPartIsNamedWithWhatIsAccepted) {
  ExpectRefused("mysql://u:s3cret@db/app?table=X", {"table name 'X'", "lower-case"});
  ExpectRefused("mysql://u:s3cret@db/app?table=a;drop%20table%20b", {"table name", "lower-case"});
  ExpectRefused("mysql://u:s3cret@db/app?table=" + std::string(49, 'a'), {"table name", "47"});
  EXPECT_TRUE(Parse("mysql://u@db/app?table=" + std::string(48, 'a')).ok());
  ExpectRefused("mysql://u:s3cret@db/app?tabel=x", {"unknown parameter 'tabel'", "accepted: table"});
  ExpectRefused("mysql://u:s3cret@db/app?sslmode=require", {"'sslmode'", "accepted"});
  ExpectRefused("mysql://u:s3cret@db:http/app", {"port 'http'", "1 to 65535"});
  ExpectRefused("mysql://u:s3cret@db:70000/app", {"port '70000'"});
  ExpectRefused("mysql://u:s3cret@db:/app", {"port", "empty"});
  ExpectRefused("mysql://u:s3cret@db/", {"no database", "/dlock"});
  ExpectRefused("mysql://u:s3cret@db", {"no database"});
  ExpectRefused("mysql://u:s3cret@db/a/b", {"database 'a/b'"});
  ExpectRefused("mysql://u:s3cret@/app", {"no host", "socket="});
  ExpectRefused("mysql://u:s3cret@h1,h2/app", {"one host only"});
  ExpectRefused("mysql://u:s3cret@[::1/app", {"unclosed '['"});
  ExpectRefused("mysql://u:s3cret@db/app?socket=relative.sock", {"socket='relative.sock'", "absolute"});
}

// The registry knows both schemes and hands them here; a URI this parser
// refuses fails before any connection.
TEST(MariaDbUri, BothSchemesOpenThroughTheRegistry) {
  internal::BackendParams params;
  params.connect_timeout = std::chrono::milliseconds(200);
  for (const char* scheme : {"mysql", "mariadb"}) {
    auto b = internal::OpenBackend(std::string(scheme) + "://u:s3cret@127.0.0.1:1/app?tabel=x", params);
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument) << b.status().ToString();
    EXPECT_NE(b.status().message().find("tabel"), std::string::npos);
  }
  EXPECT_NE(internal::SupportedSchemes().find("mysql://"), std::string::npos);
  EXPECT_NE(internal::SupportedSchemes().find("mariadb://"), std::string::npos);
}

// Nothing listens on the port: unavailable (69), in one line, quickly, and
// without the password.
TEST(MariaDbUri, NoServerIsUnavailableWithinTheConnectTimeout) {
  internal::BackendParams params;
  params.connect_timeout = std::chrono::milliseconds(500);
  const auto start = std::chrono::steady_clock::now();
  auto b = internal::OpenBackend("mysql://u:s3cret@127.0.0.1:1/app", params);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kUnavailable) << b.status().ToString();
  EXPECT_EQ(b.status().message().find("s3cret"), std::string::npos);
  EXPECT_EQ(b.status().message().find('\n'), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

}  // namespace
}  // namespace dlock::mariadb
