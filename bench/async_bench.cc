// dlock_bench_async: what the asynchronous API costs, on any store (by URI,
// or "-" for $DLOCK_BACKEND). docs/benchmarks.md, "The asynchronous API".
//
//   dlock_bench_async URI pending N      N acquisitions pending at once on N
//                                        held keys: threads, memory each, and
//                                        how long until all are granted
//   dlock_bench_async URI cycle N        the uncontended acquire + release,
//                                        blocking against asynchronous
//   dlock_bench_async URI distinct N     N distinct keys acquired and released
//                                        at once, against N Pings at the same
//                                        concurrency (the store's floor here)
//   dlock_bench_async URI waiters W P MS W waiters on one key in P processes
//                                        for MS ms: hand-offs, attempts and
//                                        notifications per hand-off, hand-off
//                                        latency; $DLOCK_WORK_CMD (a shell
//                                        command printing one number: the
//                                        store's own count of commands) read
//                                        before and after gives the store's
//                                        work per hand-off
//
// One JSON line per run on stdout.
#include <dirent.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <iostream>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "async_bench.h"
#include "async_floor.h"

namespace dlock::bench {
namespace {

// Acquires `keys` through `client`, all at once; the leases in key order.
std::vector<Lease> AcquireAll(Client& client, const std::vector<std::string>& keys) {
  std::vector<std::future<Result<Lease>>> futures;
  futures.reserve(keys.size());
  for (const auto& k : keys) futures.push_back(client.AcquireFuture(k, Opts(milliseconds(600000))));
  std::vector<Lease> leases;
  for (auto& f : futures) {
    Result<Lease> lease = f.get();
    if (!lease.ok()) Fail("acquire", lease.status());
    leases.push_back(std::move(*lease));
  }
  return leases;
}

std::vector<std::string> Keys(const std::string& what, int n) {
  const std::string prefix = "bench-async/" + std::to_string(getpid()) + "/" + what + "/";
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) keys.push_back(prefix + std::to_string(i));
  return keys;
}

// Counts answers and wakes the caller when all `expected` came.
struct Answers {
  explicit Answers(int n) : expected(n) {}
  void Add(bool granted_one) {
    if (granted_one) ++granted;
    if (answered.fetch_add(1) + 1 == expected) all.set_value();
  }
  const int expected;
  std::atomic<int> granted{0}, answered{0};
  std::promise<void> all;
};

json Pending(int n) {
  auto plan = std::make_shared<FaultPlan>();
  // The holder is the application here: its threads (and its own async
  // ones, which took the keys) are counted as the application's.
  auto holder = Connect();
  std::vector<Lease> held = AcquireAll(*holder, Keys("pending", n));
  const int threads_app = ThreadsOfThisProcess();
  auto waiters = Connect(plan);
  // One acquisition first, so that what the store makes once for waiting
  // (a subscription, a watch stream) exists before the count.
  AcquireAll(*waiters, Keys("warm", 1)).clear();
  const int threads_before = ThreadsOfThisProcess();
  const long rss_before = RssKb();
  auto answers = std::make_shared<Answers>(n);
  for (const Lease& lease : held) {
    waiters->AcquireAsync(lease.key(), Opts(milliseconds(600000)),
                          [answers](Result<Lease> got) { answers->Add(got.ok()); });
  }
  while (plan->Tries() < n + 1) std::this_thread::sleep_for(milliseconds(10));
  std::this_thread::sleep_for(milliseconds(500));  // settled: each waits
  const int threads_during = ThreadsOfThisProcess();
  const long rss_during = RssKb();
  const auto released_at = Clock::now();
  for (Lease& lease : held) (void)lease.Release();
  answers->all.get_future().wait();
  return {{"pending", n},
          {"threads_app", threads_app},
          {"threads_client_idle", threads_before - threads_app},
          {"threads_client_pending", threads_during - threads_app},
          {"threads_added_by_pending", threads_during - threads_before},
          {"rss_bytes_per_pending", (rss_during - rss_before) * 1024.0 / n},
          {"granted", answers->granted.load()},
          {"all_granted_after_release_ms",
           MicrosBetween(released_at, Clock::now()) / 1000},
          {"notifications", plan->Notifies()},
          {"notifications_blind", plan->BlindNotifies()}};
}

// µs per uncontended acquire + release, blocking or through the future.
double CycleUs(Client& client, const std::string& key, int n, bool async) {
  const auto start = Clock::now();
  for (int i = 0; i < n; ++i) {
    Result<Lease> lease = async ? client.AcquireFuture(key, Opts(milliseconds(5000))).get()
                                : client.Acquire(key, Opts(milliseconds(5000)));
    if (!lease.ok()) Fail("cycle", lease.status());
    Status released = lease->Release();
    if (!released.ok()) Fail("release", released);
  }
  return MicrosBetween(start, Clock::now()) / n;
}

json Cycle(int n) {
  auto client = Connect();
  const std::string key = Keys("cycle", 1)[0];
  (void)CycleUs(*client, key, std::max(1, n / 10), true);  // warm both paths
  (void)CycleUs(*client, key, std::max(1, n / 10), false);
  std::vector<double> blocking, async;
  for (int round = 0; round < 5; ++round) {  // interleaved: load drifts alike
    blocking.push_back(CycleUs(*client, key, n / 5, false));
    async.push_back(CycleUs(*client, key, n / 5, true));
  }
  std::sort(blocking.begin(), blocking.end());
  std::sort(async.begin(), async.end());
  return {{"cycles", n},
          {"blocking_us_median", blocking[2]},
          {"async_us_median", async[2]},
          {"async_over_blocking", async[2] / blocking[2]}};
}

// N Pings from `threads` threads: the round trips a store gives at the
// concurrency the async API has (its worker threads).
double PingRate(Client& client, int n, unsigned threads) {
  std::atomic<int> left{n};
  const auto start = Clock::now();
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      while (left.fetch_sub(1) > 0) {
        if (Status s = client.Ping(); !s.ok()) Fail("ping", s);
      }
    });
  }
  for (auto& t : pool) t.join();
  return n / (MicrosBetween(start, Clock::now()) / 1e6);
}

// CPU time (user + system) this process has used, in µs.
double ProcessCpuUs() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e6 +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

json Distinct(int n) {
  auto client = Connect();
  const double floor = PingRate(*client, n, 2);
  auto answers = std::make_shared<Answers>(n);
  const std::vector<std::string> keys = Keys("distinct", n);
  const double cpu_start = ProcessCpuUs();
  const auto start = Clock::now();
  for (const std::string& key : keys) {
    // Released without waiting, as docs/benchmarks.md says it is: a cycle
    // ends when its release is answered.
    client->AcquireAsync(key, Opts(milliseconds(600000)), [answers](Result<Lease> lease) {
      if (!lease.ok()) return answers->Add(false);
      lease->ReleaseAsync([answers](const Status& released) { answers->Add(released.ok()); });
    });
  }
  answers->all.get_future().wait();
  const double rate = n / (MicrosBetween(start, Clock::now()) / 1e6);
  const double cpu_us_per_cycle = (ProcessCpuUs() - cpu_start) / n;
  client.reset();  // its threads would take CPU from the floor's run below
  // A cycle is two writes (grant, release); each floor counts one a write.
  json out = {{"keys", n},
              {"cycles_per_s", rate},
              {"ok", answers->granted.load()},
              {"ping_per_s_2_threads", floor},
              // The client's own cost (all its threads), beside the store's.
              {"client_cpu_us_per_cycle", cpu_us_per_cycle},
              {"writes_over_floor", 2 * rate / floor}};
  const std::optional<WriteFloor> pipelined = PipelinedWriteFloor(g_uri, 2 * n);
  out["pipelined_floor"] = pipelined ? json(pipelined->what) : json("not measured for this store");
  if (pipelined) {
    out["pipelined_writes_per_s"] = pipelined->writes_per_s;
    out["writes_over_pipelined_floor"] = 2 * rate / pipelined->writes_per_s;
  }
  return out;
}

}  // namespace
}  // namespace dlock::bench

int main(int argc, char** argv) {
  const char* env = std::getenv("DLOCK_BACKEND");
  if (argc < 4 || (std::string_view(argv[1]) == "-" && env == nullptr)) {
    std::cerr << "usage: dlock_bench_async URI|- pending N | cycle N | distinct N | "
                 "waiters W P MS\n";
    return 64;
  }
  using namespace dlock::bench;
  g_uri = std::string_view(argv[1]) == "-" ? env : argv[1];
  const std::string mode = argv[2];
  const int n = std::atoi(argv[3]);
  if (n <= 0) {
    std::cerr << "dlock_bench_async: N must be a positive number, not '" << argv[3] << "'\n";
    return 64;
  }
  json out;
  if (mode == "pending") {
    out = Pending(n);
  } else if (mode == "cycle") {
    out = Cycle(n);
  } else if (mode == "distinct") {
    out = Distinct(n);
  } else if (mode == "waiters" && argc == 6) {
    out = Waiters(n, std::atoi(argv[4]), std::atoi(argv[5]));
  } else {
    std::cerr << "dlock_bench_async: unknown mode '" << mode << "'\n";
    return 64;
  }
  out["mode"] = mode;
  std::cout << out.dump() << std::endl;
  return 0;
}
