// The flags that say which lock to take and how (exec, once, acquire), and
// their checks: one set of words and errors for every command that locks.
#ifndef DLOCK_SRC_CLI_LOCK_FLAGS_H_
#define DLOCK_SRC_CLI_LOCK_FLAGS_H_

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dlock/client.h"

namespace CLI {
class App;
}

namespace dlock::cli {

struct LockFlags {
  // The positional KEY; none when --key names every key.
  std::optional<std::string> key;
  std::string ttl = "30s";
  std::string wait = "10s";
  bool no_wait = false;
  std::string backend;
  std::vector<std::string> extra_keys;  // --key: more keys, all or nothing
  std::string max_hold;                 // --max-hold: stop renewing after this
  std::string lock_delay;               // --lock-delay: keep the key this long after a loss
  bool shared = false;                  // --shared: the read side of a read-write lock
  int permits = 1;                      // --permits N: a semaphore
  std::string label;                    // --label: shown by status / to election observers
};

// The flags, checked: what a command acts on.
struct LockPlan {
  std::string primary;            // the key named in messages and DLOCK_KEY
  std::vector<std::string> keys;  // every key, primary included
  AcquireOptions options;         // ttl, wait, sharing, lock-delay, max hold, label
};

// kInvalidArgument naming the flag and what it accepts. `usage` is the
// command's synopsis, quoted when no key is given.
Result<LockPlan> CheckLockFlags(const LockFlags& flags, std::string_view usage);

// A duration flag's value (internal::ParseDuration), errors naming `flag`.
Result<std::chrono::milliseconds> FlagDuration(std::string_view flag, const std::string& text);

// --keep: how long a record (run-once, break) is kept; "forever", or a
// duration of at least 1s.
Result<std::chrono::milliseconds> KeepFlag(const std::string& text);

// KEY, --ttl, --wait, --no-wait, --max-hold, --lock-delay, --backend.
void AddLockFlags(CLI::App& cmd, LockFlags& flags);
// --shared, --permits, --label.
void AddHoldingFlags(CLI::App& cmd, LockFlags& flags);

}  // namespace dlock::cli

#endif  // DLOCK_SRC_CLI_LOCK_FLAGS_H_
