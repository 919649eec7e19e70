// The ZooKeeper C client resolves its host list again on every poll of its
// I/O thread unless told otherwise (zoo_set_servers_resolution_delay); on a
// contended key that was ~40 % of a CPU for four clients (getaddrinfo reads
// files and makes a netlink query each time). This test counts the
// resolutions a session makes while it works, by interposing getaddrinfo
// (the executable's definition wins over libc's for the C client too).
// Its own executable: the interposer must not meet the sanitizers' own
// getaddrinfo interceptors, so under them it is not built (CMakeLists.txt).
#include <dlfcn.h>
#include <netdb.h>

#include <atomic>

#include <gtest/gtest.h>

#include "backends/zookeeper/zk_session.h"
#include "zk_fixture.h"

namespace {
std::atomic<int> resolutions{0};
}  // namespace

extern "C" int getaddrinfo(const char* node, const char* service, const struct addrinfo* hints,
                           struct addrinfo** res) {
  using Fn = int (*)(const char*, const char*, const struct addrinfo*, struct addrinfo**);
  static const Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "getaddrinfo"));
  resolutions.fetch_add(1);
  return real(node, service, hints, res);
}

namespace dlock::zookeeper {
namespace {

using std::chrono::seconds;

TEST(ZooKeeperSession, TheHostListIsNotResolvedOnEveryPoll) {
  auto session = Session::Start(testing::FixtureOptions().hosts, seconds(10), DefaultClock(), {}, {});
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  ASSERT_EQ((*session)->WaitConnected(seconds(10)), Session::State::kConnected);
  ASSERT_GT(resolutions.load(), 0) << "the interposer saw no resolution at all: it tests nothing";
  const int before = resolutions.load();
  for (int i = 0; i < 200; ++i) {
    auto op = (*session)->Exists("/", false);
    ASSERT_NE(op->Wait(seconds(5)), nullptr);
  }
  EXPECT_LE(resolutions.load() - before, 2) << "200 requests resolved the host list "
                                            << resolutions.load() - before << " times";
}

}  // namespace
}  // namespace dlock::zookeeper
