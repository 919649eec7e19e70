#include "core/uri.h"

#include <gtest/gtest.h>

#include "core/registry.h"

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
