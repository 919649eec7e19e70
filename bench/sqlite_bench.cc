// dlock_bench_sqlite: what a lock on the embedded SQLite store costs, next to
// what any lock on that store must pay. One run, one fresh SQLite file:
//
//  (a) cycle  Client::TryAcquire(key, ttl 30s) then Lease::Release(),
//             uncontended, one Client (its renewal thread running), timed per
//             iteration; the acquire and release halves are reported too.
//  (b) floor  two raw write transactions per iteration on a one-row table in
//             the same file, through sqlite3 directly with the backend's own
//             durability settings (WAL, synchronous=FULL, the same busy
//             timeout): BEGIN IMMEDIATE; INSERT ... ON CONFLICT DO UPDATE;
//             COMMIT.
//  (c) exec   whole processes, fork/execvp/waitpid: `dlock exec KEY --backend
//             sqlite:///FILE -- true` against util-linux `flock FILE true`
//             (and bare `true`, to show what spawning alone costs).
//
// Why (b) is the floor: a lease must survive a crash of the host, or the
// fencing token could go backwards, so the grant is a committed, fsynced
// write before TryAcquire returns; and a release must be a committed write
// too, or the key stays held until its TTL runs out. On this store each of
// those is at least one write transaction: take the write lock (BEGIN
// IMMEDIATE), change one row, append to the WAL and fsync it (COMMIT with
// synchronous=FULL). Everything the backend does beyond that (more
// statements, reads, transactions, fsyncs) is what cycle/floor measures.
//
// (a) and (b) run interleaved in blocks of 100 iterations, so that a noisy
// machine drifting over the run hits both alike; (c) interleaves per run.
// Targets: cycle p50 <= 1.5 x floor p50, dlock exec p50 <= 3 x flock p50.
// The exit status is 0 whenever the measurement ran (a MISS included), 64 for
// a bad flag, 1 when something could not be measured.
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backends/sqlite/sqlite_backend.h"
#include "dlock/client.h"

namespace {

using Clock = std::chrono::steady_clock;  // CLOCK_MONOTONIC
constexpr int kExitUsage = 64;
constexpr int kBlock = 100;         // (a)/(b) interleaving and warm-up
constexpr int kProcessWarmUp = 10;
constexpr double kCycleTarget = 1.5;
constexpr double kExecTarget = 3.0;
constexpr const char* kUsage =
    "usage: dlock_bench_sqlite [--iterations N] [--process-runs M] [--json FILE] "
    "[--dir DIR] [--dlock PATH]";

struct Flags {
  int iterations = 2000;
  int process_runs = 200;
  std::string json_path;
  std::string dir;    // parent of the fresh temp directory
  std::string dlock;  // the CLI binary
};

[[noreturn]] void Die(const std::string& message, int code = 1) {
  std::cerr << "dlock_bench_sqlite: " << message << '\n';
  std::exit(code);
}

Flags ParseFlags(int argc, char** argv) {
  Flags flags;
  auto value = [&](int& i) -> std::string {
    if (i + 1 >= argc) Die(std::string(argv[i]) + " needs a value; " + kUsage, kExitUsage);
    return argv[++i];
  };
  auto count = [&](int& i) {
    const std::string flag = argv[i], text = value(i);
    int n = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec != std::errc() || end != text.data() + text.size() || n < 1) {
      Die(flag + " wants a positive integer, got '" + text + "'", kExitUsage);
    }
    return n;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--iterations") flags.iterations = count(i);
    else if (arg == "--process-runs") flags.process_runs = count(i);
    else if (arg == "--json") flags.json_path = value(i);
    else if (arg == "--dir") flags.dir = value(i);
    else if (arg == "--dlock") flags.dlock = value(i);
    else if (arg == "--help" || arg == "-h") { std::cout << kUsage << '\n'; std::exit(0); }
    else Die("unknown argument '" + std::string(arg) + "'; " + kUsage, kExitUsage);
  }
  if (flags.dlock.empty()) {
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) Die("cannot read /proc/self/exe (" + ec.message() + "); pass --dlock PATH");
    flags.dlock = (self.parent_path() / "dlock").string();
  }
  return flags;
}

// ---- Statistics -------------------------------------------------------------

struct Summary {
  double p50_us = 0, p99_us = 0, mean_us = 0;
  std::size_t n = 0;
};

Summary Summarize(std::vector<double> us) {
  Summary s;
  s.n = us.size();
  if (us.empty()) return s;
  std::sort(us.begin(), us.end());
  auto rank = [&](double p) {  // nearest-rank percentile
    const auto i = static_cast<std::size_t>(std::ceil(p / 100.0 * us.size()));
    return us[std::clamp<std::size_t>(i, 1, us.size()) - 1];
  };
  s.p50_us = rank(50);
  s.p99_us = rank(99);
  s.mean_us = std::accumulate(us.begin(), us.end(), 0.0) / us.size();
  return s;
}

double MicrosSince(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

// ---- The machine and the filesystem under the file --------------------------

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("model name")) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

struct FsInfo {
  std::string type = "unknown", source, mount_point;
  std::string same_as_work = "n/a";  // is it the filesystem /work is on?
};

// The mount in /proc/self/mountinfo with the longest mount point that is a
// prefix of `dir` (which is canonical: mkdtemp under a canonical parent).
FsInfo FilesystemOf(const std::string& dir) {
  FsInfo fs;
  std::ifstream in("/proc/self/mountinfo");
  std::size_t best = 0;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string id, parent, devno, root, mount_point, word;
    fields >> id >> parent >> devno >> root >> mount_point;
    while (fields >> word && word != "-") {
    }
    std::string type, source;
    fields >> type >> source;
    const bool under = dir == mount_point || mount_point == "/" ||
                       dir.starts_with(mount_point + "/");
    if (under && mount_point.size() >= best) {
      best = mount_point.size();
      fs = {type, source, mount_point, fs.same_as_work};
    }
  }
  struct stat a, b;
  if (stat(dir.c_str(), &a) == 0 && stat("/work", &b) == 0) {
    fs.same_as_work = a.st_dev == b.st_dev ? "yes" : "no";
  }
  return fs;
}

// ---- (a) the dlock cycle and (b) the floor ----------------------------------

void CheckSqlite(int rc, sqlite3* db, const char* what) {
  if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) {
    Die(std::string("floor: ") + what + ": " + sqlite3_errmsg(db));
  }
}

// The floor's own connection, opened the way the backend opens its file.
class Floor {
 public:
  explicit Floor(const std::string& path) {
    const dlock::sqlite::SqliteOptions defaults;  // the backend's busy timeout
    CheckSqlite(sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                                nullptr),
                db_, "open");
    CheckSqlite(sqlite3_busy_timeout(db_, static_cast<int>(defaults.busy_timeout.count())), db_,
                "busy_timeout");
    Exec("PRAGMA synchronous = FULL");
    Exec("PRAGMA journal_mode = WAL");
    Exec("CREATE TABLE IF NOT EXISTS bench_floor (key TEXT PRIMARY KEY NOT NULL, "
         "value INTEGER NOT NULL) WITHOUT ROWID");
    Prepare("BEGIN IMMEDIATE", &begin_);
    Prepare("INSERT INTO bench_floor (key, value) VALUES ('floor', ?1) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value", &upsert_);
    Prepare("COMMIT", &commit_);
  }
  ~Floor() {
    for (sqlite3_stmt* s : {begin_, upsert_, commit_}) sqlite3_finalize(s);
    sqlite3_close_v2(db_);
  }
  Floor(const Floor&) = delete;
  Floor& operator=(const Floor&) = delete;

  // One single-row write transaction, committed durably.
  void Write() {
    sqlite3_bind_int64(upsert_, 1, ++value_);
    for (sqlite3_stmt* s : {begin_, upsert_, commit_}) {
      CheckSqlite(sqlite3_step(s), db_, sqlite3_sql(s));
      sqlite3_reset(s);
    }
  }

 private:
  void Exec(const char* sql) { CheckSqlite(sqlite3_exec(db_, sql, nullptr, nullptr, nullptr), db_, sql); }
  void Prepare(const char* sql, sqlite3_stmt** out) {
    CheckSqlite(sqlite3_prepare_v2(db_, sql, -1, out, nullptr), db_, sql);
  }
  sqlite3* db_ = nullptr;
  sqlite3_stmt *begin_ = nullptr, *upsert_ = nullptr, *commit_ = nullptr;
  std::int64_t value_ = 0;
};

struct CycleSamples {
  std::vector<double> cycle, acquire, release, floor;
};

void RunCycles(dlock::Client& client, int n, CycleSamples* out) {
  dlock::AcquireOptions options;
  options.ttl = std::chrono::seconds(30);
  for (int i = 0; i < n; ++i) {
    const auto start = Clock::now();
    auto lease = client.TryAcquire("bench/cycle", options);
    const auto acquired = Clock::now();
    if (!lease.ok()) Die("cycle: TryAcquire: " + lease.status().message());
    if (auto s = lease->Release(); !s.ok()) Die("cycle: Release: " + s.message());
    if (out == nullptr) continue;
    out->cycle.push_back(MicrosSince(start));
    out->acquire.push_back(std::chrono::duration<double, std::micro>(acquired - start).count());
    out->release.push_back(MicrosSince(acquired));
  }
}

void RunFloor(Floor& floor, int n, CycleSamples* out) {
  for (int i = 0; i < n; ++i) {
    const auto start = Clock::now();
    floor.Write();  // grant
    floor.Write();  // release
    if (out != nullptr) out->floor.push_back(MicrosSince(start));
  }
}

// ---- (c) whole processes ----------------------------------------------------

// Runs argv to completion; returns the wall time in µs. Dies unless it exits 0.
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
  const double us = MicrosSince(start);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    Die("'" + argv[0] + "' failed (wait status " + std::to_string(status) +
        (WIFEXITED(status) && WEXITSTATUS(status) == 127 ? ", not found?" : "") + ")");
  }
  return us;
}

// ---- Report -----------------------------------------------------------------

struct Row {
  std::string name, json_name;
  Summary s;
};

struct Ratio {
  std::string name, json_name;
  double value, target;
  bool pass() const { return value <= target; }
};

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = ParseFlags(argc, argv);
  if (access(flags.dlock.c_str(), X_OK) != 0) {
    Die("no dlock binary at " + flags.dlock +
        " (build it: cmake --build --preset default --target dlock_cli, or pass --dlock PATH)");
  }

  // A fresh directory, on the filesystem of $TMPDIR (else /tmp) or --dir.
  std::string parent = flags.dir;
  if (parent.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    parent = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  }
  std::error_code ec;
  parent = std::filesystem::canonical(parent, ec).string();
  if (ec) Die("directory " + (flags.dir.empty() ? std::string("$TMPDIR or /tmp") : flags.dir) +
              ": " + ec.message());
  std::string templ = parent + "/dlock-bench-XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) Die("mkdtemp in " + parent + ": " + std::strerror(errno));
  const std::string dir = templ;
  // Removed on every exit, Die() included (std::exit runs atexit handlers).
  static std::string cleanup_dir;
  cleanup_dir = dir;
  std::atexit([] { std::error_code ignored; std::filesystem::remove_all(cleanup_dir, ignored); });
  const std::string db_path = dir + "/locks.db", flock_path = dir + "/flock.lock";
  if (db_path.find_first_of("%?#") != std::string::npos) {
    Die("the directory " + dir + " has '%', '?' or '#' in it; pass another --dir");
  }
  const std::string uri = "sqlite://" + db_path;
  const FsInfo fs = FilesystemOf(dir);
  utsname uts{};
  uname(&uts);

  std::cout << "dlock SQLite benchmark\n"
            << "  machine:    " << std::thread::hardware_concurrency() << " CPUs, " << CpuModel()
            << ", Linux " << uts.release << "\n"
            << "  file:       " << db_path << " (SQLite " << sqlite3_libversion()
            << ", WAL, synchronous=FULL)\n"
            << "  filesystem: " << fs.type << " on " << fs.source << " (mounted at "
            << fs.mount_point << "; same filesystem as /work: " << fs.same_as_work << ")\n"
            << "  runs:       " << flags.iterations << " cycles after " << kBlock
            << " warm-up; " << flags.process_runs << " process runs after " << kProcessWarmUp
            << " warm-up\n\n" << std::flush;

  // (a) and (b), interleaved in blocks.
  CycleSamples samples;
  {
    auto client = dlock::Client::Connect(uri);
    if (!client.ok()) Die("cannot open " + uri + ": " + client.status().message());
    Floor floor(db_path);
    RunCycles(**client, kBlock, nullptr);
    RunFloor(floor, kBlock, nullptr);
    for (int done = 0; done < flags.iterations; done += kBlock) {
      const int n = std::min(kBlock, flags.iterations - done);
      RunCycles(**client, n, &samples);
      RunFloor(floor, n, &samples);
    }
  }  // the Client's renewal thread is gone before we fork

  // (c), one of each per run.
  const std::vector<std::string> dlock_argv = {flags.dlock, "exec", "bench/exec", "--backend",
                                               uri, "--", "true"};
  const std::vector<std::string> flock_argv = {"flock", flock_path, "true"};
  const std::vector<std::string> true_argv = {"true"};
  std::vector<double> dlock_us, flock_us, true_us;
  for (int i = 0; i < kProcessWarmUp + flags.process_runs; ++i) {
    const double d = TimeProcess(dlock_argv), f = TimeProcess(flock_argv),
                 t = TimeProcess(true_argv);
    if (i < kProcessWarmUp) continue;
    dlock_us.push_back(d);
    flock_us.push_back(f);
    true_us.push_back(t);
  }

  const std::vector<Row> rows = {
      {"cycle: TryAcquire + Release", "cycle", Summarize(samples.cycle)},
      {"  acquire half", "cycle_acquire", Summarize(samples.acquire)},
      {"  release half", "cycle_release", Summarize(samples.release)},
      {"floor: 2 raw write txns", "floor", Summarize(samples.floor)},
      {"dlock exec KEY -- true", "dlock_exec", Summarize(dlock_us)},
      {"flock FILE true", "flock", Summarize(flock_us)},
      {"true (spawn only)", "spawn_true", Summarize(true_us)},
  };
  const std::vector<Ratio> ratios = {
      {"cycle p50 / floor p50", "cycle_over_floor_p50", rows[0].s.p50_us / rows[3].s.p50_us,
       kCycleTarget},
      {"dlock exec p50 / flock p50", "dlock_exec_over_flock_p50",
       rows[4].s.p50_us / rows[5].s.p50_us, kExecTarget},
  };

  char line[160];
  std::snprintf(line, sizeof line, "%-30s %10s %10s %10s %6s\n", "", "p50 µs", "p99 µs",
                "mean µs", "n");
  std::cout << line;
  for (const Row& r : rows) {
    std::snprintf(line, sizeof line, "%-30s %10.1f %10.1f %10.1f %6zu\n", r.name.c_str(),
                  r.s.p50_us, r.s.p99_us, r.s.mean_us, r.s.n);
    std::cout << line;
  }
  std::cout << '\n';
  for (const Ratio& r : ratios) {
    std::snprintf(line, sizeof line, "%-30s %6.2f   target <= %.1f   %s\n", r.name.c_str(),
                  r.value, r.target, r.pass() ? "PASS" : "MISS");
    std::cout << line;
  }

  if (!flags.json_path.empty()) {
    nlohmann::json j;
    std::vector<std::string> args(argv, argv + argc);
    j["command"] = args;
    j["machine"] = {{"cpus", std::thread::hardware_concurrency()},
                    {"cpu_model", CpuModel()},
                    {"kernel", uts.release}};
    j["sqlite"] = {{"version", sqlite3_libversion()},
                   {"journal_mode", "wal"},
                   {"synchronous", "full"}};
    j["filesystem"] = {{"type", fs.type},
                       {"source", fs.source},
                       {"mount_point", fs.mount_point},
                       {"same_as_work", fs.same_as_work}};
    j["iterations"] = flags.iterations;
    j["process_runs"] = flags.process_runs;
    for (const Row& r : rows) {
      j["results"][r.json_name] = {
          {"p50_us", r.s.p50_us}, {"p99_us", r.s.p99_us}, {"mean_us", r.s.mean_us}, {"n", r.s.n}};
    }
    for (const Ratio& r : ratios) {
      j["ratios"][r.json_name] = {{"value", r.value}, {"target", r.target}, {"pass", r.pass()}};
    }
    std::ofstream out(flags.json_path);
    out << j.dump(2) << '\n';
    if (!out) Die("cannot write " + flags.json_path);
  }
  return 0;
}
