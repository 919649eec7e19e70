// The etcd key layout (shared with etcd's concurrency.Mutex and `etcdctl
// lock`) and the etcd:// URI, without a server.
#include "backends/etcd/etcd_keys.h"

#include <gtest/gtest.h>

namespace dlock::etcd {
namespace {

Result<EtcdOptions> Parse(std::string_view text) {
  auto uri = internal::ParseUri(text);
  if (!uri.ok()) return uri.status();
  return OptionsFromUri(*uri);
}

TEST(EtcdKeysTest, LayoutMatchesEtcdsMutex) {
  // concurrency.NewMutex(s, "jobs/a") puts "jobs/a/" + fmt.Sprintf("%x", lease).
  EXPECT_EQ(QueuePrefix("", "jobs/a"), "jobs/a/");
  EXPECT_EQ(QueuePrefix("app/", "jobs/a"), "app/jobs/a/");
  EXPECT_EQ(MemberKey("jobs/a/", 0x694d7a1b2c3d4e5f), "jobs/a/694d7a1b2c3d4e5f");
  EXPECT_EQ(LeaseHex(0x1f), "1f");
}

TEST(EtcdKeysTest, LongerNamesAreNotQueueMembers) {
  EXPECT_TRUE(IsQueueMember("a/", "a/694d"));
  EXPECT_FALSE(IsQueueMember("a/", "a/b/694d")) << "a member of lock a/b";
  EXPECT_FALSE(IsQueueMember("a/", "a//694d")) << "a member of lock a/";
  EXPECT_FALSE(IsQueueMember("a/", "a/"));
  EXPECT_FALSE(IsQueueMember("a/", "ab/694d"));
}

TEST(EtcdKeysTest, PrefixRangeEndCoversExactlyThePrefix) {
  EXPECT_EQ(PrefixRangeEnd("a/"), "a0");
  EXPECT_EQ(PrefixRangeEnd("a\xff"), "b");
  EXPECT_EQ(PrefixRangeEnd(""), std::string(1, '\0'));
  EXPECT_EQ(PrefixRangeEnd("\xff\xff"), std::string(1, '\0'));
}

TEST(EtcdKeysTest, LockNameOfKeys) {
  EXPECT_EQ(LockNameOf("", "jobs/a/694d"), "jobs/a");
  EXPECT_EQ(LockNameOf("app/", "app/jobs/a/694d"), "jobs/a");
  EXPECT_EQ(LockNameOf("app/", "other/jobs/a/694d"), std::nullopt);
  EXPECT_EQ(LockNameOf("", "jobs/a/not-hex"), std::nullopt);
  EXPECT_EQ(LockNameOf("", "plainkey"), std::nullopt);
  EXPECT_EQ(LockNameOf("", "/694d"), std::nullopt);
  const std::string owner(32, 'a');
  EXPECT_EQ(LockNameOf("", "jobs/a/694d-" + owner), "jobs/a") << "a second owner of a session";
  EXPECT_EQ(LockNameOf("", "jobs/a/694d-abc"), std::nullopt);
  EXPECT_EQ(LockNameOf("", "jobs/a/-" + owner), std::nullopt);
}

TEST(EtcdKeysTest, DoneKeysNeverMeetLockKeys) {
  EXPECT_EQ(DoneKey("", "jobs/a"), ".dlock-done:jobs%2Fa");
  EXPECT_EQ(DoneKey("app/", "50%/x"), "app/.dlock-done:50%25%2Fx");
  EXPECT_NE(DoneKey("", "a/b"), DoneKey("", "a%2Fb")) << "the escape is reversible";
  // No '/' after the root: in no lock's queue range, never a lock's member.
  for (std::string name : {"a", "a/b", "a/694d", ".dlock-done:a", "/", "x/0123abcd"}) {
    const std::string k = DoneKey("app/", name);
    EXPECT_EQ(k.find('/', 4), std::string::npos) << k;
    EXPECT_EQ(LockNameOf("app/", k), std::nullopt) << k;
    EXPECT_FALSE(k.starts_with(QueuePrefix("app/", name))) << k;
    EXPECT_FALSE(k.starts_with(QueuePrefix("app/", ".dlock-done:a"))) << k;
  }
}

// Lock-delay markers: outside every queue (etcdctl and Go's Mutex never see
// them), one range per lock name, and back to the name and member.
TEST(EtcdKeysTest, DelayMarkersStayOutOfQueuesAndApartPerName) {
  EXPECT_EQ(DelayPrefix("", "jobs/a"), ".dlock-delay:jobs%2Fa:");
  EXPECT_EQ(DelayPrefix("app/", "50%:x"), "app/.dlock-delay:50%25%3Ax:");
  EXPECT_EQ(DelayKey(DelayPrefix("app/", "a"), QueuePrefix("app/", "a"), "app/a/694d"),
            "app/.dlock-delay:a:694d");
  const std::string owner = "0123456789abcdef0123456789abcdef";
  EXPECT_EQ(DelayKey(DelayPrefix("", "a"), QueuePrefix("", "a"), "a/694d-" + owner),
            ".dlock-delay:a:694d-" + owner);
  for (std::string name : {"a", "a/b", "a:b", "a%3Ab", "a/694d", ".dlock-delay:a", "/", ":"}) {
    const std::string k =
        DelayKey(DelayPrefix("app/", name), QueuePrefix("app/", name), QueuePrefix("app/", name) + "694d");
    EXPECT_EQ(k.find('/', 4), std::string::npos) << k;
    EXPECT_EQ(LockNameOf("app/", k), std::nullopt) << k;
    EXPECT_FALSE(k.starts_with(QueuePrefix("app/", name))) << k;
    EXPECT_EQ(DelayLockNameOf("app/", k), name) << k;
    EXPECT_TRUE(k.starts_with(DelayListPrefix("app/", name.substr(0, 1)))) << k;
    EXPECT_NE(k, DoneKey("app/", name));
  }
  // A name's range holds its own markers only, not those of names it is a
  // prefix of.
  for (std::string longer : {"a:b", "a/b", "ab"}) {
    const std::string k = DelayPrefix("", longer) + "694d";
    EXPECT_FALSE(k.starts_with(DelayPrefix("", "a"))) << k;
    EXPECT_TRUE(k.starts_with(DelayListPrefix("", "a"))) << k;
  }
  EXPECT_EQ(DelayLockNameOf("", ".dlock-done:a"), std::nullopt);
  EXPECT_EQ(DelayLockNameOf("", ".dlock-delay:a"), std::nullopt) << "no member";
  EXPECT_EQ(DelayLockNameOf("", ".dlock-delay:a%zz:1"), std::nullopt);

  MarkerValue m = DecodeMarker(EncodeMarker(1234, EncodeValue(owner, 3, "host:1")));
  EXPECT_EQ(m.member_revision, 1234);
  EXPECT_EQ(m.member.owner_hex, owner);
  EXPECT_EQ(m.member.limit, 3u);
  EXPECT_EQ(m.member.label, "host:1");
  m = DecodeMarker(EncodeMarker(7, owner));
  EXPECT_EQ(m.member_revision, 7);
  EXPECT_EQ(m.member.limit, 1u);
  EXPECT_EQ(DecodeMarker("x\n").member_revision, 0);
  EXPECT_EQ(DecodeMarker("").member.limit, 1u);
}

TEST(EtcdKeysTest, BreakRecordsStayOutOfQueuesAndApartPerName) {
  const std::string k = BreakKey("r/", "jobs/a:b", 0x18c, std::string(32, 'f'));
  EXPECT_EQ(k, "r/.dlock-breaks:jobs%2Fa%3Ab:000000000000018c-" + std::string(32, 'f'));
  EXPECT_EQ(BreakLockNameOf("r/", k), "jobs/a:b");
  EXPECT_EQ(LockNameOf("r/", k), std::nullopt) << "a record is read as a queue member";
  EXPECT_EQ(DelayLockNameOf("r/", k), std::nullopt);
  EXPECT_EQ(BreakLockNameOf("r/", DelayKey(DelayPrefix("r/", "a"), "r/a/", "r/a/1f")),
            std::nullopt);
  // The range of a name prefix holds the records of every name that starts
  // with it; a name's own records sort by time.
  EXPECT_TRUE(k.starts_with(BreaksListPrefix("r/", "jobs/")));
  EXPECT_FALSE(k.starts_with(BreaksListPrefix("r/", "jobs/b")));
  EXPECT_LT(BreakKey("r/", "a", 9, "0"), BreakKey("r/", "a", 10, "0"));
  EXPECT_FALSE(BreakKey("r/", "a:x", 1, "0").starts_with(BreaksListPrefix("r/", "a") + ":"))
      << "a name's records range holds a longer name's";
}

TEST(EtcdKeysTest, MemberValuesCarryLimitAndLabel) {
  const std::string owner = "0123456789abcdef0123456789abcdef";
  EXPECT_EQ(EncodeValue(owner, 1, ""), owner) << "the old format for a plain mutex";
  MemberValue v = DecodeValue(EncodeValue(owner, 0xFFFFFFFFu, "host:1\nx"));
  EXPECT_EQ(v.owner_hex, owner);
  EXPECT_EQ(v.limit, 0xFFFFFFFFu);
  EXPECT_EQ(v.label, "host:1\nx");
  v = DecodeValue(owner);  // written by an older dlock
  EXPECT_EQ(v.owner_hex, owner);
  EXPECT_EQ(v.limit, 1u);
  v = DecodeValue("");  // Go's Mutex, etcdctl lock
  EXPECT_EQ(v.owner_hex, "");
  EXPECT_EQ(v.limit, 1u);
  EXPECT_EQ(DecodeValue(owner + "\nx\nlabel").limit, 1u) << "unreadable: exclusive";
  EXPECT_EQ(DecodeValue(owner + "\n0\n").limit, 1u);
}

TEST(EtcdUriTest, EndpointsPrefixAndTimeout) {
  auto o = Parse("etcd://h1:2379,h2,[::1]:2380/app/locks?timeout=2s");
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->endpoints, (std::vector<std::string>{"h1:2379", "h2:2379", "[::1]:2380"}));
  EXPECT_EQ(o->root, "app/locks/");
  EXPECT_EQ(o->request_timeout, std::chrono::seconds(2));

  auto bare = Parse("etcd://127.0.0.1:2379");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->root, "");
  auto slash = Parse("etcd://127.0.0.1:2379/app/");
  ASSERT_TRUE(slash.ok());
  EXPECT_EQ(slash->root, "app/");
}

TEST(EtcdUriTest, EtcdsTakesTlsFilesAndAUser) {
  auto o = Parse("etcds://dlock:s3cret@h1:2379,h2/app?cacert=/ca.pem&cert=/c.pem&key=/c.key");
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_TRUE(o->security.tls);
  EXPECT_EQ(o->security.tls_files.ca_file, "/ca.pem");
  EXPECT_EQ(o->security.tls_files.cert_file, "/c.pem");
  EXPECT_EQ(o->security.tls_files.key_file, "/c.key");
  EXPECT_EQ(o->security.user, "dlock");
  EXPECT_EQ(o->security.password, "s3cret");
  EXPECT_EQ(o->root, "app/");
  auto plain = Parse("etcd://h1:2379");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->security.tls);
  EXPECT_EQ(plain->security.user, "");
  // System roots, no client certificate, known by the password alone.
  auto bare = Parse("etcds://h1:2379");
  ASSERT_TRUE(bare.ok());
  EXPECT_TRUE(bare->security.tls);
  EXPECT_EQ(bare->security.tls_files.ca_file, "");
}

TEST(EtcdUriTest, BadInputIsRefusedWithAClearMessage) {
  struct Case {
    const char* uri;
    const char* says;
  };
  for (const Case& c : {
           Case{"etcd://", "names no host"},
           Case{"etcd://h1:2379,,h2:2379", "empty host"},
           Case{"etcd://h1:http", "port 'http'"},
           Case{"etcd://h1:70000", "1 to 65535"},
           Case{"etcd://user@h1:2379", "but no password"},
           Case{"etcd://:pw@h1:2379", "no user name"},
           Case{"etcd://h1:2379?cacert=/ca.pem", "use etcds://"},
           Case{"etcds://h1:2379?cert=/c.pem", "come together"},
           Case{"etcds://h1:2379?cacert=", "empty"},
           Case{"etcd://h1:2379/bad%00prefix", "NUL or control byte"},
           Case{"etcd://h1:2379/bad%0aprefix", "NUL or control byte"},
           Case{"etcd://h1:2379/bad%ffprefix", "not valid UTF-8"},
           Case{"etcd://h1:2379?tiemout=1s", "unknown parameter 'tiemout'"},
           Case{"etcd://h1:2379?timeout=fast", "timeout"},
           Case{"etcd://h1:2379?timeout=1ms", "below 100ms"},
       }) {
    auto o = Parse(c.uri);
    ASSERT_FALSE(o.ok()) << c.uri;
    EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument) << c.uri;
    EXPECT_NE(o.status().message().find(c.says), std::string::npos)
        << c.uri << ": " << o.status().message();
    EXPECT_EQ(o.status().message().find("pw"), std::string::npos) << "password leaked";
  }
}

}  // namespace
}  // namespace dlock::etcd
