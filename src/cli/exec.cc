#include "cli/exec.h"

#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>

#include "cli/command.h"
#include "cli/common.h"
#include "cli/exec_metrics.h"
#include "cli/exported_store.h"
#include "cli/interrupt_watcher.h"
#include "cli/job_control.h"
#include "cli/signals.h"
#include "cli/supervisor.h"
#include "core/duration.h"
#include "core/fd.h"

extern char** environ;

namespace dlock::cli {
namespace {

using internal::Fd;
using std::chrono::milliseconds;

// The flags, checked: what RunExec acts on.
struct ExecPlan : LockPlan {
  milliseconds grace{0};
  milliseconds keep = kDefaultDoneRetention;  // `dlock once`'s record
};

Result<ExecPlan> CheckFlags(const ExecFlags& flags) {
  ExecPlan plan;
  DLOCK_ASSIGN_OR_RETURN(
      static_cast<LockPlan&>(plan),
      CheckLockFlags(flags, "dlock exec KEY [OPTIONS] [--] CMD..., or --key K [--key K2...] -- "
                            "CMD..."));
  if (flags.once && !flags.extra_keys.empty()) {
    return InvalidArgumentError("dlock once takes one key (no --key)");
  }
  if (flags.command.empty()) {
    return InvalidArgumentError("no command given: dlock exec KEY [OPTIONS] [--] CMD [ARGS...]");
  }
  DLOCK_ASSIGN_OR_RETURN(plan.grace, FlagDuration("--kill-grace", flags.kill_grace));
  if (flags.once) {
    DLOCK_ASSIGN_OR_RETURN(plan.keep, KeepFlag(flags.keep));
  }
  return plan;
}

// Every key, all or nothing; a held single key is tried once without a
// watcher thread first (the common, uncontended case).
Result<std::vector<Lease>> AcquireAll(Client& client, const ExecPlan& plan,
                                      SignalChannel& signals, std::stop_source cancel,
                                      int& interrupted) {
  if (plan.keys.size() == 1) {
    Result<Lease> one = client.TryAcquire(plan.primary, plan.options);
    if (!one.ok() && one.status().code() == StatusCode::kLockHeld &&
        plan.options.wait > milliseconds(0)) {
      InterruptWatcher watcher(signals, cancel);
      one = client.Acquire(plan.primary, plan.options);
      watcher.Stop();
      interrupted = watcher.signal();
    }
    if (!one.ok()) return one.status();
    std::vector<Lease> leases;
    leases.push_back(std::move(*one));
    return leases;
  }
  // Several keys: one canonical order (no deadlock between two commands
  // asking for the same keys in different orders).
  InterruptWatcher watcher(signals, cancel);
  Result<std::vector<Lease>> leases = client.AcquireAll(plan.keys, plan.options);
  watcher.Stop();
  interrupted = watcher.signal();
  return leases;
}

// The command's environment: ours, with DLOCK_* replaced. DLOCK_KEY and
// DLOCK_TOKEN are the primary key's; with more keys, DLOCK_KEY_COUNT and
// DLOCK_KEY_<i> / DLOCK_TOKEN_<i> list every one, in the canonical order
// they were taken in. DLOCK_BACKEND never holds a password
// (exported_store.h). DLOCK_SESSION makes a dlock run by the command one
// party with us in `dlock status --waits`: it acts for the holder.
std::vector<std::string> ChildEnvironment(const std::vector<Lease>& leases,
                                          const std::string& primary,
                                          const std::string& exported_uri,
                                          std::uint64_t session) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string_view v(*e);
    if (v.starts_with("DLOCK_KEY") || v.starts_with("DLOCK_TOKEN") ||
        v.starts_with("DLOCK_BACKEND=") || v.starts_with("DLOCK_SESSION=")) {
      continue;
    }
    env.emplace_back(v);
  }
  for (const Lease& l : leases) {
    if (l.key() != primary) continue;
    env.push_back("DLOCK_KEY=" + l.key());
    // An unordered store's 0 would only be refused by every fence.
    env.push_back(l.token_ordered() ? "DLOCK_TOKEN=" + std::to_string(l.token())
                                    : "DLOCK_TOKEN_UNORDERED=1");
  }
  if (leases.size() > 1) {
    env.push_back("DLOCK_KEY_COUNT=" + std::to_string(leases.size()));
    for (std::size_t i = 0; i < leases.size(); ++i) {
      env.push_back("DLOCK_KEY_" + std::to_string(i) + "=" + leases[i].key());
      if (leases[i].token_ordered()) {
        env.push_back("DLOCK_TOKEN_" + std::to_string(i) + "=" +
                      std::to_string(leases[i].token()));
      }
    }
  }
  env.push_back("DLOCK_BACKEND=" + exported_uri);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(session));
  env.push_back(std::string("DLOCK_SESSION=") + hex);
  return env;
}

std::vector<char*> CStrings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

Status ReleaseAll(std::vector<Lease>& leases) {
  Status first;
  for (Lease& l : leases) {
    Status s = l.Release();
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

int ExitCodeOfCommand(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return kExitSoftware;
}

// After the command: record a `once` run done (while the lease still holds:
// the store checks the owner), release, and turn what happened into an exit
// code.
int Finish(const ExecFlags& flags, const ExecPlan& plan, Store& store,
           std::vector<Lease>& leases, const CommandOutcome& outcome, ExecRecord& record) {
  Status marked;
  if (flags.once && !outcome.terminated && ExitCodeOfCommand(outcome.wait_status) == 0) {
    marked = store.client->MarkDone(leases.front(), plan.keep);
  }
  Status released = ReleaseAll(leases);
  record.released = MonotonicClock::now();
  record.lease_lost = outcome.terminated || released.code() == StatusCode::kLeaseLost ||
                      marked.code() == StatusCode::kLeaseLost;
  record.done_not_recorded = !marked.ok();
  const std::string key = "'" + plan.primary + "'";
  if (!marked.ok()) {
    return Fail(marked.code() == StatusCode::kUnavailable ? kExitUnavailable : kExitLeaseLost,
                key + " ran, but could not be recorded as done (" + marked.message() +
                    "); the next caller will run it again");
  }
  if (outcome.terminated) {
    return Fail(kExitLeaseLost, "lease on key " + key + " lost (" + outcome.why +
                                    "); the command's process group was terminated");
  }
  if (released.code() == StatusCode::kLeaseLost) {
    return Fail(kExitLeaseLost,
                "lease on key " + key + " was lost while the command ran: " + released.message());
  }
  if (!released.ok()) {
    Fail(0, "warning: could not release key " + key + ": " + released.message() +
                "; it expires by itself within " + internal::FormatDuration(plan.options.ttl));
  }
  return ExitCodeOfCommand(outcome.wait_status);
}

Result<bool> IsDone(const ExecFlags& flags, Store& store, const std::string& key) {
  if (!flags.once) return false;
  return store.client->IsDone(key);
}

int RunUnderLeases(const ExecFlags& flags, const ExecPlan& plan, Store& store,
                   std::vector<Lease>& leases, SignalChannel& signals, int lost_fd,
                   ExecRecord& record) {
  // Somebody may have finished it while we waited for the lock.
  if (auto done = IsDone(flags, store, plan.primary); !done.ok() || *done) {
    (void)ReleaseAll(leases);
    if (!done.ok()) return Fail(done.status());
    Fail(0, "'" + plan.primary + "' was done while we waited; not running it again");
    return kExitOk;
  }
  auto exported = ExportedStore::For(store.uri);
  if (!exported.ok()) {
    (void)ReleaseAll(leases);
    return Fail(exported.status());
  }
  std::vector<std::string> env =
      ChildEnvironment(leases, plan.primary, exported->uri(), store.client->Session());
  std::vector<std::string> args = flags.command;
  std::vector<char*> envp = CStrings(env);
  std::vector<char*> argv = CStrings(args);
  SupervisorOptions options;
  // When to act, counted back from valid_until, which is already a drift
  // margin before the store's own expiry.
  options.term_lead = std::min<Duration>(plan.grace, plan.options.ttl / 4);
  options.kill_lead = options.term_lead / 5;
  options.key = plan.primary;
  if (plan.options.max_hold) {
    options.renew_until = MonotonicClock::now() + *plan.options.max_hold;
    options.max_hold_text = flags.max_hold;
  }
  Supervisor supervisor(leases, signals, lost_fd, options);
  Result<CommandOutcome> outcome = supervisor.Run(argv.data(), envp.data());
  if (!outcome.ok()) {
    (void)ReleaseAll(leases);
    return Fail(outcome.status());
  }
  record.command_ran = true;
  return Finish(flags, plan, store, leases, *outcome, record);
}

int RunRecorded(const ExecFlags& flags, ExecRecord& record) {
  Result<ExecPlan> plan = CheckFlags(flags);
  if (!plan.ok()) return Fail(plan.status());
  record.key = plan->primary;
  // Before any thread exists, so that every thread inherits the mask.
  Result<SignalChannel> signals = SignalChannel::Open();
  if (!signals.ok()) return Fail(signals.status());
  Fd lost_fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  auto store = OpenStore(flags.backend);
  if (!store.ok()) return Fail(store.status());
  // `dlock once`: done already? Then there is nothing to wait for.
  if (auto done = IsDone(flags, *store, plan->primary); !done.ok() || *done) {
    if (!done.ok()) return Fail(done.status());
    Fail(0, "'" + plan->primary + "' is already done; not running it again");
    return kExitOk;
  }
  std::stop_source cancel;
  plan->options.cancel = cancel.get_token();
  plan->options.on_lost = [lost = lost_fd.get()](const Status&) {
    std::uint64_t one = 1;
    (void)!::write(lost, &one, sizeof one);
  };
  int interrupted = 0;
  Result<std::vector<Lease>> leases = AcquireAll(*store->client, *plan, *signals, cancel, interrupted);
  if (interrupted != 0) {
    if (leases.ok()) (void)ReleaseAll(*leases);
    return Fail(128 + interrupted, "interrupted by signal " + std::to_string(interrupted) +
                                       " while waiting for key '" + plan->primary + "'");
  }
  if (!leases.ok()) return Fail(leases.status());
  record.granted = MonotonicClock::now();
  for (const Lease& l : *leases) {
    if (l.key() == plan->primary && l.token_ordered()) record.token = l.token();
  }
  return RunUnderLeases(flags, *plan, *store, *leases, *signals, lost_fd.get(), record);
}

}  // namespace

int RunExec(const ExecFlags& flags) {
  if (flags.metrics_file) {
    if (Status s = CheckMetricsFile(*flags.metrics_file); !s.ok()) return Fail(s);
  }
  ExecRecord record;
  const int code = RunRecorded(flags, record);
  if (flags.metrics_file) {
    if (Status s = WriteMetricsFile(*flags.metrics_file, record, code); !s.ok()) {
      Fail(0, "warning: " + s.message());
    }
  }
  return code;
}

namespace {

// What exec and once add to the lock flags.
void AddRunFlags(CLI::App& cmd, ExecFlags& f) {
  AddLockFlags(cmd, f);
  cmd.add_option("--kill-grace", f.kill_grace,
                 "SIGTERM the command this long before the lease could lapse (at most ttl/4); "
                 "SIGKILL at a fifth of it")
      ->capture_default_str();
  cmd.add_option("--metrics-file", f.metrics_file,
                 "when done, write the run's figures (waited, held, token, outcome) to this "
                 "file for node_exporter's textfile collector (NAME.prom; replaced atomically)");
}

}  // namespace

void AddExecCommands(CLI::App& app, Commands& commands) {
  auto exec = std::make_shared<ExecFlags>();
  CLI::App* cmd = app.add_subcommand(
      "exec", "Run CMD while holding the lock KEY; DLOCK_KEY, DLOCK_TOKEN and DLOCK_BACKEND "
              "(never with a password) are set in its environment");
  AddRunFlags(*cmd, *exec);
  cmd->add_option("--key", exec->extra_keys,
                  "another key to hold too (repeatable): all are taken in one canonical order, "
                  "all or nothing; each token is in DLOCK_KEY_<i>/DLOCK_TOKEN_<i>; with --, "
                  "KEY may be left out")
      ->allow_extra_args(false);
  AddHoldingFlags(*cmd, *exec);
  cmd->footer(
      "Usage: dlock exec KEY [OPTIONS] [--] CMD [ARGS...]\n"
      "Every word from CMD on is the command's, with or without --.\n"
      "Example: dlock exec nightly-report --ttl 30s -- sh -c 'make-report > out.csv'\n"
      "Exit status: the command's own; 64 usage; 69 store unavailable; 75 gave up waiting; "
      "77 the store refused the credentials; 79 lease lost (command terminated).");
  commands.push_back({cmd, [exec] { return RunExec(*exec); }, &exec->command});

  auto once = std::make_shared<ExecFlags>();
  once->once = true;
  cmd = app.add_subcommand(
      "once", "Run CMD once for KEY across every caller: skip if KEY is done, else run it under "
              "the lock and record it done if it exits 0");
  AddRunFlags(*cmd, *once);
  cmd->add_option("--keep", once->keep,
                  "keep the done record this long (e.g. 30d, 12h), or 'forever'; after that "
                  "KEY runs again")
      ->capture_default_str();
  cmd->footer(
      "Usage: dlock once KEY [OPTIONS] [--] CMD [ARGS...]\n"
      "A failed run (non-zero exit) is not recorded, so the next caller runs it again; a crashed "
      "one is retried once its lease expires.\nExit status: 0 ran or already done; the "
      "command's own on failure; 64, 69, 75, 77, 79 as for exec.");
  commands.push_back({cmd, [once] { return RunExec(*once); }, &once->command});
}

}  // namespace dlock::cli
