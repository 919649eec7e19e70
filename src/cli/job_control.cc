#include "cli/job_control.h"

#include <signal.h>
#include <termios.h>
#include <unistd.h>

namespace dlock::cli {

Terminal Terminal::OnStdin() {
  Terminal t;
  if (::isatty(STDIN_FILENO)) t.fd_ = STDIN_FILENO;
  return t;
}

void Terminal::GiveTo(pid_t group) const {
  if (fd_ >= 0) (void)::tcsetpgrp(fd_, group);
}

void Terminal::TakeBack() const {
  if (fd_ >= 0) (void)::tcsetpgrp(fd_, ::getpgrp());
}

bool Terminal::DlockInForeground() const {
  return fd_ >= 0 && ::tcgetpgrp(fd_) == ::getpgrp();
}

bool IsJobStop(int signal) {
  return signal == SIGTSTP || signal == SIGTTIN || signal == SIGTTOU;
}

void StopSelf(int signal, bool whole_group) {
  if (!whole_group) {
    // SIGSTOP, not `signal`: in a process group no parent outside it can
    // continue (an orphaned group: a script under cron or a service
    // manager), the kernel discards SIGTSTP, SIGTTIN and SIGTTOU, and dlock
    // would run on while its command stays stopped. Returns on SIGCONT.
    ::raise(SIGSTOP);
    return;
  }
  sigset_t just_this;
  sigemptyset(&just_this);
  sigaddset(&just_this, signal);
  // Its disposition is the default (stop): dlock only ever blocks it.
  ::pthread_sigmask(SIG_UNBLOCK, &just_this, nullptr);
  ::killpg(0, signal);  // returns once SIGCONT has continued us
  ::pthread_sigmask(SIG_BLOCK, &just_this, nullptr);
}

}  // namespace dlock::cli
