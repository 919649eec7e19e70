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
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "core/uri.h"
#include "cycle_and_handoff.h"
#include "dlock/client.h"
#include "sql_bench_setup.h"

namespace {

using dlock::bench::CycleSamples;
using dlock::bench::Die;
using dlock::bench::Flags;
using dlock::bench::Handoff;
using dlock::bench::kExitUsage;
constexpr int kBlock = 100;
constexpr const char* kUsage =
    "usage: dlock_bench_postgres [--uri URI] [--iterations N] [--seconds S] "
    "[--contenders K] [--json FILE]";

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

// The targets' ratios (against the floor) and the reference ones (against
// Ping), printed and put in `report`.
void ReportRatios(double spread_percent, nlohmann::json& report) {
  using dlock::bench::PrintRatios;
  const auto& results = report["results"];
  auto p50 = [&](const char* key) { return results[key]["p50_us"].get<double>(); };
  PrintRatios(
      {{"cycle_over_floor_p50", "cycle p50 / floor p50", p50("cycle") / p50("floor"), 1.3, "x"},
       {"handoff_over_write_rt_p50", "hand-off p50 / write RT p50",
        p50("handoff") / p50("write_rt"), 3.0, "x"},
       {"grant_count_spread", "max |count - mean| / mean", spread_percent, 15.0, "%"}},
      report);
  const double ping_cycle = p50("cycle") / p50("ping_floor");
  const double ping_handoff = p50("handoff") / p50("ping_write_rt");
  report["reference"] = {{"cycle_over_ping_floor_p50", ping_cycle},
                         {"handoff_over_ping_rt_p50", ping_handoff},
                         {"ping_over_write_rt_p50", p50("ping_write_rt") / p50("write_rt")}};
  char line[200];
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
CycleSamples RunCyclePhase(const std::string& uri, const dlock::internal::Uri& parsed,
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
  // (b) is the floor, (b') Client::Ping.
  const std::function<void()> write = [&] { floor.Write(); };
  const std::function<void()> ping = [&] {
    if (auto s = (*client)->Ping(); !s.ok()) Die("floor: Ping: " + s.message());
  };
  dlock::bench::RunCyclesAndFloor(**client, write, ping, kBlock, nullptr);
  Placement placement;
  std::vector<pid_t> servers = floor.ServerPidsOf(name);
  servers.push_back(floor.ServerPid());
  placement.Pin(servers);
  report["placement"] = placement.description();
  std::cout << "  placement: " << placement.description() << "\n\n" << std::flush;
  CycleSamples samples;
  for (int done = 0; done < flags.iterations; done += kBlock) {
    dlock::bench::RunCyclesAndFloor(**client, write, ping,
                                    std::min(kBlock, flags.iterations - done), &samples);
  }
  placement.Restore();
  floor.Exec("DROP TABLE dlock_bench_floor");
  return samples;
}

// Prints the table and the ratios, and fills `report` with them.
void Report(const CycleSamples& samples, const Handoff& handoff, nlohmann::json& report) {
  auto& results = report["results"];
  dlock::bench::PrintRows(
      {{"cycle", "cycle: TryAcquire + Release", samples.cycle},
       {"cycle_acquire", "  acquire half", samples.acquire},
       {"cycle_release", "  release half", samples.release},
       {"floor", "floor: 2 single-row writes", samples.floor},
       {"write_rt", "  one write round trip", samples.write},
       {"ping_floor", "Client::Ping x 2 (reference)", samples.other_floor},
       {"ping_write_rt", "  one Ping", samples.other_write},
       {"handoff", "hand-off (Release returned->grant)", handoff.from_return_us},
       {"handoff_from_call", "  from the Release call", handoff.from_call_us}},
      results);
  ReportRatios(dlock::bench::GrantSpreadPercent(handoff.counts, results), report);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "--contender")
    return dlock::bench::Contender(argc, argv);
  const Flags flags = dlock::bench::ParseFlags(argc, argv, kUsage);
  const std::string uri = flags.uri.empty() ? dlock::bench::StartOwnServer("postgres") : flags.uri;
  auto parsed = dlock::internal::ParseUri(uri);
  if (!parsed.ok()) Die(parsed.status().message(), kExitUsage);

  nlohmann::json report;
  report["command"] = std::vector<std::string>(argv, argv + argc);
  report["server"] = parsed->Redacted();
  report["iterations"] = flags.iterations;
  report["handoff_seconds"] = flags.seconds;
  report["contenders"] = flags.contenders;
  const CycleSamples samples = RunCyclePhase(uri, *parsed, flags, report);
  const Handoff handoff = dlock::bench::RunHandoff(uri, flags.seconds, flags.contenders,
                                                   dlock::bench::TokenSteps::kByOne);
  Report(samples, handoff, report);
  if (!flags.json_path.empty()) {
    std::ofstream out(flags.json_path);
    out << report.dump(2) << '\n';
    if (!out.flush()) Die("cannot write " + flags.json_path);
  }
  return 0;
}
