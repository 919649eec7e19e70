// Key <-> znode path mapping and lock node names: no server needed.
#include "backends/zookeeper/zk_path.h"

#include <gtest/gtest.h>

namespace dlock::zookeeper {
namespace {

TEST(ZkPathTest, KeysAreTheirOwnPathsUnderTheChroot) {
  EXPECT_EQ(*LockPath("/dlock", "jobs/nightly"), "/dlock/jobs/nightly");
  EXPECT_EQ(*LockPath("", "jobs/nightly"), "/jobs/nightly");
  EXPECT_EQ(*LockPath("/dlock", "/jobs/nightly"), "/dlock/jobs/nightly") << "one leading / ignored";
  EXPECT_EQ(LockPath("/dlock", "").status().code(), StatusCode::kInvalidArgument);
}

TEST(ZkPathTest, ForbiddenBytesAndSegmentsAreEscapedReversibly) {
  const std::string keys[] = {"p%_ *\xff", "a//b", "a/./b", "a/../b", "_c_x-lock-0000000001",
                              "tab\there", "trailing/", "caf\xc3\xa9", "zookeeper/x"};
  for (const std::string& key : keys) {
    for (const std::string chroot : {"", "/dlock"}) {
      auto path = LockPath(chroot, key);
      ASSERT_TRUE(path.ok()) << key;
      EXPECT_EQ(NormalizeChroot(*path).status().ok(), true) << *path << " breaks the path rules";
      auto back = KeyOfPath(chroot, *path);
      ASSERT_TRUE(back.has_value()) << *path;
      EXPECT_EQ(*back, key) << *path;
    }
  }
  EXPECT_EQ(*LockPath("", "zookeeper/x"), "/%7Aookeeper/x");
  EXPECT_EQ(*LockPath("/d", "zookeeper/x"), "/d/zookeeper/x");
  EXPECT_EQ(*LockPath("/d", "a//b"), "/d/a/%/b");
  EXPECT_EQ(*LockPath("/d", "p%_ *\xff"), "/d/p%25_ *%FF");
}

TEST(ZkPathTest, ChrootMustFollowZooKeepersPathRules) {
  EXPECT_EQ(*NormalizeChroot(""), "");
  EXPECT_EQ(*NormalizeChroot("/"), "");
  EXPECT_EQ(*NormalizeChroot("/apps/locks"), "/apps/locks");
  for (const char* bad : {"/a//b", "/a/", "/a/./b", "/..", "/a\x01", "/zookeeper", "/zookeeper/q",
                          "/\xff", "/\xf0\x9f\x94\x92"}) {
    auto r = NormalizeChroot(bad);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("path rules"), std::string::npos);
  }
}

TEST(ZkPathTest, LockNodesFollowCuratorsLayout) {
  const OwnerId owner(0x0123456789abcdefULL, 0xfedcba9876543210ULL);
  EXPECT_EQ(GuidOf(owner), "01234567-89ab-cdef-fedc-ba9876543210");
  EXPECT_EQ(LockNodePrefix(owner), "_c_01234567-89ab-cdef-fedc-ba9876543210-lock-");
  auto n = ParseLockNode(LockNodePrefix(owner) + "0000000042");
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->sequence, 42);
  EXPECT_EQ(OwnerOfGuid(n->guid), owner);
  // Curator without protection, and a sub-key that is not a contender.
  EXPECT_TRUE(ParseLockNode("lock-0000000001").has_value());
  EXPECT_FALSE(ParseLockNode("b").has_value());
  EXPECT_FALSE(ParseLockNode("lock-12").has_value());
  auto sorted = SortedContenders({"_c_" + std::string(36, 'a') + "-lock-0000000010", "b",
                                  "lock-0000000002", "_c_" + std::string(36, 'b') + "-lock-0000000005"});
  ASSERT_EQ(sorted.size(), 3u);
  EXPECT_EQ(sorted[0].sequence, 2);
  EXPECT_EQ(sorted[1].sequence, 5);
  EXPECT_EQ(sorted[2].sequence, 10);
}

}  // namespace
}  // namespace dlock::zookeeper
