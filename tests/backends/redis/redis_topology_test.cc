// Tests that need processes or servers of their own: a holder process that
// is SIGSTOPped past its lease (fixture server), a password-protected
// server, a Sentinel failover (primary, replica, three sentinels), and
// Redlock over three independent nodes.
//
// The binary doubles as the stopped holder: `redis_backend_test --holder
// URI KEY` acquires KEY, prints its token, and on a line from stdin makes a
// fenced write with that token and prints the outcome.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <thread>

#include "backends/redis/redis_backend.h"
#include "backends/redis/redis_keys.h"
#include "backends/redis/redis_slots.h"
#include "dlock/fence.h"
#include "dlock/fence_redis.h"
#include "redis_test_util.h"
#include "timing.h"

extern char** environ;

namespace dlock::redis {
namespace {

using std::chrono::milliseconds;
using namespace dlock::redis::testing;

std::string g_self;  // argv[0]

// ------------------------------------------------- the SIGSTOPped holder

int HolderMain(const std::string& uri, const std::string& key) {
  auto client = Client::Connect(uri);
  if (!client.ok()) {
    std::cout << "error " << client.status().ToString() << std::endl;
    return 1;
  }
  // The connection it will write on after resuming, made while it held the
  // lock: a writer in the middle of its work.
  ContextPtr data = Admin(PortOf(uri));
  auto lease = (*client)->TryAcquire(key, Opts(milliseconds(500)));
  if (!lease.ok()) {
    std::cout << "error " << lease.status().ToString() << std::endl;
    return 1;
  }
  std::cout << lease->token() << std::endl;
  std::string line;
  std::getline(std::cin, line);  // the test stops us here, then resumes us
  Status s = fence::Redis::Set(data.get(), key, lease->token(), "data:" + key, "old holder");
  std::cout << s.ToString() << std::endl;
  return 0;
}

TEST(RedisStopped, HolderPausedPastItsLeaseIsFencedOff) {
  const std::string uri = FixtureUri();
  if (uri.empty()) GTEST_SKIP() << "no Redis fixture (run through ctest)";
  const std::string key = UniqueKey("stopped-holder");

  int to_child[2], from_child[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(from_child), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, to_child[0], 0);
  posix_spawn_file_actions_adddup2(&actions, from_child[1], 1);
  posix_spawn_file_actions_addclose(&actions, to_child[1]);
  posix_spawn_file_actions_addclose(&actions, from_child[0]);
  std::string a0 = g_self, a1 = "--holder", a2 = uri, a3 = key;
  char* argv[] = {a0.data(), a1.data(), a2.data(), a3.data(), nullptr};
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, g_self.c_str(), &actions, nullptr, argv, environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  close(to_child[0]);
  close(from_child[1]);
  FILE* out = fdopen(from_child[0], "r");
  auto read_line = [&] {
    char buf[512] = {0};
    if (fgets(buf, sizeof buf, out) == nullptr) return std::string();
    std::string s(buf);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  };

  const std::string first = read_line();
  const FencingToken old_token = std::strtoull(first.c_str(), nullptr, 10);
  ASSERT_GT(old_token, 0u) << "holder said: " << first;
  ASSERT_EQ(kill(pid, SIGSTOP), 0);

  // Its 500 ms lease runs out in Redis while it is stopped; we get the key.
  auto client = NewClient(uri);
  auto lease = client->Acquire(key, Opts(milliseconds(10'000), milliseconds(5000)));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_GT(lease->token(), old_token);
  ContextPtr data = Admin(PortOf(uri));
  ASSERT_TRUE(fence::Redis::Set(data.get(), key, lease->token(), "data:" + key, "new holder").ok());

  // The old holder resumes and writes with its old token: refused.
  ASSERT_EQ(kill(pid, SIGCONT), 0);
  ASSERT_EQ(write(to_child[1], "write\n", 6), 6);
  const std::string verdict = read_line();
  EXPECT_EQ(verdict, fence::StaleToken(old_token, lease->token(), key).ToString());
  EXPECT_EQ(ReplyString(Cmd(data.get(), {"GET", "data:" + key}).get()), "new holder");
  close(to_child[1]);
  fclose(out);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

// ----------------------------------------------------------- passwords

TEST(RedisAuth, WrongOrMissingPasswordIsNamedAndNeverPrinted) {
  Topology t("start-auth", "right-pw-123");
  ASSERT_TRUE(t.ok()) << "could not start redis with a password: " << t.why();
  const std::string port = std::to_string(t.Port("main"));
  Status error;
  EXPECT_EQ(OpenRaw("redis://:wrong-pw-456@127.0.0.1:" + port + "/0", &error), nullptr);
  EXPECT_EQ(error.code(), StatusCode::kPermissionDenied) << error.ToString();
  EXPECT_NE(error.message().find("wrong user name or password"), std::string::npos)
      << error.ToString();
  EXPECT_EQ(error.message().find("wrong-pw-456"), std::string::npos) << error.ToString();

  EXPECT_EQ(OpenRaw("redis://127.0.0.1:" + port + "/0", &error), nullptr);
  EXPECT_EQ(error.code(), StatusCode::kPermissionDenied) << error.ToString();
  EXPECT_NE(error.message().find("requires a password"), std::string::npos) << error.ToString();

  auto backend = OpenRaw(t.uri(), &error);
  ASSERT_NE(backend, nullptr) << error.ToString();
  EXPECT_EQ(backend->Describe().find("right-pw-123"), std::string::npos) << backend->Describe();
  EXPECT_NE(backend->Describe().find(":***@"), std::string::npos) << backend->Describe();
  auto a = backend->TryAcquire({UniqueKey("auth"), OwnerId(1, 1), milliseconds(1000)});
  ASSERT_TRUE(a.ok() && a->granted) << a.status().ToString();
}

// ------------------------------------------------------------ Sentinel

// Until sentinel `s1` names `port` as the primary (or `limit` passes).
bool WaitForPrimary(const Topology& t, int port, milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    ContextPtr s = Admin(t.Port("s1"));
    if (s && s->err == 0) {
      ReplyPtr r = Cmd(s.get(), {"SENTINEL", "get-master-addr-by-name", "dlock-primary"});
      if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
          ReplyString(r->element[1]) == std::to_string(port)) {
        // And the new primary says so itself.
        ContextPtr p = Admin(port);
        ReplyPtr role = p ? Cmd(p.get(), {"ROLE"}) : nullptr;
        if (role && role->type == REDIS_REPLY_ARRAY && ReplyString(role->element[0]) == "master") {
          return true;
        }
      }
    }
    std::this_thread::sleep_for(milliseconds(100));
  }
  return false;
}

TEST(RedisSentinel, WithWaitReplicasTheLockAndCounterSurviveAFailover) {
  Topology t("start-sentinel");
  ASSERT_TRUE(t.ok()) << "could not start the sentinel topology: " << t.why();
  const std::string key = UniqueKey("failover-wait");
  auto holder = NewClient(t.uri() + "?wait_replicas=1&wait_timeout=2s");
  ASSERT_TRUE(holder);
  auto lease = holder->TryAcquire(key, Opts(milliseconds(20'000)));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  const FencingToken token = lease->token();

  ASSERT_TRUE(t.Signal("kill", "p"));
  ASSERT_TRUE(WaitForPrimary(t, t.Port("r"), milliseconds(20'000))) << "no failover";

  // The grant and the counter were on the replica before the primary died.
  ContextPtr promoted = Admin(t.Port("r"));
  const std::string counter = ReplyString(Cmd(promoted.get(), {"GET", SlotCounterName(key)}).get());
  EXPECT_GE(std::strtoull(counter.c_str(), nullptr, 10), token) << "counter: '" << counter << "'";
  auto other = NewClient(t.uri());
  ASSERT_TRUE(other);
  auto refused = other->TryAcquire(key, Opts(milliseconds(20'000)));
  EXPECT_EQ(refused.status().code(), StatusCode::kLockHeld) << refused.status().ToString();
  // The holder's client follows the new primary: it lists the lock there
  // (the first call after the failover may report kUnavailable: that call
  // found its connection dead), and its release lands there.
  Result<std::vector<HolderInfo>> listed = UnavailableError("not tried");
  for (int i = 0; i < 50 && !listed.ok(); ++i) {
    listed = holder->List(key);
    if (!listed.ok()) std::this_thread::sleep_for(milliseconds(100));
  }
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].token, token);
  EXPECT_TRUE(lease->Check().ok()) << lease->Check().ToString();
  EXPECT_TRUE(lease->Release().ok());
  EXPECT_EQ(Cmd(promoted.get(), {"EXISTS", LockName(key)})->integer, 0);
  auto next = other->TryAcquire(key, Opts(milliseconds(20'000)));
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_GT(next->token(), token);
}

// A renewal the replica has not confirmed is no renewal: a failover then
// would leave the lease ending on the promoted replica before the holder
// believes it does.
TEST(RedisSentinel, WithWaitReplicasAnUnreplicatedRenewalFails) {
  Topology t("start-sentinel");
  ASSERT_TRUE(t.ok()) << "could not start the sentinel topology: " << t.why();
  auto backend = OpenRaw(t.uri() + "?wait_replicas=1&wait_timeout=2s");
  ASSERT_NE(backend, nullptr);
  const LeaseRequest lease{UniqueKey("renew-wait"), OwnerId(1, 1), milliseconds(3000)};
  auto granted = backend->TryAcquire(lease);
  ASSERT_TRUE(granted.ok()) << granted.status().ToString();
  ASSERT_TRUE(granted->granted);
  EXPECT_TRUE(backend->Renew({&lease, 1})[0].ok());
  ASSERT_TRUE(t.Signal("pause", "r"));
  const Status renewed = backend->Renew({&lease, 1})[0];
  ASSERT_TRUE(t.Signal("resume", "r"));
  EXPECT_EQ(renewed.code(), StatusCode::kUnavailable) << renewed.ToString();
  EXPECT_NE(renewed.message().find("0 of 1 replicas confirmed it"), std::string::npos)
      << renewed.message();
}

// KeepPlaces through Sentinel, with wait_replicas: the place is kept on
// the primary Sentinel names, in one script call and without a WAIT (a
// place lost in a failover costs its waiter only its turn).
TEST(RedisSentinel, KeepPlacesKeepsAPlaceOnThePrimaryWithoutWaiting) {
  Topology t("start-sentinel");
  ASSERT_TRUE(t.ok()) << "could not start the sentinel topology: " << t.why();
  auto backend = OpenRaw(t.uri() + "?wait_replicas=1&wait_timeout=2s");
  ASSERT_NE(backend, nullptr);
  ASSERT_TRUE(backend->KeepsPlaces());
  const std::string key = UniqueKey("sentinel-keep");
  ASSERT_TRUE(backend->TryAcquire({key, OwnerId(1, 1), milliseconds(20'000)})->granted);
  LeaseRequest waiter{key, OwnerId(2, 2), milliseconds(20'000), milliseconds(3000)};
  auto waiting = backend->Begin(waiter);
  ASSERT_FALSE(waiting->Try()->granted);
  ContextPtr primary = Admin(t.Port("p"));
  auto calls = [&](const std::string& command) {
    const std::string info = ReplyString(Cmd(primary.get(), {"INFO", "commandstats"}).get());
    const std::size_t at = info.find("cmdstat_" + command + ":calls=");
    return at == std::string::npos ? 0 : std::atoll(info.c_str() + at + 15 + command.size());
  };
  waiter.queue_ttl = milliseconds(60'000);
  (void)backend->KeepPlaces({&waiter, 1});  // caches the script
  const long long scripts = calls("evalsha"), waits = calls("wait");
  const std::vector<Status> kept = backend->KeepPlaces({&waiter, 1});
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_TRUE(kept[0].ok()) << kept[0].ToString();
  EXPECT_EQ(calls("evalsha"), scripts + 1);
  EXPECT_EQ(calls("wait"), waits);
  const long long ends = std::atoll(
      ReplyString(Cmd(primary.get(), {"HGET", QueueExpiryName(key), waiter.owner.ToString()})
                      .get())
          .c_str());
  EXPECT_GT(ends - RedisNowMs(primary.get()), 35'000);
  waiting->Abandon();
  ASSERT_TRUE(backend->Release(key, OwnerId(1, 1)).ok());
}

// A paused VM or a starved machine stalls every sentinel at once. With
// Sentinel's defaults, a 2.5 s stall as the primary dies puts them in TILT
// mode for 30 s, after which they judge the replica too long disconnected
// to promote: the failover took 67-101 s (measured), longer than any test
// waits. scripts/servers/redis.sh keeps its topologies out of that.
TEST(RedisSentinel, AFailoverFollowsAStallOfEverySentinel) {
  Topology t("start-sentinel");
  ASSERT_TRUE(t.ok()) << "could not start the sentinel topology: " << t.why();
  std::vector<pid_t> sentinels;
  for (const char* s : {"s1", "s2", "s3"}) {
    sentinels.push_back(std::atoi(ReadFirstLine(t.dir() + "/" + s + ".pid").c_str()));
    ASSERT_GT(sentinels.back(), 0) << s;
  }
  for (pid_t pid : sentinels) EXPECT_EQ(kill(pid, SIGSTOP), 0);
  EXPECT_TRUE(t.Signal("kill", "p"));
  std::this_thread::sleep_for(milliseconds(2500));  // the stall
  for (pid_t pid : sentinels) EXPECT_EQ(kill(pid, SIGCONT), 0);
  EXPECT_TRUE(WaitForPrimary(t, t.Port("r"), milliseconds(20'000)))
      << "no failover within 20 s of the stall's end";
}

TEST(RedisSentinel, WithoutWaitAFailoverCanLoseTheGrantAndTheCounter) {
  Topology t("start-sentinel");
  ASSERT_TRUE(t.ok()) << "could not start the sentinel topology: " << t.why();
  const std::string key = UniqueKey("failover-nowait");
  auto holder = NewClient(t.uri());
  ASSERT_TRUE(holder);
  ContextPtr primary = Admin(t.Port("p"));
  {
    auto warmup = holder->TryAcquire(key, Opts(milliseconds(20'000)));
    ASSERT_TRUE(warmup.ok());
    ASSERT_TRUE(warmup->Release().ok());
    Cmd(primary.get(), {"SET", "sync-point", "1"});
    ReplyPtr w = Cmd(primary.get(), {"WAIT", "1", "2000"});
    ASSERT_EQ(w->integer, 1);
  }
  // The replica falls behind: it is stopped, and a large write fills the
  // socket buffers between it and the primary, so what follows stays in the
  // primary's own memory when it dies.
  ASSERT_TRUE(t.Signal("pause", "r"));
  Cmd(primary.get(), {"SET", "filler", std::string(48 << 20, 'x')});
  auto lease = holder->TryAcquire(key, Opts(milliseconds(20'000)));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  const FencingToken token = lease->token();
  ASSERT_TRUE(t.Signal("kill", "p"));
  ASSERT_TRUE(t.Signal("resume", "r"));
  ASSERT_TRUE(WaitForPrimary(t, t.Port("r"), milliseconds(20'000))) << "no failover";

  // The promoted replica never saw the grant: a second holder is granted
  // while the first still believes it holds the key, and the counter went
  // back, so the same token is issued twice. (wait_replicas, and the fence
  // for the resource's part, are the answers: docs/backend-redis.md.)
  auto other = NewClient(t.uri());
  ASSERT_TRUE(other);
  auto second = other->TryAcquire(key, Opts(milliseconds(20'000)));
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_TRUE(lease->Check().ok()) << "the first holder still believes it holds the key";
  EXPECT_LE(second->token(), token) << "the counter's last increment was lost";
}

// -------------------------------------------------------------- Redlock

TEST(RedisRedlock, MajorityWithOneNodeDownSucceedsButHasNoOrderedToken) {
  Topology t("start-nodes", "3");
  ASSERT_TRUE(t.ok()) << "could not start three redis nodes: " << t.why();
  auto backend = OpenRaw(t.uri());
  ASSERT_NE(backend, nullptr);
  EXPECT_NE(backend->Describe().find("contested"), std::string::npos) << backend->Describe();
  ASSERT_TRUE(t.Signal("kill", "n3"));
  auto client = Client::FromBackend(std::move(backend));
  const std::string key = UniqueKey("redlock");
  auto lease = client->TryAcquire(key, Opts(milliseconds(10'000)));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ(lease->token(), 0u) << "Redlock grants carry no ordered token";
  EXPECT_FALSE(lease->token_ordered()) << "and say so";
  auto other = NewClient(t.uri().substr(0, t.uri().rfind(',')) + ",127.0.0.1:" +
                         std::to_string(t.Port("n1")));
  // (n1 twice stands in for the dead node: the client needs 3 to open.)
  if (other) {
    EXPECT_EQ(other->TryAcquire(key, Opts(milliseconds(1000))).status().code(),
              StatusCode::kLockHeld);
  }
  auto listed = client->List(key);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].owner, lease->owner());
  // The fences refuse its token: Redlock cannot fence.
  ContextPtr n1 = Admin(t.Port("n1"));
  EXPECT_EQ(fence::Redis::Set(n1.get(), key, lease->token(), "data", "x").code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(lease->Release().ok());
}

TEST(RedisRedlock, TwoOfThreeDownFailsWithinTheWaitDeadline) {
  Topology t("start-nodes", "3");
  ASSERT_TRUE(t.ok());
  auto client = NewClient(t.uri());
  ASSERT_TRUE(client);
  // What a round to all three costs here now, while they are up.
  const std::string probe = UniqueKey("redlock-probe");
  auto round = [&] {
    auto l = client->TryAcquire(probe, Opts(milliseconds(5000)));
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    if (l.ok()) {
      EXPECT_TRUE(l->Release().ok());
    }
  };
  round();  // connects
  const Duration round_cost = testing_support::MeasureSlowest(3, round);
  ASSERT_TRUE(t.Signal("kill", "n1"));
  ASSERT_TRUE(t.Signal("pause", "n2"));  // a hung node, not just a refused one
  constexpr milliseconds kWait{800}, kNodeTimeout{100};  // the URI's default
  const auto start = std::chrono::steady_clock::now();
  auto lease = client->Acquire(UniqueKey("redlock-down"), Opts(milliseconds(5000), kWait));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_FALSE(lease.ok());
  EXPECT_EQ(lease.status().code(), StatusCode::kUnavailable) << lease.status().ToString();
  EXPECT_NE(lease.status().message().find("majority"), std::string::npos) << lease.status().ToString();
  // The deadline, plus at most one round bounded by node_timeout and the
  // release round after it, plus room for their own work; overrunning by a
  // whole wait more is not keeping to the deadline.
  const auto slack = testing_support::FastPath(round_cost, milliseconds(300), kWait);
  EXPECT_LT(took, kWait + 2 * kNodeTimeout + slack.limit) << slack;
  ASSERT_TRUE(t.Signal("resume", "n2"));
}

}  // namespace
}  // namespace dlock::redis

int main(int argc, char** argv) {
  dlock::redis::g_self = argv[0];
  if (argc == 4 && std::string(argv[1]) == "--holder") {
    return dlock::redis::HolderMain(argv[2], argv[3]);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
