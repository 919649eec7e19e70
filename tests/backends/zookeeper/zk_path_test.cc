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

TEST(ZkPathTest, DoneRecordsLiveApartFromEveryLock) {
  EXPECT_EQ(*DonePath("/dlock", "jobs/nightly"), "/dlock/%dlock-done/jobs%2Fnightly");
  EXPECT_EQ(*DonePath("", "/jobs/nightly"), "/%dlock-done/jobs%2Fnightly") << "one leading /";
  EXPECT_EQ(*DonePath("", "."), "/%dlock-done/%2E");
  EXPECT_EQ(*DonePath("", ".."), "/%dlock-done/%2E%2E");
  EXPECT_EQ(*DonePath("", "p%_ *\xff"), "/%dlock-done/p%25_ *%FF");
  EXPECT_EQ(DonePath("", "/").status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(*DonePath("", "a/b"), *DonePath("", "a%2Fb"));
  // The directory is no key's lock path, nor under one: its name is not an
  // encoding LockPath makes, so it decodes to no key.
  EXPECT_FALSE(DecodeSegment(kDoneDirName).has_value());
  for (const std::string chroot : {"", "/dlock"}) {
    EXPECT_EQ(KeyOfPath(chroot, DoneDir(chroot)), std::nullopt);
    EXPECT_EQ(KeyOfPath(chroot, *DonePath(chroot, "a")), std::nullopt);
    for (const std::string key : {"%dlock-done", "%dlock-done/a", "a", "x/_c_y-lock-0000000001"}) {
      auto lock = LockPath(chroot, key);
      auto done = DonePath(chroot, key);
      EXPECT_NE(*lock, DoneDir(chroot)) << key;
      EXPECT_FALSE(lock->starts_with(DoneDir(chroot) + "/")) << *lock;
      EXPECT_FALSE(done->starts_with(*lock + "/")) << *done;
      EXPECT_TRUE(NormalizeChroot(*done).ok()) << *done << " breaks the path rules";
    }
  }
}

TEST(ZkPathTest, DoneRecordNamesCarryTheirEndAndTheirOwner) {
  const OwnerId owner(0x0123456789abcdef, 0xfedcba9876543210);
  const std::string name = FormatDoneRecord({1733400000123, owner});
  EXPECT_EQ(name, "1733400000123-0123456789abcdeffedcba9876543210");
  auto parsed = ParseDoneRecord(name);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->keep_until_unix_ms, 1733400000123);
  EXPECT_EQ(parsed->owner, owner);
  parsed = ParseDoneRecord(FormatDoneRecord({std::nullopt, owner}));
  ASSERT_TRUE(parsed.has_value());
  EXPECT_FALSE(parsed->keep_until_unix_ms.has_value()) << "for ever";
  for (const std::string& bad : std::vector<std::string>{"", "ever", "-0123456789abcdeffedcba9876543210",
                                "01-0123456789abcdeffedcba9876543210", "x-" + owner.ToString(),
                                "12-" + owner.ToString().substr(1), "12-" + owner.ToString() + "0"}) {
    EXPECT_FALSE(ParseDoneRecord(bad).has_value()) << bad;
  }
}

TEST(ZkPathTest, BreakRecordNamesCarryTheKeyAndTheirEnd) {
  EXPECT_EQ(BreaksDir("/dlock"), "/dlock/%dlock-breaks");
  EXPECT_FALSE(DecodeSegment(kBreaksDirName).has_value()) << "the directory decodes to a key";
  EXPECT_EQ(*BreakNodePrefix("jobs/nightly", 1700000000000), "jobs%2Fnightly%-1700000000000-");
  EXPECT_EQ(*BreakNodePrefix("/a", std::nullopt), "a%-ever-");
  EXPECT_EQ(BreakNodePrefix("/", 1).status().code(), StatusCode::kInvalidArgument);
  // Keys with the separators in them come back whole, with the sequence
  // ZooKeeper appends.
  for (const std::string key : {"a", "a-b%-c", "%-", "x/y-1-2", ".", "p%_ *\xff"}) {
    for (const std::optional<std::int64_t> end : {std::optional<std::int64_t>(42),
                                                  std::optional<std::int64_t>()}) {
      const std::string name = *BreakNodePrefix(key, end) + "0000000007";
      auto parsed = ParseBreakNode(name);
      ASSERT_TRUE(parsed.has_value()) << name;
      EXPECT_EQ(parsed->key, key) << name;
      EXPECT_EQ(parsed->keep_until_unix_ms, end) << name;
      EXPECT_TRUE(NormalizeChroot("/" + name).ok()) << name << " breaks the path rules";
    }
  }
  for (const std::string bad : {"", "a", "a%-", "a%-12", "%-12-0000000001", "a%-x-0000000001",
                                "a%-012-0000000001", "a%zz%-1-0000000001", "a%-ever-",
                                "a%-ever-123", "a%-ever-00000000x1"}) {
    EXPECT_FALSE(ParseBreakNode(bad).has_value()) << "'" << bad << "' read as a record";
  }
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
  // A sharing node says its limit; to Curator it is one more contender.
  EXPECT_EQ(LockNodePrefix(owner, 3), "_c_01234567-89ab-cdef-fedc-ba9876543210-n3-lock-");
  auto shared = ParseLockNode(LockNodePrefix(owner, 0xFFFFFFFFu) + "0000000043");
  ASSERT_TRUE(shared.has_value());
  EXPECT_EQ(shared->limit, 0xFFFFFFFFu);
  EXPECT_EQ(shared->guid, GuidOf(owner));
  EXPECT_EQ(shared->sequence, 43);
  EXPECT_EQ(ParseLockNode(LockNodePrefix(owner) + "0000000042")->limit, 1u);
  // A lock-delay too, after the limit.
  EXPECT_EQ(LockNodePrefix(owner, 3, 1500),
            "_c_01234567-89ab-cdef-fedc-ba9876543210-n3-d1500-lock-");
  auto delayed = ParseLockNode(LockNodePrefix(owner, 1, 250) + "0000000044");
  ASSERT_TRUE(delayed.has_value());
  EXPECT_EQ(delayed->delay_ms, 250u);
  EXPECT_EQ(delayed->limit, 1u);
  EXPECT_EQ(delayed->guid, GuidOf(owner));
  auto both = ParseLockNode(LockNodePrefix(owner, 3, 1500) + "0000000045");
  ASSERT_TRUE(both.has_value());
  EXPECT_EQ(both->limit, 3u);
  EXPECT_EQ(both->delay_ms, 1500u);
  for (const char* bad : {"-d0-", "-d-", "-d1500-n3-", "-d15x-", "-n3-d1500-d1-"}) {
    auto n = ParseLockNode("_c_01234567-89ab-cdef-fedc-ba9876543210" + std::string(bad) +
                           "lock-0000000001");
    ASSERT_TRUE(n.has_value()) << bad;
    EXPECT_EQ(n->guid, "") << bad << ": an unknown tag names no dlock owner";
    EXPECT_EQ(n->delay_ms, 0u) << bad;
  }
  auto odd = ParseLockNode("_c_01234567-89ab-cdef-fedc-ba9876543210-x-lock-0000000001");
  ASSERT_TRUE(odd.has_value()) << "still a contender";
  EXPECT_EQ(odd->limit, 1u) << "an unknown tag is exclusive";
  EXPECT_EQ(odd->guid, "");
  std::vector<LockNode> q(4);
  for (auto& n : q) n.limit = 0xFFFFFFFFu;
  EXPECT_EQ(HolderCount(q), 4u) << "readers share";
  q[2].limit = 1;
  EXPECT_EQ(HolderCount(q), 2u) << "a writer waits for the readers ahead, and those behind it";
  q[0].limit = 2;
  EXPECT_EQ(HolderCount(q), 2u);
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
