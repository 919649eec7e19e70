// dlock_bench_footprint URI KEYS [THREADS]: acquires and releases KEYS
// distinct keys (under a fresh prefix), then reports how many objects the
// store keeps for them (Backend::StoredObjects) right after and until none
// are left (ZooKeeper reaps emptied containers, PostgreSQL sweeps free rows:
// both some time after the release). One JSON line. docs/benchmarks.md,
// "Footprint".
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "core/registry.h"
#include "dlock/clock.h"

namespace {

using dlock::Backend;
using dlock::OwnerId;
using dlock::StatusCode;

// Keys [from, to) of `prefix`, each acquired and released by its own owner;
// a reply lost to a busy store is asked again. False on any other error.
bool Cycle(Backend& b, const std::string& prefix, std::uint64_t from, std::uint64_t to) {
  for (std::uint64_t i = from; i < to; ++i) {
    const std::string key = prefix + std::to_string(i);
    const OwnerId owner(0xf00d, i + 1);
    dlock::Result<dlock::Attempt> a = dlock::UnavailableError("not tried");
    for (int tries = 0; tries < 10 && !a.ok(); ++tries) {
      a = b.TryAcquire({key, owner, std::chrono::seconds(30)});
    }
    if (!a.ok() || !a->granted) {
      std::cerr << key << ": " << (a.ok() ? "not granted" : a.status().ToString()) << "\n";
      return false;
    }
    dlock::Status released = dlock::UnavailableError("not tried");
    for (int tries = 0; tries < 10 && !released.ok(); ++tries) released = b.Release(key, owner);
    if (!released.ok()) {
      std::cerr << key << ": " << released.ToString() << "\n";
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  // "-": the URI is in $DLOCK_BACKEND, so that a password in it stays out
  // of the process list.
  const char* from_env = std::getenv("DLOCK_BACKEND");
  if (argc < 3 || (std::string_view(argv[1]) == "-" && from_env == nullptr)) {
    std::cerr << "usage: dlock_bench_footprint URI|- KEYS [THREADS] (-: $DLOCK_BACKEND)\n";
    return 64;
  }
  const std::string uri = std::string_view(argv[1]) == "-" ? from_env : argv[1];
  const std::uint64_t keys = std::strtoull(argv[2], nullptr, 10);
  const int threads = argc > 3 ? std::atoi(argv[3]) : 4;
  const std::string prefix =
      "footprint/" + std::to_string(dlock::bench::MonotonicNs() % 1'000'000'000) + "/";
  dlock::internal::BackendParams params;
  params.clock = dlock::DefaultClock();
  std::vector<std::unique_ptr<Backend>> backends;
  for (int t = 0; t < threads; ++t) {
    auto b = dlock::internal::OpenBackend(uri, params);
    if (!b.ok()) {
      std::cerr << b.status().ToString() << "\n";
      return 69;
    }
    backends.push_back(std::move(*b));
  }
  std::atomic<bool> ok{true};
  const std::int64_t start = dlock::bench::MonotonicNs();
  {
    std::vector<std::jthread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        const std::uint64_t from = keys * t / threads, to = keys * (t + 1) / threads;
        if (!Cycle(*backends[t], prefix, from, to)) ok = false;
      });
    }
  }
  const double cycle_s = (dlock::bench::MonotonicNs() - start) / 1e9;
  if (!ok) return 1;
  auto stored = backends[0]->StoredObjects(prefix);
  const std::uint64_t after = stored.ok() ? *stored : ~0ULL;
  const std::int64_t settle_start = dlock::bench::MonotonicNs();
  const int settle_limit_s = 1800;
  while (stored.ok() && *stored > 0 &&
         dlock::bench::MonotonicNs() - settle_start < settle_limit_s * 1'000'000'000LL) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    stored = backends[0]->StoredObjects(prefix);
  }
  nlohmann::json out = {
      {"store", backends[0]->Describe()},
      {"keys", keys},
      {"threads", threads},
      {"cycles_per_s", keys / cycle_s},
      {"objects_right_after", after},
      {"objects_at_end", stored.ok() ? nlohmann::json(*stored) : nlohmann::json(stored.status().ToString())},
      {"settled_after_s", (dlock::bench::MonotonicNs() - settle_start) / 1e9}};
  std::cout << out.dump() << std::endl;
  return stored.ok() && *stored == 0 ? 0 : 1;
}
