// Credentials handed to the C client between two connection attempts. After
// an attempt fails (a member refused or closed the connection) the client's
// state is 0 until its next attempt, and zoo_add_auth refuses credentials
// then (ZINVALIDSTATE) though nothing is wrong. The suite once failed so
// under load: a break on the secured ensemble reported "the session expired"
// for a session not a millisecond old. No server here: a socket that is
// bound but not listening refuses, and one that listens takes the connection
// and never answers, which keeps an attempt in progress.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "backends/zookeeper/zk_session.h"
#include "eventually.h"
#include "loopback_socket.h"

namespace dlock::zookeeper {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing_support::LoopbackSocket;

// A handle whose only host refuses, caught between two attempts.
zhandle_t* BetweenAttempts(const LoopbackSocket& refusing) {
  zoo_set_debug_level(static_cast<ZooLogLevel>(0));
  zhandle_t* zh = zookeeper_init(refusing.host().c_str(), nullptr, 10'000, nullptr, nullptr, 0);
  if (zh == nullptr) return nullptr;
  if (!testing_support::Eventually([&] { return zoo_state(zh) == 0; }, seconds(10))) {
    zookeeper_close(zh);
    return nullptr;
  }
  return zh;
}

TEST(ZooKeeperCredentialsTest, AreTakenOnceTheNextAttemptBegins) {
  LoopbackSocket member;
  ASSERT_NE(member.port(), 0);
  zhandle_t* zh = BetweenAttempts(member);
  ASSERT_NE(zh, nullptr) << "the client never tried the refusing host";
  // The member starts taking connections while the credentials wait.
  std::thread opens([&] {
    std::this_thread::sleep_for(milliseconds(100));
    EXPECT_TRUE(member.Listen());
  });
  const int rc = AddCredentials(zh, "dlock:secret", seconds(30));
  opens.join();
  EXPECT_EQ(rc, ZOK) << zerror(rc);
  zookeeper_close(zh);
}

TEST(ZooKeeperCredentialsTest, NobodyTakingAConnectionIsReportedAsSuch) {
  LoopbackSocket member;  // never listens
  ASSERT_NE(member.port(), 0);
  auto s = Session::Start(member.host(), seconds(10), DefaultClock(), {}, {},
                          Identity{"dlock", "secret", {}}, milliseconds(300));
  // An attempt may be caught under way (credentials taken: the session then
  // waits to connect); otherwise the error says what is wrong.
  if (!s.ok()) {
    EXPECT_EQ(s.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(s.status().message().find("answered within 300ms"), std::string::npos)
        << s.status().ToString();
    EXPECT_EQ(s.status().message().find("expired"), std::string::npos) << s.status().ToString();
  }
}

}  // namespace
}  // namespace dlock::zookeeper
