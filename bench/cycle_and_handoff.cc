#include "cycle_and_handoff.h"

#include <errno.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>
#include <thread>

#include "bench_util.h"

namespace dlock::bench {
namespace {

using Clock = std::chrono::steady_clock;  // CLOCK_MONOTONIC: one clock for all processes

constexpr int kHandoffWarmUp = 20;  // grants left out at the start of the hand-off

// Two writes, timed as one floor sample and two write round trips.
void TimePair(const std::function<void()>& write, std::vector<double>* floor_us,
              std::vector<double>* write_us) {
  const auto start = Clock::now();
  write();  // as a grant
  const auto mid = Clock::now();
  write();  // as a release
  const auto end = Clock::now();
  if (floor_us == nullptr) return;
  floor_us->push_back(MicrosBetween(start, end));
  write_us->push_back(MicrosBetween(start, mid));
  write_us->push_back(MicrosBetween(mid, end));
}

void TimeCycle(Client& client, CycleSamples* out) {
  AcquireOptions options;
  options.ttl = std::chrono::seconds(30);
  const auto start = Clock::now();
  auto lease = client.TryAcquire("bench/cycle", options);
  const auto acquired = Clock::now();
  if (!lease.ok()) Die("cycle: TryAcquire: " + lease.status().message());
  if (auto s = lease->Release(); !s.ok()) Die("cycle: Release: " + s.message());
  const auto released = Clock::now();
  if (out == nullptr) return;
  out->cycle.push_back(MicrosBetween(start, released));
  out->acquire.push_back(MicrosBetween(start, acquired));
  out->release.push_back(MicrosBetween(acquired, released));
}

// One grant as a contender saw it.
struct Grant {
  std::uint64_t token;
  std::int64_t acquired_ns, release_start_ns, release_end_ns;
};

// Starts `contenders` copies of this program as contenders, each writing
// its grants to DIR/<index>, and waits for all of them.
void RunContenders(const std::string& uri, const std::string& key, const std::string& dir,
                   std::int64_t start_ns, std::int64_t end_ns, int contenders) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) Die("cannot read /proc/self/exe: " + ec.message());
  std::vector<pid_t> pids;
  for (int i = 0; i < contenders; ++i) {
    const std::vector<std::string> args = {self.string(),
                                           "--contender",
                                           uri,
                                           key,
                                           std::to_string(start_ns),
                                           std::to_string(end_ns),
                                           dir + "/" + std::to_string(i)};
    const pid_t pid = fork();
    if (pid < 0) Die(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
      std::vector<char*> argv;
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) Die("a contender failed");
  }
}

// Every contender's grants, in token order; counts those before `end_ns`.
std::vector<Grant> ReadGrants(const std::string& dir, int contenders, std::int64_t end_ns,
                              std::vector<int>* counts) {
  std::vector<Grant> grants;
  for (int i = 0; i < contenders; ++i) {
    std::ifstream in(dir + "/" + std::to_string(i));
    Grant g{};
    int n = 0;
    while (in >> g.token >> g.acquired_ns >> g.release_start_ns >> g.release_end_ns) {
      grants.push_back(g);
      if (g.acquired_ns < end_ns) ++n;
    }
    counts->push_back(n);
  }
  std::sort(grants.begin(), grants.end(),
            [](const Grant& a, const Grant& b) { return a.token < b.token; });
  return grants;
}

}  // namespace

void Die(const std::string& message, int code) {
  std::cerr << program_invocation_short_name << ": " << message << '\n';
  std::exit(code);
}

void RunCyclesAndFloor(Client& client, const std::function<void()>& floor_write,
                       const std::function<void()>& other_write, int n, CycleSamples* out) {
  auto cycle = [&] { TimeCycle(client, out); };
  auto floor = [&] {
    TimePair(floor_write, out ? &out->floor : nullptr, out ? &out->write : nullptr);
  };
  auto other = [&] {
    TimePair(other_write, out ? &out->other_floor : nullptr, out ? &out->other_write : nullptr);
  };
  for (int i = 0; i < n; ++i) {
    switch (i % 3) {
      case 0:
        cycle();
        floor();
        other();
        break;
      case 1:
        floor();
        other();
        cycle();
        break;
      default:
        other();
        cycle();
        floor();
        break;
    }
  }
}

int Contender(int argc, char** argv) {
  if (argc != 7) Die("--contender URI KEY START_NS END_NS OUTFILE", kExitUsage);
  const std::string uri = argv[2], key = argv[3], out_path = argv[6];
  const std::int64_t start_ns = std::atoll(argv[4]), end_ns = std::atoll(argv[5]);
  auto client = Client::Connect(uri);
  if (!client.ok()) Die("contender: " + client.status().message());
  AcquireOptions options;
  options.ttl = std::chrono::seconds(10);
  options.wait = std::chrono::seconds(20);
  // Warm the connection (and any listening one) before the start.
  {
    auto lease = (*client)->Acquire(key + "/warm/" + std::to_string(getpid()), options);
    if (lease.ok()) (void)lease->Release();
  }
  while (MonotonicNs() < start_ns) std::this_thread::sleep_for(std::chrono::microseconds(200));
  std::vector<Grant> grants;
  while (MonotonicNs() < end_ns) {
    auto lease = (*client)->Acquire(key, options);
    if (!lease.ok()) Die("contender: Acquire: " + lease.status().message());
    Grant g{lease->token(), MonotonicNs(), 0, 0};
    g.release_start_ns = MonotonicNs();
    if (auto s = lease->Release(); !s.ok()) Die("contender: Release: " + s.message());
    g.release_end_ns = MonotonicNs();
    grants.push_back(g);
  }
  std::ofstream out(out_path);
  for (const Grant& g : grants) {
    out << g.token << ' ' << g.acquired_ns << ' ' << g.release_start_ns << ' ' << g.release_end_ns
        << '\n';
  }
  return out.flush() ? 0 : 1;
}

Handoff RunHandoff(const std::string& uri, int seconds, int contenders, TokenSteps steps) {
  char tmpl[] = "/tmp/dlock-bench-handoff.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) Die(std::string("mkdtemp: ") + std::strerror(errno));
  const std::string dir = tmpl;
  const std::string key =
      "bench/handoff/" + std::to_string(getpid()) + "/" + std::to_string(MonotonicNs());
  const std::int64_t start_ns = MonotonicNs() + 1'500'000'000;  // time to connect
  const std::int64_t end_ns = start_ns + static_cast<std::int64_t>(seconds) * 1'000'000'000;
  RunContenders(uri, key, dir, start_ns, end_ns, contenders);
  Handoff result;
  const std::vector<Grant> grants = ReadGrants(dir, contenders, end_ns, &result.counts);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  for (std::size_t i = kHandoffWarmUp; i + 1 < grants.size(); ++i) {
    const Grant& prev = grants[i];
    const Grant& next = grants[i + 1];
    // Consecutive grants only, and only while everybody was still contending.
    if (steps == TokenSteps::kByOne && next.token != prev.token + 1) continue;
    if (next.acquired_ns >= end_ns) continue;
    result.from_call_us.push_back((next.acquired_ns - prev.release_start_ns) / 1000.0);
    result.from_return_us.push_back((next.acquired_ns - prev.release_end_ns) / 1000.0);
  }
  return result;
}

void PrintRows(const std::vector<Row>& rows, nlohmann::json& results) {
  char line[200];
  std::snprintf(line, sizeof line, "%-32s %10s %10s %10s %6s\n", "", "p50 µs", "p99 µs", "mean µs",
                "n");
  std::cout << line;
  for (const Row& row : rows) {
    const auto& r = results[row.key] = SummaryJson(row.us);
    std::snprintf(line, sizeof line, "%-32s %10.1f %10.1f %10.1f %6zu\n", row.label,
                  r["p50_us"].get<double>(), r["p99_us"].get<double>(), r["mean_us"].get<double>(),
                  r["n"].get<std::size_t>());
    std::cout << line;
  }
}

double GrantSpreadPercent(const std::vector<int>& counts, nlohmann::json& results) {
  const double mean = std::accumulate(counts.begin(), counts.end(), 0.0) / counts.size();
  double worst = 0;
  std::string listed;
  for (int c : counts) {
    worst = std::max(worst, std::abs(c - mean) / mean);
    listed += (listed.empty() ? "" : " ") + std::to_string(c);
  }
  results["grants_per_process"] = counts;
  std::cout << "grants per process: " << listed << " (mean " << mean << ")\n\n";
  return worst * 100;
}

void PrintRatios(const std::vector<Ratio>& ratios, nlohmann::json& report) {
  char line[200];
  for (const Ratio& r : ratios) {
    const bool pass = r.value <= r.target;
    report["ratios"][r.key] = {{"value", r.value}, {"target", r.target}, {"pass", pass}};
    std::snprintf(line, sizeof line, "%-32s %6.2f%s  target <= %.1f%s  %s\n", r.label, r.value,
                  r.unit, r.target, r.unit, pass ? "PASS" : "MISS");
    std::cout << line;
  }
}

}  // namespace dlock::bench
