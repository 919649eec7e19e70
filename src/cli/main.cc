// The `dlock` command: parses flags and hands each subcommand to its file.
#include <limits.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/bench_cmd.h"
#include "cli/chaos_cmd.h"
#include "cli/common.h"
#include "cli/demo_cmd.h"
#include "cli/exec.h"
#include "cli/fence_cmd.h"
#include "cli/plan_cmd.h"
#include "cli/status_cmd.h"
#include "core/registry.h"
#include "core/uri.h"

namespace {

// The store this command line names: --backend (before any `--`), else
// $DLOCK_BACKEND; empty for the default SQLite file.
std::string NamedStore(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--") break;  // the child's arguments
    if (a == "--backend" && i + 1 < argc) return argv[i + 1];
    if (a.starts_with("--backend=")) return std::string(a.substr(10));
  }
  const char* env = std::getenv("DLOCK_BACKEND");
  return env ? env : "";
}

// PostgreSQL and etcd are served by dlock-full (see core/registry.cc): hand
// it the whole command line before anything has happened. Returns only if
// it cannot be started.
int RunInFullBinary(char** argv, const std::string& scheme) {
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  std::string path = n > 0 ? std::string(self, static_cast<std::size_t>(n)) : "";
  path = path.substr(0, path.rfind('/') + 1) + "dlock-full";
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execv(path.c_str(), argv);
  return dlock::cli::Fail(dlock::cli::kExitUnavailable,
                          "the " + scheme + " store is served by " + path +
                              ", which cannot be run: " + std::strerror(errno));
}

constexpr const char* kBackendHelp =
    "store URI (default: $DLOCK_BACKEND, else the SQLite file "
    "$XDG_STATE_HOME/dlock/locks.db)";

}  // namespace

int main(int argc, char** argv) {
  using namespace dlock::cli;
  if (auto uri = dlock::internal::ParseUri(NamedStore(argc, argv));
      uri.ok() && dlock::internal::ServedByFullBinary(uri->scheme)) {
    return RunInFullBinary(argv, uri->scheme);
  }
  CLI::App app{"dlock: distributed locks with fencing tokens", "dlock"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "dlock 0.1.0");
  app.footer("Stores: " + dlock::internal::SupportedSchemes() +
             "\nExit codes: 64 usage, 65 stale token, 69 store unavailable, 75 gave up "
             "waiting, 79 lease lost.\nSee docs/cli.md.");

  ExecFlags exec_flags;
  CLI::App* exec = app.add_subcommand(
      "exec", "Run CMD while holding the lock KEY; DLOCK_KEY, DLOCK_TOKEN and DLOCK_BACKEND "
              "are set in its environment");
  exec->add_option("key", exec_flags.key, "lock key (1 to 1024 bytes)")->required();
  exec->add_option("command", exec_flags.command, "command and arguments, after --")
      ->required();
  exec->add_option("--ttl", exec_flags.ttl, "lease time to live (10ms..24h)")
      ->capture_default_str();
  auto* wait = exec->add_option("--wait", exec_flags.wait, "how long to wait for a held lock")
                   ->capture_default_str();
  exec->add_flag("--no-wait", exec_flags.no_wait, "fail at once (exit 75) if the lock is held")
      ->excludes(wait);
  exec->add_option("--kill-grace", exec_flags.kill_grace,
                   "SIGTERM the command this long before the lease could lapse (at most "
                   "ttl/4); SIGKILL at a fifth of it")
      ->capture_default_str();
  exec->add_option("--backend", exec_flags.backend, kBackendHelp);
  exec->add_option("--key", exec_flags.extra_keys,
                   "another key to hold too (repeatable): all are taken in one canonical "
                   "order, all or nothing; each token is in DLOCK_KEY_<i>/DLOCK_TOKEN_<i>")
      ->allow_extra_args(false);  // one value per --key, so that `--` still ends the options
  exec->add_option("--max-hold", exec_flags.max_hold,
                   "stop renewing after this long, so a hung command cannot keep the lock "
                   "forever (it is then terminated like any lost lease)");
  exec->add_option("--lock-delay", exec_flags.lock_delay,
                   "if this lease is lost (expired, dlock killed) rather than released, "
                   "nobody gets KEY until the store's clock is this far past the loss, so "
                   "writes still in flight drain first (0..24h; not on redlock)");
  exec->add_flag("--shared", exec_flags.shared,
                 "take the read side of a read-write lock: shared with other --shared "
                 "holders, never with a plain exec of KEY (the writer); a waiting writer "
                 "goes before readers that come after it");
  exec->add_option("--permits", exec_flags.permits,
                   "a semaphore: up to N holders of KEY at once, each with its own token "
                   "(everyone on KEY should use the same N)")
      ->capture_default_str();
  exec->add_option("--label", exec_flags.label,
                   "name this holder in 'dlock status' (default host:pid)");
  exec->footer(
      "Example: dlock exec nightly-report --ttl 30s -- sh -c 'make-report > out.csv'\n"
      "Exit status: the command's own; 64 usage; 69 store unavailable; 75 gave up waiting; "
      "79 lease lost (command terminated).");

  ExecFlags once_flags;
  once_flags.once = true;
  CLI::App* once = app.add_subcommand(
      "once", "Run CMD once for KEY across every caller: skip if KEY is done, else run it under "
              "the lock and record it done if it exits 0");
  once->add_option("key", once_flags.key, "run-once key, e.g. reconcile/2026-11-29")->required();
  once->add_option("command", once_flags.command, "command and arguments, after --")->required();
  once->add_option("--ttl", once_flags.ttl, "lease time to live (10ms..24h)")->capture_default_str();
  auto* once_wait = once->add_option("--wait", once_flags.wait, "how long to wait for the lock")
                        ->capture_default_str();
  once->add_flag("--no-wait", once_flags.no_wait, "fail at once (exit 75) if another caller runs it")
      ->excludes(once_wait);
  once->add_option("--kill-grace", once_flags.kill_grace, "as for exec")->capture_default_str();
  once->add_option("--max-hold", once_flags.max_hold, "as for exec");
  once->add_option("--lock-delay", once_flags.lock_delay, "as for exec");
  once->add_option("--backend", once_flags.backend, kBackendHelp);
  once->footer(
      "A failed run (non-zero exit) is not recorded, so the next caller runs it again; a crashed "
      "one is retried once its lease expires.\nExit status: 0 ran or already done; the "
      "command's own on failure; 64, 69, 75, 79 as for exec.");

  StatusFlags status_flags;
  CLI::App* status = app.add_subcommand("status", "List held locks: key, owner, token, time left");
  status->add_option("prefix", status_flags.prefix, "only keys starting with this");
  status->add_flag("--json", status_flags.json,
                   "print JSON: an array of holders, or with --waits the wait-for graph");
  status->add_flag("--waits", status_flags.waits,
                   "show who waits for whom, name any deadlock cycle, and tell it from "
                   "waiting behind a slow holder (exit 3 if there is a cycle)");
  status->add_option("--backend", status_flags.backend, kBackendHelp);

  LeaderFlags leader_flags;
  CLI::App* leader = app.add_subcommand(
      "leader", "Leader election on KEY: show the leader (term = its fencing token, and its "
                "label), or wait for a new one; campaign with 'dlock exec KEY --label VALUE'");
  leader->add_option("key", leader_flags.key, "election key")->required();
  leader->add_option("--after", leader_flags.after,
                     "wait for a leader whose term is above this one (0: any leader)");
  leader->add_option("--wait", leader_flags.wait, "how long --after waits")
      ->capture_default_str();
  leader->add_flag("--json", leader_flags.json, "print {term, owner, label, ttl_remaining_ms}");
  leader->add_option("--backend", leader_flags.backend, kBackendHelp);
  leader->footer(
      "Exit status: 0 a leader is shown; 75 no leader (or none newer than --after when --wait "
      "ran out); 64 usage; 69 store unavailable.");

  FenceWriteFlags fence_flags;
  CLI::App* fence = app.add_subcommand(
      "fence", "Resource-side guards that reject writes carrying a stale fencing token");
  fence->require_subcommand(1);
  CLI::App* fence_write = fence->add_subcommand(
      "write",
      "Replace DIR/NAME with standard input, atomically, only if the token is not older than "
      "the newest one this directory has accepted for the key (exit 65 if it is)");
  fence_write->add_option("name", fence_flags.name, "file name inside DIR")->required();
  fence_write->add_option("--dir", fence_flags.dir, "the fenced directory")->required();
  fence_write->add_option("--token", fence_flags.token, "fencing token (default: $DLOCK_TOKEN)");
  fence_write->add_option("--key", fence_flags.key, "lock key (default: $DLOCK_KEY)");
  fence_write->footer(
      "Example: dlock exec daily -- sh -c 'make-report | dlock fence write --dir /srv/reports "
      "daily.csv'\nExit status: 0 written; 64 usage; 65 stale token (file untouched); 73 the "
      "directory cannot be written.");

  DemoFlags demo_flags;
  CLI::App* demo = app.add_subcommand(
      "demo", "Play the stale-writer story live: a paused holder, an expired lease, a fence");
  demo->add_option("--backend", demo_flags.backend, kBackendHelp);
  demo->add_option("--ttl", demo_flags.ttl, "lease of the two workers")->capture_default_str();
  demo->add_option("--key", demo_flags.key, "lock key the workers use")->capture_default_str();
  demo->add_flag("--no-fence", demo_flags.no_fence,
                 "write without the fence, and watch an update get lost");
  demo->add_flag("--json", demo_flags.json, "print the events and the outcome as JSON");

  PlanFlags plan_flags;
  CLI::App* plan = app.add_subcommand(
      "plan", "What a lock on one key costs: ceiling, queueing, crash recovery, a verdict");
  plan->add_option("--rate", plan_flags.rate,
                   "average operations, all keys: 12/s, 500/min, 3.5k/h, 1M/day (bare: per s)")
      ->required();
  plan->add_option("--peak", plan_flags.peak, "peak rate / average rate")->capture_default_str();
  plan->add_option("--hold", plan_flags.hold, "critical section: 200us, 40ms, 1.5s")->required();
  plan->add_option("--hot-share", plan_flags.hot_share,
                   "the hottest key's share of all operations, (0, 1]")
      ->capture_default_str();
  plan->add_option("--lease", plan_flags.lease, "lease time to live")->capture_default_str();
  auto* rtt = plan->add_option("--rtt", plan_flags.rtt,
                               "one lock operation's store round trip (default 1ms); Acquire "
                               "+ Release cost two");
  plan->add_option("--from-bench", plan_flags.from_bench,
                   "take the rtt from this `dlock bench --json` file (floor_rtt_us)")
      ->excludes(rtt);
  plan->add_option("--idempotent", plan_flags.idempotent,
                   "is the protected operation idempotent? recommends a mechanism")
      ->check(CLI::IsMember({"yes", "no"}));
  plan->add_flag("--json", plan_flags.json, "print every figure as JSON");
  plan->footer(
      "Example: dlock plan --rate 1M/day --peak 3 --hold 40ms --hot-share 0.3\n"
      "Exit status: 0 planned (a saturated key is a verdict, not an error); 64 bad input.");

  DemoWorkerFlags worker_flags;
  CLI::App* worker = app.add_subcommand("demo-worker", "one worker of 'dlock demo'");
  worker->group("");  // hidden
  worker->add_option("--name", worker_flags.name)->required();
  worker->add_option("--key", worker_flags.key)->required();
  worker->add_option("--ttl", worker_flags.ttl)->required();
  worker->add_option("--wait", worker_flags.wait);
  worker->add_option("--backend", worker_flags.backend)->required();
  worker->add_option("--dir", worker_flags.dir)->required();
  worker->add_option("--add", worker_flags.add);
  worker->add_option("--work", worker_flags.work);
  worker->add_flag("--no-fence", worker_flags.no_fence);

  BenchFlags bench_flags;
  CLI::App* bench = app.add_subcommand(
      "bench", "Measure a store: floor, lock cycle, hand-off, hot key, many keys, memory per lease");
  bench->add_option("--backend", bench_flags.backend, kBackendHelp);
  bench->add_option("--iterations", bench_flags.iterations, "samples of the floor and the cycle")
      ->capture_default_str();
  bench->add_option("--contenders", bench_flags.contenders, "clients contending for one key")
      ->capture_default_str();
  bench->add_option("--hold", bench_flags.hold, "critical section of the contenders")
      ->capture_default_str();
  bench->add_option("--duration", bench_flags.duration, "length of the contended run")
      ->capture_default_str();
  bench->add_option("--clients", bench_flags.clients, "clients in the many-key run")
      ->capture_default_str();
  bench->add_option("--leases", bench_flags.leases, "leases held at once for the memory figure")
      ->capture_default_str();
  bench->add_option("--json", bench_flags.json,
                    "write every figure to FILE (read by 'dlock plan --from-bench FILE')");

  ChaosFlags chaos_flags;
  CLI::App* chaos = app.add_subcommand(
      "chaos", "Run workers against a store while injecting faults, and check the history");
  chaos->add_option("--backend", chaos_flags.backend,
                    "store URI (default: a fresh SQLite file in each run's directory)");
  chaos->add_option("--workload", chaos_flags.workload,
                    "fenced (writes checked by a fence) or unfenced (the positive control)")
      ->capture_default_str();
  chaos->add_option("--faults", chaos_flags.faults,
                    "comma-separated: pause, kill, partition, clock-step, delay, drop, "
                    "store-restart; or none")
      ->capture_default_str();
  chaos->add_option("--duration", chaos_flags.duration, "length of each run")
      ->capture_default_str();
  chaos->add_option("--ttl", chaos_flags.ttl, "the workers' lease")->capture_default_str();
  chaos->add_option("--seed", chaos_flags.seed, "replay a schedule (default: random, printed)");
  chaos->add_option("--runs", chaos_flags.runs, "runs, with seeds seed, seed+1, ...")
      ->capture_default_str();
  chaos->add_option("--workers", chaos_flags.workers, "worker processes")->capture_default_str();
  chaos->add_flag("--json", chaos_flags.json, "print the results as JSON");
  chaos->add_option("--report", chaos_flags.report,
                    "write an HTML report (timeline + checks) of the last failing, else last, run");
  chaos->add_option("--dir", chaos_flags.dir, "where run directories go (default: $TMPDIR)");
  chaos->add_option("--server-script", chaos_flags.server_script,
                    "store-restart: the store's script (scripts/servers/<store>.sh)");
  chaos->add_option("--server-dir", chaos_flags.server_dir,
                    "store-restart: the directory the script started the store in");
  chaos->add_flag("--keep", chaos_flags.keep, "keep every run's directory (failing fenced runs are always kept)");
  chaos->footer("Exit status: 0 no violation; 3 safety violations; 4 only recovery failures; 64 usage; 69 store unavailable.");

  ChaosWorkerFlags chaos_worker_flags;
  CLI::App* chaos_worker = app.add_subcommand("chaos-worker", "one worker of 'dlock chaos'");
  chaos_worker->group("");  // hidden
  chaos_worker->add_option("--id", chaos_worker_flags.id)->required();
  chaos_worker->add_option("--incarnation", chaos_worker_flags.incarnation);
  chaos_worker->add_option("--backend", chaos_worker_flags.backend)->required();
  chaos_worker->add_option("--key", chaos_worker_flags.key)->required();
  chaos_worker->add_option("--resource", chaos_worker_flags.resource)->required();
  chaos_worker->add_option("--ttl", chaos_worker_flags.ttl)->required();
  chaos_worker->add_flag("--unfenced", chaos_worker_flags.unfenced);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help("", CLI::AppFormatMode::Normal);
    // Help for the subcommand that was asked about.
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    std::cout << app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::CallForVersion&) {
    std::cout << "dlock 0.1.0\n";
    return 0;
  } catch (const CLI::ParseError& e) {
    return Fail(kExitUsage, std::string(e.what()) + " (see 'dlock --help')");
  }

  if (exec->parsed()) return RunExec(exec_flags);
  if (once->parsed()) return RunExec(once_flags);
  if (status->parsed()) return RunStatus(status_flags);
  if (leader->parsed()) return RunLeader(leader_flags);
  if (fence_write->parsed()) return RunFenceWrite(fence_flags);
  if (demo->parsed()) return RunDemo(demo_flags);
  if (chaos->parsed()) return RunChaos(chaos_flags);
  if (bench->parsed()) return RunBench(bench_flags);
  if (chaos_worker->parsed()) return RunChaosWorker(chaos_worker_flags);
  if (plan->parsed()) return RunPlan(plan_flags);
  if (worker->parsed()) return RunDemoWorker(worker_flags);
  return Fail(kExitUsage, "no command given (see 'dlock --help')");
}
