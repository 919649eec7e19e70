#include "cli/supervisor.h"

#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "cli/common.h"
#include "cli/descriptors.h"
#include "core/duration.h"

namespace dlock::cli {
namespace {

using std::chrono::milliseconds;

void WriteAll(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = ::write(fd, s.data(), s.size());
    if (n <= 0) return;
    s.remove_prefix(static_cast<std::size_t>(n));
  }
}

// Handlers of ours must not run in the child: it shares our memory until it
// execs (see Spawn). Caught signals go back to their default, as exec would
// set them anyway; ignored ones stay ignored, as exec keeps them.
void DefaultCaughtSignals() {
  for (int signal = 1; signal < NSIG; ++signal) {
    struct sigaction action {};
    if (signal == SIGKILL || signal == SIGSTOP || ::sigaction(signal, nullptr, &action) != 0) {
      continue;
    }
    const bool caught = (action.sa_flags & SA_SIGINFO) != 0 ||
                        (action.sa_handler != SIG_DFL && action.sa_handler != SIG_IGN);
    if (!caught) continue;
    action = {};
    action.sa_handler = SIG_DFL;
    ::sigaction(signal, &action, nullptr);
  }
}

// What the child needs, on the parent's stack (the parent waits until the
// child has exec'd).
struct ChildStart {
  Supervisor* supervisor;
  char** argv;
  char** envp;
  bool take_terminal;
};

// The child's stack: execvpe runs on it, with its PATH search (a copy of
// $PATH and the name) and, for a script without #!, an argv for /bin/sh. Only
// the pages touched are ever backed.
std::size_t ChildStackBytes(char** argv) {
  std::size_t argc = 0;
  while (argv[argc] != nullptr) ++argc;
  const char* path = std::getenv("PATH");
  const std::size_t bytes = (std::size_t{1} << 20) + (argc + 2) * sizeof(char*) +
                            (path != nullptr ? std::strlen(path) : 0);
  const std::size_t page = 4096;
  return (bytes + page - 1) / page * page;
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kShareMemoryWithChild = false;  // the sanitizers do not follow it
#else
constexpr bool kShareMemoryWithChild = true;
#endif

}  // namespace

int Supervisor::ChildMain(void* start) noexcept {
  const auto* s = static_cast<const ChildStart*>(start);
  s->supervisor->RunChild(s->argv, s->envp, s->take_terminal);
}

Supervisor::Supervisor(std::vector<Lease>& leases, SignalChannel& signals, int lost_fd,
                       SupervisorOptions options)
    : leases_(leases),
      signals_(signals),
      lost_fd_(lost_fd),
      options_(std::move(options)),
      terminal_(Terminal::OnStdin()) {}

// Only async-signal-safe calls between the clone and exec: the parent has
// threads, and the child runs in its memory. Every signal is blocked here.
void Supervisor::RunChild(char** argv, char** envp, bool take_terminal) {
  ::setpgid(0, 0);
  // Signals are still blocked here, so taking the terminal from the
  // background cannot stop us (SIGTTOU).
  if (take_terminal) terminal_.GiveTo(::getpid());
  // If dlock dies (even by SIGKILL) the command must not run on without the
  // lock. PDEATHSIG follows the thread that forked: the main thread, which
  // lives until dlock exits.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent_) ::_exit(kExitSoftware);  // it died before prctl
  CloseDescriptorsNotInherited();
  DefaultCaughtSignals();
  ::sigprocmask(SIG_SETMASK, &signals_.original_mask(), nullptr);
  ::execvpe(argv[0], argv, envp);
  const int err = errno;
  WriteAll(2, "dlock: cannot run '");
  WriteAll(2, argv[0]);
  WriteAll(2, err == ENOENT ? "': command not found\n"
              : err == EACCES ? "': permission denied\n"
                              : "': cannot execute\n");
  ::_exit(err == ENOENT ? 127 : 126);
}

Result<CommandOutcome> Supervisor::Run(char** argv, char** envp) {
  // Orphaned members of the command's group are re-parented to us, so that
  // after a SIGKILL we can wait until the whole group is gone.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  const bool take_terminal = terminal_.DlockInForeground();
  parent_ = ::getpid();
  child_ = Spawn(argv, envp, take_terminal);
  if (child_ < 0) {
    return InternalError(std::string("cannot start the command: ") + std::strerror(errno));
  }
  ::setpgid(child_, child_);  // also done by the child; whichever runs first wins
  if (take_terminal) terminal_.GiveTo(child_);
  while (!child_done_) {
    ActOnDeadlines();
    WaitForEvents();
    CollectChild();
  }
  if (sent_kill_) {
    // Wait for the rest of the group (it was SIGKILLed) before we report.
    while (::waitpid(-child_, nullptr, 0) > 0 || errno == EINTR) {
    }
  }
  if (::tcgetpgrp(STDIN_FILENO) == child_) terminal_.TakeBack();
  return outcome_;
}

// Like posix_spawn (which cannot set PR_SET_PDEATHSIG): the child shares
// our memory (CLONE_VM) on a stack of its own, and this thread waits
// (CLONE_VFORK) until it has exec'd or exited. A fork would copy the page
// tables of a large process with threads (dlock-full's gRPC) and fault in
// copies of every page touched after it: milliseconds, on the path from a
// grant to the command's start.
pid_t Supervisor::Spawn(char** argv, char** envp, bool take_terminal) {
  // Blocked in the child too until RunChild has reset the handlers.
  sigset_t all;
  sigset_t before;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &before);
  pid_t pid = -1;
  int err = 0;
  if (!kShareMemoryWithChild) {
    pid = ::fork();
    if (pid == 0) RunChild(argv, envp, take_terminal);
    err = errno;
  } else {
    const std::size_t stack_bytes = ChildStackBytes(argv);
    void* stack = ::mmap(nullptr, stack_bytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE, -1, 0);
    if (stack == MAP_FAILED) {
      err = errno;
    } else {
      ChildStart start{this, argv, envp, take_terminal};
      pid = ::clone(&Supervisor::ChildMain, static_cast<char*>(stack) + stack_bytes,
                    CLONE_VM | CLONE_VFORK | SIGCHLD, &start);
      err = errno;
      ::munmap(stack, stack_bytes);
    }
  }
  ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  errno = err;
  return pid;
}

void Supervisor::Terminate(int signal, std::string why) {
  ::killpg(child_, signal);
  sent_term_ = true;
  sent_kill_ = sent_kill_ || signal == SIGKILL;
  if (!outcome_.terminated) {
    outcome_.terminated = true;
    outcome_.why = std::move(why);
  }
}

void Supervisor::ActOnDeadlines() {
  if (sent_kill_) return;
  TimePoint valid_until = TimePoint::max();
  for (const Lease& lease : leases_) {
    if (Status s = lease.Check(); !s.ok()) return Terminate(SIGKILL, s.message());
    valid_until = std::min(valid_until, lease.valid_until());
  }
  const TimePoint now = MonotonicClock::now();
  const bool max_hold = now >= options_.renew_until;
  const std::string why = max_hold ? "its max hold " + options_.max_hold_text + " was reached"
                                   : "no renewal got through before its valid_until";
  if (now >= valid_until - options_.kill_lead) return Terminate(SIGKILL, why);
  if (sent_term_ || now < valid_until - options_.term_lead) return;
  Fail(0, "lease on key '" + options_.key + "' is about to expire " +
              (max_hold ? "(its max hold " + options_.max_hold_text + " is reached)"
                        : "without a renewal") +
              "; sending SIGTERM to process group " + std::to_string(child_));
  Terminate(SIGTERM, why);
}

int Supervisor::MillisecondsToNextDeadline() const {
  if (sent_kill_) return -1;
  TimePoint valid_until = TimePoint::max();
  for (const Lease& lease : leases_) valid_until = std::min(valid_until, lease.valid_until());
  const TimePoint next = valid_until - (sent_term_ ? options_.kill_lead : options_.term_lead);
  const auto left = std::chrono::ceil<milliseconds>(next - MonotonicClock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 60'000));
}

void Supervisor::WaitForEvents() {
  pollfd fds[2] = {{signals_.fd(), POLLIN, 0}, {lost_fd_, POLLIN, 0}};
  ::poll(fds, 2, MillisecondsToNextDeadline());
  std::uint64_t count;
  while (::read(lost_fd_, &count, sizeof count) == sizeof count) {
  }
  while (std::optional<int> signal = signals_.Next()) OnSignal(*signal);
}

void Supervisor::OnSignal(int signal) {
  // SIGCHLD only says "look": CollectChild does. A stop sent to dlock is
  // sent to the command's job; when the job stops, CollectChild stops us too.
  if (signal != SIGCHLD) ::killpg(child_, signal);
}

void Supervisor::CollectChild() {
  int status = 0;
  pid_t pid;
  while ((pid = ::waitpid(child_, &status, WNOHANG | WUNTRACED)) == child_) {
    if (WIFSTOPPED(status)) {
      if (IsJobStop(WSTOPSIG(status))) StopWithCommand(WSTOPSIG(status));
      continue;
    }
    outcome_.wait_status = status;
    child_done_ = true;
    return;
  }
}

void Supervisor::StopWithCommand(int signal) {
  // Every process of the group, not only the one we wait for, and before
  // our renewals stop with us.
  ::killpg(child_, SIGSTOP);
  if (::tcgetpgrp(STDIN_FILENO) == child_) terminal_.TakeBack();
  StopSelf(signal, terminal_.present());
  // Continued (fg or bg). While we were stopped nothing renewed: the
  // command goes on only under leases the store confirms now.
  if (Status confirmed = ConfirmLeases(); !confirmed.ok()) {
    Terminate(SIGKILL, "it could not be confirmed after dlock was stopped: " +
                           confirmed.message() + "; the command was not continued");
    return;
  }
  if (terminal_.DlockInForeground()) terminal_.GiveTo(child_);
  ::killpg(child_, SIGCONT);
}

Status Supervisor::ConfirmLeases() {
  for (Lease& lease : leases_) DLOCK_RETURN_IF_ERROR(lease.Renew());
  return Status::Ok();
}

}  // namespace dlock::cli
