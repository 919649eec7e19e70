// dlock_bench_etcd: what a dlock lock on etcd costs, next to what any lock on
// etcd must pay and next to the etcd locks people use today, in one run
// against one cluster (docs/benchmarks-etcd.md):
//
//  (a) cycle     Client::TryAcquire(key, ttl 30s) + Lease::Release(),
//                uncontended, one Client (its renewal thread running).
//  (b) floor     a raw Txn that puts a key, then a raw Txn that deletes it,
//                through dlock's own gRPC connection code to the same
//                member. A grant must be a Raft write (or its token could go
//                back after a failover) and so must a release; (b) is those
//                two writes and nothing else. "one write" is its put half.
//      (a) and (b) alternate in blocks of 50, so drift hits both alike.
//  (c) hand-off  4 contenders, one key, a ~1 ms critical section, for
//                --seconds each: the time from one holder's release to the
//                next holder's grant (each holder stamps both, wall clock),
//                and acquisitions per second. Contenders:
//                  dlock          4 threads, each with its own Client
//                  go-mutex       4 processes of bench/peers/etcd_mutex_peer
//                                 (etcd's concurrency.Mutex, one session each)
//                  python-etcd3   4 processes of bench/peers/etcd3_lock_peer.py
//                  dlock-exec     4 loops of `dlock exec KEY -- STAMP` (a
//                                 process per acquisition)
//                  etcdctl-lock   4 loops of `etcdctl lock KEY -- STAMP`
//                where STAMP is this binary in --stamp mode. A peer whose
//                program is missing is skipped, and the report says so.
//
// Targets: cycle p50 <= 1.3 x floor p50; dlock hand-off p50 <= 3 x one write
// p50; dlock contended throughput >= 5 x go-mutex's.
//
// Without --uri it starts a 3-member cluster of its own with
// scripts/servers/etcd.sh (fsync on, loopback) and stops it at the end.
// Exit status: 0 when everything was measured (MISS included), 64 for a bad
// flag, 1 when something could not be measured.
#include <fcntl.h>
#include <spawn.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backends/etcd/etcd_connection.h"
#include "backends/etcd/etcd_keys.h"
#include "bench_flags.h"
#include "bench_util.h"
#include "core/uri.h"
#include "dlock/client.h"

extern char** environ;

namespace {

using Steady = std::chrono::steady_clock;
using dlock::bench::ParseBenchFlags;
using dlock::bench::SummaryJson;
using std::chrono::milliseconds;
constexpr int kExitUsage = 64;
constexpr int kContenders = 4;
constexpr const char* kUsage =
    "usage: dlock_bench_etcd [--uri etcd://...] [--iterations N] [--seconds S] [--hold-us U] "
    "[--json FILE] [--dlock PATH] [--go-peer PATH] [--python-peer PATH] [--etcdctl PATH]\n"
    "       dlock_bench_etcd --stamp FILE [--hold-us U]\n"
    "       dlock_bench_etcd --contend NAME --uri URI --out FILE [--seconds S] [--hold-us U]";

struct Flags {
  std::string uri;
  int iterations = 500;
  int seconds = 5;
  int hold_us = 1000;
  std::string json_path;
  std::string dlock, go_peer, python_peer, etcdctl = "etcdctl", python = "/usr/bin/python3";
  std::string stamp;  // --stamp mode
  std::string contend;  // --contend mode: the lock name
  std::string out;      // --contend mode: where the stamps go
};

[[noreturn]] void Die(const std::string& message, int code = 1) {
  std::cerr << "dlock_bench_etcd: " << message << '\n';
  std::exit(code);
}

std::filesystem::path SelfDir() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) Die("cannot read /proc/self/exe: " + ec.message());
  return self.parent_path();
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  ParseBenchFlags(argc, argv, kUsage,
                  {{"--iterations", &f.iterations},
                   {"--seconds", &f.seconds},
                   {"--hold-us", &f.hold_us},
                   {"--uri", &f.uri},
                   {"--json", &f.json_path},
                   {"--dlock", &f.dlock},
                   {"--go-peer", &f.go_peer},
                   {"--python-peer", &f.python_peer},
                   {"--etcdctl", &f.etcdctl},
                   {"--stamp", &f.stamp},
                   {"--contend", &f.contend},
                   {"--out", &f.out}});
  const auto dir = SelfDir();
  if (f.dlock.empty()) f.dlock = (dir / "dlock").string();
  if (f.go_peer.empty()) f.go_peer = (dir / "etcd_mutex_peer").string();
  if (f.python_peer.empty()) {
    f.python_peer = std::string(DLOCK_SOURCE_DIR) + "/bench/peers/etcd3_lock_peer.py";
  }
  return f;
}

std::int64_t WallNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// --stamp FILE: the critical section of the process-per-acquisition peers.
int Stamp(const Flags& f) {
  const std::int64_t acquired = WallNs();
  std::this_thread::sleep_for(std::chrono::microseconds(f.hold_us));
  const std::int64_t released = WallNs();
  const std::string line = std::to_string(acquired) + " " + std::to_string(released) + "\n";
  const int fd = open(f.stamp.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0 || write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    return 1;
  }
  close(fd);
  return 0;
}

// --contend NAME: one dlock contender process, the twin of the Go peer:
// one Client for the run, Acquire / hold / Release until --seconds pass.
int Contend(const Flags& f) {
  auto client = dlock::Client::Connect(f.uri);
  if (!client.ok()) {
    std::cerr << "dlock_bench_etcd --contend: " << client.status().message() << '\n';
    return 1;
  }
  dlock::AcquireOptions o;
  o.ttl = std::chrono::seconds(10);
  o.wait = std::chrono::seconds(30);
  std::string lines;
  int errors = 0;
  const auto end = Steady::now() + std::chrono::seconds(f.seconds);
  while (Steady::now() < end) {
    auto lease = (*client)->Acquire(f.contend, o);
    if (!lease.ok()) {
      ++errors;
      continue;
    }
    const std::int64_t acquired = WallNs();
    std::this_thread::sleep_for(std::chrono::microseconds(f.hold_us));
    const std::int64_t released = WallNs();
    if (!lease->Release().ok()) ++errors;
    lines += std::to_string(acquired) + " " + std::to_string(released) + "\n";
  }
  std::ofstream(f.out, std::ios::app) << lines;
  return errors == 0 ? 0 : 1;
}

double Us(Steady::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

// Runs argv to completion; its exit status (-1 if it could not start).
// With `stderr_path`, the program's stderr is appended there (to tell why a
// peer failed).
int Run(const std::vector<std::string>& argv, bool quiet = true,
        const std::string& stderr_path = "") {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (quiet) posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  if (!stderr_path.empty()) {
    posix_spawn_file_actions_addopen(&actions, 2, stderr_path.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND, 0644);
  }
  pid_t pid;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

bool Executable(const std::string& path) {
  if (path.find('/') != std::string::npos) return access(path.c_str(), X_OK) == 0;
  return Run({"sh", "-c", "command -v " + path + " >/dev/null"}) == 0;
}

// A run of 4 contenders: every acquisition's (acquired, released) stamps.
struct Contended {
  std::string peer;
  std::string how;
  bool ran = false;
  std::string skipped_because;
  std::vector<std::pair<std::int64_t, std::int64_t>> holds;
  int errors = 0;
  std::string first_error;  // the first failed process's last stderr line
};

// The last non-empty line of `path`: what a failed peer said last.
std::string LastLine(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  return last.size() > 300 ? last.substr(0, 300) + "..." : last;
}

nlohmann::json Judge(const Contended& c) {
  nlohmann::json j = {{"peer", c.peer}, {"how", c.how}};
  if (!c.ran) {
    j["skipped"] = c.skipped_because;
    return j;
  }
  // A peer that failed before it measured anything is a failure, never a
  // rate of zero.
  if (c.errors > 0 && c.holds.size() < 2) {
    j["failed"] = std::to_string(c.errors) + " of its processes failed" +
                  (c.first_error.empty() ? "" : ": " + c.first_error);
    return j;
  }
  auto holds = c.holds;
  std::sort(holds.begin(), holds.end());
  std::vector<double> handoff_us;
  int overlaps = 0;
  for (std::size_t i = 1; i < holds.size(); ++i) {
    const double gap = static_cast<double>(holds[i].first - holds[i - 1].second) / 1000.0;
    if (gap < 0) {
      ++overlaps;
    } else {
      handoff_us.push_back(gap);
    }
  }
  double per_second = 0;
  if (holds.size() > 1) {
    const double span_s =
        static_cast<double>(holds.back().second - holds.front().first) / 1e9;
    per_second = static_cast<double>(holds.size()) / span_s;
  }
  j["acquisitions"] = holds.size();
  j["per_second"] = per_second;
  j["handoff"] = SummaryJson(handoff_us);
  j["overlaps"] = overlaps;  // must be 0: two holders at once
  j["errors"] = c.errors;
  return j;
}

std::vector<std::pair<std::int64_t, std::int64_t>> ReadStamps(const std::string& path) {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  std::ifstream in(path);
  std::int64_t a, r;
  while (in >> a >> r) out.emplace_back(a, r);
  return out;
}

class Bench {
 public:
  Bench(Flags flags, std::string uri, std::string dir)
      : f_(std::move(flags)), uri_(std::move(uri)), dir_(std::move(dir)) {
    auto parsed = dlock::internal::ParseUri(uri_);
    if (!parsed.ok()) Die(parsed.status().message(), kExitUsage);
    auto options = dlock::etcd::OptionsFromUri(*parsed);
    if (!options.ok()) Die(options.status().message(), kExitUsage);
    endpoints_ = options->endpoints;
    conn_ = std::make_unique<dlock::etcd::Connection>(endpoints_, std::chrono::seconds(5));
  }

  nlohmann::json CycleAndFloor() {
    auto client = dlock::Client::Connect(uri_);
    if (!client.ok()) Die("connect: " + client.status().message());
    dlock::AcquireOptions o;
    o.ttl = std::chrono::seconds(30);
    std::vector<double> cycle, acquire, release, floor, put;
    const std::string floor_key = "bench/floor-" + std::to_string(getpid());
    constexpr int kBlock = 50;
    for (int done = -kBlock; done < f_.iterations; done += kBlock) {  // first block: warm-up
      const bool keep = done >= 0;
      for (int i = 0; i < kBlock; ++i) {
        const auto start = Steady::now();
        auto lease = (*client)->TryAcquire("bench/cycle", o);
        const auto acquired = Steady::now();
        if (!lease.ok()) Die("cycle: " + lease.status().message());
        if (auto s = lease->Release(); !s.ok()) Die("cycle: release: " + s.message());
        const auto released = Steady::now();
        if (!keep) continue;
        cycle.push_back(Us(released - start));
        acquire.push_back(Us(acquired - start));
        release.push_back(Us(released - acquired));
      }
      for (int i = 0; i < kBlock; ++i) {
        const auto start = Steady::now();
        RawWrite(floor_key, true);
        const auto mid = Steady::now();
        RawWrite(floor_key, false);
        if (!keep) continue;
        floor.push_back(Us(Steady::now() - start));
        put.push_back(Us(mid - start));
      }
    }
    return {{"cycle", SummaryJson(cycle)},     {"acquire", SummaryJson(acquire)},
            {"release", SummaryJson(release)}, {"floor", SummaryJson(floor)},
            {"one_write", SummaryJson(put)}};
  }

  Contended DlockThreads() {
    Contended c{"dlock-threads", "4 threads in one process, a Client each (library)"};
    const std::string key = "bench/handoff-dlock-" + std::to_string(getpid());
    std::vector<std::unique_ptr<dlock::Client>> clients;
    for (int i = 0; i < kContenders; ++i) {
      auto client = dlock::Client::Connect(uri_);
      if (!client.ok()) Die("connect: " + client.status().message());
      clients.push_back(std::move(*client));
    }
    std::mutex mu;
    std::atomic<int> errors{0};
    const auto end = Steady::now() + std::chrono::seconds(f_.seconds);
    std::vector<std::thread> threads;
    for (auto& client : clients) {
      threads.emplace_back([&, cl = client.get()] {
        dlock::AcquireOptions o;
        o.ttl = std::chrono::seconds(10);
        o.wait = std::chrono::seconds(30);
        std::vector<std::pair<std::int64_t, std::int64_t>> mine;
        while (Steady::now() < end) {
          auto lease = cl->Acquire(key, o);
          if (!lease.ok()) {
            ++errors;
            continue;
          }
          const std::int64_t acquired = WallNs();
          std::this_thread::sleep_for(std::chrono::microseconds(f_.hold_us));
          const std::int64_t released = WallNs();
          if (!lease->Release().ok()) ++errors;
          mine.emplace_back(acquired, released);
        }
        std::lock_guard l(mu);
        c.holds.insert(c.holds.end(), mine.begin(), mine.end());
      });
    }
    for (auto& t : threads) t.join();
    c.ran = true;
    c.errors = errors;
    return c;
  }

  // Four processes, each running `argv` (with OUT appended) once.
  Contended Processes(std::string peer, std::string how, const std::string& program,
                      const std::vector<std::string>& argv) {
    Contended c{std::move(peer), std::move(how)};
    if (!Executable(program)) {
      c.skipped_because = program + " not found";
      return c;
    }
    const std::string out = dir_ + "/" + c.peer + ".stamps";
    std::vector<std::thread> threads;
    std::atomic<int> errors{0};
    for (int i = 0; i < kContenders; ++i) {
      threads.emplace_back([&, i] {
        auto args = argv;
        args.push_back(out);
        const std::string err = dir_ + "/" + c.peer + "." + std::to_string(i) + ".stderr";
        if (Run(args, false, err) != 0) ++errors;
      });
    }
    for (auto& t : threads) t.join();
    c.holds = ReadStamps(out);
    c.ran = true;
    c.errors = errors;
    for (int i = 0; i < kContenders && c.first_error.empty(); ++i) {
      c.first_error = LastLine(dir_ + "/" + c.peer + "." + std::to_string(i) + ".stderr");
    }
    return c;
  }

  // Four loops, each starting `argv` (a lock command around STAMP) again and
  // again until --seconds have passed: a process per acquisition.
  Contended ProcessLoops(std::string peer, std::string how, const std::string& program,
                         const std::vector<std::string>& argv) {
    Contended c{std::move(peer), std::move(how)};
    if (!Executable(program)) {
      c.skipped_because = program + " not found";
      return c;
    }
    const std::string out = dir_ + "/" + c.peer + ".stamps";
    std::vector<std::string> args = argv;
    for (auto& a : args) {
      if (a == "@OUT") a = out;
    }
    std::atomic<int> errors{0};
    const auto end = Steady::now() + std::chrono::seconds(f_.seconds);
    std::vector<std::thread> threads;
    for (int i = 0; i < kContenders; ++i) {
      threads.emplace_back([&, i] {
        const std::string err = dir_ + "/" + c.peer + "." + std::to_string(i) + ".stderr";
        while (Steady::now() < end) {
          if (Run(args, true, err) != 0) ++errors;
        }
      });
    }
    for (auto& t : threads) t.join();
    c.holds = ReadStamps(out);
    c.ran = true;
    c.errors = errors;
    for (int i = 0; i < kContenders && c.first_error.empty(); ++i) {
      c.first_error = LastLine(dir_ + "/" + c.peer + "." + std::to_string(i) + ".stderr");
    }
    return c;
  }

  std::string Endpoints() const {
    std::string s;
    for (const auto& e : endpoints_) s += (s.empty() ? "" : ",") + e;
    return s;
  }
  const std::string& FirstEndpoint() const { return endpoints_.front(); }

 private:
  void RawWrite(const std::string& key, bool put) {
    namespace pb = dlock::etcd::pb;
    pb::TxnRequest txn;
    if (put) {
      pb::PutRequest* p = txn.add_success()->mutable_request_put();
      p->set_key(key);
      p->set_value("0123456789abcdef0123456789abcdef");  // an owner id's size
    } else {
      txn.add_success()->mutable_request_delete_range()->set_key(key);
    }
    auto r = conn_->Txn(txn, dlock::MonotonicClock::now() + std::chrono::seconds(5));
    if (!r.ok()) Die("floor: " + r.status().message());
  }

  Flags f_;
  std::string uri_;
  std::string dir_;
  std::vector<std::string> endpoints_;
  std::unique_ptr<dlock::etcd::Connection> conn_;
};

std::string EtcdVersion() {
  FILE* p = popen("etcd --version 2>/dev/null | head -1", "r");
  char buf[128] = {};
  if (p && fgets(buf, sizeof buf, p)) {
    pclose(p);
    std::string s = buf;
    while (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  if (p) pclose(p);
  return "unknown";
}

}  // namespace

int main(int argc, char** argv) {
  Flags f = ParseFlags(argc, argv);
  if (!f.stamp.empty()) return Stamp(f);
  if (!f.contend.empty()) return Contend(f);

  char tmpl[] = "/tmp/dlock-bench-etcd.XXXXXX";
  if (!mkdtemp(tmpl)) Die("mkdtemp failed");
  const std::string dir = tmpl;
  const std::string script = std::string(DLOCK_SOURCE_DIR) + "/scripts/servers/etcd.sh";
  std::string uri = f.uri;
  const bool own_cluster = uri.empty();
  if (own_cluster) {
    std::cerr << "starting a 3-member etcd cluster in " << dir << "/cluster\n";
    if (Run({"bash", script, "start", dir + "/cluster"}) != 0) Die("could not start etcd");
    std::ifstream in(dir + "/cluster/uri");
    std::getline(in, uri);
  }
  Bench bench(f, uri, dir);
  const std::string self = (SelfDir() / "dlock_bench_etcd").string();
  const std::string hold = std::to_string(f.hold_us);
  const std::string secs = std::to_string(f.seconds);
  const std::string pid = std::to_string(getpid());

  std::cerr << "uncontended cycle and floor, " << f.iterations << " each...\n";
  nlohmann::json cycle = bench.CycleAndFloor();
  std::vector<Contended> runs;
  std::cerr << "hand-off, 4 contenders, " << f.seconds << " s each: dlock...\n";
  runs.push_back(bench.Processes(
      "dlock", "4 processes, a Client each (library), as the Go peer", self,
      {self, "--contend", "bench/handoff-dlock-" + pid, "--uri", uri, "--seconds", secs,
       "--hold-us", hold, "--out"}));
  std::cerr << "  dlock, threads...\n";
  runs.push_back(bench.DlockThreads());
  std::cerr << "  go-mutex...\n";
  runs.push_back(bench.Processes(
      "go-mutex", "4 processes, etcd concurrency.Mutex, one session each (library)", f.go_peer,
      {f.go_peer, bench.Endpoints(), "bench/handoff-go-" + pid, secs, hold}));
  std::cerr << "  python-etcd3...\n";
  runs.push_back(bench.Processes(
      "python-etcd3", "4 processes, python-etcd3 Lock (library)", f.python,
      {f.python, f.python_peer, bench.FirstEndpoint(), "bench-handoff-py-" + pid, secs, hold}));
  std::cerr << "  dlock exec...\n";
  runs.push_back(bench.ProcessLoops(
      "dlock-exec", "4 loops of `dlock exec KEY -- STAMP` (a process per acquisition)", f.dlock,
      {f.dlock, "exec", "bench/handoff-exec-" + pid, "--backend", uri, "--ttl", "10s", "--wait",
       "60s", "--", self, "--stamp", "@OUT", "--hold-us", hold}));
  std::cerr << "  etcdctl lock...\n";
  runs.push_back(bench.ProcessLoops(
      "etcdctl-lock", "4 loops of `etcdctl lock KEY -- STAMP` (a process per acquisition)",
      f.etcdctl,
      {f.etcdctl, "--endpoints", bench.Endpoints(), "lock", "bench/handoff-etcdctl-" + pid, "--",
       self, "--stamp", "@OUT", "--hold-us", hold}));

  nlohmann::json report;
  utsname uts{};
  uname(&uts);
  report["environment"] = {{"cpus", std::thread::hardware_concurrency()},
                           {"kernel", uts.release},
                           {"etcd", EtcdVersion()},
                           {"cluster", own_cluster ? "3 members on loopback, started by the bench"
                                                   : uri}};
  report["uncontended"] = cycle;
  report["contended"] = nlohmann::json::array();
  double dlock_rate = 0, go_rate = 0, dlock_handoff = 0;
  bool measured = true;
  for (const auto& r : runs) {
    nlohmann::json j = Judge(r);
    if (j.contains("failed")) {
      if (r.peer == "dlock") measured = false;
      report["contended"].push_back(j);
      continue;
    }
    if (r.peer == "dlock") {
      dlock_rate = j["per_second"];
      dlock_handoff = j["handoff"]["p50_us"];
      if (!r.ran || r.holds.size() < 10) measured = false;
    }
    if (r.peer == "go-mutex" && r.ran) go_rate = j["per_second"];
    if (r.ran && j["overlaps"] != 0) measured = false;
    report["contended"].push_back(j);
  }
  const double cycle_p50 = cycle["cycle"]["p50_us"], floor_p50 = cycle["floor"]["p50_us"];
  const double write_p50 = cycle["one_write"]["p50_us"];
  auto verdict = [](bool hit) { return hit ? "HIT" : "MISS"; };
  report["targets"] = {
      {"cycle_over_floor", {{"value", cycle_p50 / floor_p50}, {"target", "<= 1.3"},
                            {"verdict", verdict(cycle_p50 <= 1.3 * floor_p50)}}},
      {"handoff_over_one_write",
       {{"value", dlock_handoff / write_p50}, {"target", "<= 3"},
        {"verdict", verdict(dlock_handoff <= 3 * write_p50)}}},
      {"throughput_over_go_mutex",
       {{"value", go_rate > 0 ? dlock_rate / go_rate : 0.0}, {"target", ">= 5"},
        {"verdict", go_rate > 0 ? verdict(dlock_rate >= 5 * go_rate) : "not measured"}}}};

  std::printf("uncontended (us)        p50      p99\n");
  for (const char* k : {"cycle", "acquire", "release", "floor", "one_write"}) {
    std::printf("  %-12s %10.0f %8.0f\n", k, static_cast<double>(cycle[k]["p50_us"]),
                static_cast<double>(cycle[k]["p99_us"]));
  }
  std::printf("contended, 4 x %d us hold   acq/s   hand-off p50   p99 (us)  overlaps\n",
              f.hold_us);
  for (const auto& j : report["contended"]) {
    if (j.contains("skipped") || j.contains("failed")) {
      const bool skipped = j.contains("skipped");
      std::printf("  %-14s %s: %s\n", j["peer"].get<std::string>().c_str(),
                  skipped ? "skipped" : "FAILED",
                  j[skipped ? "skipped" : "failed"].get<std::string>().c_str());
      continue;
    }
    std::printf("  %-14s %13.0f %14.0f %9.0f %6d\n", j["peer"].get<std::string>().c_str(),
                static_cast<double>(j["per_second"]),
                static_cast<double>(j["handoff"]["p50_us"]),
                static_cast<double>(j["handoff"]["p99_us"]), j["overlaps"].get<int>());
  }
  for (const auto& [name, t] : report["targets"].items()) {
    std::printf("target %-26s %6.2f (%s) %s\n", name.c_str(), t["value"].get<double>(),
                t["target"].get<std::string>().c_str(), t["verdict"].get<std::string>().c_str());
  }
  if (!f.json_path.empty()) std::ofstream(f.json_path) << report.dump(2) << '\n';
  if (own_cluster) Run({"bash", script, "stop", dir + "/cluster"});
  std::filesystem::remove_all(dir);
  return measured ? 0 : 1;
}
