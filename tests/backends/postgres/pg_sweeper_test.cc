// The sweeper's steps never wait on the server (pg_sweeper.h): it runs on
// the LISTEN thread, which must go on waking waiters. No server needed: a
// port that never answers, and one that refuses.
#include "backends/postgres/pg_sweeper.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "loopback_socket.h"

namespace dlock::postgres {
namespace {

using std::chrono::milliseconds;
using Steady = std::chrono::steady_clock;
using testing_support::LoopbackSocket;

// A step that waited for the silent server would take the whole call
// timeout; one that does not takes microseconds. Half of it tells them
// apart on any machine.
constexpr milliseconds kCallTimeout{3000};

ConnInfo At(const LoopbackSocket& server) {
  return {{"host", "127.0.0.1"},
          {"port", std::to_string(server.port())},
          {"dbname", "dlock"},
          {"user", "dlock"},
          {"sslmode", "disable"}};
}

// Steps the sweeper as the listener's thread would, from its first round
// until it asks for nothing before its next one; true when every step came
// back within half the call timeout.
bool RunRound(Sweeper& sweeper, Listener::Chore::Next next, milliseconds* slowest) {
  // The first round comes kSweepEvery after the release.
  std::this_thread::sleep_until(next.at);
  do {
    const auto started = Steady::now();
    next = sweeper.Step();
    *slowest =
        std::max(*slowest, std::chrono::duration_cast<milliseconds>(Steady::now() - started));
    if (next.fd >= 0) PollFd(next.fd, next.events, next.at);
  } while (next.fd >= 0);
  return *slowest < kCallTimeout / 2;
}

TEST(PgSweeperTest, AServerThatNeverAnswersHoldsUpNoStep) {
  LoopbackSocket silent(LoopbackSocket::Start::kListening);
  ASSERT_NE(silent.port(), 0);
  Sweeper sweeper(At(silent), "SELECT 1", "sweep", kCallTimeout, "test");
  ASSERT_TRUE(sweeper.NoteRelease()) << "a first release must plan a round";
  EXPECT_FALSE(sweeper.NoteRelease()) << "a second release planned another round";
  const auto released = Steady::now();
  const Listener::Chore::Next first = sweeper.Step();
  ASSERT_EQ(first.fd, -1);
  ASSERT_GE(first.at, released + kSweepEvery - milliseconds(100));
  milliseconds slowest{0};
  EXPECT_TRUE(RunRound(sweeper, first, &slowest)) << "a step took " << slowest.count() << " ms";
  // The round failed (no connection in the call timeout): the rows wait for
  // the next one.
  EXPECT_TRUE(sweeper.Released());
  const Listener::Chore::Next after = sweeper.Step();
  EXPECT_EQ(after.fd, -1);
  EXPECT_GE(after.at, Steady::now() + kSweepEvery / 2) << "no next round planned";
  EXPECT_FALSE(sweeper.LastBatch(Steady::now() + milliseconds(200)))
      << "a sweeper with no connection claimed the last batch";
}

TEST(PgSweeperTest, ARefusedConnectionEndsTheRoundAtOnce) {
  LoopbackSocket refusing(LoopbackSocket::Start::kRefusing);
  ASSERT_NE(refusing.port(), 0);
  Sweeper sweeper(At(refusing), "SELECT 1", "sweep", kCallTimeout, "test");
  ASSERT_TRUE(sweeper.NoteRelease());
  milliseconds slowest{0};
  EXPECT_TRUE(RunRound(sweeper, sweeper.Step(), &slowest))
      << "a step took " << slowest.count() << " ms";
  EXPECT_TRUE(sweeper.Released());
}

}  // namespace
}  // namespace dlock::postgres
