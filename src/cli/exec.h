// `dlock exec KEY [--] CMD...` and `dlock once KEY [--] CMD...`: run a command
// while holding a lock (supervisor.h keeps it from outliving the lease).
#ifndef DLOCK_SRC_CLI_EXEC_H_
#define DLOCK_SRC_CLI_EXEC_H_

#include <optional>
#include <string>
#include <vector>

#include "cli/lock_flags.h"

namespace dlock::cli {

struct ExecFlags : LockFlags {
  // SIGTERM this long before valid_until (at most ttl/4), SIGKILL at a fifth
  // of it.
  std::string kill_grace = "5s";
  std::optional<std::string> metrics_file;  // --metrics-file: the run's figures, for Prometheus
  std::vector<std::string> command;
  // `dlock once`: skip if KEY is marked done; mark it done after CMD exits 0,
  // for `keep` (a duration, or "forever").
  bool once = false;
  std::string keep = "30d";  // kDefaultDoneRetention
  static_assert(kDefaultDoneRetention == std::chrono::hours(24 * 30), "--keep's default");
};

int RunExec(const ExecFlags& flags);

}  // namespace dlock::cli

#endif  // DLOCK_SRC_CLI_EXEC_H_
