// Every figure is measured in one run against one store, and printed as a
// ratio to a floor measured in the same run, because on a shared machine
// only ratios mean anything.
//
//   floor     Client::Ping(): one round trip of the kind a grant costs
//   cycle     TryAcquire + Release, uncontended: two round trips of work,
//             compared with two pings
//   hand-off  N contenders on one key: release invoked -> next holder granted
//   hot key   grants per second on that key, against the ideal 1 / hold
//   many keys C clients, one key each: cycles per second, against the same
//             clients pinging (two pings per cycle)
//   memory    client memory per held lease, with L leases held by one client
#include "cli/command.h"
#include "cli/bench_cmd.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "core/duration.h"
#include "core/stats.h"

namespace dlock::cli {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

std::int64_t NowNs() { return MonotonicClock::now().time_since_epoch().count(); }

using internal::Summary;

// Samples in ns, summarised in µs (src/core/stats.h, as the bench programs).
Summary Summarise(const std::vector<std::int64_t>& ns) {
  std::vector<double> us;
  us.reserve(ns.size());
  for (auto v : ns) us.push_back(static_cast<double>(v) / 1e3);
  return internal::Summarize(std::move(us));
}

json ToJson(const Summary& s) {
  return {{"p50_us", s.p50_us}, {"p99_us", s.p99_us}, {"mean_us", s.mean_us}, {"n", s.n}};
}

std::int64_t RssBytes() {
  std::ifstream statm("/proc/self/statm");
  std::int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

double Ratio(double a, double b) { return b > 0 ? a / b : 0; }

std::string Fixed(double v, int digits = 1) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(digits) << v;
  return o.str();
}

}  // namespace

int RunBench(const BenchFlags& f) {
  auto hold = internal::ParseDuration(f.hold);
  if (!hold.ok()) return Fail(hold.status().WithContext("--hold"));
  auto duration = internal::ParseDuration(f.duration);
  if (!duration.ok()) return Fail(duration.status().WithContext("--duration"));
  if (*duration <= milliseconds(0)) return Fail(kExitUsage, "--duration must be positive");
  if (f.iterations < 10 || f.iterations > 1'000'000) return Fail(kExitUsage, "--iterations must be 10 to 1000000");
  if (f.contenders < 2 || f.contenders > 64) return Fail(kExitUsage, "--contenders must be 2 to 64");
  if (f.clients < 1 || f.clients > 64) return Fail(kExitUsage, "--clients must be 1 to 64");
  if (f.leases < 1 || f.leases > 1'000'000) return Fail(kExitUsage, "--leases must be 1 to 1000000");

  auto store = OpenStore(f.backend);
  if (!store.ok()) return Fail(store.status());
  Client& client = *store->client;
  const std::string prefix = "bench/" + std::to_string(DefaultRandom()->Next() % 1'000'000'000) + "/";
  AcquireOptions opts;
  opts.ttl = std::chrono::seconds(30);
  opts.wait = std::chrono::seconds(30);
  auto open_client = [&]() -> std::unique_ptr<Client> {
    auto c = Client::Connect(store->uri);
    return c.ok() ? std::move(*c) : nullptr;
  };
  std::cout << "dlock bench on " << client.Describe() << std::endl;

  // (a) floor
  std::vector<std::int64_t> samples;
  // A store that does not answer one request in time (a loaded ZooKeeper
  // fsyncing its log, a fresh one preallocating it) costs that sample, not
  // the run: up to three tries per request, counted and reported as
  // `retried`.
  int retried = 0;
  auto with_retries = [&](const std::function<Status()>& op) {
    Status s;
    for (int attempt = 0; attempt < 3; ++attempt) {
      s = op();
      if (s.code() != StatusCode::kUnavailable) return s;
      ++retried;
    }
    return s;
  };
  Status ping = with_retries([&] { return client.Ping(); });
  const bool have_floor = ping.ok();
  if (!have_floor && ping.code() != StatusCode::kFailedPrecondition) return Fail(ping);
  if (have_floor) {
    for (int i = 0; i < f.iterations + f.iterations / 10; ++i) {
      const auto t0 = NowNs();
      if (Status s = with_retries([&] { return client.Ping(); }); !s.ok()) return Fail(s);
      if (i >= f.iterations / 10) samples.push_back(NowNs() - t0);
    }
  }
  const Summary floor = Summarise(samples);

  // (b) uncontended cycle
  samples.clear();
  for (int i = 0; i < f.iterations + f.iterations / 10; ++i) {
    const auto t0 = NowNs();
    Status s = with_retries([&]() -> Status {
      auto lease = client.TryAcquire(prefix + "cycle", opts);
      if (!lease.ok()) return lease.status();
      return lease->Release();
    });
    if (!s.ok()) return Fail(s);
    if (i >= f.iterations / 10) samples.push_back(NowNs() - t0);
  }
  const Summary cycle = Summarise(samples);

  // (c) hand-off and (d) hot key: contenders on one key.
  std::atomic<std::int64_t> release_invoked{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<std::int64_t> handoffs;
  std::vector<int> per_contender(static_cast<std::size_t>(f.contenders), 0);
  std::atomic<int> errors{0};
  std::string first_error;
  const std::int64_t hot_start = NowNs();
  {
    std::vector<std::thread> threads;
    for (int c = 0; c < f.contenders; ++c) {
      threads.emplace_back([&, c] {
        auto me = open_client();
        if (!me) {
          ++errors;
          return;
        }
        while (!stop) {
          const std::int64_t asked = NowNs();
          auto lease = me->Acquire(prefix + "hot", opts);
          const std::int64_t granted = NowNs();
          if (!lease.ok()) {
            if (errors++ == 0) {
              std::lock_guard l(mu);
              first_error = lease.status().ToString();
            }
            continue;
          }
          const std::int64_t released = release_invoked.load();
          {
            std::lock_guard l(mu);
            ++per_contender[static_cast<std::size_t>(c)];
            // A hand-off: we were waiting when the previous holder let go.
            if (released > asked) handoffs.push_back(granted - released);
          }
          std::this_thread::sleep_for(*hold);
          release_invoked = NowNs();
          (void)lease->Release();
        }
      });
    }
    std::this_thread::sleep_for(*duration);
    stop = true;
    for (auto& t : threads) t.join();
  }
  const double hot_seconds = static_cast<double>(NowNs() - hot_start) / 1e9;
  if (errors > 0) return Fail(kExitUnavailable, "contended run: " + std::to_string(errors.load()) + " errors, first: " + first_error);
  const Summary handoff = Summarise(handoffs);
  int grants = 0;
  for (int n : per_contender) grants += n;
  const double hot_ops = grants / hot_seconds;
  const double ideal_ops = 1.0 / std::chrono::duration<double>(*hold).count();
  const auto [min_it, max_it] = std::minmax_element(per_contender.begin(), per_contender.end());

  // (e) many keys, against the same clients pinging.
  auto run_clients = [&](bool locks) {
    std::atomic<std::int64_t> count{0};
    std::atomic<bool> done{false};
    std::vector<std::thread> threads;
    for (int c = 0; c < f.clients; ++c) {
      threads.emplace_back([&, c] {
        auto me = open_client();
        if (!me) return;
        const std::string key = prefix + "many/" + std::to_string(c);
        while (!done) {
          if (locks) {
            auto lease = me->TryAcquire(key, opts);
            if (lease.ok()) (void)lease->Release();
          } else {
            (void)me->Ping();
            (void)me->Ping();
          }
          ++count;
        }
      });
    }
    const auto t0 = NowNs();
    std::this_thread::sleep_for(*duration / 2);
    done = true;
    for (auto& t : threads) t.join();
    return static_cast<double>(count.load()) / (static_cast<double>(NowNs() - t0) / 1e9);
  };
  const double many_ops = run_clients(true);
  const double many_floor_ops = have_floor ? run_clients(false) : 0;

  // (f) memory per held lease.
  std::int64_t bytes_per_lease = 0;
  {
    std::vector<Lease> held;
    held.reserve(static_cast<std::size_t>(f.leases));
    const std::int64_t before = RssBytes();
    AcquireOptions long_opts = opts;
    long_opts.ttl = std::chrono::minutes(10);
    for (int i = 0; i < f.leases; ++i) {
      Result<Lease> lease = UnavailableError("not tried");
      Status s = with_retries([&] {
        lease = client.TryAcquire(prefix + "mem/" + std::to_string(i), long_opts);
        return lease.status();
      });
      if (!s.ok()) return Fail(s);
      held.push_back(std::move(*lease));
    }
    bytes_per_lease = (RssBytes() - before) / f.leases;
    for (auto& l : held) (void)l.Release();
  }

  const double cycle_ratio = Ratio(cycle.p50_us, 2 * floor.p50_us);
  const double handoff_ratio = Ratio(handoff.p50_us, floor.p50_us);
  std::cout << std::fixed << std::setprecision(1);
  auto line = [](const std::string& what, const Summary& s) {
    std::cout << "  " << std::left << std::setw(34) << what << std::right << std::setw(10)
              << s.p50_us << std::setw(10) << s.p99_us << "   (n=" << s.n << ")\n";
  };
  std::cout << "                                         p50 us    p99 us\n";
  if (have_floor) line("floor: one round trip (Ping)", floor);
  line("cycle: TryAcquire + Release", cycle);
  line("hand-off, " + std::to_string(f.contenders) + " contenders", handoff);
  if (retried > 0) {
    std::cout << "  (" << retried << " request(s) not answered in time were retried)\n";
  }
  if (have_floor) {
    std::cout << "  cycle / two round trips           " << Fixed(cycle_ratio, 2) << "\n"
              << "  hand-off / one round trip         " << Fixed(handoff_ratio, 2) << "\n";
  } else {
    std::cout << "  (this store has no Ping: no floor, no ratios)\n";
  }
  std::cout << "  hot key: " << Fixed(hot_ops) << " grants/s with a " << f.hold << " hold; ideal 1/hold = "
            << Fixed(ideal_ops) << "/s (" << Fixed(100 * Ratio(hot_ops, ideal_ops)) << "%); per contender "
            << *min_it << ".." << *max_it << "\n"
            << "  many keys: " << Fixed(many_ops) << " cycles/s with " << f.clients << " clients";
  if (have_floor) std::cout << "; floor " << Fixed(many_floor_ops) << " (two pings)/s (" << Fixed(100 * Ratio(many_ops, many_floor_ops)) << "%)";
  std::cout << "\n  memory: " << bytes_per_lease << " bytes of client memory per held lease ("
            << f.leases << " leases)\n";

  if (!f.json.empty()) {
    json out = {{"backend", client.Describe()},
                {"floor_rtt_us", have_floor ? json(floor.p50_us) : json(nullptr)},
                {"floor", have_floor ? ToJson(floor) : json(nullptr)},
                {"cycle", ToJson(cycle)},
                {"cycle_ratio_to_floor", have_floor ? json(cycle_ratio) : json(nullptr)},
                // No hand-off seen (the releaser always took the key back):
                // null, not a zero latency.
                {"handoff", handoff.n ? ToJson(handoff) : json(nullptr)},
                {"handoff_ratio_to_floor",
                 have_floor && handoff.n ? json(handoff_ratio) : json(nullptr)},
                {"contenders", f.contenders},
                {"hot_key", {{"hold_ms", std::chrono::duration<double, std::milli>(*hold).count()},
                             {"ops_per_s", hot_ops},
                             {"ideal_ops_per_s", ideal_ops},
                             {"ratio_to_ideal", Ratio(hot_ops, ideal_ops)},
                             {"per_contender", per_contender}}},
                {"many_keys", {{"clients", f.clients},
                               {"ops_per_s", many_ops},
                               {"floor_ops_per_s", have_floor ? json(many_floor_ops) : json(nullptr)},
                               {"ratio_to_floor", have_floor ? json(Ratio(many_ops, many_floor_ops)) : json(nullptr)}}},
                {"memory", {{"leases", f.leases}, {"bytes_per_lease", bytes_per_lease}}},
                {"retried", retried}};
    std::ofstream file(f.json, std::ios::trunc);
    file << out.dump(2) << '\n';
    if (!file) return Fail(kExitCantCreate, "cannot write " + f.json);
  }
  return kExitOk;
}

void AddBenchCommand(CLI::App& app, Commands& commands) {
  auto bench = std::make_shared<BenchFlags>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Measure a store: floor, lock cycle, hand-off, hot key, many keys, memory per lease");
  cmd->add_option("--backend", bench->backend, kBackendHelp);
  cmd->add_option("--iterations", bench->iterations, "samples of the floor and the cycle")
      ->capture_default_str();
  cmd->add_option("--contenders", bench->contenders, "clients contending for one key")
      ->capture_default_str();
  cmd->add_option("--hold", bench->hold, "critical section of the contenders")
      ->capture_default_str();
  cmd->add_option("--duration", bench->duration, "length of the contended run")
      ->capture_default_str();
  cmd->add_option("--clients", bench->clients, "clients in the many-key run")
      ->capture_default_str();
  cmd->add_option("--leases", bench->leases, "leases held at once for the memory figure")
      ->capture_default_str();
  cmd->add_option("--json", bench->json,
                  "write every figure to FILE (read by 'dlock plan --from-bench FILE')");
  commands.push_back({cmd, [bench] { return RunBench(*bench); }});
}

}  // namespace dlock::cli
