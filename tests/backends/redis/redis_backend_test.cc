// The Redis backend through the Backend interface and Client: key escaping
// and URI checks (no server), odd servers (a fake one in this process), and
// behaviour against the fixture's real redis-server (RedisServer.*).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <optional>
#include <thread>

#include "backends/redis/redis_keys.h"
#include "backends/redis/redis_slots.h"
#include "dlock/fence.h"
#include "dlock/fence_redis.h"
#include "eventually.h"
#include "redis_test_util.h"
#include "timing.h"

namespace dlock::redis {
namespace {

using std::chrono::milliseconds;
using namespace dlock::redis::testing;

// ---------------------------------------------------------------- no server

// Slots as a Redis 7 cluster node computes them (CLUSTER KEYSLOT, checked
// against redis-server 7.0 with cluster-enabled).
TEST(RedisKeys, HashSlotsAreRedisClusters) {
  EXPECT_EQ(HashSlot("foo"), 12182);
  EXPECT_EQ(HashSlot("bar"), 5061);
  EXPECT_EQ(HashSlot("hello"), 866);
  EXPECT_EQ(HashSlot("somekey"), 11058);
  EXPECT_EQ(HashSlot("{user1000}.following"), 3443);
  EXPECT_EQ(HashSlot("dlock:{a}:lock"), 15495);
  EXPECT_EQ(HashSlot("%s0"), 1647);
  EXPECT_EQ(HashSlot("%s1"), 5710);
  EXPECT_EQ(HashSlot("a{}b"), HashSlot("a{}b")) << "an empty tag: the whole name";
  EXPECT_NE(HashSlot("{}x"), HashSlot("{}y"));
}

// Each slot's counter is in that slot, named by the first tag that lands
// there, and shares the slot with every name of the keys it serves.
TEST(RedisKeys, EverySlotHasACounterInThatSlot) {
  for (std::uint16_t slot = 0; slot < kSlotCount; ++slot) {
    ASSERT_EQ(HashSlot(SlotTag(slot)), slot) << SlotTag(slot);
  }
  EXPECT_EQ(SlotTag(1647), "%s0");
  EXPECT_EQ(SlotTag(5710), "%s1");
  for (const char* key : {"a", "jobs/nightly", "{x}", "%s0"}) {
    EXPECT_EQ(HashSlot(SlotCounterName(key)), HashSlot(LockName(key))) << key;
    EXPECT_FALSE(IsPerKeyName(SlotCounterName(key))) << key;
    EXPECT_TRUE(IsPerKeyName(LockName(key))) << key;
  }
  EXPECT_FALSE(IsPerKeyName(FenceName("a")));
  EXPECT_TRUE(IsPerKeyName(DoneName("a")));
}

TEST(RedisKeys, EscapingIsReversibleAndKeepsPrefixes) {
  for (std::string key : {"a", "{x}", "}a{", "%7B", "p%_ *\xff", "a:b}:lock"}) {
    EXPECT_EQ(UnescapeKey(EscapeKey(key)), key);
    EXPECT_EQ(KeyFromLockName(LockName(key)), key);
    const std::string e = EscapeKey(key);
    EXPECT_EQ(e.find('{'), std::string::npos);
    EXPECT_EQ(e.find('}'), std::string::npos);
  }
  // The hash tag covers the whole key, for every role.
  EXPECT_EQ(LockName("a}b"), "dlock:{a%7Db}:lock");
  EXPECT_EQ(CounterName("a}b"), "dlock:{a%7Db}:token");
  EXPECT_EQ(QueueName("{"), "dlock:{%7B}:queue");
  EXPECT_TRUE(EscapeKey("ab%").starts_with(EscapeKey("ab")));
  EXPECT_EQ(LockPattern("a*[?"), "dlock:{a\\*\\[\\?*}:lock");
  EXPECT_FALSE(KeyFromLockName("dlock:{a}:token").has_value());
  EXPECT_FALSE(UnescapeKey("%zz").has_value());
}

TEST(RedisKeys, ScriptShaMatchesRedis) {
  // sha1("return 1"), as SCRIPT LOAD reports it.
  EXPECT_EQ(Sha1Hex("return 1"), "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
  EXPECT_EQ(Sha1Hex(""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
}

TEST(RedisUri, BadUrisAreRefusedBeforeConnecting) {
  struct Case {
    std::string uri;
    std::string says;
  };
  const Case cases[] = {
      {"redis://127.0.0.1:6379/x", "bad database index 'x'"},
      {"redis://127.0.0.1:6379/-1", "bad database index"},
      {"redis://h1:6379,h2:6379/0", "redis:// takes one server"},
      {"redis://127.0.0.1:99999/0", "port must be a number"},
      {"redis://127.0.0.1:6379/0?bogus=1", "unknown parameter 'bogus'"},
      {"redis://127.0.0.1:6379/0?wait_replicas=x", "bad wait_replicas"},
      {"redis://127.0.0.1:6379/0?wait_timeout=soon", "wait_timeout"},
      {"redis://::1:6379/0", "IPv6 address needs brackets"},
      {"redis+sentinel://127.0.0.1:26379", "master name"},
      {"redis+sentinel://127.0.0.1:26379/m?db=z", "bad database index"},
      {"redlock://127.0.0.1:1,127.0.0.1:2", "at least 3"},
      {"redlock://a:1,b:2,c:3?drift_factor=2", "drift_factor"},
      {"redis://127.0.0.1:6379/0?cacert=/ca.pem", "use rediss://"},
      {"rediss://127.0.0.1:6380/0?cert=/c.pem", "cert= and key= come together"},
      {"rediss+sentinel://127.0.0.1:26379/m?sentinel_password_file=/nonexistent/x",
       "sentinel password"},
  };
  for (const Case& c : cases) {
    Status error;
    EXPECT_EQ(OpenRaw(c.uri, &error), nullptr) << c.uri;
    EXPECT_EQ(error.code(), StatusCode::kInvalidArgument) << c.uri << ": " << error.ToString();
    EXPECT_NE(error.message().find(c.says), std::string::npos) << c.uri << ": " << error.ToString();
  }
}

TEST(RedisUri, PasswordIsNeverPrinted) {
  Status error;
  // Nothing listens on port 1.
  EXPECT_EQ(OpenRaw("redis://user:s3cr3t-pw@127.0.0.1:1/0", &error), nullptr);
  EXPECT_EQ(error.code(), StatusCode::kUnavailable) << error.ToString();
  EXPECT_NE(error.message().find("connection refused"), std::string::npos) << error.ToString();
  EXPECT_EQ(error.message().find("s3cr3t-pw"), std::string::npos) << error.ToString();
  EXPECT_EQ(OpenRaw("redis://127.0.0.1:1/0?password=s3cr3t-pw", &error), nullptr);
  EXPECT_EQ(error.message().find("s3cr3t-pw"), std::string::npos) << error.ToString();
}

// A TCP server on a free loopback port that runs `serve(fd)` for each
// connection, one at a time, in its own thread.
class FakeServer {
 public:
  explicit FakeServer(std::function<void(int fd)> serve) : serve_(std::move(serve)) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    socklen_t len = sizeof addr;
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    listen(listen_fd_, 8);
    thread_ = std::thread([this] {
      for (;;) {
        const int fd = accept(listen_fd_, nullptr, nullptr);
        if (fd < 0) return;
        if (stopping_) {
          close(fd);
          return;
        }
        serve_(fd);
        close(fd);
      }
    });
  }
  ~FakeServer() {
    stopping_ = true;
    shutdown(listen_fd_, SHUT_RDWR);
    close(listen_fd_);
    thread_.join();
  }
  std::string Uri(const std::string& query = "") const {
    return "redis://127.0.0.1:" + std::to_string(port_) + "/0" + query;
  }

  static std::string ReadSome(int fd) {
    char buf[4096];
    const ssize_t n = read(fd, buf, sizeof buf);
    return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
  }
  static void Write(int fd, std::string_view s) {
    [[maybe_unused]] ssize_t n = write(fd, s.data(), s.size());
  }

 private:
  std::function<void(int)> serve_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

TEST(RedisOddServers, NonRedisServerIsNamedAsSuch) {
  FakeServer http([](int fd) {
    FakeServer::ReadSome(fd);
    FakeServer::Write(fd, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
  });
  Status error;
  EXPECT_EQ(OpenRaw(http.Uri(), &error), nullptr);
  EXPECT_EQ(error.code(), StatusCode::kUnavailable) << error.ToString();
  EXPECT_NE(error.message().find("does not speak the Redis protocol"), std::string::npos)
      << error.ToString();
}

// rediss:// to a server that answers the TLS hello in plaintext (a Redis
// error reply), or not at all: kUnavailable, saying so, within the timeout.
TEST(RedisOddServers, PlaintextServerOnRedissIsNamedAndNeverHangs) {
  FakeServer plain([](int fd) {
    FakeServer::ReadSome(fd);
    FakeServer::Write(fd, "-ERR unknown command\r\n");
  });
  const std::string uri = "rediss" + plain.Uri().substr(5);
  Status error;
  // A handshake refused at once: what OpenSSL's setup costs here now (slow
  // under sanitizers).
  const Duration setup = testing_support::MeasureSlowest(2, [&] {
    EXPECT_EQ(OpenRaw(uri, &error, milliseconds(3000)), nullptr);
  });
  EXPECT_EQ(error.code(), StatusCode::kUnavailable) << error.ToString();
  EXPECT_NE(error.message().find("did not speak TLS"), std::string::npos) << error.ToString();

  // Silent for longer than the bound below: only dlock's own timeout can
  // end the handshake in time; waiting the silence out is the slow path.
  static constexpr milliseconds kSilence{2500}, kTimeout{200};
  FakeServer silent([](int fd) {
    FakeServer::ReadSome(fd);
    std::this_thread::sleep_for(kSilence);
  });
  const auto prompt = testing_support::FastPath(setup, milliseconds(100), kSilence - kTimeout);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(OpenRaw("rediss" + silent.Uri().substr(5), &error, kTimeout), nullptr);
  EXPECT_LT(std::chrono::steady_clock::now() - start, kTimeout + prompt.limit) << prompt;
  EXPECT_EQ(error.code(), StatusCode::kUnavailable) << error.ToString();
  EXPECT_NE(error.message().find("TLS handshake within the connect timeout"), std::string::npos)
      << error.ToString();
}

TEST(RedisOddServers, SilentServerTimesOut) {
  FakeServer silent([](int fd) {
    FakeServer::ReadSome(fd);
    std::this_thread::sleep_for(milliseconds(600));
  });
  Status error;
  EXPECT_EQ(OpenRaw(silent.Uri(), &error, milliseconds(200)), nullptr);
  EXPECT_EQ(error.code(), StatusCode::kUnavailable) << error.ToString();
  EXPECT_NE(error.message().find("did not answer within 200ms"), std::string::npos)
      << error.ToString();
}

TEST(RedisOddServers, ReplyCutOffMidwayIsUnavailable) {
  // Answers the connect-time PING, then starts the script's reply and hangs
  // up in the middle of it.
  FakeServer cut([](int fd) {
    FakeServer::ReadSome(fd);
    FakeServer::Write(fd, "+PONG\r\n");
    FakeServer::ReadSome(fd);
    FakeServer::Write(fd, "*3\r\n:1\r\n$2\r\n4");
  });
  auto backend = OpenRaw(cut.Uri());
  ASSERT_NE(backend, nullptr);
  auto attempt = backend->TryAcquire({"k", OwnerId(1, 1), milliseconds(1000)});
  EXPECT_EQ(attempt.status().code(), StatusCode::kUnavailable) << attempt.status().ToString();
  EXPECT_NE(attempt.status().message().find("closed the connection in the middle of a reply"),
            std::string::npos)
      << attempt.status().ToString();
}

// ------------------------------------------------------- the fixture server

class RedisServer : public ::testing::Test {
 protected:
  void SetUp() override {
    uri_ = FixtureUri();
    if (uri_.empty()) GTEST_SKIP() << "no Redis fixture (run through ctest)";
    admin_ = Admin(PortOf(uri_));
    ASSERT_TRUE(admin_ && admin_->err == 0);
  }
  long long CommandCalls(const std::string& name) {
    ReplyPtr r = Cmd(admin_.get(), {"INFO", "commandstats"});
    const std::string text = ReplyString(r.get());
    const std::string tag = "cmdstat_" + name + ":calls=";
    const std::size_t at = text.find(tag);
    return at == std::string::npos ? 0 : std::atoll(text.c_str() + at + tag.size());
  }
  std::string uri_;
  ContextPtr admin_;
};

TEST_F(RedisServer, HandOffByNotificationIsPrompt) {
  auto a = NewClient(uri_);
  auto b = NewClient(uri_);
  ASSERT_TRUE(a && b);
  const std::string key = UniqueKey("handoff");
  // 50 ms, or more where a grant and release cost more now; below the
  // queue refresh (1 s), the only other way the waiter could get the key.
  const auto bound = testing_support::FastPath(
      testing_support::GrantAndReleaseCost(*a, key + "/probe", milliseconds(10'000)),
      milliseconds(50), milliseconds(1000));
  const double bound_ms = std::chrono::duration<double, std::milli>(bound.limit).count();
  for (int round = 0; round < 5; ++round) {
    auto held = a->TryAcquire(key, Opts(milliseconds(10'000)));
    ASSERT_TRUE(held.ok()) << held.status().ToString();
    std::atomic<std::int64_t> granted_ns{0};
    std::optional<Result<Lease>> waited;
    std::thread waiter([&] {
      waited.emplace(b->Acquire(key, Opts(milliseconds(10'000), milliseconds(10'000))));
      granted_ns = NowNs();
    });
    // Released once the waiter is queued and its subscriber listens on the
    // key's channel; the holder's lease (10 s) and the queue refresh (1 s)
    // are far longer than the gap asserted below, so only the notification
    // can explain it.
    EXPECT_TRUE(testing_support::Eventually(
        [&] {
          ReplyPtr subscribers = Cmd(admin_.get(), {"PUBSUB", "NUMSUB", WakeChannel(0, key)});
          ReplyPtr queued = Cmd(admin_.get(), {"LLEN", QueueName(key)});
          return subscribers && subscribers->type == REDIS_REPLY_ARRAY &&
                 subscribers->elements == 2 && subscribers->element[1]->integer >= 1 && queued &&
                 queued->integer >= 1;
        },
        milliseconds(10'000), milliseconds(10)))
        << "round " << round << ": the waiter never listened";
    const std::int64_t released_ns = NowNs();
    EXPECT_TRUE(held->Release().ok());  // no ASSERT while the waiter runs
    waiter.join();
    ASSERT_TRUE(waited->ok()) << waited->status().ToString();
    const double gap_ms = static_cast<double>(granted_ns - released_ns) / 1e6;
    EXPECT_LT(gap_ms, bound_ms) << "round " << round << "; " << bound;
    EXPECT_GT((*waited)->token(), held->token());
    ASSERT_TRUE((*waited)->Release().ok());
  }
}

TEST_F(RedisServer, WaitersAreServedInArrivalOrderAndALoopingReleaserCannotStarve) {
  const std::string key = UniqueKey("fifo");
  auto holder = NewClient(uri_);
  auto first = holder->TryAcquire(key, Opts(milliseconds(10'000)));
  ASSERT_TRUE(first.ok());
  auto observer = OpenRaw(uri_);
  ASSERT_NE(observer, nullptr);
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::jthread> waiters;
  for (int i = 1; i <= 3; ++i) {
    waiters.emplace_back([&, i] {
      auto client = NewClient(uri_);
      auto lease = client->Acquire(key, Opts(milliseconds(10'000), milliseconds(10'000)));
      ASSERT_TRUE(lease.ok()) << lease.status().ToString();
      {
        std::lock_guard l(mu);
        order.push_back(i);
      }
      std::this_thread::sleep_for(milliseconds(20));
      ASSERT_TRUE(lease->Release().ok());
    });
    // Arrival order 1, 2, 3: the next waiter starts once this one is queued.
    testing_support::Eventually(
        [&] {
          auto waiting = observer->Waiters(key);
          return waiting.ok() && waiting->size() == static_cast<std::size_t>(i);
        },
        milliseconds(10'000), milliseconds(1));
  }
  // The holder releases and at once wants the key back: it must queue
  // behind the three that were waiting.
  // (No ASSERT until the waiters are joined.)
  EXPECT_TRUE(first->Release().ok());
  auto again = holder->Acquire(key, Opts(milliseconds(10'000), milliseconds(10'000)));
  EXPECT_TRUE(again.ok()) << again.status().ToString();
  {
    std::lock_guard l(mu);
    order.push_back(0);
  }
  for (auto& t : waiters) t.join();
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3, 0}));
}

// Waits until the server's clock has passed `owner`'s queue place.
void WaitForPlaceToLapse(redisContext* admin, const std::string& key, const OwnerId& owner) {
  const long long expiry = std::atoll(
      ReplyString(Cmd(admin, {"HGET", QueueExpiryName(key), owner.ToString()}).get()).c_str());
  ASSERT_GT(expiry, 0);
  for (long long now = RedisNowMs(admin); now <= expiry; now = RedisNowMs(admin)) {
    ASSERT_GT(now, 0);
    std::this_thread::sleep_for(milliseconds(expiry - now + 1));
  }
}

TEST_F(RedisServer, DeadWaiterLeavesTheQueueWhenItsPlaceExpires) {
  auto b = OpenRaw(uri_);
  ASSERT_NE(b, nullptr);
  const std::string key = UniqueKey("dead-waiter");
  const OwnerId holder(1, 1), dead(2, 2), live(3, 3);
  ASSERT_TRUE(b->TryAcquire({key, holder, milliseconds(10'000)})->granted);
  // `dead` queues for 300 ms and never comes back; `live` queues behind it.
  auto dead_waiter = b->Begin({key, dead, milliseconds(10'000), milliseconds(300)});
  auto live_waiter = b->Begin({key, live, milliseconds(10'000), milliseconds(3000)});
  EXPECT_FALSE(dead_waiter->Try()->granted);
  EXPECT_FALSE(live_waiter->Try()->granted);
  // A single attempt (no queue place) does not jump the queue either.
  EXPECT_FALSE(b->TryAcquire({key, OwnerId(4, 4), milliseconds(10'000)})->granted);
  WaitForPlaceToLapse(admin_.get(), key, dead);
  // The release passes over the lapsed place: nobody holds the key, and
  // `live` (woken) takes it.
  ASSERT_TRUE(b->Release(key, holder).ok());
  EXPECT_EQ(Cmd(admin_.get(), {"EXISTS", LockName(key)})->integer, 0);
  auto granted = live_waiter->Try();
  ASSERT_TRUE(granted.ok());
  EXPECT_TRUE(granted->granted);
  ASSERT_TRUE(b->Release(key, live).ok());
  // The queue is empty again: a single attempt gets the key.
  EXPECT_TRUE(b->TryAcquire({key, OwnerId(5, 5), milliseconds(10'000)})->granted);
  ASSERT_TRUE(b->Release(key, OwnerId(5, 5)).ok());
}

// The price of grant on release (docs/backend-redis.md): a waiter that dies
// while its place at the head still lives is granted the key by the next
// release, and holds it for its ttl, as if it had died holding it.
TEST_F(RedisServer, AWaiterDeadAtTheHeadIsGrantedAndHoldsForItsTtl) {
  auto b = OpenRaw(uri_);
  const std::string key = UniqueKey("dead-head");
  const OwnerId holder(1, 1), dead(2, 2), live(3, 3);
  ASSERT_TRUE(b->TryAcquire({key, holder, milliseconds(10'000)})->granted);
  // The dead waiter's lease is granted at the release and must still run
  // at the live waiter's attempt after it: 3 s, for a loaded machine. Both
  // places (two thirds of 30 s) outlast the test.
  constexpr milliseconds kDeadTtl{3000};
  auto dead_waiter = b->Begin({key, dead, kDeadTtl, milliseconds(30'000)});
  auto live_waiter = b->Begin({key, live, milliseconds(10'000), milliseconds(30'000)});
  EXPECT_FALSE(dead_waiter->Try()->granted);
  EXPECT_FALSE(live_waiter->Try()->granted);
  ASSERT_TRUE(b->Release(key, holder).ok());
  EXPECT_EQ(ReplyString(Cmd(admin_.get(), {"GET", LockName(key)}).get()).substr(0, 32),
            dead.ToString());
  auto refused = live_waiter->Try();
  ASSERT_TRUE(refused.ok());
  EXPECT_FALSE(refused->granted);
  EXPECT_GT(refused->holder_ttl_remaining, milliseconds(0));
  EXPECT_LE(refused->holder_ttl_remaining, kDeadTtl);
  std::this_thread::sleep_for(refused->holder_ttl_remaining + milliseconds(20));
  auto granted = live_waiter->Try();
  ASSERT_TRUE(granted.ok());
  EXPECT_TRUE(granted->granted);
  ASSERT_TRUE(b->Release(key, live).ok());
}

// A waiter that takes its place with a subscription confirmed before its
// (second) refused attempt, as the core does: its next Wait returns on any
// message for it published from now on, even one that arrived before the
// wait began.
std::unique_ptr<Acquisition> Queue(Backend* backend, const LeaseRequest& request) {
  auto acquisition = backend->Begin(request);
  auto first = acquisition->Try();
  EXPECT_TRUE(first.ok() && !first->granted);
  acquisition->Wait(DefaultClock()->Now() + milliseconds(2000), {});
  auto second = acquisition->Try();
  EXPECT_TRUE(second.ok() && !second->granted);
  return acquisition;
}

TEST_F(RedisServer, AReleaseGrantsTheHeadWhichNeedsNoRoundTripOfItsOwn) {
  auto holder_b = OpenRaw(uri_);
  auto waiter_b = OpenRaw(uri_);
  const std::string key = UniqueKey("grant-on-release");
  const OwnerId holder(1, 1), waiter(2, 2);
  auto held = holder_b->TryAcquire({key, holder, milliseconds(10'000)});
  ASSERT_TRUE(held.ok() && held->granted);
  LeaseRequest request{key, waiter, milliseconds(10'000), milliseconds(3000)};
  request.label = "next|in line";
  auto waiting = Queue(waiter_b.get(), request);
  const TimePoint queued_at = DefaultClock()->Now();
  const long long calls_before = CommandCalls("evalsha");
  ASSERT_TRUE(holder_b->Release(key, holder).ok());
  EXPECT_TRUE(waiting->Wait(DefaultClock()->Now() + milliseconds(5000), {}));
  auto got = waiting->Try();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->granted);
  EXPECT_EQ(got->token, held->token + 1);
  // The lease counts from the refused attempt's send, before the release.
  EXPECT_NE(got->valid_from, TimePoint{});
  EXPECT_LT(got->valid_from, queued_at);
  // The release was the only script call: the head sent nothing.
  EXPECT_EQ(CommandCalls("evalsha"), calls_before + 1);
  EXPECT_EQ(Cmd(admin_.get(), {"LLEN", QueueName(key)})->integer, 0);
  auto listed = waiter_b->List(key);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].owner, waiter);
  EXPECT_EQ((*listed)[0].token, got->token);
  EXPECT_EQ((*listed)[0].label, "next|in line");
  // It is a holding like any other: renewed, then released.
  EXPECT_TRUE(waiter_b->Renew(std::vector<LeaseRequest>{request})[0].ok());
  ASSERT_TRUE(waiter_b->Release(key, waiter).ok());
  EXPECT_EQ(Cmd(admin_.get(), {"EXISTS", LockName(key)})->integer, 0);
}

// An acquisition keeps its state itself, not in the calling thread: its
// wait may run on one thread and the Try after it on another (as an
// asynchronous caller's would), and a grant the wait brought still needs no
// round trip.
TEST_F(RedisServer, AnAcquisitionMayMoveBetweenThreads) {
  auto holder_b = OpenRaw(uri_);
  auto waiter_b = OpenRaw(uri_);
  const std::string key = UniqueKey("across-threads");
  const OwnerId holder(1, 1), waiter(2, 2);
  auto held = holder_b->TryAcquire({key, holder, milliseconds(10'000)});
  ASSERT_TRUE(held.ok() && held->granted);
  const LeaseRequest request{key, waiter, milliseconds(10'000), milliseconds(3000)};
  std::unique_ptr<Acquisition> waiting;
  std::thread([&] { waiting = Queue(waiter_b.get(), request); }).join();
  ASSERT_NE(waiting, nullptr);
  const long long calls_before = CommandCalls("evalsha");
  ASSERT_TRUE(holder_b->Release(key, holder).ok());
  bool woken = false;
  std::thread([&] {
    woken = waiting->Wait(DefaultClock()->Now() + milliseconds(5000), {});
  }).join();
  EXPECT_TRUE(woken);
  auto got = waiting->Try();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->granted);
  EXPECT_EQ(got->token, held->token + 1);
  EXPECT_EQ(CommandCalls("evalsha"), calls_before + 1)
      << "the grant on release was not handed over";
  ASSERT_TRUE(waiter_b->Release(key, waiter).ok());
}

// A single attempt takes no place in the queue, whatever queue_ttl says:
// waiters queue through Begin.
TEST_F(RedisServer, TryAcquireTakesNoPlace) {
  auto b = OpenRaw(uri_);
  const std::string key = UniqueKey("no-place");
  ASSERT_TRUE(b->TryAcquire({key, OwnerId(1, 1), milliseconds(10'000)})->granted);
  EXPECT_FALSE(
      b->TryAcquire({key, OwnerId(2, 2), milliseconds(10'000), milliseconds(3000)})->granted);
  EXPECT_EQ(Cmd(admin_.get(), {"EXISTS", QueueName(key)})->integer, 0);
  ASSERT_TRUE(b->Release(key, OwnerId(1, 1)).ok());
}

// A grant message older than the waiter's last refusal (here forged; in
// life one delayed past a lease that then ran out), or not a grant message
// at all, is not believed: the next attempt asks the server.
TEST_F(RedisServer, AGrantMessageOlderThanTheLastRefusalIsNotBelieved) {
  auto holder_b = OpenRaw(uri_);
  auto waiter_b = OpenRaw(uri_);
  const std::string key = UniqueKey("stale-grant");
  const OwnerId holder(1, 1), waiter(2, 2);
  ASSERT_TRUE(holder_b->TryAcquire({key, holder, milliseconds(10'000)})->granted);
  const LeaseRequest request{key, waiter, milliseconds(10'000), milliseconds(3000)};
  for (const std::string forged : {":999:1", ":999", ":x:y", ":999:1:2"}) {
    auto waiting = Queue(waiter_b.get(), request);
    Cmd(admin_.get(), {"PUBLISH", WakeChannel(0, key), waiter.ToString() + forged});
    EXPECT_TRUE(waiting->Wait(DefaultClock()->Now() + milliseconds(5000), {}));
    auto got = waiting->Try();
    ASSERT_TRUE(got.ok()) << forged << ": " << got.status().ToString();
    EXPECT_FALSE(got->granted) << forged << ": the holder still holds the key";
    waiting->Abandon();
  }
  ASSERT_TRUE(holder_b->Release(key, holder).ok());
}

TEST_F(RedisServer, GivingUpLeavesTheQueueAndWakesTheNext) {
  auto b = OpenRaw(uri_);
  const std::string key = UniqueKey("give-up");
  ASSERT_TRUE(b->TryAcquire({key, OwnerId(1, 1), milliseconds(10'000)})->granted);
  auto second = b->Begin({key, OwnerId(2, 2), milliseconds(10'000), milliseconds(3000)});
  auto third = b->Begin({key, OwnerId(3, 3), milliseconds(10'000), milliseconds(3000)});
  EXPECT_FALSE(second->Try()->granted);
  EXPECT_FALSE(third->Try()->granted);
  // The release grants the key to the head, unseen; the head gives up, which
  // passes the key on: the next one has it.
  ASSERT_TRUE(b->Release(key, OwnerId(1, 1)).ok());
  second->Abandon();
  EXPECT_TRUE(third->Try()->granted);
  EXPECT_EQ(Cmd(admin_.get(), {"LLEN", QueueName(key)})->integer, 0);
  ASSERT_TRUE(b->Release(key, OwnerId(3, 3)).ok());
}

// The core retries an attempt whose reply was lost with the same owner; a
// waiting attempt that was in fact granted must get its token back. (The
// queueing fast path once took the holder's own key for another's and put
// the holder in the queue behind itself, refused until its own lease ran
// out.)
TEST_F(RedisServer, AWaitingAttemptRetriedByTheHolderGetsItsTokenBack) {
  auto b = OpenRaw(uri_);
  const std::string key = UniqueKey("retried");
  const OwnerId me(1, 1);
  auto acquisition = b->Begin({key, me, milliseconds(10'000), milliseconds(3000)});
  auto first = acquisition->Try();
  ASSERT_TRUE(first.ok() && first->granted) << first.status().ToString();
  auto again = acquisition->Try();
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->granted) << "the holder was refused its own key";
  EXPECT_EQ(again->token, first->token);
  EXPECT_EQ(Cmd(admin_.get(), {"LLEN", QueueName(key)})->integer, 0)
      << "the holder queued behind itself";
  ASSERT_TRUE(b->Release(key, me).ok());
}

TEST_F(RedisServer, NoScriptAfterScriptFlushFallsBackToEval) {
  auto b = OpenRaw(uri_);
  const std::string key = UniqueKey("noscript");
  ASSERT_TRUE(b->TryAcquire({key, OwnerId(1, 1), milliseconds(10'000)})->granted);
  ReplyPtr flushed = Cmd(admin_.get(), {"SCRIPT", "FLUSH"});
  ASSERT_EQ(ReplyString(flushed.get()), "OK");
  const long long evals = CommandCalls("eval");
  auto again = b->TryAcquire({key, OwnerId(1, 1), milliseconds(10'000)});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->granted);
  EXPECT_EQ(CommandCalls("eval"), evals + 1) << "one EVAL after NOSCRIPT";
  ASSERT_TRUE(b->Release(key, OwnerId(1, 1)).ok());  // also flushed: EVAL
  // Cached again: no further EVAL.
  const long long after = CommandCalls("eval");
  ASSERT_TRUE(b->TryAcquire({key, OwnerId(2, 2), milliseconds(10'000)})->granted);
  ASSERT_TRUE(b->Release(key, OwnerId(2, 2)).ok());
  EXPECT_EQ(CommandCalls("eval"), after);
}

// The asynchronous API's batches: every attempt and release of a batch in
// one pipeline, each answered as alone; after SCRIPT FLUSH the batch is
// sent again with its first call by EVAL, which caches the script (no
// SCRIPT LOAD: the minimal ACL refuses it).
TEST_F(RedisServer, BatchedAttemptsAndReleasesArePipelinedAndAnsweredEach) {
  auto b = OpenRaw(uri_);
  ASSERT_TRUE(b->BatchesCalls());
  const std::string held = UniqueKey("batch-held");
  ASSERT_TRUE(b->TryAcquire({held, OwnerId(9, 9), milliseconds(10'000)})->granted);
  std::vector<LeaseRequest> requests;
  for (int i = 0; i < 50; ++i) {
    requests.push_back({UniqueKey("batch/" + std::to_string(i)), OwnerId(1, i + 1),
                        milliseconds(10'000)});
  }
  requests.push_back({held, OwnerId(1, 99), milliseconds(10'000)});
  requests.push_back({"", OwnerId(1, 100), milliseconds(10'000)});  // refused before sending
  ASSERT_EQ(ReplyString(Cmd(admin_.get(), {"SCRIPT", "FLUSH"}).get()), "OK");
  const long long loads = CommandCalls("script|load"), evals = CommandCalls("eval");
  auto got = b->TryAcquireMany(requests);
  ASSERT_EQ(got.size(), requests.size());
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(got[i].ok()) << got[i].status().ToString();
    EXPECT_TRUE(got[i]->granted);
  }
  ASSERT_TRUE(got[50].ok());
  EXPECT_FALSE(got[50]->granted) << "a held key was granted in a batch";
  EXPECT_EQ(got[51].status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CommandCalls("script|load"), loads);
  EXPECT_EQ(CommandCalls("eval"), evals + 1);
  requests[50].owner = OwnerId(7, 7);  // not the holder: kNotOwner
  auto released = b->ReleaseMany(std::span(requests).first(51));
  for (int i = 0; i < 50; ++i) EXPECT_TRUE(released[i].ok()) << released[i].ToString();
  EXPECT_EQ(released[50].code(), StatusCode::kNotOwner);
  auto left = b->List(UniqueKey("batch/"));
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty());
  ASSERT_TRUE(b->Release(held, OwnerId(9, 9)).ok());
}

// The server's time of `owner`'s place in `key`'s queue (ms), 0 if none.
long long PlaceExpiry(redisContext* admin, const std::string& key, const OwnerId& owner) {
  return std::atoll(
      ReplyString(Cmd(admin, {"HGET", QueueExpiryName(key), owner.ToString()}).get()).c_str());
}

// The asynchronous API's keeps (Backend::KeepPlaces): 300 places kept by
// two script calls (256 a call) sent in one pipeline, each now lasting two
// thirds of the queue_ttl asked; a holding is never touched; no place
// (never queued, lapsed, or the owner holds the key) is kNotFound, and a
// lapsed place is not revived.
TEST_F(RedisServer, KeepPlacesKeepsEveryPlaceInOnePipelineAndTouchesNoHolding) {
  auto b = OpenRaw(uri_);
  ASSERT_TRUE(b->KeepsPlaces());
  const OwnerId holder(1, 1);
  constexpr int kPlaces = 300;
  std::vector<LeaseRequest> keeps;
  std::vector<std::unique_ptr<Acquisition>> waiting;
  for (int i = 0; i < kPlaces; ++i) {
    const std::string key = UniqueKey("keep/" + std::to_string(i));
    ASSERT_TRUE(b->TryAcquire({key, holder, milliseconds(60'000)})->granted);
    // A place of 20 s (two thirds): the 600 round trips of this loop fit
    // in it on a loaded machine, and the keep below still shows.
    LeaseRequest waiter{key, OwnerId(2, static_cast<std::uint64_t>(i + 1)), milliseconds(60'000),
                        milliseconds(30'000)};
    waiting.push_back(b->Begin(waiter));
    auto refused = waiting.back()->Try();
    ASSERT_TRUE(refused.ok() && !refused->granted) << i;
    waiter.queue_ttl = milliseconds(60'000);  // kept for 40 s from the keep
    keeps.push_back(waiter);
  }
  // The holder of the first key: its holding is no place.
  const std::string held = keeps[0].key;
  keeps.push_back({held, holder, milliseconds(60'000), milliseconds(120'000)});
  // Never queued.
  keeps.push_back({UniqueKey("keep/none"), OwnerId(3, 3), milliseconds(10'000),
                   milliseconds(60'000)});
  // Queued for 200 ms (two thirds of 300), and lapsed.
  const std::string lapsing = UniqueKey("keep/lapsed");
  ASSERT_TRUE(b->TryAcquire({lapsing, holder, milliseconds(10'000)})->granted);
  const LeaseRequest short_lived{lapsing, OwnerId(4, 4), milliseconds(10'000), milliseconds(300)};
  auto lapsed = b->Begin(short_lived);
  ASSERT_FALSE(lapsed->Try()->granted);
  WaitForPlaceToLapse(admin_.get(), lapsing, short_lived.owner);
  const long long lapsed_at = PlaceExpiry(admin_.get(), lapsing, short_lived.owner);
  keeps.push_back({lapsing, short_lived.owner, milliseconds(10'000), milliseconds(60'000)});
  keeps.push_back({"", OwnerId(5, 5), milliseconds(10'000), milliseconds(60'000)});
  const std::string held_value = ReplyString(Cmd(admin_.get(), {"GET", LockName(held)}).get());

  (void)b->KeepPlaces(std::span(keeps).subspan(kPlaces + 1, 1));  // caches the script
  const long long scripts = CommandCalls("evalsha"), sets = CommandCalls("set");
  const std::vector<Status> kept = b->KeepPlaces(keeps);
  EXPECT_EQ(CommandCalls("evalsha"), scripts + 2) << "one script call per 256 places";
  EXPECT_EQ(CommandCalls("set"), sets) << "a keep sets no lock";

  ASSERT_EQ(kept.size(), keeps.size());
  const long long now = RedisNowMs(admin_.get());
  for (int i = 0; i < kPlaces; ++i) {
    EXPECT_TRUE(kept[i].ok()) << i << ": " << kept[i].ToString();
    EXPECT_GT(PlaceExpiry(admin_.get(), keeps[i].key, keeps[i].owner), now + 35'000) << i;
  }
  EXPECT_EQ(kept[kPlaces].code(), StatusCode::kNotFound) << kept[kPlaces].ToString();
  EXPECT_EQ(ReplyString(Cmd(admin_.get(), {"GET", LockName(held)}).get()), held_value);
  EXPECT_LE(Cmd(admin_.get(), {"PTTL", LockName(held)})->integer, 60'000) << "a holding extended";
  EXPECT_EQ(kept[kPlaces + 1].code(), StatusCode::kNotFound) << kept[kPlaces + 1].ToString();
  EXPECT_EQ(kept[kPlaces + 2].code(), StatusCode::kNotFound) << kept[kPlaces + 2].ToString();
  EXPECT_EQ(PlaceExpiry(admin_.get(), lapsing, short_lived.owner), lapsed_at) << "revived";
  EXPECT_EQ(kept[kPlaces + 3].code(), StatusCode::kInvalidArgument);
  EXPECT_NE(kept[kPlaces].message().find(held), std::string::npos) << kept[kPlaces].message();

  for (auto& w : waiting) w->Abandon();
  lapsed->Abandon();
  for (int i = 0; i < kPlaces; ++i) ASSERT_TRUE(b->Release(keeps[i].key, holder).ok());
  ASSERT_TRUE(b->Release(lapsing, holder).ok());
  EXPECT_EQ(b->StoredObjects(UniqueKey("keep/")).value(), 0u);
}

// An asynchronous waiter's place (one that never blocked in Wait) lasts two
// thirds of queue_ttl from each attempt: the core keeps it every third, and
// a dead waiter at the head holds the queue up for two thirds at most. A
// blocked waiter's lasts kPlaceTtl (1 s) from each of its attempts.
TEST_F(RedisServer, AnAsynchronousWaitersPlaceLastsTwoThirdsOfQueueTtl) {
  auto b = OpenRaw(uri_);
  const std::string key = UniqueKey("async-place");
  ASSERT_TRUE(b->TryAcquire({key, OwnerId(1, 1), milliseconds(10'000)})->granted);
  const LeaseRequest request{key, OwnerId(2, 2), milliseconds(10'000), milliseconds(30'000)};
  auto waiter = b->Begin(request);
  ASSERT_FALSE(waiter->Try()->granted);
  const long long left = PlaceExpiry(admin_.get(), key, request.owner) - RedisNowMs(admin_.get());
  EXPECT_GT(left, 15'000);
  EXPECT_LE(left, 20'000);
  waiter->Wait(DefaultClock()->Now() + milliseconds(1), {});  // now it blocks
  ASSERT_FALSE(waiter->Try()->granted);
  EXPECT_LE(PlaceExpiry(admin_.get(), key, request.owner) - RedisNowMs(admin_.get()), 1000);
  waiter->Abandon();
  ASSERT_TRUE(b->Release(key, OwnerId(1, 1)).ok());
}

TEST_F(RedisServer, RunOnceRecordIsSetOnlyByTheHolder) {
  auto b = OpenRaw(uri_);
  const std::string key = UniqueKey("once");
  EXPECT_FALSE(b->IsDone(key).value());
  EXPECT_EQ(b->MarkDone(key, OwnerId(1, 1), kDefaultDoneRetention).code(), StatusCode::kNotOwner) << "nobody holds it";
  auto grant = b->TryAcquire({key, OwnerId(1, 1), milliseconds(10'000)});
  ASSERT_TRUE(grant.ok() && grant->granted);
  EXPECT_EQ(b->MarkDone(key, OwnerId(2, 2), kDefaultDoneRetention).code(), StatusCode::kNotOwner);
  EXPECT_FALSE(b->IsDone(key).value());
  ASSERT_TRUE(b->MarkDone(key, OwnerId(1, 1), kDefaultDoneRetention).ok());
  EXPECT_TRUE(b->IsDone(key).value());
  EXPECT_EQ(ReplyString(Cmd(admin_.get(), {"GET", DoneName(key)}).get()), std::to_string(grant->token));
  ASSERT_TRUE(b->Release(key, OwnerId(1, 1)).ok());
  EXPECT_TRUE(b->IsDone(key).value()) << "the record outlives the lease";
}

TEST_F(RedisServer, PingIsOneScriptCall) {
  auto b = OpenRaw(uri_);
  ASSERT_TRUE(b->Ping().ok());  // may load the script (EVAL) first
  const long long before = CommandCalls("evalsha");
  ASSERT_TRUE(b->Ping().ok());
  EXPECT_EQ(CommandCalls("evalsha"), before + 1);
}

TEST_F(RedisServer, RenewalOfAllLeasesIsOneScriptCall) {
  auto b = OpenRaw(uri_);
  std::vector<LeaseRequest> leases;
  for (int i = 0; i < 5; ++i) {
    leases.push_back({UniqueKey("renew" + std::to_string(i)), OwnerId(9, 9), milliseconds(10'000)});
    ASSERT_TRUE(b->TryAcquire(leases.back())->granted);
  }
  const long long before = CommandCalls("evalsha");
  auto results = b->Renew(leases);
  EXPECT_EQ(CommandCalls("evalsha"), before + 1);
  ASSERT_EQ(results.size(), 5u);
  for (const Status& s : results) EXPECT_TRUE(s.ok()) << s.ToString();
  for (const auto& l : leases) ASSERT_TRUE(b->Release(l.key, l.owner).ok());
}

TEST_F(RedisServer, ClosedIdleConnectionIsReplacedQuietly) {
  auto b = OpenRaw(uri_);
  const std::string key = UniqueKey("reconnect");
  ASSERT_TRUE(b->TryAcquire({key, OwnerId(1, 1), milliseconds(10'000)})->granted);
  ReplyPtr killed = Cmd(admin_.get(), {"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"});
  ASSERT_TRUE(killed && killed->type == REDIS_REPLY_INTEGER);
  std::this_thread::sleep_for(milliseconds(50));  // the FIN reaches us; idle long enough to be checked
  auto again = b->TryAcquire({key, OwnerId(1, 1), milliseconds(10'000)});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->granted);
  ASSERT_TRUE(b->Release(key, OwnerId(1, 1)).ok());
}

TEST_F(RedisServer, CallThatTimesOutIsUnavailableThenTheNextReconnects) {
  auto b = OpenRaw(uri_ + "?timeout=100ms");
  const std::string key = UniqueKey("timeout");
  ASSERT_TRUE(b->TryAcquire({key, OwnerId(1, 1), milliseconds(10'000)})->granted);
  ReplyPtr paused = Cmd(admin_.get(), {"CLIENT", "PAUSE", "400", "ALL"});
  ASSERT_EQ(ReplyString(paused.get()), "OK");
  auto stuck = b->TryAcquire({key, OwnerId(1, 1), milliseconds(10'000)});
  EXPECT_EQ(stuck.status().code(), StatusCode::kUnavailable) << stuck.status().ToString();
  EXPECT_NE(stuck.status().message().find("did not answer within 100ms"), std::string::npos)
      << stuck.status().ToString();
  std::this_thread::sleep_for(milliseconds(400));
  // The outcome was unknown; the retry with the same owner gets the grant.
  auto again = b->TryAcquire({key, OwnerId(1, 1), milliseconds(10'000)});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->granted);
  ASSERT_TRUE(b->Release(key, OwnerId(1, 1)).ok());
}

TEST_F(RedisServer, WrongDatabaseIndexIsNamed) {
  Status error;
  std::string uri = uri_.substr(0, uri_.rfind('/')) + "/99999";
  EXPECT_EQ(OpenRaw(uri, &error), nullptr);
  EXPECT_EQ(error.code(), StatusCode::kInvalidArgument) << error.ToString();
  EXPECT_NE(error.message().find("no such database"), std::string::npos) << error.ToString();
  // Databases are separate stores: the same key in db 1 is independent.
  const std::string key = UniqueKey("db");
  auto db0 = OpenRaw(uri_);
  auto db1 = OpenRaw(uri_.substr(0, uri_.rfind('/')) + "/1");
  ASSERT_TRUE(db0 && db1);
  ASSERT_TRUE(db0->TryAcquire({key, OwnerId(1, 1), milliseconds(10'000)})->granted);
  EXPECT_TRUE(db1->TryAcquire({key, OwnerId(2, 2), milliseconds(10'000)})->granted);
  ASSERT_TRUE(db0->Release(key, OwnerId(1, 1)).ok());
  ASSERT_TRUE(db1->Release(key, OwnerId(2, 2)).ok());
}

TEST_F(RedisServer, WaitReplicasRefusesAGrantNoReplicaConfirmed) {
  // The fixture has no replica: WAIT 1 confirms nothing.
  auto client = NewClient(uri_ + "?wait_replicas=1&wait_timeout=50ms");
  ASSERT_TRUE(client);
  const std::string key = UniqueKey("wait");
  auto lease = client->TryAcquire(key, Opts(milliseconds(10'000)));
  EXPECT_EQ(lease.status().code(), StatusCode::kUnavailable) << lease.status().ToString();
  EXPECT_NE(lease.status().message().find("only 0 of 1 replicas confirmed"), std::string::npos)
      << lease.status().ToString();
  // The unconfirmed grant was released when the client gave up.
  auto other = NewClient(uri_)->TryAcquire(key, Opts(milliseconds(1000)));
  EXPECT_TRUE(other.ok()) << other.status().ToString();
}

TEST_F(RedisServer, KeysWithBracesAndGlobCharactersStayApart) {
  auto client = NewClient(uri_);
  const std::string base = UniqueKey("glob");
  std::vector<std::string> keys = {base + "{a}", base + "}", base + "*", base + "[x]",
                                   base + "%7D", base + "\\"};
  std::vector<Lease> leases;
  for (const auto& k : keys) {
    auto l = client->TryAcquire(k, Opts(milliseconds(10'000)));
    ASSERT_TRUE(l.ok()) << k << ": " << l.status().ToString();
    leases.push_back(std::move(*l));
  }
  auto all = client->List(base);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->size(), keys.size());
  auto star = client->List(base + "*");
  ASSERT_TRUE(star.ok());
  ASSERT_EQ(star->size(), 1u) << "'*' in a prefix is literal";
  EXPECT_EQ((*star)[0].key, base + "*");
  EXPECT_EQ((*star)[0].token, leases[2].token());
}

TEST_F(RedisServer, FenceAdmitsNewerTokensAndRejectsOlderOnes) {
  redisContext* c = admin_.get();
  const std::string lock = UniqueKey("fenced");
  const std::string data = "data:" + lock;
  EXPECT_EQ(fence::Redis::Highest(c, lock).value(), 0u);
  EXPECT_TRUE(fence::Redis::Set(c, lock, 5, data, "five").ok());
  EXPECT_TRUE(fence::Redis::Set(c, lock, 5, data, "five again").ok()) << "equal is admitted";
  Status stale = fence::Redis::Set(c, lock, 4, data, "four");
  EXPECT_EQ(stale, fence::StaleToken(4, 5, lock));
  EXPECT_EQ(ReplyString(Cmd(c, {"GET", data}).get()), "five again");
  EXPECT_TRUE(fence::Redis::HSet(c, lock, 6, data + ":h", "f", "six").ok());
  EXPECT_EQ(fence::Redis::HSet(c, lock, 5, data + ":h", "f", "x").code(), StatusCode::kStaleToken);
  EXPECT_EQ(ReplyString(Cmd(c, {"HGET", data + ":h", "f"}).get()), "six");
  // A caller's script, with its own KEYS and ARGV.
  const std::string keys[] = {data + ":n"};
  const std::string args[] = {"7"};
  auto r = fence::Redis::Eval(c, lock, 7, "return redis.call('INCRBY', KEYS[1], ARGV[1])", keys, args);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->integer, 7);
  auto old = fence::Redis::Eval(c, lock, 6, "return redis.call('INCRBY', KEYS[1], ARGV[1])", keys, args);
  EXPECT_EQ(old.status(), fence::StaleToken(6, 7, lock));
  auto broken = fence::Redis::Eval(c, lock, 8, "return nosuchfunction()", keys, args);
  EXPECT_EQ(broken.status().code(), StatusCode::kFailedPrecondition) << broken.status().ToString();
  EXPECT_EQ(fence::Redis::Highest(c, lock).value(), 7u) << "a failed script records nothing";
  EXPECT_EQ(fence::Redis::Set(c, lock, 0, data, "x").code(), StatusCode::kInvalidArgument);
  // The record sits beside the lock, in its hash slot.
  EXPECT_EQ(fence::Redis::RecordKey(lock), FenceName(lock));
}

// ------------------------------------------- #10: sharing, labels, lock-delay

LeaseRequest Req(const std::string& key, OwnerId owner, milliseconds ttl,
                 milliseconds lock_delay = milliseconds(0), std::uint32_t limit = 1,
                 milliseconds queue_ttl = milliseconds(0)) {
  LeaseRequest r{key, owner, ttl, queue_ttl, lock_delay};
  r.limit = limit;
  r.label = "redis-test";
  return r;
}

TEST_F(RedisServer, LockDelayHoldsTheKeyAfterAnExpiryByRedisClock) {
  auto b = OpenRaw(uri_);
  ASSERT_TRUE(b && b->SupportsLockDelay());
  const std::string key = UniqueKey("lock-delay");
  const OwnerId holder(1, 1), next(2, 2);
  const milliseconds ttl(300), delay(700);
  ASSERT_TRUE(b->TryAcquire(Req(key, holder, ttl, delay))->granted);
  // The store's record of the holding: its end is the lease's end + delay.
  ReplyPtr score = Cmd(admin_.get(), {"ZSCORE", HoldersName(key), holder.ToString()});
  ASSERT_TRUE(score && score->type == REDIS_REPLY_STRING);
  const long long end = std::atoll(score->str);
  const long long lease_end = end - delay.count();
  // The holder dies (like SIGKILL: no renewal, no release). Another owner
  // tries until it is granted; each attempt is bracketed by Redis's TIME.
  bool refused_inside_delay = false;
  long long granted_before = -1;
  for (int i = 0; i < 1000; ++i) {
    const long long before = RedisNowMs(admin_.get());
    // (With a lock-delay of its own, so that its grant time is recorded.)
    auto a = b->TryAcquire(Req(key, next, milliseconds(10'000), milliseconds(1)));
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    const long long after = RedisNowMs(admin_.get());
    if (a->granted) {
      granted_before = after;
      break;
    }
    if (before > lease_end) {
      refused_inside_delay = true;
      // The lease has ended: the holder holds nothing any more...
      auto renewed = b->Renew(std::vector<LeaseRequest>{Req(key, holder, ttl)});
      EXPECT_EQ(renewed[0].code(), StatusCode::kNotOwner);
      EXPECT_TRUE(b->List(key)->empty());
      // ...not even by retrying: its own delay counts against it too (asked
      // well inside the delay; near its end the retry may rightly win the
      // free key, and then gives it back).
      const long long retry_at = RedisNowMs(admin_.get());
      auto retry = b->TryAcquire(Req(key, holder, ttl, delay));
      ASSERT_TRUE(retry.ok()) << retry.status().ToString();
      if (retry_at + 100 < end) {
        EXPECT_FALSE(retry->granted) << "the lost holder got its key back inside its lock-delay";
      }
      if (retry->granted) {
        ASSERT_TRUE(b->Release(key, holder).ok());
      }
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  ASSERT_GT(granted_before, 0) << "never granted";
  EXPECT_TRUE(refused_inside_delay) << "no attempt fell between the lease's end and the delay's";
  // The grant time the store recorded (its TIME inside the script) is not
  // before the end of the delay.
  // hinfo: token|limit|ttl|delay|granted|label.
  const std::string v =
      ReplyString(Cmd(admin_.get(), {"HGET", HoldInfoName(key), next.ToString()}).get());
  std::size_t g = 0;
  for (int field = 0; field < 4 && g != std::string::npos; ++field) g = v.find('|', g + 1);
  ASSERT_NE(g, std::string::npos) << v;
  const long long granted_at = std::atoll(v.c_str() + g + 1);
  EXPECT_GE(granted_at, end) << v;
  EXPECT_LE(granted_at, granted_before);
  ASSERT_TRUE(b->Release(key, next).ok());
}

TEST_F(RedisServer, LockDelayDoesNotFollowACleanRelease) {
  auto b = OpenRaw(uri_);
  const std::string key = UniqueKey("lock-delay-clean");
  ASSERT_TRUE(b->TryAcquire(Req(key, OwnerId(1, 1), milliseconds(10'000), milliseconds(10'000)))
                  ->granted);
  EXPECT_FALSE(b->TryAcquire(Req(key, OwnerId(2, 2), milliseconds(10'000)))->granted);
  ASSERT_TRUE(b->Release(key, OwnerId(1, 1)).ok());
  auto next = b->TryAcquire(Req(key, OwnerId(2, 2), milliseconds(10'000)));
  ASSERT_TRUE(next.ok());
  EXPECT_TRUE(next->granted) << "a clean release left a lock-delay behind";
  EXPECT_EQ(Cmd(admin_.get(), {"EXISTS", HoldersName(key)})->integer, 0);
  ASSERT_TRUE(b->Release(key, OwnerId(2, 2)).ok());
  // And the fast path is open again: the lock key is gone.
  EXPECT_EQ(Cmd(admin_.get(), {"EXISTS", LockName(key)})->integer, 0);
}

TEST_F(RedisServer, ListKeepsTheGrantTimeAcrossRenewals) {
  auto b = OpenRaw(uri_);
  const std::string key = UniqueKey("held-for");
  ASSERT_TRUE(b->TryAcquire(Req(key, OwnerId(1, 1), milliseconds(10'000)))->granted);
  std::this_thread::sleep_for(milliseconds(50));
  auto before = b->List(key);
  ASSERT_TRUE(before.ok() && before->size() == 1u);
  EXPECT_EQ((*before)[0].ttl, milliseconds(10'000));
  EXPECT_EQ((*before)[0].label, "redis-test");
  ASSERT_TRUE((*before)[0].held_for.has_value());
  EXPECT_GE(*(*before)[0].held_for, milliseconds(40));
  auto renewed = b->Renew(std::vector<LeaseRequest>{Req(key, OwnerId(1, 1), milliseconds(20'000))});
  ASSERT_TRUE(renewed[0].ok());
  auto after = b->List(key);
  ASSERT_TRUE(after.ok() && after->size() == 1u);
  EXPECT_EQ((*after)[0].ttl, milliseconds(20'000));
  EXPECT_GT((*after)[0].ttl_remaining, milliseconds(10'000));
  ASSERT_TRUE((*after)[0].held_for.has_value());
  EXPECT_GE(*(*after)[0].held_for, *(*before)[0].held_for) << "the renewal reset the grant time";
  ASSERT_TRUE(b->Release(key, OwnerId(1, 1)).ok());
}

// A key's own counter, left by an older dlock (which kept one per key for
// ever), is folded into its slot's counter at the key's next grant: the
// token goes on above it, and the counter is gone.
TEST_F(RedisServer, AnOlderDlocksCounterIsFoldedIntoTheSlotsCounter) {
  auto b = OpenRaw(uri_);
  const std::string key = UniqueKey("old-counter");
  const std::string slot = ReplyString(Cmd(admin_.get(), {"GET", SlotCounterName(key)}).get());
  const auto high = std::to_string(std::strtoull(slot.c_str(), nullptr, 10) + 1'000'000);
  ASSERT_EQ(ReplyString(Cmd(admin_.get(), {"SET", CounterName(key), high}).get()), "OK");
  auto granted = b->TryAcquire(Req(key, OwnerId(9, 9), milliseconds(10'000)));
  ASSERT_TRUE(granted.ok() && granted->granted) << granted.status().ToString();
  EXPECT_EQ(granted->token, std::stoull(high) + 1);
  EXPECT_EQ(Cmd(admin_.get(), {"EXISTS", CounterName(key)})->integer, 0);
  ASSERT_TRUE(b->Release(key, OwnerId(9, 9)).ok());
  EXPECT_EQ(b->StoredObjects(key).value(), 0u) << "the key left something behind";
  // Another key of the same slot follows the raised counter.
  auto again = b->TryAcquire(Req(key, OwnerId(9, 9), milliseconds(10'000)));
  ASSERT_TRUE(again.ok() && again->granted);
  EXPECT_GT(again->token, granted->token);
  ASSERT_TRUE(b->Release(key, OwnerId(9, 9)).ok());
}

TEST_F(RedisServer, HoldingsOfThePreviousVersionAreRead) {
  // The previous layout: the lock key holds the owner alone.
  auto b = OpenRaw(uri_);
  const std::string key = UniqueKey("old-format");
  const OwnerId old(7, 7);
  ASSERT_EQ(ReplyString(Cmd(admin_.get(), {"SET", CounterName(key), "41"}).get()), "OK");
  ASSERT_EQ(ReplyString(Cmd(admin_.get(), {"SET", LockName(key), old.ToString(), "PX", "10000"}).get()),
            "OK");
  auto list = b->List(key);
  ASSERT_TRUE(list.ok() && list->size() == 1u) << list.status().ToString();
  EXPECT_EQ((*list)[0].owner, old);
  EXPECT_EQ((*list)[0].token, 41u);
  EXPECT_FALSE(b->TryAcquire(Req(key, OwnerId(8, 8), milliseconds(1000)))->granted);
  EXPECT_FALSE(b->TryAcquire(Req(key, OwnerId(8, 8), milliseconds(1000), {}, kSharedLimit))->granted);
  auto retry = b->TryAcquire(Req(key, old, milliseconds(10'000)));
  ASSERT_TRUE(retry.ok() && retry->granted);
  EXPECT_EQ(retry->token, 41u);
  EXPECT_TRUE(b->Renew(std::vector<LeaseRequest>{Req(key, old, milliseconds(10'000))})[0].ok());
  ASSERT_TRUE(b->Release(key, old).ok());
  auto next = b->TryAcquire(Req(key, OwnerId(8, 8), milliseconds(1000)));
  ASSERT_TRUE(next.ok() && next->granted);
  EXPECT_GT(next->token, 41u) << "the token went down";
  ASSERT_TRUE(b->Release(key, OwnerId(8, 8)).ok());
  EXPECT_EQ(Cmd(admin_.get(), {"EXISTS", CounterName(key)})->integer, 0)
      << "the key's old counter stayed behind";
}

TEST_F(RedisServer, AWriterReleaseWakesEveryQueuedReader) {
  auto b = OpenRaw(uri_);
  const std::string key = UniqueKey("readers-wake");
  ASSERT_TRUE(b->TryAcquire(Req(key, OwnerId(1, 1), milliseconds(10'000)))->granted);
  std::vector<std::string> readers;
  std::vector<std::unique_ptr<Acquisition>> reading;
  for (std::uint64_t i = 10; i < 13; ++i) {
    const OwnerId r(i, i);
    readers.push_back(r.ToString());
    reading.push_back(
        b->Begin(Req(key, r, milliseconds(10'000), {}, kSharedLimit, milliseconds(5000))));
    EXPECT_FALSE(reading.back()->Try()->granted);
  }
  // A writer behind them is not woken.
  auto writer =
      b->Begin(Req(key, OwnerId(20, 20), milliseconds(10'000), {}, 1, milliseconds(5000)));
  EXPECT_FALSE(writer->Try()->granted);
  auto waiters = b->Waiters(key);
  ASSERT_TRUE(waiters.ok() && waiters->size() == 4u) << waiters.status().ToString();
  EXPECT_EQ((*waiters)[0].limit, kSharedLimit);
  EXPECT_EQ((*waiters)[3].limit, 1u);
  EXPECT_EQ((*waiters)[3].label, "redis-test");
  EXPECT_TRUE((*waiters)[0].waited_for.has_value());

  ContextPtr sub = Admin(PortOf(uri_));
  const std::string channel = WakeChannel(0, key);
  ReplyPtr ok(static_cast<redisReply*>(redisCommand(sub.get(), "SUBSCRIBE %b", channel.data(),
                                                    channel.size())));
  ASSERT_TRUE(ok);
  ASSERT_TRUE(b->Release(key, OwnerId(1, 1)).ok());
  std::vector<std::string> woken;
  for (int i = 0; i < 3; ++i) {
    void* reply = nullptr;
    ASSERT_EQ(redisGetReply(sub.get(), &reply), REDIS_OK);
    ReplyPtr message(static_cast<redisReply*>(reply));
    ASSERT_EQ(message->elements, 3u);
    woken.push_back(ReplyString(message->element[2]));
  }
  EXPECT_EQ(woken, readers);
  for (auto& reader : reading) EXPECT_TRUE(reader->Try()->granted);
  for (std::uint64_t i = 10; i < 13; ++i) EXPECT_TRUE(b->Release(key, OwnerId(i, i)).ok());
  writer->Abandon();
  EXPECT_EQ(Cmd(admin_.get(), {"EXISTS", QueueName(key)})->integer, 0);
}

}  // namespace
}  // namespace dlock::redis
