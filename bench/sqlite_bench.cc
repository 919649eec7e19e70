// dlock_bench_sqlite: what a lock on the embedded SQLite store costs, next to
// what any lock on that store must pay. One run, one fresh SQLite file:
//
//  (a) cycle  Client::TryAcquire(key, ttl 30s) then Lease::Release(),
//             uncontended, one Client (its renewal thread running), timed per
//             iteration; the acquire and release halves are reported too.
//  (b) floor  two raw write transactions per iteration on a one-row table in
//             the same file, through sqlite3 directly with the backend's
//             durability settings (WAL, synchronous=FULL, the same busy
//             timeout): BEGIN IMMEDIATE; INSERT ... ON CONFLICT DO UPDATE;
//             COMMIT.
//  (c) exec   whole processes, fork/execvp/waitpid: `dlock exec KEY --backend
//             sqlite:///FILE -- true` against util-linux `flock FILE true`,
//             and bare `true` to show what spawning alone costs.
//
// Why (b) is the floor: a grant must be durable before TryAcquire returns, or
// after a crash the fencing token could go backwards; a release must be a
// committed write too, or the key stays held until its TTL runs out. On this
// store each is at least one write transaction: take the write lock (BEGIN
// IMMEDIATE), change one row, append it to the WAL and fsync (COMMIT with
// synchronous=FULL). Whatever the backend does beyond that (more statements,
// reads, transactions, fsyncs) is what cycle/floor measures.
//
// (a) and (b) alternate in blocks of 100 iterations, so that a noisy machine
// drifting over the run hits both alike; (c) alternates every run.
// Targets: cycle p50 <= 1.5 x floor p50; dlock exec p50 <= 3 x flock p50.
// Exit status: 0 when everything was measured (MISS included), 64 for a bad
// flag, 1 when something could not be measured.
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "backends/sqlite/sqlite_backend.h"
#include "bench_flags.h"
#include "bench_util.h"
#include "dlock/client.h"

namespace {

using Clock = std::chrono::steady_clock;  // CLOCK_MONOTONIC
using dlock::bench::MicrosBetween;
using dlock::bench::ParseBenchFlags;
using dlock::bench::SummaryJson;
constexpr int kExitUsage = 64;
constexpr int kBlock = 100;  // (a)/(b) alternation, and their warm-up
constexpr int kProcessWarmUp = 10;
constexpr const char* kUsage =
    "usage: dlock_bench_sqlite [--iterations N] [--process-runs M] [--json FILE] "
    "[--dir DIR] [--dlock PATH]";

struct Flags {
  int iterations = 2000;
  int process_runs = 200;
  std::string json_path;
  std::string dir;    // where the fresh temp directory goes
  std::string dlock;  // the CLI binary
};

[[noreturn]] void Die(const std::string& message, int code = 1) {
  std::cerr << "dlock_bench_sqlite: " << message << '\n';
  std::exit(code);
}

Flags ParseFlags(int argc, char** argv) {
  Flags flags;
  ParseBenchFlags(argc, argv, kUsage,
                  {{"--iterations", &flags.iterations},
                   {"--process-runs", &flags.process_runs},
                   {"--json", &flags.json_path},
                   {"--dir", &flags.dir},
                   {"--dlock", &flags.dlock}});
  if (!flags.dlock.empty() && access(flags.dlock.c_str(), X_OK) != 0) {
    Die("--dlock " + flags.dlock + ": not an executable file", kExitUsage);
  }
  if (flags.dlock.empty()) {
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) Die("cannot read /proc/self/exe (" + ec.message() + "); pass --dlock PATH");
    flags.dlock = (self.parent_path() / "dlock").string();
  }
  return flags;
}

// What the numbers were taken on: CPUs, kernel, SQLite, and the filesystem
// under `dir` (the mount in /proc/self/mountinfo with the longest mount point
// that is a prefix of the canonical `dir`), and whether /work is on it too.
nlohmann::json Environment(const std::string& dir) {
  std::string cpu = "unknown", fs_type = "unknown", fs_source, fs_mount;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.starts_with("model name")) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  }
  std::ifstream mountinfo("/proc/self/mountinfo");
  for (std::string line; std::getline(mountinfo, line);) {
    std::string skip, mount, type, source;  // fields 5, and the two after " - "
    std::istringstream(line) >> skip >> skip >> skip >> skip >> mount;
    std::istringstream(line.substr(line.find(" - ") + 3)) >> type >> source;
    const bool covers = mount == "/" || dir == mount || dir.starts_with(mount + "/");
    if (covers && mount.size() >= fs_mount.size()) {
      std::tie(fs_type, fs_source, fs_mount) = std::tie(type, source, mount);
    }
  }
  struct stat here, work;
  std::string same_as_work = "n/a";
  if (stat(dir.c_str(), &here) == 0 && stat("/work", &work) == 0) {
    same_as_work = here.st_dev == work.st_dev ? "yes" : "no";
  }
  utsname uts{};
  uname(&uts);
  return {{"machine",
           {{"cpus", std::thread::hardware_concurrency()}, {"cpu", cpu}, {"kernel", uts.release}}},
          {"sqlite", std::string(sqlite3_libversion()) + ", WAL, synchronous=FULL"},
          {"filesystem",
           {{"type", fs_type},
            {"source", fs_source},
            {"mount_point", fs_mount},
            {"same_as_work", same_as_work}}}};
}

// (b): a connection of its own, opened the way the backend opens its file.
class Floor {
 public:
  explicit Floor(const std::string& path) {
    const dlock::sqlite::SqliteOptions backend_defaults;
    Check(
        sqlite3_open_v2(path.c_str(), &db_,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr),
        "open");
    Check(sqlite3_busy_timeout(db_, static_cast<int>(backend_defaults.busy_timeout.count())),
          "busy_timeout");
    for (const char* sql :
         {"PRAGMA synchronous = FULL", "PRAGMA journal_mode = WAL",
          "CREATE TABLE IF NOT EXISTS bench_floor (key TEXT PRIMARY KEY NOT NULL, "
          "value INTEGER NOT NULL) WITHOUT ROWID"}) {
      Check(sqlite3_exec(db_, sql, nullptr, nullptr, nullptr), sql);
    }
    const char* sql[3] = {"BEGIN IMMEDIATE",
                          "INSERT INTO bench_floor (key, value) VALUES ('floor', ?1) "
                          "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                          "COMMIT"};
    for (int i = 0; i < 3; ++i) {
      Check(sqlite3_prepare_v2(db_, sql[i], -1, &txn_[i], nullptr), sql[i]);
    }
  }
  ~Floor() {
    for (sqlite3_stmt* s : txn_) sqlite3_finalize(s);
    sqlite3_close_v2(db_);
  }
  Floor(const Floor&) = delete;
  Floor& operator=(const Floor&) = delete;

  // One single-row write transaction, committed durably.
  void Write() {
    sqlite3_bind_int64(txn_[1], 1, ++value_);
    for (sqlite3_stmt* s : txn_) {
      Check(sqlite3_step(s), sqlite3_sql(s));
      sqlite3_reset(s);
    }
  }

 private:
  void Check(int rc, const char* what) {
    if (rc != SQLITE_OK && rc != SQLITE_DONE) {
      Die(std::string("floor: ") + what + ": " + sqlite3_errmsg(db_));
    }
  }
  sqlite3* db_ = nullptr;
  sqlite3_stmt* txn_[3] = {};  // BEGIN IMMEDIATE, upsert, COMMIT
  std::int64_t value_ = 0;
};

struct Samples {
  std::vector<double> cycle, acquire, release, floor, dlock_exec, flock, spawn_true;
};

// (a) and (b), n iterations each; recorded unless `out` is null (warm-up).
void RunCyclesAndFloor(dlock::Client& client, Floor& floor, int n, Samples* out) {
  dlock::AcquireOptions options;
  options.ttl = std::chrono::seconds(30);
  for (int i = 0; i < n; ++i) {
    const auto start = Clock::now();
    auto lease = client.TryAcquire("bench/cycle", options);
    const auto acquired = Clock::now();
    if (!lease.ok()) Die("cycle: TryAcquire: " + lease.status().message());
    if (auto s = lease->Release(); !s.ok()) Die("cycle: Release: " + s.message());
    const auto released = Clock::now();
    if (out == nullptr) continue;
    out->cycle.push_back(MicrosBetween(start, released));
    out->acquire.push_back(MicrosBetween(start, acquired));
    out->release.push_back(MicrosBetween(acquired, released));
  }
  for (int i = 0; i < n; ++i) {
    const auto start = Clock::now();
    floor.Write();  // grant
    floor.Write();  // release
    if (out != nullptr) out->floor.push_back(MicrosBetween(start, Clock::now()));
  }
}

// (c): runs argv to completion and returns its wall time in µs; dies unless
// it exits 0.
double TimeProcess(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const auto start = Clock::now();
  const pid_t pid = fork();
  if (pid < 0) Die(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    execvp(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) Die(std::string("waitpid: ") + std::strerror(errno));
  }
  const double us = MicrosBetween(start, Clock::now());
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    Die("'" + argv[0] + "' failed (wait status " + std::to_string(status) +
        (WIFEXITED(status) && WEXITSTATUS(status) == 127 ? ", not found?" : "") + ")");
  }
  return us;
}

// A fresh directory under --dir, else $TMPDIR, else /tmp; removed at exit.
std::string MakeTempDir(const std::string& dir_flag) {
  const char* tmpdir = std::getenv("TMPDIR");
  std::string parent = !dir_flag.empty()                      ? dir_flag
                       : tmpdir != nullptr && *tmpdir != '\0' ? tmpdir
                                                              : "/tmp";
  std::error_code ec;
  const std::string canonical = std::filesystem::canonical(parent, ec).string();
  if (ec) Die("directory " + parent + ": " + ec.message(), dir_flag.empty() ? 1 : kExitUsage);
  parent = canonical;
  std::string dir = parent + "/dlock-bench-XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) Die("mkdtemp in " + parent + ": " + std::strerror(errno));
  if (dir.find_first_of("%?#") != std::string::npos) {
    Die(dir + " has '%', '?' or '#' in it, which a sqlite:// URI would misread; use --dir");
  }
  static std::string to_remove;  // std::exit (so Die) runs atexit handlers too
  to_remove = dir;
  std::atexit([] {
    std::error_code ignored;
    std::filesystem::remove_all(to_remove, ignored);
  });
  return dir;
}

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = ParseFlags(argc, argv);
  if (access(flags.dlock.c_str(), X_OK) != 0) {
    Die("no dlock binary at " + flags.dlock +
        " (build it: cmake --build --preset default --target dlock_cli, or pass --dlock PATH)");
  }
  const std::string dir = MakeTempDir(flags.dir);
  const std::string db_path = dir + "/locks.db", uri = "sqlite://" + db_path;
  nlohmann::json report = Environment(dir);
  report["command"] = std::vector<std::string>(argv, argv + argc);
  report["file"] = db_path;
  report["iterations"] = flags.iterations;
  report["process_runs"] = flags.process_runs;
  auto str = [&](const char* g, const char* k) { return report[g][k].get<std::string>(); };
  std::cout << "dlock SQLite benchmark\n  machine:    " << report["machine"]["cpus"] << " vCPU, "
            << str("machine", "cpu") << ", Linux " << str("machine", "kernel")
            << "\n  file:       " << db_path << " (SQLite " << sqlite3_libversion()
            << ", WAL, synchronous=FULL)\n  filesystem: " << str("filesystem", "type") << " on "
            << str("filesystem", "source") << ", mounted at " << str("filesystem", "mount_point")
            << " (same filesystem as /work: " << str("filesystem", "same_as_work")
            << ")\n  runs:       " << flags.iterations << " cycles after " << kBlock << " warm-up; "
            << flags.process_runs << " process runs after " << kProcessWarmUp << " warm-up\n\n"
            << std::flush;

  Samples samples;
  {
    auto client = dlock::Client::Connect(uri);
    if (!client.ok()) Die("cannot open " + uri + ": " + client.status().message());
    Floor floor(db_path);
    RunCyclesAndFloor(**client, floor, kBlock, nullptr);
    for (int done = 0; done < flags.iterations; done += kBlock) {
      RunCyclesAndFloor(**client, floor, std::min(kBlock, flags.iterations - done), &samples);
    }
  }  // closed, and the Client's renewal thread gone, before we fork

  const std::vector<std::string> dlock_argv = {flags.dlock, "exec", "bench/exec", "--backend",
                                               uri,         "--",   "true"};
  const std::vector<std::string> flock_argv = {"flock", dir + "/flock.lock", "true"};
  for (int i = 0; i < kProcessWarmUp + flags.process_runs; ++i) {
    const double d = TimeProcess(dlock_argv), f = TimeProcess(flock_argv),
                 t = TimeProcess({"true"});
    if (i < kProcessWarmUp) continue;
    samples.dlock_exec.push_back(d);
    samples.flock.push_back(f);
    samples.spawn_true.push_back(t);
  }

  const struct {
    const char *key, *label;
    const std::vector<double>& us;
  } rows[] = {{"cycle", "cycle: TryAcquire + Release", samples.cycle},
              {"cycle_acquire", "  acquire half", samples.acquire},
              {"cycle_release", "  release half", samples.release},
              {"floor", "floor: 2 raw write txns", samples.floor},
              {"dlock_exec", "dlock exec KEY -- true", samples.dlock_exec},
              {"flock", "flock FILE true", samples.flock},
              {"spawn_true", "true (spawn only)", samples.spawn_true}};
  auto& results = report["results"];
  char line[160];
  std::snprintf(line, sizeof line, "%-30s %10s %10s %10s %6s\n", "", "p50 µs", "p99 µs", "mean µs",
                "n");
  std::cout << line;
  for (const auto& row : rows) {
    const auto& r = results[row.key] = SummaryJson(row.us);
    std::snprintf(line, sizeof line, "%-30s %10.1f %10.1f %10.1f %6zu\n", row.label,
                  r["p50_us"].get<double>(), r["p99_us"].get<double>(), r["mean_us"].get<double>(),
                  r["n"].get<std::size_t>());
    std::cout << line;
  }
  std::cout << '\n';
  const struct {
    const char *key, *label, *num, *den;
    double target;
  } ratios[] = {
      {"cycle_over_floor_p50", "cycle p50 / floor p50", "cycle", "floor", 1.5},
      {"dlock_exec_over_flock_p50", "dlock exec p50 / flock p50", "dlock_exec", "flock", 3.0}};
  for (const auto& r : ratios) {
    const double value =
        results[r.num]["p50_us"].get<double>() / results[r.den]["p50_us"].get<double>();
    const bool pass = value <= r.target;
    report["ratios"][r.key] = {{"value", value}, {"target", r.target}, {"pass", pass}};
    std::snprintf(line, sizeof line, "%-30s %6.2f   target <= %.1f   %s\n", r.label, value,
                  r.target, pass ? "PASS" : "MISS");
    std::cout << line;
  }

  if (!flags.json_path.empty()) {
    std::ofstream out(flags.json_path);
    out << report.dump(2) << '\n';
    if (!out.flush()) Die("cannot write " + flags.json_path);
  }
  return 0;
}
