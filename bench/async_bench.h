// What the modes of dlock_bench_async (async_bench.cc,
// async_bench_waiters.cc) share.
#ifndef DLOCK_BENCH_ASYNC_BENCH_H_
#define DLOCK_BENCH_ASYNC_BENCH_H_

#include <dirent.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "core/registry.h"
#include "dlock/client.h"
#include "dlock/testing/faulty_backend.h"

namespace dlock::bench {

using nlohmann::json;
using std::chrono::milliseconds;
using testing::FaultPlan;
using Clock = std::chrono::steady_clock;

inline std::string g_uri;  // the store, from the command line

inline int ThreadsOfThisProcess() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

inline long RssKb() {
  std::ifstream status("/proc/self/status");
  std::string word;
  while (status >> word) {
    if (word == "VmRSS:") {
      long kb = 0;
      status >> kb;
      return kb;
    }
  }
  return 0;
}

// A client on the store; with a plan, its attempts and notifications are
// counted.
inline std::unique_ptr<Client> Connect(std::shared_ptr<FaultPlan> plan = nullptr) {
  internal::BackendParams params;
  params.clock = DefaultClock();
  auto backend = internal::OpenBackend(g_uri, params);
  if (!backend.ok()) {
    std::cerr << "dlock_bench_async: " << backend.status().ToString() << "\n";
    std::exit(69);
  }
  std::unique_ptr<Backend> b = std::move(*backend);
  if (plan) b = std::make_unique<testing::FaultyBackend>(std::move(b), plan);
  return Client::FromBackend(std::move(b));
}

inline AcquireOptions Opts(milliseconds wait) {
  AcquireOptions o;
  o.ttl = milliseconds(60000);
  o.wait = wait;
  return o;
}

[[noreturn]] inline void Fail(const std::string& what, const Status& status) {
  std::cerr << "dlock_bench_async: " << what << ": " << status.ToString() << "\n";
  std::exit(70);
}

// W waiters on one key in P processes for MS ms (async_bench_waiters.cc).
json Waiters(int waiters, int processes, int ms);

}  // namespace dlock::bench

#endif  // DLOCK_BENCH_ASYNC_BENCH_H_
