// The ZooKeeper store with credentials, against the secured ensemble fixture
// (scripts/servers/zookeeper.sh start-secure): nodes dlock creates carry an
// ACL of the creating identity and the URI's acl_admin only, so a client
// without the credentials, or with others, can neither delete nor change a
// held lock's node, nor lock under dlock's nodes; and bad credentials in a
// URI are refused with one line.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "backends/zookeeper/zk_path.h"
#include "backends/zookeeper/zk_session.h"
#include "backends/zookeeper/zookeeper_backend.h"
#include "core/credentials.h"
#include "core/uri.h"
#include "dlock/client.h"
#include "zk_fixture.h"

namespace dlock::zookeeper {
namespace {

using std::chrono::seconds;
using testing::Env;
using testing::FixtureUri;

std::string ReadLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

ZkOptions SecureOptions() {
  auto uri = internal::ParseUri(FixtureUri());
  EXPECT_TRUE(uri.ok()) << "no fixture: run through ctest (DLOCK_TEST_URI_FILE)";
  EXPECT_TRUE(internal::ResolveCredentials(*uri).ok());
  auto o = OptionsFromUri(*uri);
  EXPECT_TRUE(o.ok()) << o.status().ToString();
  return *o;
}

// zk://HOSTS/CHROOT with `userinfo` ("" or "user:password@") in front.
std::string UriAs(const std::string& userinfo) {
  const ZkOptions o = SecureOptions();
  return "zk://" + userinfo + o.hosts + o.chroot;
}

std::string UniqueKey(std::string_view name) {
  static const std::string run = std::to_string(DefaultRandom()->Next() % 1'000'000'000);
  return "zk-acl/" + run + "/" + std::string(name);
}

// A raw session of some identity, to try what another client could do.
class RawClient {
 public:
  explicit RawClient(Identity identity) {
    auto s = Session::Start(SecureOptions().hosts, seconds(10), DefaultClock(), {}, {}, identity);
    EXPECT_TRUE(s.ok());
    session_ = std::move(*s);
    EXPECT_EQ(session_->WaitConnected(seconds(10)), Session::State::kConnected);
  }
  int Run(const std::shared_ptr<Op>& op) {
    const Reply* r = op->Wait(seconds(10));
    return r == nullptr ? ZOPERATIONTIMEOUT : r->rc;
  }
  // The path of the one contender node under `key`'s lock node.
  std::string HolderNode(const std::string& key) {
    const std::string dir = *LockPath(SecureOptions().chroot, key);
    auto sync = session_->Sync(dir);
    auto op = session_->Children(dir);
    const Reply* r = op->Wait(seconds(10));
    if (r == nullptr || r->rc != ZOK || r->children.size() != 1) return "";
    return dir + "/" + r->children[0];
  }
  Session& session() { return *session_; }

 private:
  std::unique_ptr<Session> session_;
};

Identity Admin() {
  return Identity{"ops", ReadLine(Env("DLOCK_TEST_SERVER_DIR") + "/ops.password"), {}};
}

TEST(ZooKeeperAclTest, OthersCannotDeleteOrChangeAHeldLock) {
  auto client = Client::Connect(FixtureUri());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  const std::string key = UniqueKey("held");
  auto lease = (*client)->Acquire(key, {.ttl = seconds(30)});
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  RawClient admin(Admin());
  const std::string node = admin.HolderNode(key);
  ASSERT_FALSE(node.empty()) << "the admin identity could not list the lock's node";
  const std::string dir = node.substr(0, node.rfind('/'));

  for (const Identity& other : {Identity{}, Identity{"mallory", "guess", {}},
                                Identity{"dlock", "not-the-password", {}}}) {
    SCOPED_TRACE("as '" + other.user + "'");
    RawClient raw(other);
    EXPECT_EQ(raw.Run(raw.session().Delete(node)), ZNOAUTH);
    EXPECT_EQ(raw.Run(raw.session().Set(node, "mine", -1)), ZNOAUTH);
    EXPECT_EQ(raw.Run(raw.session().Get(node)), ZNOAUTH);
    EXPECT_EQ(raw.Run(raw.session().Create(dir + "/_c_x-lock-", "", ZOO_EPHEMERAL_SEQUENTIAL)),
              ZNOAUTH);
  }
  EXPECT_TRUE(lease->Renew().ok()) << "the lease should be untouched";

  // The URI's acl_admin may: an operator's way out of a stuck lock.
  EXPECT_EQ(admin.Run(admin.session().Delete(node)), ZOK);
}

TEST(ZooKeeperAclTest, WrongOrMissingCredentialsArePermissionDenied) {
  auto holder = Client::Connect(FixtureUri());
  ASSERT_TRUE(holder.ok());
  const std::string key = UniqueKey("refused");
  auto lease = (*holder)->Acquire(key, {.ttl = seconds(30)});
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  for (const std::string& userinfo : {std::string(), std::string("dlock:Pa55-not-this@"),
                                      std::string("mallory:guess@")}) {
    SCOPED_TRACE(userinfo.empty() ? "anonymous" : userinfo);
    auto other = Client::Connect(UriAs(userinfo));
    ASSERT_TRUE(other.ok()) << other.status().ToString();
    auto refused = (*other)->TryAcquire(key, {.ttl = seconds(30)});
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied) << refused.status().ToString();
    EXPECT_EQ(refused.status().message().find("Pa55"), std::string::npos)
        << "a password in the message: " << refused.status().message();
    EXPECT_EQ(refused.status().message().find('\n'), std::string::npos);
  }
}

TEST(ZooKeeperAclTest, BadCredentialsInTheUriAreOneLineErrors) {
  const ZkOptions o = SecureOptions();
  const std::string rest = o.hosts + o.chroot;
  for (const std::string& uri :
       {"zk://dlock@" + rest, "zk://:secret@" + rest,
        "zk://dlock:pw@" + rest + "?acl_admin=ops", "zk://" + rest + "?acl_admin=ops:" + std::string(27, 'a') + "=",
        "zk://dlock:pw@" + rest + "?cacert=/etc/ssl/certs/ca-certificates.crt"}) {
    SCOPED_TRACE(uri);
    auto client = Client::Connect(uri);
    ASSERT_FALSE(client.ok());
    EXPECT_EQ(client.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(client.status().message().find("secret"), std::string::npos);
    EXPECT_EQ(client.status().message().find('\n'), std::string::npos);
  }
  auto tls = Client::Connect("zks://" + rest);
  ASSERT_FALSE(tls.ok());
  EXPECT_NE(tls.status().message().find("no TLS"), std::string::npos) << tls.status().message();
}

}  // namespace
}  // namespace dlock::zookeeper
