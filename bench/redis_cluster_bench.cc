// dlock_bench_redis_cluster: many distinct keys acquired and released at
// once, on a Redis Cluster of one primary and on one of three primaries,
// in the same run (and on one plain server, for what routing costs). Each
// worker thread has its own Client and cycles TryAcquire + Release over its
// own keys, so that nothing contends: what is measured is how the servers'
// work spreads over primaries. The servers are started by
// scripts/servers/redis.sh (start, start-cluster DIR 1, start-cluster DIR);
// the targets take turns, --rounds times, and the median is reported, with
// the CPU each side used (on a small machine the client's own CPU and the
// servers' share the same cores: that, not the cluster, is then the limit).
//
//   dlock_bench_redis_cluster [--threads 8] [--keys 256] [--duration-ms 3000]
//                             [--rounds 3] [--json FILE]
//
// Exit status: 0 measured, 64 a bad flag, 1 something could not be measured.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_flags.h"
#include "dlock/client.h"

namespace {

using dlock::bench::ParseBenchFlags;

constexpr const char* kUsage =
    "usage: dlock_bench_redis_cluster [--threads 8] [--keys 256] [--duration-ms 3000]\n"
    "                                 [--rounds 3] [--json FILE]";

struct Flags {
  int threads = 8;
  int keys = 256;  // per thread
  int duration_ms = 3000;
  int rounds = 3;
  std::string json_path;
};

[[noreturn]] void Die(const std::string& message, int code = 1) {
  std::cerr << "dlock_bench_redis_cluster: " << message << '\n';
  std::exit(code);
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  ParseBenchFlags(argc, argv, kUsage,
                  {{"--threads", &f.threads},
                   {"--keys", &f.keys},
                   {"--duration-ms", &f.duration_ms},
                   {"--rounds", &f.rounds},
                   {"--json", &f.json_path}});
  return f;
}

std::string Script() { return std::string(DLOCK_SOURCE_DIR) + "/scripts/servers/redis.sh"; }

// Servers started by redis.sh VERB DIR ARGS, stopped on scope exit.
class Servers {
 public:
  Servers(const std::string& verb, const std::string& args) {
    char tmpl[] = "/tmp/dlock-bench-cluster.XXXXXX";
    if (mkdtemp(tmpl) == nullptr) Die("cannot make a directory in /tmp");
    dir_ = tmpl;
    const std::string cmd =
        "bash " + Script() + " " + verb + " " + dir_ + " " + args + " >" + dir_ + ".out 2>&1";
    if (std::system(cmd.c_str()) != 0)
      Die("redis.sh " + verb + " " + args + " failed (" + dir_ + ".out)");
    std::ifstream in(dir_ + "/uri");
    std::getline(in, uri_);
  }
  ~Servers() {
    (void)std::system(("bash " + Script() + " stop " + dir_ + " >/dev/null 2>&1").c_str());
    std::remove((dir_ + ".out").c_str());
  }
  const std::string& uri() const { return uri_; }
  // Script calls (EVALSHA and EVAL) each server has run so far, by member.
  std::map<std::string, long long> ScriptCalls() const {
    std::map<std::string, long long> calls;
    for (const auto& name : {"main", "c1", "c2", "c3", "c4", "c5", "c6"}) {
      std::ifstream port_file(dir_ + "/" + name + ".port");
      std::string port;
      if (!std::getline(port_file, port)) continue;
      FILE* p = popen(("redis-cli -p " + port + " info commandstats 2>/dev/null").c_str(), "r");
      if (p == nullptr) continue;
      char line[512];
      long long n = 0;
      while (std::fgets(line, sizeof line, p) != nullptr) {
        const std::string l(line);
        for (const std::string cmd : {"cmdstat_evalsha:calls=", "cmdstat_eval:calls="}) {
          if (l.starts_with(cmd)) n += std::atoll(l.c_str() + cmd.size());
        }
      }
      pclose(p);
      calls[name] = n;
    }
    return calls;
  }
  // CPU seconds used so far by every server under the directory.
  double CpuSeconds() const {
    double total = 0;
    for (const auto& name : {"main", "c1", "c2", "c3", "c4", "c5", "c6"}) {
      std::ifstream pid_file(dir_ + "/" + name + ".pid");
      std::string pid;
      if (!std::getline(pid_file, pid)) continue;
      std::ifstream stat("/proc/" + pid + "/stat");
      std::string line;
      std::getline(stat, line);
      std::istringstream fields(line.substr(line.rfind(')') + 2));
      std::string field;
      long long utime = 0, stime = 0;
      for (int i = 3; i <= 15 && fields >> field; ++i) {
        if (i == 14) utime = std::atoll(field.c_str());
        if (i == 15) stime = std::atoll(field.c_str());
      }
      total += static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
    }
    return total;
  }

 private:
  std::string dir_, uri_;
};

double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

struct Sample {
  double ops_per_s = 0;
  double client_cpu = 0;  // cores busy, on average
  double server_cpu = 0;
  std::map<std::string, long long> script_calls;  // by server, during the run
};

// One timed run: every thread cycles over its own keys until the end.
Sample RunOnce(const Flags& f, const Servers& servers, const std::string& tag) {
  std::vector<std::unique_ptr<dlock::Client>> clients;
  for (int t = 0; t < f.threads; ++t) {
    auto c = dlock::Client::Connect(servers.uri());
    if (!c.ok()) Die("cannot connect to " + servers.uri() + ": " + c.status().ToString());
    clients.push_back(std::move(*c));
  }
  dlock::AcquireOptions options;
  options.ttl = std::chrono::seconds(30);
  std::atomic<long long> done{0};
  std::atomic<bool> failed{false};
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + std::chrono::milliseconds(f.duration_ms);
  const double cpu0 = ProcessCpuSeconds(), server0 = servers.CpuSeconds();
  const auto calls0 = servers.ScriptCalls();
  {
    std::vector<std::jthread> workers;
    for (int t = 0; t < f.threads; ++t) {
      workers.emplace_back([&, t] {
        long long n = 0;
        for (int i = 0; std::chrono::steady_clock::now() < end; ++i) {
          const std::string key =
              "bench/" + tag + "/" + std::to_string(t) + "/" + std::to_string(i % f.keys);
          auto lease = clients[t]->TryAcquire(key, options);
          if (!lease.ok() || !lease->Release().ok()) {
            failed = true;
            return;
          }
          ++n;
        }
        done += n;
      });
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (failed) Die("a cycle failed on " + servers.uri());
  Sample sample{static_cast<double>(done) / seconds, (ProcessCpuSeconds() - cpu0) / seconds,
                (servers.CpuSeconds() - server0) / seconds, servers.ScriptCalls()};
  for (auto& [name, n] : sample.script_calls) n -= calls0.count(name) ? calls0.at(name) : 0;
  return sample;
}

Sample Median(std::vector<Sample> samples) {
  std::sort(samples.begin(), samples.end(),
            [](const Sample& a, const Sample& b) { return a.ops_per_s < b.ops_per_s; });
  return samples[samples.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const Flags f = ParseFlags(argc, argv);
  const std::vector<std::string> names = {"one server (redis://)", "cluster, 1 primary",
                                          "cluster, 3 primaries"};
  Servers single("start", ""), one("start-cluster", "1"), three("start-cluster", "3");
  const Servers* targets[] = {&single, &one, &three};
  std::vector<std::vector<Sample>> samples(3);
  for (int r = 0; r < f.rounds; ++r) {
    for (int k = 0; k < 3; ++k) {
      const int t = (k + r) % 3;  // take turns: no target always runs first
      samples[t].push_back(
          RunOnce(f, *targets[t], std::to_string(getpid()) + "-" + std::to_string(r)));
    }
  }
  nlohmann::json out;
  out["threads"] = f.threads;
  out["keys_per_thread"] = f.keys;
  out["duration_ms"] = f.duration_ms;
  out["rounds"] = f.rounds;
  out["cpus"] = std::thread::hardware_concurrency();
  std::vector<Sample> medians;
  for (int t = 0; t < 3; ++t) {
    medians.push_back(Median(samples[t]));
    // How the scripts spread over the servers (the primaries' shares).
    long long total = 0;
    for (const auto& [name, n] : medians[t].script_calls) total += n;
    std::string shares;
    nlohmann::json share_json;
    for (const auto& [name, n] : medians[t].script_calls) {
      if (n == 0 || total == 0) continue;
      const double share = 100.0 * static_cast<double>(n) / static_cast<double>(total);
      shares += " " + name + " " + std::to_string(static_cast<int>(share + 0.5)) + "%";
      share_json[name] = share;
    }
    std::printf(
        "%-24s %9.0f acquire+release/s   client CPU %.2f cores, servers %.2f cores;"
        " scripts:%s\n",
        names[t].c_str(), medians[t].ops_per_s, medians[t].client_cpu, medians[t].server_cpu,
        shares.c_str());
    out["targets"].push_back({{"name", names[t]},
                              {"ops_per_s", medians[t].ops_per_s},
                              {"client_cores", medians[t].client_cpu},
                              {"server_cores", medians[t].server_cpu},
                              {"script_share_percent", share_json}});
  }
  const double scale = medians[2].ops_per_s / medians[1].ops_per_s;
  std::printf("3 primaries / 1 primary: %.2fx (%d CPUs here)\n", scale,
              std::thread::hardware_concurrency());
  out["three_over_one"] = scale;
  if (!f.json_path.empty()) std::ofstream(f.json_path) << out.dump(2) << '\n';
  return 0;
}
