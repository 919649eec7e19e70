#include "core/uri.h"

#include <gtest/gtest.h>

#include "core/credentials.h"
#include "core/registry.h"

#include <stdlib.h>
#include <unistd.h>

namespace dlock::internal {
namespace {

TEST(UriTest, SplitsEveryPart) {
  auto u = ParseUri("Redis://alice:s%40cret@h1:6379,h2:6379/0?wait_replicas=1&x=a%20b");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->scheme, "redis");
  EXPECT_EQ(u->user, "alice");
  EXPECT_EQ(u->password, "s@cret");
  EXPECT_EQ(u->hosts, "h1:6379,h2:6379");
  EXPECT_EQ(u->path, "/0");
  ASSERT_NE(u->Param("x"), nullptr);
  EXPECT_EQ(*u->Param("x"), "a b");
  EXPECT_EQ(u->Param("nope"), nullptr);
}

TEST(UriTest, SqlitePathHasNoHost) {
  auto u = ParseUri("sqlite:///var/lib/my%3Flocks.db");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->hosts, "");
  EXPECT_EQ(u->path, "/var/lib/my?locks.db");
}

TEST(UriTest, RedactedNeverShowsThePassword) {
  auto u = ParseUri("postgres://bob:hunter2@db/app?password=hunter3&sslmode=require");
  ASSERT_TRUE(u.ok());
  std::string r = u->Redacted();
  EXPECT_EQ(r.find("hunter"), std::string::npos) << r;
  EXPECT_NE(r.find("bob:***@db"), std::string::npos) << r;
  EXPECT_NE(r.find("sslmode=require"), std::string::npos) << r;
}

TEST(UriTest, MalformedInputIsNamed) {
  for (const char* bad : {"", "nocolon", "://x", "sqlite:/x", "sq lite://x", "a://b/%zz"}) {
    auto u = ParseUri(bad);
    EXPECT_FALSE(u.ok()) << bad;
    EXPECT_EQ(u.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(UriTest, UnknownParameterListsTheAcceptedOnes) {
  auto u = ParseUri("sqlite:///x?synchronus=full");
  ASSERT_TRUE(u.ok());
  Status s = u->CheckParams({"synchronous", "busy_timeout"});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'synchronus'"), std::string::npos);
  EXPECT_NE(s.message().find("synchronous, busy_timeout"), std::string::npos);
}

TEST(RegistryTest, UnknownSchemeListsSupportedOnesWithoutThePassword) {
  auto b = OpenBackend("mongo://u:topsecret@h/db", BackendParams{});
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("unknown store 'mongo'"), std::string::npos);
  EXPECT_NE(b.status().message().find("sqlite:///path/locks.db"), std::string::npos);
  EXPECT_EQ(b.status().message().find("topsecret"), std::string::npos);
}

}  // namespace
}  // namespace dlock::internal

namespace dlock::internal {
namespace {

constexpr const char* kHostilePassword = "Sec/ret?P@ss#w%rd with space";

TEST(UriTest, APasswordMayHoldAnyCharacterUnescaped) {
  auto u = ParseUri(std::string("redis://:") + kHostilePassword + "@127.0.0.1:6379/0?x=1");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->password, kHostilePassword);
  EXPECT_EQ(u->hosts, "127.0.0.1:6379");
  EXPECT_EQ(u->path, "/0");
  ASSERT_NE(u->Param("x"), nullptr);
  for (const std::string& shown : {u->Redacted(), u->Format(false)}) {
    for (const char* piece : {"Sec", "ret", "ss#", "rd with"}) {
      EXPECT_EQ(shown.find(piece), std::string::npos) << shown;
    }
  }
}

TEST(UriTest, FormatGivesTheSameUriBack) {
  auto u = ParseUri("postgres://bob%3Aa:p%40ss%2Fw%25@h1:5432,h2/my%20db?sslmode=require&x=a%26b");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  auto again = ParseUri(u->Format(true));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->user, "bob:a");
  EXPECT_EQ(again->password, "p@ss/w%");
  EXPECT_EQ(again->hosts, u->hosts);
  EXPECT_EQ(again->path, "/my db");
  EXPECT_EQ(again->query, u->query);
  auto without = ParseUri(u->Format(false));
  ASSERT_TRUE(without.ok());
  EXPECT_FALSE(without->has_password);
  EXPECT_EQ(without->user, "bob:a");
}

TEST(UriTest, SecretParametersAreMaskedOrLeftOut) {
  auto u = ParseUri("postgres://h/db?sslpassword=k3y&password=pw9&auth_token=t0k&sslmode=verify");
  ASSERT_TRUE(u.ok());
  const std::string r = u->Redacted();
  for (const char* secret : {"k3y", "pw9", "t0k"}) {
    EXPECT_EQ(r.find(secret), std::string::npos) << r;
    EXPECT_EQ(u->Format(false).find(secret), std::string::npos) << u->Format(false);
  }
  EXPECT_NE(r.find("sslpassword=***"), std::string::npos) << r;
  EXPECT_NE(r.find("sslmode=verify"), std::string::npos) << r;
  EXPECT_FALSE(IsSecretParam("password_file"));
  EXPECT_FALSE(IsSecretParam("password_env"));
}

TEST(UriTest, TextThatIsNotAUriIsShownOnlyUpToWhereAPasswordCouldStart) {
  auto u = ParseUri(":hunter2@host");
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(u.status().message().find("hunter2"), std::string::npos) << u.status().message();
}

TEST(CredentialsTest, APasswordFromAFile) {
  char path[] = "/tmp/dlock-uri-test.XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "s3cret/@?\n", 10), 10);
  close(fd);
  auto u = ParseUri(std::string("redis://127.0.0.1:6379/0?password_file=") + path);
  ASSERT_TRUE(u.ok());
  ASSERT_TRUE(ResolveCredentials(*u).ok());
  EXPECT_EQ(u->password, "s3cret/@?");
  EXPECT_TRUE(u->has_password);
  EXPECT_EQ(u->Param("password_file"), nullptr) << "resolved, so no store sees it";
  EXPECT_NE(u->Format(false).find(std::string("password_file=") + path), std::string::npos);
  EXPECT_EQ(u->Format(false).find("s3cret"), std::string::npos);
  EXPECT_EQ(u->Redacted().find("s3cret"), std::string::npos);
  unlink(path);
  auto missing = ParseUri(std::string("redis://h/0?password_file=") + path);
  Status s = ResolveCredentials(*missing);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("cannot be read"), std::string::npos) << s.message();
}

TEST(CredentialsTest, APasswordFromTheEnvironmentAndOnlyOneSource) {
  setenv("DLOCK_URI_TEST_PW", "from-env", 1);
  auto u = ParseUri("redis://h/0?password_env=DLOCK_URI_TEST_PW");
  ASSERT_TRUE(ResolveCredentials(*u).ok());
  EXPECT_EQ(u->password, "from-env");
  EXPECT_NE(u->Format(false).find("password_env=DLOCK_URI_TEST_PW"), std::string::npos);
  auto both = ParseUri("redis://:inline@h/0?password_env=DLOCK_URI_TEST_PW");
  Status s = ResolveCredentials(*both);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().find("inline"), std::string::npos);
  auto unset = ParseUri("redis://h/0?password_env=DLOCK_URI_TEST_UNSET");
  EXPECT_EQ(ResolveCredentials(*unset).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dlock::internal
