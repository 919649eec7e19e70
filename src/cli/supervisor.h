// How `dlock exec` keeps its promise: the command never runs without a
// valid lease. Its process group is gone before the earliest lease's
// valid_until, so before the store can grant the key to anybody else:
//
//   valid_until - term_lead:  SIGTERM to the group  (no renewal got through,
//   valid_until - kill_lead:  SIGKILL to the group   or the max hold ended)
//   lease lost (the store names another owner):  SIGKILL at once
//
// and a stopped job (Ctrl-Z, job_control.h) is continued only after every
// lease is confirmed with the store; otherwise it is killed while stopped.
// Signals and lease losses arrive as events on descriptors (signals.h, the
// on_lost eventfd), beside the deadlines, in one loop.
#ifndef DLOCK_SRC_CLI_SUPERVISOR_H_
#define DLOCK_SRC_CLI_SUPERVISOR_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "cli/job_control.h"
#include "cli/signals.h"
#include "dlock/lease.h"

namespace dlock::cli {

struct SupervisorOptions {
  Duration term_lead{0};  // SIGTERM this long before valid_until
  Duration kill_lead{0};  // SIGKILL this long before it
  std::string key;        // the primary key, for messages
  // When renewals stop (--max-hold), for the message; max(): never.
  TimePoint renew_until = TimePoint::max();
  std::string max_hold_text;  // as the flag gave it
};

// What became of the command.
struct CommandOutcome {
  int wait_status = 0;      // as waitpid reported its end
  bool terminated = false;  // dlock ended it: its lease was ending or lost
  std::string why;          // when terminated
};

class Supervisor {
 public:
  // `lost_fd`: an eventfd the leases' on_lost callbacks write to.
  Supervisor(std::vector<Lease>& leases, SignalChannel& signals, int lost_fd,
             SupervisorOptions options);

  // Runs argv[0] (found on PATH) with `argv` and `envp` in a new process
  // group, and returns when every process of it is gone.
  Result<CommandOutcome> Run(char** argv, char** envp);

 private:
  // Starts the command (RunChild in a new process); -1 and errno if it
  // could not be.
  pid_t Spawn(char** argv, char** envp, bool take_terminal);
  static int ChildMain(void* start) noexcept;
  [[noreturn]] void RunChild(char** argv, char** envp, bool take_terminal);
  void ActOnDeadlines();
  int MillisecondsToNextDeadline() const;
  void WaitForEvents();
  void OnSignal(int signal);
  void CollectChild();
  // The command's job stopped with `signal`: stop with it, and on `fg` or
  // `bg` confirm the leases before continuing it.
  void StopWithCommand(int signal);
  Status ConfirmLeases();
  void Terminate(int signal, std::string why);

  std::vector<Lease>& leases_;
  SignalChannel& signals_;
  const int lost_fd_;
  const SupervisorOptions options_;
  const Terminal terminal_;
  pid_t parent_ = -1;
  pid_t child_ = -1;
  bool child_done_ = false;
  bool sent_term_ = false;
  bool sent_kill_ = false;
  CommandOutcome outcome_;
};

}  // namespace dlock::cli

#endif  // DLOCK_SRC_CLI_SUPERVISOR_H_
