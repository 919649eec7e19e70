// Job control for the command dlock runs, done the way a shell does it, so
// that Ctrl-Z stops the command and dlock together and an interactive
// command can read the terminal:
//
//  - The command runs in its own process group. When dlock's standard input
//    is the terminal and dlock is in its foreground group, the command's
//    group becomes the foreground group while it runs, and dlock takes the
//    terminal back when it ends.
//  - When the command's job stops (SIGTSTP, SIGTTIN, SIGTTOU), dlock stops
//    every process of its group and then itself (and, at a terminal, its
//    own group) with the same signal: the shell sees one stopped job. `fg`/`bg` continue dlock, which confirms
//    its lease with the store before it continues the command (exec.cc).
//
// dlock blocks SIGTTOU (it is read from a signalfd), so taking the terminal
// back from a background group does not stop it.
#ifndef DLOCK_SRC_CLI_JOB_CONTROL_H_
#define DLOCK_SRC_CLI_JOB_CONTROL_H_

#include <sys/types.h>

namespace dlock::cli {

// The controlling terminal on standard input, when dlock may hand it over.
class Terminal {
 public:
  // Present when stdin is a terminal. dlock hands it over only while its
  // own group is the foreground one (DlockInForeground): not when started
  // in the background, nor after `bg`.
  static Terminal OnStdin();

  bool present() const { return fd_ >= 0; }
  // Makes process group `group` the foreground one. Async-signal-safe: the
  // child calls it for itself between fork and exec, the parent for the
  // child (whichever runs first wins, as in a shell).
  void GiveTo(pid_t group) const;
  // Makes dlock's own group the foreground one again.
  void TakeBack() const;
  // Whether dlock's group is the foreground group now (after `fg`, not
  // after `bg`).
  bool DlockInForeground() const;

 private:
  int fd_ = -1;
};

// Whether `signal` is one of the job-control stops: SIGTSTP, SIGTTIN,
// SIGTTOU.
bool IsJobStop(int signal);

// Stops dlock (every thread) with `signal`; returns when it is continued.
// With `whole_group`, the rest of dlock's process group stops too, as the
// terminal would have stopped it had the command been in it: a wrapper
// (`sh -c 'dlock exec ...; echo done'`) or a pipeline (`dlock exec ... |
// tee log`) stops with dlock, so the shell sees its job stopped. Without a
// terminal (cron, a script run by a service) only dlock stops. `signal` is
// blocked in every thread; it is unblocked here just long enough to act.
void StopSelf(int signal, bool whole_group);

}  // namespace dlock::cli

#endif  // DLOCK_SRC_CLI_JOB_CONTROL_H_
