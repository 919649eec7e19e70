#include "cli/chaos_cmd.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/common.h"
#include "core/duration.h"
#include "core/uri.h"
#include "harness/linked_cluster.h"
#include "harness/member_faults.h"
#include "harness/report.h"
#include "harness/runner.h"
#include "harness/worker.h"

namespace dlock::cli {
namespace {

using nlohmann::json;

// Exit codes of `dlock chaos` beyond the common ones (docs/cli.md).
constexpr int kExitViolations = 3;
constexpr int kExitRecoveryOnly = 4;

// The signal that stopped the campaign (SIGINT, SIGTERM): exit 128 + it.
std::atomic<int> stop_signal{0};

Result<std::vector<std::string>> ParseFaults(const std::string& text) {
  std::vector<std::string> out;
  if (text.empty() || text == "none") return out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    bool known = false;
    for (const char* k : harness::kFaultKinds) known = known || item == k;
    if (!known) {
      return InvalidArgumentError("--faults: unknown fault '" + item +
                                  "': accepted: pause, kill, partition, clock-step, delay, drop, "
                                  "store-restart, member-isolate, leader-isolate, leader-pause, "
                                  "leader-kill, leader-lag-kill (comma-separated), or none");
    }
    out.push_back(item);
  }
  return out;
}

std::string Redact(const std::string& uri) {
  if (uri.empty()) return "sqlite (a fresh file per run)";
  auto parsed = internal::ParseUri(uri);
  return parsed.ok() ? parsed->Redacted() : "(unparseable)";
}

json RunJson(const harness::RunResult& r, std::uint64_t seed, bool kept) {
  json checks = json::array();
  for (const auto& c : r.checks) {
    checks.push_back({{"id", c.id},
                      {"name", c.name},
                      {"verdict", std::string(harness::VerdictName(c.verdict))},
                      {"detail", c.detail},
                      {"violations", c.violations}});
  }
  json by_kind = json::object();
  for (const auto& [k, n] : r.counts.faults_by_kind) by_kind[k] = n;
  json j = {{"seed", seed},
            {"operations", r.counts.operations},
            {"grants", r.counts.grants},
            {"writes_admitted", r.counts.writes_admitted},
            {"faults_injected", r.counts.faults},
            {"faults_by_kind", by_kind},
            {"stale_writes_rejected", r.counts.stale_writes_rejected},
            {"violations", r.violations},
            {"recovery_failures", r.recovery_failures},
            {"checks", checks}};
  if (kept) j["dir"] = r.dir;
  return j;
}

void PrintChecks(const harness::RunResult& r) {
  for (const auto& c : r.checks) {
    std::cout << "    " << c.id << "  " << std::left;
    std::cout.width(8);
    std::cout << harness::VerdictName(c.verdict) << c.name << ": " << c.detail << '\n';
    for (const auto& v : c.violations) std::cout << "           - " << v << '\n';
  }
}

}  // namespace

int RunChaosWorker(const ChaosWorkerFlags& f) {
  auto ttl = internal::ParseDuration(f.ttl);
  if (!ttl.ok()) return Fail(ttl.status());
  harness::WorkerOptions o;
  o.id = f.id;
  o.incarnation = f.incarnation;
  o.key = f.key;
  o.resource = f.resource;
  o.fenced = !f.unfenced;
  o.ttl = *ttl;
  return harness::RunWorker(o);
}

namespace {

// The options every run of this invocation shares (each run adds its seed,
// directory and key), or why the flags are refused (exit 64).
Result<harness::RunOptions> SharedRunOptions(const ChaosFlags& f) {
  if (f.workload != "fenced" && f.workload != "unfenced") {
    return InvalidArgumentError("--workload '" + f.workload + "': accepted: fenced, unfenced");
  }
  harness::RunOptions o;
  DLOCK_ASSIGN_OR_RETURN(o.faults, ParseFaults(f.faults));
  auto duration = internal::ParseDuration(f.duration);
  if (!duration.ok()) return duration.status().WithContext("--duration");
  auto ttl = internal::ParseDuration(f.ttl);
  if (!ttl.ok()) return ttl.status().WithContext("--ttl");
  if (Status s = ValidateTtl(*ttl); !s.ok()) return s.WithContext("--ttl");
  if (*duration < *ttl * 4) {
    return InvalidArgumentError("--duration " + f.duration + " is too short for a ttl of " +
                                f.ttl + ": give at least 4 ttls");
  }
  if (f.runs < 1 || f.runs > 10'000) return InvalidArgumentError("--runs must be 1 to 10000");
  if (f.workers < 2 || f.workers > 64) return InvalidArgumentError("--workers must be 2 to 64");
  o.backend = f.backend;
  o.fenced = f.workload == "fenced";
  o.duration = *duration;
  o.ttl = *ttl;
  o.workers = f.workers;
  o.server_script = f.server_script;
  o.server_dir = f.server_dir;
  return o;
}

Result<std::uint64_t> ChaosSeed(const std::string& text) {
  if (text.empty()) return DefaultRandom()->Next() % 1'000'000'000;
  char* end = nullptr;
  errno = 0;
  const std::uint64_t seed = std::strtoull(text.c_str(), &end, 10);
  if (errno || end == text.c_str() || *end || text[0] == '-') {
    return InvalidArgumentError("--seed '" + text + "' is not a non-negative integer");
  }
  return seed;
}

// --time-limit: no run starts after it (the one in progress finishes).
Result<std::optional<std::chrono::milliseconds>> TimeLimit(const ChaosFlags& f) {
  if (f.time_limit.empty()) return std::optional<std::chrono::milliseconds>();
  auto limit = internal::ParseDuration(f.time_limit);
  if (!limit.ok()) return limit.status().WithContext("--time-limit");
  return std::optional<std::chrono::milliseconds>(*limit);
}

// What the runs of one invocation add up to.
struct ChaosTotals {
  int runs_done = 0, runs_violating = 0;
  bool out_of_time = false;  // --time-limit ended the campaign
  int operations = 0, faults = 0, stale = 0, violations = 0, recovery = 0;
  std::map<std::string, int> by_kind;
  json runs = json::array();
  std::optional<harness::RunResult> for_report;  // the last failing run, else the last

  void Add(const harness::RunResult& r) {
    ++runs_done;
    runs_violating += r.violations > 0;
    operations += r.counts.operations;
    faults += r.counts.faults;
    stale += r.counts.stale_writes_rejected;
    violations += r.violations;
    recovery += r.recovery_failures;
    for (const auto& [k, n] : r.counts.faults_by_kind) by_kind[k] += n;
  }
};

void PrintRun(const ChaosFlags& f, int i, std::uint64_t seed, const harness::RunResult& r,
              const std::string& kept_dir) {
  std::cout << "run " << i + 1 << "/" << f.runs << " seed " << seed << ": "
            << r.counts.operations << " operations, " << r.counts.faults << " faults, "
            << r.counts.stale_writes_rejected << " stale writes rejected, " << r.violations
            << " violations"
            << (r.recovery_failures ? ", " + std::to_string(r.recovery_failures) +
                                          " recovery failures"
                                    : "")
            << (kept_dir.empty() ? "" : "  (kept: " + kept_dir + ")") << '\n';
}

// Run `i` of the invocation, in a directory of its own under `base`;
// returns an exit code, kExitOk to go on.
int OneRun(const ChaosFlags& f, harness::RunOptions o, const std::filesystem::path& base,
           std::uint64_t seed, int i, ChaosTotals& totals) {
  std::string dir = (base / ("dlock-chaos-" + std::to_string(seed) + ".XXXXXX")).string();
  if (!::mkdtemp(dir.data())) {
    return Fail(kExitCantCreate, "cannot create a run directory in " + base.string());
  }
  o.seed = seed;
  o.dir = dir;
  o.key = "chaos/" + std::to_string(seed) + "/counter";
  if (o.cluster) {
    if (const Status s = o.cluster->SetKey(o.key); !s.ok()) return Fail(s);
  }
  auto result = harness::RunOnce(o);
  if (!result.ok()) return Fail(result.status().WithContext("chaos run " + std::to_string(i + 1)));
  const bool failed = result->violations > 0 || result->recovery_failures > 0;
  // A failing fenced run is a finding: keep everything. The unfenced
  // control is expected to fail; keep it only on request.
  const bool keep = f.keep || (failed && o.fenced);
  std::error_code ec;
  if (!keep) std::filesystem::remove_all(dir, ec);
  if (keep && o.cluster) {
    if (const Status s = o.cluster->CopyLogsTo(dir + "/cluster-logs"); !s.ok()) {
      std::cerr << "dlock chaos: " << s.message() << '\n';
    }
  }
  totals.Add(*result);
  totals.runs.push_back(RunJson(*result, seed, keep));
  if (!f.json) {
    PrintRun(f, i, seed, *result, keep ? dir : "");
    if (failed || f.runs == 1) PrintChecks(*result);
  }
  if (!f.report.empty() && (!totals.for_report || failed)) totals.for_report = std::move(*result);
  return kExitOk;
}

// The report, the totals (JSON or text) and the exit code.
int Finish(const ChaosFlags& f, std::uint64_t seed, const ChaosTotals& t) {
  if (!f.report.empty() && t.for_report) {
    harness::ReportContext ctx;
    ctx.title = "dlock chaos: " + Redact(f.backend) + ", " + f.workload + ", seed " +
                std::to_string(seed);
    ctx.backend = Redact(f.backend);
    ctx.seed = seed;
    if (Status s = harness::WriteReport(f.report, *t.for_report, ctx); !s.ok()) {
      return Fail(kExitCantCreate, s.message());
    }
  }
  if (f.json) {
    json by_kind = json::object();
    for (const auto& [k, n] : t.by_kind) by_kind[k] = n;
    json out = {{"seed", seed},           {"backend", Redact(f.backend)},
                {"workload", f.workload}, {"runs", t.runs_done},
                {"runs_with_violations", t.runs_violating},
                {"stopped_by_time_limit", t.out_of_time},
                {"operations", t.operations}, {"faults_injected", t.faults},
                {"faults_by_kind", by_kind},  {"stale_writes_rejected", t.stale},
                {"violations", t.violations}, {"recovery_failures", t.recovery},
                {"run_results", t.runs}};
    std::cout << out.dump(2) << '\n';
  } else {
    if (t.out_of_time) std::cout << "--time-limit " << f.time_limit << " reached\n";
    std::cout << "total: " << t.runs_done << " runs (" << t.runs_violating
              << " with violations), " << t.operations << " operations, " << t.faults
              << " faults, " << t.stale << " stale writes rejected, " << t.violations
              << " violations, " << t.recovery << " recovery failures (seed " << seed
              << "; replay with --seed " << seed << ")\n";
  }
  if (t.violations > 0) return kExitViolations;
  if (t.recovery > 0) return kExitRecoveryOnly;
  return kExitOk;
}

}  // namespace

// Member faults run on a cluster started here, with every link between its
// members through a fault proxy (harness/linked_cluster.h); null without.
Result<std::unique_ptr<harness::LinkedCluster>> StartClusterIfWanted(
    const ChaosFlags& f, const harness::RunOptions& o, const std::filesystem::path& base,
    std::uint64_t seed) {
  if (std::none_of(o.faults.begin(), o.faults.end(), harness::IsMemberFault)) {
    return std::unique_ptr<harness::LinkedCluster>();
  }
  if (f.server_script.empty() || !f.backend.empty()) {
    return InvalidArgumentError(
        "member faults run on a cluster dlock chaos starts itself: give --server-script "
        "scripts/servers/zookeeper.sh, and no --backend");
  }
  const auto wants = [&](std::string_view kind) {
    return std::find(o.faults.begin(), o.faults.end(), kind) != o.faults.end();
  };
  // Refused before any member starts.
  const auto playable = [&](const harness::LinkedCluster& cluster) -> Status {
    if (cluster.has_links() && wants("leader-lag-kill")) {
      return InvalidArgumentError(
          "leader-lag-kill is for leader-follower stores (scripts/servers/redis.sh): a quorum "
          "store replicates a write before it grants");
    }
    if (!cluster.has_links() && (wants("member-isolate") || wants("leader-isolate"))) {
      return InvalidArgumentError(f.server_script +
                                  " starts no links between members to cut: member-isolate "
                                  "and leader-isolate need etcd.sh or zookeeper.sh");
    }
    if (!cluster.has_links() &&
        std::any_of(o.faults.begin(), o.faults.end(), harness::NeedsProxy)) {
      return InvalidArgumentError(
          "partition, delay and drop need a proxy per worker, which a leader-follower store's "
          "clients (who find the leader themselves) do not have here");
    }
    return Status::Ok();
  };
  return harness::LinkedCluster::Start(
      f.server_script, (base / ("dlock-chaos-cluster-" + std::to_string(seed))).string(),
      playable);
}

// --store-params: query parameters for the URI a server script printed.
Result<std::string> WithStoreParams(std::string uri, const std::string& params) {
  if (params.empty()) return uri;
  if (params.find_first_of("?# \t\n") != std::string::npos || params.front() == '&') {
    return InvalidArgumentError("--store-params '" + params +
                                "': give NAME=VALUE pairs joined by &, e.g. "
                                "wait_replicas=1&wait_timeout=1s");
  }
  uri += (uri.find('?') == std::string::npos ? "?" : "&") + params;
  auto store = OpenStore(uri);
  if (!store.ok()) return store.status().WithContext("--store-params");
  return uri;
}

int RunChaos(const ChaosFlags& flags) {
  ChaosFlags f = flags;
  // As on every command: --backend, else $DLOCK_BACKEND (which is also how
  // dlock hands a postgres:// or etcd:// store to dlock-full); with
  // neither, a fresh SQLite file in each run's directory.
  // Member faults bring their own cluster, whatever $DLOCK_BACKEND says.
  const auto faults = ParseFaults(f.faults);
  const bool own_cluster =
      faults.ok() && std::any_of(faults->begin(), faults->end(), harness::IsMemberFault);
  if (const char* env = std::getenv("DLOCK_BACKEND");
      f.backend.empty() && env != nullptr && !own_cluster) {
    f.backend = env;
  }
  auto options = SharedRunOptions(f);
  if (!options.ok()) return Fail(options.status());
  auto seed = ChaosSeed(f.seed);
  if (!seed.ok()) return Fail(seed.status());
  auto time_limit = TimeLimit(f);
  if (!time_limit.ok()) return Fail(time_limit.status());
  if (!f.backend.empty()) {
    // Fail early, with the usual message, if the store cannot be opened.
    auto store = OpenStore(f.backend);
    if (!store.ok()) return Fail(store.status());
  }
  std::error_code ec;
  const std::filesystem::path base =
      f.dir.empty() ? std::filesystem::temp_directory_path(ec) : std::filesystem::path(f.dir);
  if (ec || !std::filesystem::is_directory(base)) {
    return Fail(kExitCantCreate, "--dir " + base.string() + " is not a directory");
  }
  // Ctrl-C or SIGTERM ends the run in progress as its time would, and
  // the campaign after it: workers and a cluster are stopped, not left.
  struct sigaction stop{};
  stop.sa_handler = [](int signal) {
    stop_signal = signal;
    harness::RequestStop();
  };
  ::sigaction(SIGINT, &stop, nullptr);
  ::sigaction(SIGTERM, &stop, nullptr);
  auto cluster = StartClusterIfWanted(f, *options, base, *seed);
  if (!cluster.ok()) return Fail(cluster.status());
  if (!f.store_params.empty() && !*cluster) {
    return Fail(InvalidArgumentError("--store-params goes with member faults (a cluster dlock "
                                     "chaos starts); with --backend, put them in its URI"));
  }
  if (*cluster) {
    auto uri = WithStoreParams((*cluster)->uri(), f.store_params);
    if (!uri.ok()) return Fail(uri.status());
    options->cluster = cluster->get();
    options->backend = f.backend = *uri;
  }
  if (!f.json) {
    std::cout << "dlock chaos: " << Redact(f.backend) << ", " << f.workload << " workload, faults "
              << (options->faults.empty() ? "none" : f.faults) << ", " << f.workers
              << " workers, ttl " << f.ttl << ", " << f.runs << " run(s) of " << f.duration
              << ", seed " << *seed << std::endl;
  }
  ChaosTotals totals;
  const auto started = std::chrono::steady_clock::now();
  for (int i = 0; i < f.runs && !harness::StopRequested(); ++i) {
    if (*time_limit && std::chrono::steady_clock::now() - started >= **time_limit) {
      totals.out_of_time = true;
      break;
    }
    if (options->cluster != nullptr) {
      if (Status s = options->cluster->Heal(); !s.ok()) return Fail(s);
    }
    const int rc = OneRun(f, *options, base, *seed + static_cast<std::uint64_t>(i), i, totals);
    if (rc != kExitOk) return rc;
  }
  if (harness::StopRequested()) {
    return Fail(128 + stop_signal, "chaos interrupted; its workers and cluster are stopped");
  }
  return Finish(f, *seed, totals);
}

void AddChaosCommands(CLI::App& app, Commands& commands) {
  auto chaos = std::make_shared<ChaosFlags>();
  CLI::App* cmd = app.add_subcommand(
      "chaos", "Run workers against a store while injecting faults, and check the history");
  cmd->add_option("--backend", chaos->backend,
                  "store URI (default: $DLOCK_BACKEND, else a fresh SQLite file in each run's "
                  "directory)");
  cmd->add_option("--workload", chaos->workload,
                  "fenced (writes checked by a fence) or unfenced (the positive control)")
      ->capture_default_str();
  cmd->add_option("--faults", chaos->faults,
                  "comma-separated: pause, kill, partition, clock-step, delay, drop, "
                  "store-restart, member-isolate, leader-isolate, leader-pause, leader-kill, "
                  "leader-lag-kill; or none")
      ->capture_default_str();
  cmd->add_option("--duration", chaos->duration, "length of each run")->capture_default_str();
  cmd->add_option("--ttl", chaos->ttl, "the workers' lease")->capture_default_str();
  cmd->add_option("--seed", chaos->seed, "replay a schedule (default: random, printed)");
  cmd->add_option("--runs", chaos->runs, "runs, with seeds seed, seed+1, ...")
      ->capture_default_str();
  cmd->add_option("--workers", chaos->workers, "worker processes")->capture_default_str();
  cmd->add_flag("--json", chaos->json, "print the results as JSON");
  cmd->add_option("--report", chaos->report,
                  "write an HTML report (timeline + checks) of the last failing, else last, run");
  cmd->add_option("--dir", chaos->dir, "where run directories go (default: $TMPDIR)");
  cmd->add_option("--server-script", chaos->server_script,
                  "store-restart: the store's script (scripts/servers/<store>.sh); member "
                  "faults: the script that starts the cluster");
  cmd->add_option("--server-dir", chaos->server_dir,
                  "store-restart: the directory the script started the store in");
  cmd->add_option("--store-params", chaos->store_params,
                  "member faults: query parameters for the URI the server script prints "
                  "(e.g. wait_replicas=1&wait_timeout=1s)");
  cmd->add_option("--time-limit", chaos->time_limit,
                  "start no run after this long (e.g. 2h with --runs 200): a bounded campaign");
  cmd->add_flag("--keep", chaos->keep,
                "keep every run's directory (failing fenced runs are always kept)");
  cmd->footer(
      "Exit status: 0 no violation; 3 safety violations; 4 only recovery failures; 64 usage; "
      "69 store unavailable; 128+N stopped by signal N (SIGINT, SIGTERM).");
  commands.push_back({cmd, [chaos] { return RunChaos(*chaos); }});

  // One worker of a chaos run; the store comes in $DLOCK_BACKEND, never argv.
  auto worker = std::make_shared<ChaosWorkerFlags>();
  cmd = app.add_subcommand("chaos-worker", "one worker of 'dlock chaos'");
  cmd->group("");  // hidden
  cmd->add_option("--id", worker->id)->required();
  cmd->add_option("--incarnation", worker->incarnation);
  cmd->add_option("--key", worker->key)->required();
  cmd->add_option("--resource", worker->resource)->required();
  cmd->add_option("--ttl", worker->ttl)->required();
  cmd->add_flag("--unfenced", worker->unfenced);
  commands.push_back({cmd, [worker] { return RunChaosWorker(*worker); }});
}

}  // namespace dlock::cli
