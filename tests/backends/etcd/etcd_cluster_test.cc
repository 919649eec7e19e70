// The etcd backend while the fixture cluster's members die, stop and come
// back (scripts/servers/etcd.sh kill|pause|resume|restart). Each test leaves
// the cluster whole and healthy again.
#include <atomic>
#include <iostream>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "etcd_test_util.h"
#include "eventually.h"
#include "timing.h"

namespace dlock::etcd::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

AcquireOptions Opts(milliseconds ttl, milliseconds wait = milliseconds(0)) {
  AcquireOptions o;
  o.ttl = ttl;
  o.wait = wait;
  return o;
}

TEST(EtcdClusterTest, KillingTheLeaderWhileALockIsHeld) {
  const std::string name = UniqueName("leader-kill");
  auto holder_client = NewClient();
  std::atomic<bool> lost{false};
  // 5 s: a leader change (a 500 ms election, the clients finding the new
  // leader) must fit, with room, between two renewals even on a loaded
  // machine, where the members themselves wait for a CPU.
  AcquireOptions o = Opts(seconds(5));
  o.on_lost = [&](const Status&) { lost = true; };
  auto held = holder_client->TryAcquire(name, o);
  ASSERT_TRUE(held.ok()) << held.status().ToString();

  // A contender tries all along; any grant while the holder still believes
  // in its lease is a double grant.
  std::atomic<bool> stop{false};
  std::atomic<int> double_grants{0};
  std::atomic<int> contender_attempts{0};
  std::jthread contender([&] {
    auto c = NewClient();
    while (!stop) {
      auto r = c->TryAcquire(name, Opts(seconds(3)));
      ++contender_attempts;
      if (r.ok()) {
        if (held->Check().ok()) ++double_grants;
        (void)r->Release();
      }
      std::this_thread::sleep_for(milliseconds(50));
    }
  });
  // A healthy client going about its business must not notice.
  std::atomic<int> cycles{0};
  std::mutex errors_mu;
  std::vector<std::string> errors;
  std::jthread busy([&] {
    auto c = NewClient();
    const std::string other = UniqueName("leader-kill-busy");
    while (!stop) {
      auto r = c->Acquire(other, Opts(seconds(3), seconds(10)));
      if (!r.ok()) {
        std::lock_guard l(errors_mu);
        errors.push_back(r.status().ToString());
        continue;
      }
      ++cycles;
      Status s = r->Release();
      if (!s.ok()) {
        std::lock_guard l(errors_mu);
        errors.push_back(s.ToString());
      }
    }
  });

  // Whatever ends this test, the threads stop first (then they are joined).
  struct StopOnExit {
    std::atomic<bool>& stop;
    ~StopOnExit() { stop = true; }
  } stop_on_exit{stop};

  std::this_thread::sleep_for(milliseconds(300));
  const std::string leader = Cluster("leader");
  ASSERT_FALSE(leader.empty());
  Cluster("kill", leader);
  const int cycles_at_kill = cycles.load();
  std::this_thread::sleep_for(seconds(6));  // past the 5 s TTL, through the election
  // Both clients carry on after it; a loaded machine may take a while to
  // show that, a stalled client never will.
  testing_support::Eventually(
      [&] { return cycles.load() > cycles_at_kill + 5 && contender_attempts.load() > 10; },
      seconds(20), milliseconds(50));
  stop = true;
  contender.join();
  busy.join();

  std::cout << "leader n" << leader << " killed; busy client: " << cycles.load() - cycles_at_kill
            << " cycles since; contender: " << contender_attempts.load() << " attempts\n";
  EXPECT_EQ(double_grants.load(), 0);
  EXPECT_GT(contender_attempts.load(), 10);
  EXPECT_FALSE(lost.load()) << "the holder lost its lease across a leader change";
  EXPECT_TRUE(held->Check().ok()) << held->Check().ToString();
  EXPECT_GT(cycles.load(), cycles_at_kill + 5) << "the busy client stalled";
  for (const auto& e : errors) ADD_FAILURE() << "a healthy client saw: " << e;

  const FencingToken before = held->token();
  ASSERT_TRUE(held->Release().ok());
  auto next = NewClient()->TryAcquire(name, Opts(seconds(3)));
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_GT(next->token(), before);

  Cluster("restart", leader);
  Cluster("health");
}

TEST(EtcdClusterTest, QuorumLossFailsAcquireByItsDeadlineAndServiceReturns) {
  const std::string name = UniqueName("quorum");
  // Short attempts so that stopped members are given up on quickly.
  constexpr milliseconds kAttemptTimeout{1500};
  const std::string uri = ClusterUri() + "?timeout=1500ms";
  auto holder_client = NewClient(uri);
  std::atomic<std::int64_t> lost_at_ns{0};
  constexpr milliseconds kTtl{2000};
  AcquireOptions o = Opts(kTtl);
  o.on_lost = [&](const Status&) {
    lost_at_ns = MonotonicClock::now().time_since_epoch().count();
  };
  auto held = holder_client->TryAcquire(name + "-held", o);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  auto client = NewClient(uri);
  ASSERT_TRUE(client);

  // Stop two of three members: the third can serve nothing that needs Raft.
  Cluster("pause", "1");
  Cluster("pause", "2");
  constexpr milliseconds kWait{2000};
  const TimePoint start = MonotonicClock::now();
  auto r = client->Acquire(name, Opts(seconds(3), kWait));
  const auto took = MonotonicClock::now() - start;
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable)
      << r.status().ToString() << "; the members now:\n" << Cluster("states");
  const std::string msg = r.status().message();
  EXPECT_TRUE(msg.find("no leader") != std::string::npos ||
              msg.find("no answer") != std::string::npos ||
              msg.find("quorum") != std::string::npos)
      << msg;
  // An attempt is cut short at the deadline; one that ran its own course
  // past it would take up to a whole attempt's timeout more. Half of that
  // is the slack.
  EXPECT_LT(took, kWait + kAttemptTimeout / 2) << "the acquire overran its 2 s deadline";
  std::cout << "acquire without quorum returned after " << testing_support::Millis(took)
            << " ms: " << msg << "\n";

  // The holder cannot renew: Check() says lost from valid_until on, and the
  // callback follows within a renewal attempt (a quarter of the TTL) and a
  // timer's lateness; not by the end of an attempt left to run its whole
  // timeout.
  const Duration timer_late = testing_support::MeasureSlowest(5, [] {
    std::this_thread::sleep_for(milliseconds(1));
  }) - milliseconds(1);
  const auto late = testing_support::FastPath(timer_late, milliseconds(50),
                                              kAttemptTimeout - kTtl / 4);
  const TimePoint valid_until = held->valid_until();
  std::this_thread::sleep_until(valid_until);
  EXPECT_EQ(held->Check().code(), StatusCode::kLeaseLost);
  ASSERT_TRUE(testing_support::Eventually([&] { return lost_at_ns.load() != 0; },
                                          milliseconds(10'000)))
      << "never reported lost";
  EXPECT_LE(lost_at_ns.load(),
            (valid_until + kTtl / 4 + late.limit).time_since_epoch().count())
      << late;

  Cluster("resume", "1");
  Cluster("resume", "2");
  const TimePoint back = MonotonicClock::now();
  auto again = client->Acquire(name, Opts(seconds(3), seconds(15)));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_LT(MonotonicClock::now() - back, seconds(10));
  std::cout << "service back " << testing_support::Millis(MonotonicClock::now() - back)
            << " ms after the members resumed\n";
  EXPECT_GT(again->token(), held->token());
  Cluster("health");
}

}  // namespace
}  // namespace dlock::etcd::testing
