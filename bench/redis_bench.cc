// dlock_bench_redis: what a lock on Redis costs, next to what any lock on
// Redis must pay, and next to the Redis locks in use today. One run, one
// server (its own redis-server on a free loopback port, unless --uri):
//
//  (a) cycle  Client::TryAcquire(key, ttl 30s) then Lease::Release(),
//             uncontended, one Client, timed per iteration.
//  (b) floor  two raw EVALSHA round trips of a trivial script (`return 1`)
//             on one hiredis connection: a grant and a release are each at
//             least one round trip, so no lock on this server can beat it.
//      (a) and (b) alternate in blocks of 100 iterations.
//  (c) hand-off, 4 processes contending for one key, each holding it for a
//      ~1 ms critical section (a spin), for --duration: dlock (this binary
//      as --contender), redis-py's Lock (bench/peers/redis_py_lock.py, with
//      Debian's /usr/bin/python3) and node redlock@4 on ioredis
//      (bench/peers/node_redlock, `npm install`ed there on first use).
//      Every process writes one line per grant; from them: acquisitions/s,
//      the release-to-next-grant gap (p50/p99), per-process counts, mean and
//      max wait.
//
// Targets (dlock): cycle p50 <= 1.25 x floor p50; contended throughput >=
// 90% of the ideal 1 / (critical section + 2 round trips), a round trip
// being floor p50 / 2; per-process counts within +-15% of their mean; max
// wait <= 10 x mean wait. Exit status: 0 when everything was measured (MISS
// included), 64 for a bad flag, 1 when something could not be measured.
#include <hiredis/hiredis.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_flags.h"
#include "bench_util.h"
#include "dlock/client.h"

extern char** environ;

namespace {

using SteadyClock = std::chrono::steady_clock;  // CLOCK_MONOTONIC, as the peers read it
using dlock::bench::MonotonicNs;
using dlock::bench::ParseBenchFlags;
using dlock::bench::SetTo;
using dlock::bench::Summarize;
using dlock::bench::Summary;
constexpr int kExitUsage = 64;
constexpr int kBlock = 100;
constexpr const char* kUsage =
    "usage: dlock_bench_redis [--uri redis://...] [--iterations N] [--duration-ms 5000]\n"
    "                         [--contenders 4] [--cs-us 1000] [--json FILE] [--no-peers]";

struct Flags {
  std::string uri;
  int iterations = 5000;
  int duration_ms = 5000;
  int contenders = 4;
  int cs_us = 1000;
  std::string json_path;
  bool peers = true;
};

[[noreturn]] void Die(const std::string& message, int code = 1) {
  std::cerr << "dlock_bench_redis: " << message << '\n';
  std::exit(code);
}

void SpinFor(std::int64_t ns) {
  const std::int64_t until = MonotonicNs() + ns;
  while (MonotonicNs() < until) {
  }
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  ParseBenchFlags(argc, argv, kUsage,
                  {{"--uri", &f.uri},
                   {"--iterations", &f.iterations},
                   {"--duration-ms", &f.duration_ms},
                   {"--contenders", &f.contenders},
                   {"--cs-us", &f.cs_us},
                   {"--json", &f.json_path},
                   {"--no-peers", SetTo{&f.peers, false}}});
  return f;
}

// ------------------------------------------------------------ statistics

// ------------------------------------------------------- (a) and (b)

struct Uncontended {
  Summary cycle, floor;
};

Uncontended MeasureUncontended(const std::string& uri, int iterations) {
  auto client = dlock::Client::Connect(uri);
  if (!client.ok()) Die("cannot connect: " + client.status().ToString());
  // The floor's connection: the same server, a trivial script by SHA.
  const auto parsed_port = uri.substr(uri.rfind(':') + 1);
  const int port = std::atoi(parsed_port.c_str());
  redisContext* raw = redisConnect("127.0.0.1", port);
  if (raw == nullptr || raw->err) Die("cannot connect the floor's connection to port " + parsed_port);
  auto* loaded = static_cast<redisReply*>(redisCommand(raw, "SCRIPT LOAD %s", "return 1"));
  if (loaded == nullptr || loaded->type != REDIS_REPLY_STRING) Die("SCRIPT LOAD failed");
  const std::string sha(loaded->str, loaded->len);
  freeReplyObject(loaded);

  const std::string key = "bench/cycle/" + std::to_string(MonotonicNs());
  dlock::AcquireOptions options;
  options.ttl = std::chrono::seconds(30);
  std::vector<double> cycle, floor;
  auto run_cycle = [&](bool record) {
    const std::int64_t t0 = MonotonicNs();
    auto lease = (*client)->TryAcquire(key, options);
    if (!lease.ok()) Die("cycle acquire: " + lease.status().ToString());
    if (!lease->Release().ok()) Die("cycle release failed");
    if (record) cycle.push_back(static_cast<double>(MonotonicNs() - t0) / 1e3);
  };
  auto run_floor = [&](bool record) {
    const std::int64_t t0 = MonotonicNs();
    for (int k = 0; k < 2; ++k) {
      auto* r = static_cast<redisReply*>(redisCommand(raw, "EVALSHA %s 0", sha.c_str()));
      if (r == nullptr || r->type != REDIS_REPLY_INTEGER) Die("floor EVALSHA failed");
      freeReplyObject(r);
    }
    if (record) floor.push_back(static_cast<double>(MonotonicNs() - t0) / 1e3);
  };
  for (int i = 0; i < kBlock; ++i) run_cycle(false), run_floor(false);  // warm-up
  for (int done = 0; done < iterations; done += kBlock) {
    for (int i = 0; i < kBlock; ++i) run_cycle(true);
    for (int i = 0; i < kBlock; ++i) run_floor(true);
  }
  redisFree(raw);
  return {Summarize(cycle), Summarize(floor)};
}

// ---------------------------------------------------------------- (c)

int ContenderMain(int argc, char** argv) {
  // --contender URI KEY START_NS END_NS CS_US OUT
  if (argc != 8) Die("--contender URI KEY START_NS END_NS CS_US OUT", kExitUsage);
  const std::string uri = argv[2], key = argv[3], out_path = argv[7];
  const std::int64_t start = std::atoll(argv[4]), end = std::atoll(argv[5]);
  const std::int64_t cs_ns = std::atoll(argv[6]) * 1000;
  auto client = dlock::Client::Connect(uri);
  if (!client.ok()) Die("contender: " + client.status().ToString());
  dlock::AcquireOptions options;
  options.ttl = std::chrono::seconds(10);
  options.wait = std::chrono::seconds(60);
  std::ostringstream lines;
  if (const std::int64_t left = start - MonotonicNs(); left > 0) {
    std::this_thread::sleep_for(std::chrono::nanoseconds(left));
  }
  while (MonotonicNs() < end) {
    const std::int64_t requested = MonotonicNs();
    auto lease = (*client)->Acquire(key, options);
    if (!lease.ok()) Die("contender acquire: " + lease.status().ToString());
    const std::int64_t granted = MonotonicNs();
    SpinFor(cs_ns);
    const std::int64_t releasing = MonotonicNs();
    if (!lease->Release().ok()) Die("contender release failed");
    const std::int64_t released = MonotonicNs();
    lines << requested << ' ' << granted << ' ' << releasing << ' ' << released << '\n';
  }
  std::ofstream(out_path) << lines.str();
  return 0;
}

struct GrantRecord {
  int proc = 0;
  std::int64_t requested = 0, granted = 0, releasing = 0, released = 0;
};

struct Contended {
  std::string name;
  bool measured = false;
  std::string why_not;
  double per_second = 0, ideal_per_second = 0, cs_mean_us = 0;
  Summary handoff, wait;
  double wait_max_us = 0;
  std::vector<long> counts;
  double spread = 0;  // max |count - mean| / mean
};

pid_t Spawn(const std::vector<std::string>& args, const std::string& dir = "") {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  (void)dir;
  pid_t pid = -1;
  if (posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

Contended RunContention(const std::string& name, const Flags& f, const std::string& tmp,
                        double rtt_us,
                        const std::function<std::vector<std::string>(
                            const std::string& key, std::int64_t start, std::int64_t end,
                            const std::string& out)>& command) {
  Contended c;
  c.name = name;
  const std::string key = "bench/handoff/" + name + "/" + std::to_string(MonotonicNs());
  // Interpreters need a moment to start: everybody begins at `start`.
  const std::int64_t start = MonotonicNs() + 1'500'000'000;
  const std::int64_t end = start + static_cast<std::int64_t>(f.duration_ms) * 1'000'000;
  std::vector<pid_t> pids;
  std::vector<std::string> outs;
  for (int p = 0; p < f.contenders; ++p) {
    outs.push_back(tmp + "/" + name + "." + std::to_string(p));
    const pid_t pid = Spawn(command(key, start, end, outs.back()));
    if (pid < 0) {
      c.why_not = "could not start " + command(key, start, end, outs.back())[0];
      for (pid_t q : pids) kill(q, SIGKILL), waitpid(q, nullptr, 0);
      return c;
    }
    pids.push_back(pid);
  }
  bool all_ok = true;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    all_ok = all_ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  if (!all_ok) {
    c.why_not = "a contender failed (see its error above)";
    return c;
  }
  std::vector<GrantRecord> grants;
  for (int p = 0; p < f.contenders; ++p) {
    std::ifstream in(outs[static_cast<std::size_t>(p)]);
    GrantRecord g;
    g.proc = p;
    long n = 0;
    while (in >> g.requested >> g.granted >> g.releasing >> g.released) {
      grants.push_back(g);
      ++n;
    }
    c.counts.push_back(n);
  }
  if (grants.size() < 10) {
    c.why_not = "too few grants";
    return c;
  }
  std::sort(grants.begin(), grants.end(),
            [](const GrantRecord& a, const GrantRecord& b) { return a.granted < b.granted; });
  std::vector<double> handoff, wait, cs;
  for (std::size_t i = 0; i < grants.size(); ++i) {
    wait.push_back(static_cast<double>(grants[i].granted - grants[i].requested) / 1e3);
    cs.push_back(static_cast<double>(grants[i].releasing - grants[i].granted) / 1e3);
    // A hand-off: the next holder was already waiting when this one let go.
    if (i > 0 && grants[i].requested < grants[i - 1].releasing) {
      handoff.push_back(static_cast<double>(grants[i].granted - grants[i - 1].releasing) / 1e3);
    }
  }
  const double span_s = static_cast<double>(grants.back().released - grants.front().granted) / 1e9;
  c.per_second = static_cast<double>(grants.size()) / span_s;
  c.cs_mean_us = std::accumulate(cs.begin(), cs.end(), 0.0) / static_cast<double>(cs.size());
  c.ideal_per_second = 1e6 / (c.cs_mean_us + 2 * rtt_us);
  c.handoff = Summarize(handoff);
  c.wait = Summarize(wait);
  c.wait_max_us = *std::max_element(wait.begin(), wait.end());
  const double mean = static_cast<double>(grants.size()) / static_cast<double>(f.contenders);
  for (long n : c.counts) c.spread = std::max(c.spread, std::abs(static_cast<double>(n) - mean) / mean);
  c.measured = true;
  for (const auto& o : outs) std::filesystem::remove(o);
  return c;
}

std::string Fixed(double v, int digits = 1) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string Counts(const std::vector<long>& counts) {
  std::string s;
  for (long n : counts) s += (s.empty() ? "" : " ") + std::to_string(n);
  return s;
}

std::string SelfPath() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("dlock_bench_redis") : p.string();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--contender") return ContenderMain(argc, argv);
  const Flags f = ParseFlags(argc, argv);
  const std::string source = DLOCK_SOURCE_DIR;

  char tmpl[] = "/tmp/dlock-bench-redis.XXXXXX";
  const std::string tmp = mkdtemp(tmpl);
  std::string uri = f.uri;
  const std::string script = source + "/scripts/servers/redis.sh";
  const bool own_server = uri.empty();
  if (own_server) {
    const std::string cmd = "bash " + script + " start " + tmp + "/server >/dev/null";
    if (std::system(cmd.c_str()) != 0) Die("could not start redis-server with " + script);
    std::ifstream in(tmp + "/server/uri");
    std::getline(in, uri);
  }
  auto cleanup = [&] {
    if (own_server) (void)std::system(("bash " + script + " stop " + tmp + "/server").c_str());
    std::filesystem::remove_all(tmp);
  };

  std::string version = "?";
  {
    redisContext* c = redisConnect("127.0.0.1", std::atoi(uri.substr(uri.rfind(':') + 1).c_str()));
    if (c && !c->err) {
      auto* r = static_cast<redisReply*>(redisCommand(c, "INFO server"));
      if (r && r->type == REDIS_REPLY_STRING) {
        std::string info(r->str, r->len);
        const auto at = info.find("redis_version:");
        if (at != std::string::npos) version = info.substr(at + 14, info.find('\r', at) - at - 14);
      }
      if (r) freeReplyObject(r);
    }
    if (c) redisFree(c);
  }
  std::cout << "dlock_bench_redis: " << uri << " (Redis " << version << "), " << f.iterations
            << " cycles, " << f.contenders << " contenders x " << f.duration_ms
            << " ms, critical section " << f.cs_us << " us\n\n";

  const Uncontended u = MeasureUncontended(uri, f.iterations);
  const double rtt_us = u.floor.p50_us / 2;

  std::vector<Contended> runs;
  const std::string self = SelfPath();
  runs.push_back(RunContention("dlock", f, tmp, rtt_us,
                               [&](const std::string& key, std::int64_t s, std::int64_t e,
                                   const std::string& out) {
                                 return std::vector<std::string>{
                                     self, "--contender", uri, key, std::to_string(s),
                                     std::to_string(e), std::to_string(f.cs_us), out};
                               }));
  if (f.peers) {
    const std::string py = source + "/bench/peers/redis_py_lock.py";
    runs.push_back(RunContention("redis-py", f, tmp, rtt_us,
                                 [&](const std::string& key, std::int64_t s, std::int64_t e,
                                     const std::string& out) {
                                   return std::vector<std::string>{
                                       "/usr/bin/python3", py, uri, key, std::to_string(s),
                                       std::to_string(e), std::to_string(f.cs_us), out};
                                 }));
    const std::string node_dir = source + "/bench/peers/node_redlock";
    if (!std::filesystem::exists(node_dir + "/node_modules/redlock")) {
      std::cout << "installing node redlock@4 + ioredis (npm install in " << node_dir << ")\n";
      (void)std::system(("cd " + node_dir + " && npm install --no-audit --no-fund --loglevel=error").c_str());
    }
    runs.push_back(RunContention("node-redlock", f, tmp, rtt_us,
                                 [&](const std::string& key, std::int64_t s, std::int64_t e,
                                     const std::string& out) {
                                   return std::vector<std::string>{
                                       "node", node_dir + "/contend.js", uri, key, std::to_string(s),
                                       std::to_string(e), std::to_string(f.cs_us), out};
                                 }));
  }
  cleanup();

  std::cout << "| measurement | p50 us | p99 us | mean us |\n| --- | ---: | ---: | ---: |\n";
  std::cout << "| cycle: TryAcquire + Release | " << Fixed(u.cycle.p50_us) << " | "
            << Fixed(u.cycle.p99_us) << " | " << Fixed(u.cycle.mean_us) << " |\n";
  std::cout << "| floor: 2 x EVALSHA `return 1` | " << Fixed(u.floor.p50_us) << " | "
            << Fixed(u.floor.p99_us) << " | " << Fixed(u.floor.mean_us) << " |\n\n";

  std::cout << "| " << f.contenders << " processes, one key | acquisitions/s | of ideal | "
            << "hand-off p50 us | p99 us | mean wait ms | max wait ms | per-process counts | spread |\n"
            << "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |\n";
  for (const Contended& c : runs) {
    if (!c.measured) {
      std::cout << "| " << c.name << " | not measured: " << c.why_not << " |\n";
      continue;
    }
    std::cout << "| " << c.name << " | " << Fixed(c.per_second, 0) << " | "
              << Fixed(100 * c.per_second / c.ideal_per_second, 0) << "% | " << Fixed(c.handoff.p50_us)
              << " | " << Fixed(c.handoff.p99_us) << " | " << Fixed(c.wait.mean_us / 1e3, 2) << " | "
              << Fixed(c.wait_max_us / 1e3, 1) << " | " << Counts(c.counts) << " | ±"
              << Fixed(100 * c.spread, 0) << "% |\n";
  }
  const Contended& d = runs[0];
  std::cout << "\nideal = 1 / (critical section " << Fixed(d.cs_mean_us) << " us + 2 x round trip "
            << Fixed(rtt_us) << " us) = " << Fixed(d.ideal_per_second, 0) << "/s\n\n";

  struct Target {
    std::string what;
    double measured;
    std::string limit;
    bool pass;
  };
  std::vector<Target> targets;
  const double cycle_ratio = u.cycle.p50_us / u.floor.p50_us;
  targets.push_back({"cycle p50 / floor p50", cycle_ratio, "<= 1.25", cycle_ratio <= 1.25});
  if (d.measured) {
    const double share = d.per_second / d.ideal_per_second;
    targets.push_back({"contended throughput / ideal", share, ">= 0.90", share >= 0.90});
    targets.push_back({"per-process count spread", d.spread, "<= 0.15", d.spread <= 0.15});
    const double tail = d.wait_max_us / d.wait.mean_us;
    targets.push_back({"max wait / mean wait", tail, "<= 10", tail <= 10});
  }
  std::cout << "| ratio | measured | target | |\n| --- | ---: | ---: | --- |\n";
  for (const Target& t : targets) {
    std::cout << "| " << t.what << " | " << Fixed(t.measured, 2) << " | " << t.limit << " | "
              << (t.pass ? "PASS" : "MISS") << " |\n";
  }
  for (const Contended& c : runs) {
    if (c.name == "dlock" || !c.measured || !d.measured) continue;
    std::cout << "dlock vs " << c.name << ": throughput x" << Fixed(d.per_second / c.per_second, 2)
              << ", max wait " << Fixed(d.wait_max_us / 1e3, 1) << " ms vs "
              << Fixed(c.wait_max_us / 1e3, 1) << " ms, hand-off p50 " << Fixed(d.handoff.p50_us)
              << " us vs " << Fixed(c.handoff.p50_us) << " us\n";
  }

  if (!f.json_path.empty()) {
    nlohmann::json j;
    j["uri"] = uri;
    j["redis_version"] = version;
    auto sum = [](const Summary& s) {
      return nlohmann::json{{"p50_us", s.p50_us}, {"p99_us", s.p99_us}, {"mean_us", s.mean_us}, {"n", s.n}};
    };
    j["cycle"] = sum(u.cycle);
    j["floor"] = sum(u.floor);
    for (const Contended& c : runs) {
      nlohmann::json r{{"measured", c.measured}};
      if (c.measured) {
        r["per_second"] = c.per_second;
        r["ideal_per_second"] = c.ideal_per_second;
        r["cs_mean_us"] = c.cs_mean_us;
        r["handoff"] = sum(c.handoff);
        r["wait"] = sum(c.wait);
        r["wait_max_us"] = c.wait_max_us;
        r["counts"] = c.counts;
        r["spread"] = c.spread;
      } else {
        r["why_not"] = c.why_not;
      }
      j["contended"][c.name] = r;
    }
    for (const Target& t : targets) j["targets"][t.what] = {{"measured", t.measured}, {"pass", t.pass}};
    std::ofstream(f.json_path) << j.dump(2) << '\n';
  }
  bool all = d.measured;
  for (const Contended& c : runs) all = all && c.measured;
  return all ? 0 : 1;
}
