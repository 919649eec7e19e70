#include "cli/lock_flags.h"

#include <CLI/CLI.hpp>

#include "cli/command.h"
#include "core/duration.h"

namespace dlock::cli {
namespace {

using std::chrono::milliseconds;

Status CheckKeys(const LockFlags& flags, std::string_view usage, LockPlan& plan) {
  if (!flags.key && flags.extra_keys.empty()) {
    return InvalidArgumentError("no key given: " + std::string(usage));
  }
  plan.keys = flags.extra_keys;
  if (flags.key) plan.keys.insert(plan.keys.begin(), *flags.key);
  plan.primary = plan.keys.front();
  for (const std::string& k : plan.keys) DLOCK_RETURN_IF_ERROR(ValidateKey(k));
  return Status::Ok();
}

Status CheckDurations(const LockFlags& flags, AcquireOptions& o) {
  DLOCK_ASSIGN_OR_RETURN(o.ttl, FlagDuration("--ttl", flags.ttl));
  DLOCK_ASSIGN_OR_RETURN(o.wait, FlagDuration("--wait", flags.wait));
  if (flags.no_wait) o.wait = milliseconds(0);
  if (!flags.max_hold.empty()) {
    DLOCK_ASSIGN_OR_RETURN(o.max_hold, FlagDuration("--max-hold", flags.max_hold));
    if (*o.max_hold <= milliseconds(0)) {
      return InvalidArgumentError("--max-hold must be positive");
    }
  }
  if (!flags.lock_delay.empty()) {
    DLOCK_ASSIGN_OR_RETURN(o.lock_delay, FlagDuration("--lock-delay", flags.lock_delay));
  }
  if (Status s = ValidateTtl(o.ttl); !s.ok()) return s.WithContext("--ttl");
  return Status::Ok();
}

}  // namespace

Result<milliseconds> FlagDuration(std::string_view flag, const std::string& text) {
  auto d = internal::ParseDuration(text);
  if (!d.ok()) return d.status().WithContext(flag);
  return d;
}

Result<milliseconds> KeepFlag(const std::string& text) {
  if (text == "forever") return kKeepDoneForever;
  DLOCK_ASSIGN_OR_RETURN(const milliseconds keep, FlagDuration("--keep", text));
  if (keep < std::chrono::seconds(1)) {
    return InvalidArgumentError("--keep " + text + ": at least 1s, or 'forever'");
  }
  return keep;
}

Result<LockPlan> CheckLockFlags(const LockFlags& flags, std::string_view usage) {
  LockPlan plan;
  DLOCK_RETURN_IF_ERROR(CheckKeys(flags, usage, plan));
  DLOCK_RETURN_IF_ERROR(CheckDurations(flags, plan.options));
  if (flags.permits < 1 || flags.permits > static_cast<int>(kMaxPermits)) {
    return InvalidArgumentError("--permits " + std::to_string(flags.permits) +
                                " is out of range: 1 to 65535");
  }
  plan.options.permits = static_cast<std::uint32_t>(flags.permits);
  plan.options.shared = flags.shared;
  if (!flags.label.empty()) plan.options.label = flags.label;
  return plan;
}

void AddLockFlags(CLI::App& cmd, LockFlags& f) {
  cmd.add_option("key", f.key, "lock key (1 to 1024 bytes)");
  cmd.add_option("--ttl", f.ttl, "lease time to live (10ms..24h)")->capture_default_str();
  auto* wait = cmd.add_option("--wait", f.wait, "how long to wait for a held lock (up to 8760h)")
                   ->capture_default_str();
  cmd.add_flag("--no-wait", f.no_wait, "fail at once (exit 75) if the lock is held")
      ->excludes(wait);
  cmd.add_option("--max-hold", f.max_hold,
                 "stop renewing after this long (up to 8760h), so a hung holder cannot keep "
                 "the lock forever (it is then lost like any lease)");
  cmd.add_option("--lock-delay", f.lock_delay,
                 "if this lease is lost (expired, dlock killed) rather than released, nobody "
                 "gets KEY until the store's clock is this far past the loss, so writes still "
                 "in flight drain first (0..24h; not on redlock)");
  cmd.add_option("--backend", f.backend, kBackendHelp);
}

void AddHoldingFlags(CLI::App& cmd, LockFlags& f) {
  cmd.add_flag("--shared", f.shared,
               "take the read side of a read-write lock: shared with other --shared holders, "
               "never with a plain holder of KEY (the writer); a waiting writer goes before "
               "readers that come after it");
  cmd.add_option("--permits", f.permits,
                 "a semaphore: up to N holders of KEY at once, each with its own token "
                 "(everyone on KEY should use the same N)")
      ->capture_default_str();
  cmd.add_option("--label", f.label, "name this holder in 'dlock status' (default host:pid)");
}

}  // namespace dlock::cli
