// dlock_bench_postgres: what a lock on PostgreSQL costs, next to what any
// lock on that server must pay. One run, one server (its own, started with
// scripts/servers/postgres.sh, unless --uri names one):
//
//  (a) cycle    Client::TryAcquire(key, ttl 30s) then Lease::Release(),
//               uncontended, one Client (its renewal thread running), timed
//               per iteration; the acquire and release halves too.
//  (b) floor    two single-row write round trips per iteration: the
//               cheapest durable write a user's own code could make for the
//               same guarantee, on a plain libpq connection of its own: a
//               prepared `UPDATE` of one row of a two-column table
//               (autocommit, the server's synchronous_commit, a HOT
//               update). "write RT" is one of them.
//  (b') ping    Client::Ping, twice, on the connection dlock uses (a
//               prepared upsert of one row of the locks table: `dlock
//               bench`'s floor), shown for reference: its statement costs
//               the server 5-15 % more than (b)'s.
//  (c) hand-off 4 contender processes (this binary again, --contender) loop
//               Acquire(key, wait) / Release on one key for --seconds. The
//               hand-off latency of grant i+1 is its Acquire's return minus
//               the moment grant i's Release returned (the key was free from
//               then on; measured on CLOCK_MONOTONIC, which all processes
//               share); grants are ordered by token. Also shown from the
//               Release call, which adds the release's own round trip; and
//               the number of grants per process.
//
// Why (b) is the floor: a grant must be durable before TryAcquire returns (or
// a crash could reissue its token), and a release must be a committed write
// (or the key stays held until its TTL): two single-row write round trips
// is the least any lock on this server does.
//
// Placement. On a 2-vCPU machine a round trip costs ~40 µs more when the
// server process runs on the other vCPU than the client thread (a
// cross-CPU wake-up each way), and the scheduler keeps each connection's
// server process where it first settled: two connections of one run
// differed by 40 % (docs/benchmarks-postgres.md, issue 25). So, when the
// server's processes can be reached (a local server, sched_setaffinity
// allowed), the measuring thread runs on one CPU and the server processes of
// both connections on another, as a client and its server on two machines;
// otherwise the run says "not pinned" and the two floors may differ by
// placement alone.
//
// (a), (b) and (b') take turns, one iteration each in a rotating order, so
// that drift on a noisy machine hits all alike (in blocks of 100, a run of
// one kind on one connection came out up to 25 % faster than the same
// write interleaved). Targets: cycle p50 <= 1.3 x floor p50; hand-off p50
// <= 3 x write RT p50; every process's grant count within +-15% of the
// mean. Exit status: 0 when everything was measured (MISS included), 64 for
// a bad flag, 1 when something could not be measured.
#include <libpq-fe.h>
#include <sched.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "bench_util.h"
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/uri.h"
#include "dlock/client.h"

#ifndef DLOCK_SOURCE_DIR
#define DLOCK_SOURCE_DIR "."
#endif

namespace {

using Clock = std::chrono::steady_clock;  // CLOCK_MONOTONIC: one clock for all processes
using dlock::bench::MicrosBetween;
using dlock::bench::MonotonicNs;
using dlock::bench::SummaryJson;
constexpr int kExitUsage = 64;
constexpr int kBlock = 100;
constexpr int kHandoffWarmUp = 20;  // grants left out at the start of (c)
constexpr const char* kUsage =
    "usage: dlock_bench_postgres [--uri URI] [--iterations N] [--seconds S] "
    "[--contenders K] [--json FILE]";

struct Flags {
  std::string uri;  // empty: start a server of our own
  int iterations = 2000;
  int seconds = 5;
  int contenders = 4;
  std::string json_path;
};

[[noreturn]] void Die(const std::string& message, int code = 1) {
  std::cerr << "dlock_bench_postgres: " << message << '\n';
  std::exit(code);
}

Flags ParseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage << '\n';
      std::exit(0);
    }
    int* count = arg == "--iterations"    ? &flags.iterations
                 : arg == "--seconds"     ? &flags.seconds
                 : arg == "--contenders"  ? &flags.contenders
                                          : nullptr;
    std::string* text = arg == "--uri" ? &flags.uri : arg == "--json" ? &flags.json_path : nullptr;
    if (count == nullptr && text == nullptr) {
      Die("unknown argument '" + std::string(arg) + "'; " + kUsage, kExitUsage);
    }
    if (i + 1 >= argc) Die(std::string(arg) + " needs a value; " + kUsage, kExitUsage);
    const std::string value = argv[++i];
    if (text != nullptr) {
      *text = value;
      continue;
    }
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), *count);
    if (ec != std::errc() || end != value.data() + value.size() || *count < 1) {
      Die(std::string(arg) + " wants a positive integer, got '" + value + "'", kExitUsage);
    }
  }
  if (flags.contenders < 2) Die("--contenders wants at least 2", kExitUsage);
  return flags;
}

// ------------------------------------------------------------ the server

// Our own server, stopped at exit (std::exit included).
std::string StartServer() {
  char tmpl[] = "/tmp/dlock-bench-pg.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) Die(std::string("mkdtemp: ") + std::strerror(errno));
  static std::string dir;
  dir = std::string(tmpl) + "/server";
  static const std::string script = DLOCK_SOURCE_DIR "/scripts/servers/postgres.sh";
  const std::string start = "bash '" + script + "' start '" + dir + "' >/dev/null";
  if (std::system(start.c_str()) != 0) Die("could not start a server with " + script);
  std::atexit([] {
    const std::string stop = "bash '" + script + "' stop '" + dir + "' >/dev/null 2>&1";
    (void)std::system(stop.c_str());
    std::error_code ignored;
    std::filesystem::remove_all(std::filesystem::path(dir).parent_path(), ignored);
  });
  std::ifstream in(dir + "/uri");
  std::string uri;
  std::getline(in, uri);
  if (uri.empty()) Die("the server script wrote no URI to " + dir + "/uri");
  return uri;
}

// ------------------------------------------------------------ (b) floor

// A user's own connection and table, and the cheapest durable single-row
// write on them: a prepared UPDATE of an existing row by its primary key,
// no index on the column it changes (a HOT update: one heap record and the
// commit in the WAL; an upsert would add a tuple-lock record).
class Floor {
 public:
  explicit Floor(const std::string& uri) : conn_(PQconnectdb(uri.c_str())) {
    if (PQstatus(conn_) != CONNECTION_OK) Die(std::string("floor: connect: ") + PQerrorMessage(conn_));
    PQsetNoticeProcessor(conn_, [](void*, const char*) {}, nullptr);
    Exec("CREATE TABLE IF NOT EXISTS dlock_bench_floor (k int PRIMARY KEY, v bigint NOT NULL)");
    Exec("INSERT INTO dlock_bench_floor VALUES (1, 0) ON CONFLICT (k) DO NOTHING");
    Exec("ANALYZE dlock_bench_floor");
    PGresult* r = PQprepare(conn_, "floor", "UPDATE dlock_bench_floor SET v = $1 WHERE k = 1", 1,
                            nullptr);
    Check(r, "prepare");
  }
  ~Floor() { PQfinish(conn_); }
  Floor(const Floor&) = delete;
  Floor& operator=(const Floor&) = delete;

  // One single-row write, committed (autocommit) before it returns.
  void Write() {
    const std::string value = std::to_string(++value_);
    const char* values[1] = {value.c_str()};
    Check(PQexecPrepared(conn_, "floor", 1, values, nullptr, nullptr, 0), "write");
  }
  std::string Setting(const char* name) {
    PGresult* r = PQexec(conn_, (std::string("SHOW ") + name).c_str());
    std::string v = PQresultStatus(r) == PGRES_TUPLES_OK ? PQgetvalue(r, 0, 0) : "?";
    PQclear(r);
    return v;
  }
  void Exec(const char* sql) { Check(PQexec(conn_, sql), sql); }
  // The server process serving this connection.
  pid_t ServerPid() const { return PQbackendPID(conn_); }
  // The server processes of the other sessions named `application_name`.
  std::vector<pid_t> ServerPidsOf(const std::string& application_name) {
    const char* values[1] = {application_name.c_str()};
    PGresult* r = PQexecParams(conn_,
                               "SELECT pid FROM pg_stat_activity WHERE application_name = $1 "
                               "AND datname = current_database() AND pid <> pg_backend_pid()",
                               1, nullptr, values, nullptr, nullptr, 0);
    std::vector<pid_t> pids;
    if (PQresultStatus(r) == PGRES_TUPLES_OK) {
      for (int i = 0; i < PQntuples(r); ++i) pids.push_back(std::atoi(PQgetvalue(r, i, 0)));
    }
    PQclear(r);
    return pids;
  }

 private:
  void Check(PGresult* r, const std::string& what) {
    const ExecStatusType s = PQresultStatus(r);
    if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) {
      const std::string m = PQresultErrorMessage(r);
      PQclear(r);
      Die("floor: " + what + ": " + m);
    }
    PQclear(r);
  }
  PGconn* conn_;
  std::int64_t value_ = 0;
};

// ------------------------------------------------------------ placement

// The measuring thread on one CPU, the server processes of both
// connections on another (the header comment says why); undone by Restore.
class Placement {
 public:
  // `server_pids`: the processes serving the raw and dlock's connections.
  void Pin(const std::vector<pid_t>& server_pids) {
    if (sched_getaffinity(0, sizeof saved_, &saved_) != 0) return Fail("sched_getaffinity failed");
    std::vector<int> cpus;
    for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c) {
      if (CPU_ISSET(c, &saved_)) cpus.push_back(c);
    }
    if (cpus.size() < 2) return Fail("fewer than 2 CPUs");
    if (server_pids.size() < 2) return Fail("dlock's server process not found");
    for (pid_t pid : server_pids) {
      if (!SetCpu(pid, cpus[1])) {
        return Fail("cannot move server process " + std::to_string(pid) + ": " +
                    std::strerror(errno));
      }
    }
    if (!SetCpu(0, cpus[0])) return Fail(std::string("cannot pin this thread: ") + std::strerror(errno));
    pinned_ = true;
    description_ = "pinned: this thread on CPU " + std::to_string(cpus[0]) + ", the server's " +
                   std::to_string(server_pids.size()) + " processes on CPU " +
                   std::to_string(cpus[1]);
  }
  // The thread's CPUs as they were (the contenders it forks inherit them).
  void Restore() {
    if (pinned_) (void)sched_setaffinity(0, sizeof saved_, &saved_);
    pinned_ = false;
  }
  bool pinned() const { return pinned_; }
  const std::string& description() const { return description_; }

 private:
  static bool SetCpu(pid_t pid, int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(pid, sizeof set, &set) == 0;
  }
  void Fail(const std::string& why) { description_ = "not pinned (" + why + ")"; }
  cpu_set_t saved_{};
  bool pinned_ = false;
  std::string description_ = "not pinned";
};

struct Samples {
  std::vector<double> cycle, acquire, release, floor, write, ping_floor, ping_write;
};

// One iteration of each of (a), (b) and (b'), in an order that rotates with
// `i`, so that neither position nor drift favours any of them.
void RunCyclesAndFloor(dlock::Client& client, Floor& raw, int n, Samples* out) {
  dlock::AcquireOptions options;
  options.ttl = std::chrono::seconds(30);
  auto cycle = [&] {
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
  };
  // Two writes, timed as one floor sample and two write RTs.
  auto pair = [&](auto write, std::vector<double> Samples::*floor_us,
                  std::vector<double> Samples::*write_us) {
    const auto start = Clock::now();
    write();  // as a grant
    const auto mid = Clock::now();
    write();  // as a release
    const auto end = Clock::now();
    if (out == nullptr) return;
    (out->*floor_us).push_back(MicrosBetween(start, end));
    (out->*write_us).push_back(MicrosBetween(start, mid));
    (out->*write_us).push_back(MicrosBetween(mid, end));
  };
  auto ping = [&] {
    pair(
        [&] {
          if (auto s = client.Ping(); !s.ok()) Die("floor: Ping: " + s.message());
        },
        &Samples::ping_floor, &Samples::ping_write);
  };
  auto raw_pair = [&] { pair([&] { raw.Write(); }, &Samples::floor, &Samples::write); };
  for (int i = 0; i < n; ++i) {
    switch (i % 3) {
      case 0: cycle(); ping(); raw_pair(); break;
      case 1: ping(); raw_pair(); cycle(); break;
      default: raw_pair(); cycle(); ping(); break;
    }
  }
}

// ------------------------------------------------------------ (c) hand-off

// One grant as a contender saw it.
struct Grant {
  std::uint64_t token;
  int process;
  std::int64_t acquired_ns, release_start_ns, release_end_ns;
};

// --contender URI KEY START_NS END_NS OUTFILE: loops Acquire/Release from
// START_NS (so all begin together) until END_NS; writes one line per grant.
int Contender(int argc, char** argv) {
  if (argc != 7) Die("--contender URI KEY START_NS END_NS OUTFILE", kExitUsage);
  const std::string uri = argv[2], key = argv[3], out_path = argv[6];
  const std::int64_t start_ns = std::atoll(argv[4]), end_ns = std::atoll(argv[5]);
  auto client = dlock::Client::Connect(uri);
  if (!client.ok()) Die("contender: " + client.status().message());
  dlock::AcquireOptions options;
  options.ttl = std::chrono::seconds(10);
  options.wait = std::chrono::seconds(20);
  // Warm the connection (and the LISTEN one) before the start.
  {
    auto lease = (*client)->Acquire(key + "/warm/" + std::to_string(getpid()), options);
    if (lease.ok()) (void)lease->Release();
  }
  while (MonotonicNs() < start_ns) std::this_thread::sleep_for(std::chrono::microseconds(200));
  std::vector<Grant> grants;
  while (MonotonicNs() < end_ns) {
    auto lease = (*client)->Acquire(key, options);
    if (!lease.ok()) Die("contender: Acquire: " + lease.status().message());
    Grant g{lease->token(), 0, MonotonicNs(), 0, 0};
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

struct Handoff {
  std::vector<double> from_call_us, from_return_us;
  std::vector<int> counts;
};

Handoff RunHandoff(const std::string& uri, const Flags& flags) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) Die("cannot read /proc/self/exe: " + ec.message());
  char tmpl[] = "/tmp/dlock-bench-handoff.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) Die(std::string("mkdtemp: ") + std::strerror(errno));
  const std::string dir = tmpl;
  const std::string key = "bench/handoff/" + std::to_string(getpid()) + "/" + std::to_string(MonotonicNs());
  const std::int64_t start_ns = MonotonicNs() + 1'500'000'000;  // time to connect
  const std::int64_t end_ns = start_ns + static_cast<std::int64_t>(flags.seconds) * 1'000'000'000;
  std::vector<pid_t> pids;
  for (int i = 0; i < flags.contenders; ++i) {
    const std::string out = dir + "/" + std::to_string(i);
    const std::vector<std::string> args = {self.string(), "--contender", uri, key,
                                           std::to_string(start_ns), std::to_string(end_ns), out};
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
  std::vector<Grant> grants;
  Handoff result;
  for (int i = 0; i < flags.contenders; ++i) {
    std::ifstream in(dir + "/" + std::to_string(i));
    Grant g{};
    int n = 0;
    while (in >> g.token >> g.acquired_ns >> g.release_start_ns >> g.release_end_ns) {
      g.process = i;
      grants.push_back(g);
      if (g.acquired_ns < end_ns) ++n;
    }
    result.counts.push_back(n);
  }
  std::filesystem::remove_all(dir, ec);
  std::sort(grants.begin(), grants.end(),
            [](const Grant& a, const Grant& b) { return a.token < b.token; });
  for (std::size_t i = kHandoffWarmUp; i + 1 < grants.size(); ++i) {
    const Grant& prev = grants[i];
    const Grant& next = grants[i + 1];
    // Consecutive grants only (each grant bumps the key's token by one), and
    // only while everybody was still contending.
    if (next.token != prev.token + 1 || next.acquired_ns >= end_ns) continue;
    result.from_call_us.push_back((next.acquired_ns - prev.release_start_ns) / 1000.0);
    result.from_return_us.push_back((next.acquired_ns - prev.release_end_ns) / 1000.0);
  }
  return result;
}

// The targets' ratios (against the floor) and the reference ones (against
// Ping), printed and put in `report`.
void ReportRatios(double spread_percent, nlohmann::json& report) {
  const auto& results = report["results"];
  auto p50 = [&](const char* key) { return results[key]["p50_us"].get<double>(); };
  const struct {
    const char *key, *label;
    double value, target;
    const char* unit;
  } ratios[] = {
      {"cycle_over_floor_p50", "cycle p50 / floor p50", p50("cycle") / p50("floor"), 1.3, "x"},
      {"handoff_over_write_rt_p50", "hand-off p50 / write RT p50",
       p50("handoff") / p50("write_rt"), 3.0, "x"},
      {"grant_count_spread", "max |count - mean| / mean", spread_percent, 15.0, "%"},
  };
  char line[200];
  for (const auto& r : ratios) {
    const bool pass = r.value <= r.target;
    report["ratios"][r.key] = {{"value", r.value}, {"target", r.target}, {"pass", pass}};
    std::snprintf(line, sizeof line, "%-32s %6.2f%s  target <= %.1f%s  %s\n", r.label, r.value,
                  r.unit, r.target, r.unit, pass ? "PASS" : "MISS");
    std::cout << line;
  }
  const double ping_cycle = p50("cycle") / p50("ping_floor");
  const double ping_handoff = p50("handoff") / p50("ping_write_rt");
  report["reference"] = {{"cycle_over_ping_floor_p50", ping_cycle},
                         {"handoff_over_ping_rt_p50", ping_handoff},
                         {"ping_over_write_rt_p50", p50("ping_write_rt") / p50("write_rt")}};
  std::snprintf(line, sizeof line,
                "(against Client::Ping: cycle %.2fx two Pings, hand-off %.2fx one; a Ping is "
                "%.2fx a write RT)\n",
                ping_cycle, ping_handoff, p50("ping_write_rt") / p50("write_rt"));
  std::cout << line;
}

// dlock's URI with an application_name this run can find its session by.
std::string NamedUri(const std::string& uri, const dlock::internal::Uri& parsed,
                     std::string* name) {
  if (const std::string* given = parsed.Param("application_name")) {
    *name = *given;
    return uri;
  }
  *name = "dlock_bench_cycle_" + std::to_string(getpid());
  return uri + (uri.find('?') == std::string::npos ? "?" : "&") + "application_name=" + *name;
}

// (a), (b) and (b'), with the server described in `report`.
Samples RunCyclePhase(const std::string& uri, const dlock::internal::Uri& parsed,
                      const Flags& flags, nlohmann::json& report) {
  Floor floor(uri);
  utsname uts{};
  uname(&uts);
  report["machine"] = {{"cpus", std::thread::hardware_concurrency()}, {"kernel", uts.release}};
  report["postgres"] = {{"version", floor.Setting("server_version")},
                        {"fsync", floor.Setting("fsync")},
                        {"synchronous_commit", floor.Setting("synchronous_commit")},
                        {"wal_sync_method", floor.Setting("wal_sync_method")}};
  std::cout << "dlock PostgreSQL benchmark\n  machine:  " << report["machine"]["cpus"]
            << " vCPU, Linux " << uts.release << "\n  server:   " << parsed.Redacted()
            << " (PostgreSQL " << floor.Setting("server_version")
            << ", fsync=" << floor.Setting("fsync")
            << ", synchronous_commit=" << floor.Setting("synchronous_commit")
            << ")\n  runs:     " << flags.iterations << " cycles after " << kBlock
            << " warm-up; hand-off " << flags.contenders << " processes x " << flags.seconds
            << " s\n"
            << std::flush;
  std::string name;
  auto client = dlock::Client::Connect(NamedUri(uri, parsed, &name));
  if (!client.ok()) Die("cannot open " + parsed.Redacted() + ": " + client.status().message());
  RunCyclesAndFloor(**client, floor, kBlock, nullptr);
  Placement placement;
  std::vector<pid_t> servers = floor.ServerPidsOf(name);
  servers.push_back(floor.ServerPid());
  placement.Pin(servers);
  report["placement"] = placement.description();
  std::cout << "  placement: " << placement.description() << "\n\n" << std::flush;
  Samples samples;
  for (int done = 0; done < flags.iterations; done += kBlock) {
    RunCyclesAndFloor(**client, floor, std::min(kBlock, flags.iterations - done), &samples);
  }
  placement.Restore();
  floor.Exec("DROP TABLE dlock_bench_floor");
  return samples;
}

// Prints the table and the ratios, and fills `report` with them.
void Report(const Samples& samples, const Handoff& handoff, nlohmann::json& report) {
  const struct {
    const char *key, *label;
    const std::vector<double>& us;
  } rows[] = {{"cycle", "cycle: TryAcquire + Release", samples.cycle},
              {"cycle_acquire", "  acquire half", samples.acquire},
              {"cycle_release", "  release half", samples.release},
              {"floor", "floor: 2 single-row writes", samples.floor},
              {"write_rt", "  one write round trip", samples.write},
              {"ping_floor", "Client::Ping x 2 (reference)", samples.ping_floor},
              {"ping_write_rt", "  one Ping", samples.ping_write},
              {"handoff", "hand-off (Release returned->grant)", handoff.from_return_us},
              {"handoff_from_call", "  from the Release call", handoff.from_call_us}};
  auto& results = report["results"];
  char line[200];
  std::snprintf(line, sizeof line, "%-32s %10s %10s %10s %6s\n", "", "p50 µs", "p99 µs", "mean µs",
                "n");
  std::cout << line;
  for (const auto& row : rows) {
    const auto& r = results[row.key] = SummaryJson(row.us);
    std::snprintf(line, sizeof line, "%-32s %10.1f %10.1f %10.1f %6zu\n", row.label,
                  r["p50_us"].get<double>(), r["p99_us"].get<double>(), r["mean_us"].get<double>(),
                  r["n"].get<std::size_t>());
    std::cout << line;
  }
  const double mean_count =
      std::accumulate(handoff.counts.begin(), handoff.counts.end(), 0.0) / handoff.counts.size();
  double worst = 0;
  std::string counts;
  for (int c : handoff.counts) {
    worst = std::max(worst, std::abs(c - mean_count) / mean_count);
    counts += (counts.empty() ? "" : " ") + std::to_string(c);
  }
  results["grants_per_process"] = handoff.counts;
  std::cout << "grants per process: " << counts << " (mean " << mean_count << ")\n\n";
  ReportRatios(worst * 100, report);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "--contender") return Contender(argc, argv);
  const Flags flags = ParseFlags(argc, argv);
  const std::string uri = flags.uri.empty() ? StartServer() : flags.uri;
  auto parsed = dlock::internal::ParseUri(uri);
  if (!parsed.ok()) Die(parsed.status().message(), kExitUsage);

  nlohmann::json report;
  report["command"] = std::vector<std::string>(argv, argv + argc);
  report["server"] = parsed->Redacted();
  report["iterations"] = flags.iterations;
  report["handoff_seconds"] = flags.seconds;
  report["contenders"] = flags.contenders;
  const Samples samples = RunCyclePhase(uri, *parsed, flags, report);
  const Handoff handoff = RunHandoff(uri, flags);
  Report(samples, handoff, report);
  if (!flags.json_path.empty()) {
    std::ofstream out(flags.json_path);
    out << report.dump(2) << '\n';
    if (!out.flush()) Die("cannot write " + flags.json_path);
  }
  return 0;
}
