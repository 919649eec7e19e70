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

#include "backends/mariadb/mariadb_backend.h"
#include "core/credentials.h"
#include "core/registry.h"
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
    "usage: dlock_bench_mariadb [--uri URI] [--iterations N] [--seconds S] "
    "[--contenders K] [--keys N] [--json FILE]";

struct Flags {
  std::string uri;  // empty: start a server of our own
  int iterations = 2000;
  int seconds = 5;
  int contenders = 4;
  int keys = 1000;
  std::string json_path;
};

[[noreturn]] void Die(const std::string& message, int code = 1) {
  std::cerr << "dlock_bench_mariadb: " << message << '\n';
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
                 : arg == "--keys"        ? &flags.keys
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
  char tmpl[] = "/tmp/dlock-bench-mariadb.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) Die(std::string("mkdtemp: ") + std::strerror(errno));
  static std::string dir;
  dir = std::string(tmpl) + "/server";
  static const std::string script = DLOCK_SOURCE_DIR "/scripts/servers/mariadb.sh";
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

struct Samples {
  std::vector<double> cycle, acquire, release, floor, write, raw_floor, raw_write;
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
        &Samples::floor, &Samples::write);
  };
  auto raw_pair = [&] { pair([&] { raw.Write(); }, &Samples::raw_floor, &Samples::raw_write); };
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
    // Neighbours in token order are consecutive grants (the key is held by
    // one at a time); only while everybody was still contending.
    if (next.acquired_ns >= end_ns) continue;
    result.from_call_us.push_back((next.acquired_ns - prev.release_start_ns) / 1000.0);
    result.from_return_us.push_back((next.acquired_ns - prev.release_end_ns) / 1000.0);
  }
  return result;
}

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

  Samples samples;
  Handoff handoff;
  {
    Floor floor(uri);
    utsname uts{};
    uname(&uts);
    report["machine"] = {{"cpus", std::thread::hardware_concurrency()}, {"kernel", uts.release}};
    report["mariadb"] = {{"version", floor.Setting("version")},
                         {"innodb_flush_log_at_trx_commit",
                          floor.Setting("innodb_flush_log_at_trx_commit")},
                         {"innodb_flush_method", floor.Setting("innodb_flush_method")}};
    std::cout << "dlock MariaDB benchmark\n  machine:  " << report["machine"]["cpus"]
              << " vCPU, Linux " << uts.release << "\n  server:   " << parsed->Redacted()
              << " (MariaDB " << floor.Setting("version") << ", innodb_flush_log_at_trx_commit="
              << floor.Setting("innodb_flush_log_at_trx_commit")
              << ")\n  runs:     " << flags.iterations << " cycles after " << kBlock
              << " warm-up; hand-off " << flags.contenders << " processes x " << flags.seconds
              << " s\n\n"
              << std::flush;
    auto client = dlock::Client::Connect(uri);
    if (!client.ok()) Die("cannot open " + parsed->Redacted() + ": " + client.status().message());
    RunCyclesAndFloor(**client, floor, kBlock, nullptr);
    for (int done = 0; done < flags.iterations; done += kBlock) {
      RunCyclesAndFloor(**client, floor, std::min(kBlock, flags.iterations - done), &samples);
    }
    floor.Exec("DROP TABLE dlock_bench_floor");
  }
  handoff = RunHandoff(uri, flags);
  const ManyKeys many = RunManyKeys(uri, flags.keys);
  report["keys"] = flags.keys;

  const struct {
    const char *key, *label;
    const std::vector<double>& us;
  } rows[] = {{"cycle", "cycle: TryAcquire + Release", samples.cycle},
              {"cycle_acquire", "  acquire half", samples.acquire},
              {"cycle_release", "  release half", samples.release},
              {"floor", "floor: 2 single-row writes", samples.floor},
              {"write_rt", "  one write round trip", samples.write},
              {"raw_floor", "raw: 2 writes, own connection", samples.raw_floor},
              {"raw_write_rt", "  one raw write round trip", samples.raw_write},
              {"handoff", "hand-off (Release returned->grant)", handoff.from_return_us},
              {"handoff_from_call", "  from the Release call", handoff.from_call_us},
              {"many_keys_acquire", "many keys: one grant", many.acquire_us},
              {"many_keys_release", "  one release", many.release_us},
              {"many_keys_renew", "  one renewal of them all", many.renew_us}};
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

  const double cycle_ratio =
      results["cycle"]["p50_us"].get<double>() / results["floor"]["p50_us"].get<double>();
  const double handoff_ratio =
      results["handoff"]["p50_us"].get<double>() / results["write_rt"]["p50_us"].get<double>();
  const struct {
    const char *key, *label;
    double value, target;
    const char* unit;
  } ratios[] = {
      {"cycle_over_floor_p50", "cycle p50 / floor p50", cycle_ratio, 1.3, "x"},
      {"handoff_over_write_rt_p50", "hand-off p50 / write RT p50", handoff_ratio, 3.0, "x"},
      {"grant_count_spread", "max |count - mean| / mean", worst * 100, 15.0, "%"},
  };
  for (const auto& r : ratios) {
    const bool pass = r.value <= r.target;
    report["ratios"][r.key] = {{"value", r.value}, {"target", r.target}, {"pass", pass}};
    std::snprintf(line, sizeof line, "%-32s %6.2f%s  target <= %.1f%s  %s\n", r.label, r.value,
                  r.unit, r.target, r.unit, pass ? "PASS" : "MISS");
    std::cout << line;
  }
  const double raw_cycle_ratio =
      results["cycle"]["p50_us"].get<double>() / results["raw_floor"]["p50_us"].get<double>();
  const double raw_handoff_ratio =
      results["handoff"]["p50_us"].get<double>() / results["raw_write_rt"]["p50_us"].get<double>();
  report["reference"] = {{"cycle_over_raw_floor_p50", raw_cycle_ratio},
                         {"handoff_over_raw_write_rt_p50", raw_handoff_ratio}};
  std::snprintf(line, sizeof line,
                "(against the raw connection: cycle %.2fx its floor, hand-off %.2fx its write RT)\n",
                raw_cycle_ratio, raw_handoff_ratio);
  std::cout << line;
  if (!flags.json_path.empty()) {
    std::ofstream out(flags.json_path);
    out << report.dump(2) << '\n';
    if (!out.flush()) Die("cannot write " + flags.json_path);
  }
  return 0;
}
