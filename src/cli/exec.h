// `dlock exec KEY [--] CMD...` and `dlock once KEY [--] CMD...`: run a command
// while holding a lock (supervisor.h keeps it from outliving the lease).
#ifndef DLOCK_SRC_CLI_EXEC_H_
#define DLOCK_SRC_CLI_EXEC_H_

#include <optional>
#include <string>
#include <vector>

namespace dlock::cli {

struct ExecFlags {
  // The positional KEY; none when --key names every key.
  std::optional<std::string> key;
  std::string ttl = "30s";
  std::string wait = "10s";
  bool no_wait = false;
  // SIGTERM this long before valid_until (at most ttl/4), SIGKILL at a fifth
  // of it.
  std::string kill_grace = "5s";
  std::string backend;
  std::vector<std::string> extra_keys;  // --key: more keys, all or nothing
  std::string max_hold;                 // --max-hold: stop renewing after this
  std::string lock_delay;               // --lock-delay: keep the key this long after a loss
  bool shared = false;                  // --shared: the read side of a read-write lock
  int permits = 1;                      // --permits N: a semaphore
  std::string label;                    // --label: shown by status / to election observers
  std::optional<std::string> metrics_file;  // --metrics-file: the run's figures, for Prometheus
  std::vector<std::string> command;
  // `dlock once`: skip if KEY is marked done; mark it done after CMD exits 0.
  bool once = false;
};

int RunExec(const ExecFlags& flags);

}  // namespace dlock::cli

#endif  // DLOCK_SRC_CLI_EXEC_H_
