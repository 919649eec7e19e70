// dlock_bench_mariadb: what a lock on MariaDB costs, next to what any lock
// on that server must pay. One run, one server (its own, started with
// scripts/servers/mariadb.sh, unless --uri names one):
//
//  (a) cycle    Client::TryAcquire(key, ttl 30s) then Lease::Release(),
//               uncontended, one Client (its renewal thread running), timed
//               per iteration; the acquire and release halves too.
//  (b) floor    two single-row write round trips per iteration on the
//               connection dlock itself uses (Client::Ping, twice: `INSERT
//               ... ON DUPLICATE KEY UPDATE` of one row of the keys table,
//               autocommit, InnoDB with the server's
//               innodb_flush_log_at_trx_commit). "write RT" is one of them.
//  (b') raw     the same kind of write (a two-column row) on a plain
//               Connector/C connection of its own, shown for reference.
//  (c) hand-off 4 contender processes (this binary again, --contender) loop
//               Acquire(key, wait) / Release on one key for --seconds. The
//               hand-off latency of grant i+1 is its Acquire's return minus
//               the moment grant i's Release returned (the key was free from
//               then on; measured on CLOCK_MONOTONIC, which all processes
//               share); grants are ordered by token (one sequence for the
//               whole store, so consecutive grants of the key are neighbours
//               in token order, not token + 1). Also shown from the Release
//               call; and the number of grants per process.
//  (d) many keys one Client acquires --keys distinct keys, renews them all
//               (Backend::Renew: one call for the batch, timed), and
//               releases them: the per-key cycle, and the batch's cost.
//
// Why (b) is the floor: a grant must be durable before TryAcquire returns (or
// a crash could reissue its token), and a release must be a committed write
// (or the key stays held until its TTL): two single-row write round trips
// on the same connection is the least any lock on this server does.
//
// (a), (b) and (b') take turns, one iteration each in a rotating order, so
// that drift on a noisy machine hits all alike. Targets: cycle p50 <= 1.3 x
// floor p50; hand-off p50 <= 3 x write RT p50; every process's grant count
// within +-15% of the mean. Exit status: 0 when everything was measured
// (MISS included), 64 for a bad flag, 1 when something could not be
// measured.
#include <mysql.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
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

#include "backends/mariadb/mariadb_backend.h"
#include "bench_util.h"
#include "core/credentials.h"
#include "core/registry.h"
#include "core/uri.h"
#include "cycle_and_handoff.h"
#include "dlock/client.h"
#include "sql_bench_setup.h"

namespace {

using Clock = std::chrono::steady_clock;
using dlock::bench::CycleSamples;
using dlock::bench::Die;
using dlock::bench::Flags;
using dlock::bench::Handoff;
using dlock::bench::kExitUsage;
using dlock::bench::MicrosBetween;
constexpr int kBlock = 100;
constexpr const char* kUsage =
    "usage: dlock_bench_mariadb [--uri URI] [--iterations N] [--seconds S] "
    "[--contenders K] [--keys N] [--json FILE]";

// ------------------------------------------------------------ (b) floor

class Floor {
 public:
  explicit Floor(const std::string& text) : mysql_(mysql_init(nullptr)) {
    auto uri = dlock::internal::ParseUri(text);
    if (!uri.ok() || !dlock::internal::ResolveCredentials(*uri).ok()) Die("floor: bad URI");
    auto options = dlock::mariadb::OptionsFromUri(*uri);
    if (!options.ok()) Die("floor: " + options.status().message());
    const dlock::mariadb::ConnectOptions& o = options->connect;
    const unsigned int tcp = MYSQL_PROTOCOL_TCP;
    mysql_optionsv(mysql_, MYSQL_OPT_PROTOCOL, &tcp);
    if (o.tls) {
      const my_bool on = 1;
      mysql_optionsv(mysql_, MYSQL_OPT_SSL_ENFORCE, &on);
      if (!o.tls_files.ca_file.empty()) mysql_optionsv(mysql_, MYSQL_OPT_SSL_CA, o.tls_files.ca_file.c_str());
      if (!o.tls_files.cert_file.empty()) {
        mysql_optionsv(mysql_, MYSQL_OPT_SSL_CERT, o.tls_files.cert_file.c_str());
        mysql_optionsv(mysql_, MYSQL_OPT_SSL_KEY, o.tls_files.key_file.c_str());
      }
    }
    if (mysql_real_connect(mysql_, o.host.c_str(), o.user.c_str(),
                           o.has_password ? o.password.c_str() : nullptr, o.database.c_str(),
                           o.port, nullptr, 0) == nullptr) {
      Die(std::string("floor: connect: ") + mysql_error(mysql_));
    }
    Exec("CREATE TABLE IF NOT EXISTS dlock_bench_floor (k INT PRIMARY KEY, v BIGINT NOT NULL) "
         "ENGINE=InnoDB");
  }
  ~Floor() { mysql_close(mysql_); }
  Floor(const Floor&) = delete;
  Floor& operator=(const Floor&) = delete;

  // One single-row write, committed (autocommit) before it returns.
  void Write() {
    Exec("INSERT INTO dlock_bench_floor (k, v) VALUES (1, " + std::to_string(++value_) +
         ") ON DUPLICATE KEY UPDATE v = VALUES(v)");
  }
  std::string Setting(const char* name) {
    if (mysql_query(mysql_, (std::string("SELECT @@") + name).c_str()) != 0) return "?";
    MYSQL_RES* r = mysql_store_result(mysql_);
    std::string v = "?";
    if (MYSQL_ROW row = r != nullptr ? mysql_fetch_row(r) : nullptr; row != nullptr && row[0]) v = row[0];
    mysql_free_result(r);
    return v;
  }
  void Exec(const std::string& sql) {
    if (mysql_real_query(mysql_, sql.data(), sql.size()) != 0) {
      Die("floor: " + sql + ": " + mysql_error(mysql_));
    }
  }

 private:
  MYSQL* mysql_;
  std::int64_t value_ = 0;
};

// ------------------------------------------------------------ (d) many keys

struct ManyKeys {
  std::vector<double> acquire_us, release_us, renew_us;
};

// One backend holds `n` distinct keys at once: each grant, one renewal of
// them all (one call), each release; three rounds.
ManyKeys RunManyKeys(const std::string& uri, int n) {
  dlock::internal::BackendParams params;
  auto backend = dlock::internal::OpenBackend(uri, params);
  if (!backend.ok()) Die("many keys: " + backend.status().message());
  ManyKeys result;
  for (int round = 0; round < 3; ++round) {
    std::vector<dlock::LeaseRequest> leases;
    for (int i = 0; i < n; ++i) {
      leases.push_back({"bench/many/" + std::to_string(getpid()) + "/" + std::to_string(i),
                        dlock::OwnerId(7, static_cast<std::uint64_t>(round * n + i + 1)),
                        std::chrono::seconds(30)});
      const auto start = Clock::now();
      auto granted = (*backend)->TryAcquire(leases.back());
      if (!granted.ok() || !granted->granted) Die("many keys: a key was not granted");
      result.acquire_us.push_back(MicrosBetween(start, Clock::now()));
    }
    const auto start = Clock::now();
    for (const dlock::Status& s : (*backend)->Renew(leases)) {
      if (!s.ok()) Die("many keys: renew: " + s.message());
    }
    result.renew_us.push_back(MicrosBetween(start, Clock::now()));
    for (const dlock::LeaseRequest& l : leases) {
      const auto released = Clock::now();
      if (auto s = (*backend)->Release(l.key, l.owner); !s.ok()) Die("many keys: " + s.message());
      result.release_us.push_back(MicrosBetween(released, Clock::now()));
    }
  }
  return result;
}

// (a), (b) and (b'), with the server described in `report`.
CycleSamples RunCyclePhase(const std::string& uri, const dlock::internal::Uri& parsed,
                           const Flags& flags, nlohmann::json& report) {
  Floor floor(uri);
  utsname uts{};
  uname(&uts);
  report["machine"] = {{"cpus", std::thread::hardware_concurrency()}, {"kernel", uts.release}};
  report["mariadb"] = {
      {"version", floor.Setting("version")},
      {"innodb_flush_log_at_trx_commit", floor.Setting("innodb_flush_log_at_trx_commit")},
      {"innodb_flush_method", floor.Setting("innodb_flush_method")}};
  std::cout << "dlock MariaDB benchmark\n  machine:  " << report["machine"]["cpus"]
            << " vCPU, Linux " << uts.release << "\n  server:   " << parsed.Redacted()
            << " (MariaDB " << floor.Setting("version") << ", innodb_flush_log_at_trx_commit="
            << floor.Setting("innodb_flush_log_at_trx_commit")
            << ")\n  runs:     " << flags.iterations << " cycles after " << kBlock
            << " warm-up; hand-off " << flags.contenders << " processes x " << flags.seconds
            << " s\n\n"
            << std::flush;
  auto client = dlock::Client::Connect(uri);
  if (!client.ok()) Die("cannot open " + parsed.Redacted() + ": " + client.status().message());
  // (b) is the floor, on dlock's own connection; (b') the raw connection.
  const std::function<void()> ping = [&] {
    if (auto s = (*client)->Ping(); !s.ok()) Die("floor: Ping: " + s.message());
  };
  const std::function<void()> raw = [&] { floor.Write(); };
  dlock::bench::RunCyclesAndFloor(**client, ping, raw, kBlock, nullptr);
  CycleSamples samples;
  for (int done = 0; done < flags.iterations; done += kBlock) {
    dlock::bench::RunCyclesAndFloor(**client, ping, raw, std::min(kBlock, flags.iterations - done),
                                    &samples);
  }
  floor.Exec("DROP TABLE dlock_bench_floor");
  return samples;
}

// Prints the table and the ratios, and fills `report` with them.
void Report(const CycleSamples& samples, const Handoff& handoff, const ManyKeys& many,
            nlohmann::json& report) {
  auto& results = report["results"];
  dlock::bench::PrintRows(
      {{"cycle", "cycle: TryAcquire + Release", samples.cycle},
       {"cycle_acquire", "  acquire half", samples.acquire},
       {"cycle_release", "  release half", samples.release},
       {"floor", "floor: 2 single-row writes", samples.floor},
       {"write_rt", "  one write round trip", samples.write},
       {"raw_floor", "raw: 2 writes, own connection", samples.other_floor},
       {"raw_write_rt", "  one raw write round trip", samples.other_write},
       {"handoff", "hand-off (Release returned->grant)", handoff.from_return_us},
       {"handoff_from_call", "  from the Release call", handoff.from_call_us},
       {"many_keys_acquire", "many keys: one grant", many.acquire_us},
       {"many_keys_release", "  one release", many.release_us},
       {"many_keys_renew", "  one renewal of them all", many.renew_us}},
      results);
  const double spread = dlock::bench::GrantSpreadPercent(handoff.counts, results);
  auto p50 = [&](const char* key) { return results[key]["p50_us"].get<double>(); };
  dlock::bench::PrintRatios(
      {{"cycle_over_floor_p50", "cycle p50 / floor p50", p50("cycle") / p50("floor"), 1.3, "x"},
       {"handoff_over_write_rt_p50", "hand-off p50 / write RT p50",
        p50("handoff") / p50("write_rt"), 3.0, "x"},
       {"grant_count_spread", "max |count - mean| / mean", spread, 15.0, "%"}},
      report);
  const double raw_cycle_ratio = p50("cycle") / p50("raw_floor");
  const double raw_handoff_ratio = p50("handoff") / p50("raw_write_rt");
  report["reference"] = {{"cycle_over_raw_floor_p50", raw_cycle_ratio},
                         {"handoff_over_raw_write_rt_p50", raw_handoff_ratio}};
  char line[200];
  std::snprintf(
      line, sizeof line,
      "(against the raw connection: cycle %.2fx its floor, hand-off %.2fx its write RT)\n",
      raw_cycle_ratio, raw_handoff_ratio);
  std::cout << line;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "--contender")
    return dlock::bench::Contender(argc, argv);
  const Flags flags = dlock::bench::ParseFlags(argc, argv, kUsage, {.keys = 1000});
  const std::string uri = flags.uri.empty() ? dlock::bench::StartOwnServer("mariadb") : flags.uri;
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
                                                   dlock::bench::TokenSteps::kInOrder);
  const ManyKeys many = RunManyKeys(uri, flags.keys);
  report["keys"] = flags.keys;
  Report(samples, handoff, many, report);
  if (!flags.json_path.empty()) {
    std::ofstream out(flags.json_path);
    out << report.dump(2) << '\n';
    if (!out.flush()) Die("cannot write " + flags.json_path);
  }
  return 0;
}
