// How `dlock exec` keeps its promise: the child's process group is gone
// before the lease's valid_until, so before the store can grant the key to
// anybody else.
//
//   acquire ──> fork child in its own process group ──> renew in background
//        │                                                  │
//        │  valid_until - lead:      SIGTERM to the group   │ (no renewal
//        │  valid_until - lead/5:    SIGKILL to the group   │  got through)
//        │  lease lost (store names another owner): SIGKILL at once
//
// Signals are blocked in every thread and read from a signalfd, so the main
// loop sees SIGCHLD, SIGINT and SIGTERM as events next to the lease's
// deadlines, and nothing runs inside a signal handler.
#include "cli/exec.h"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <optional>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <thread>

#include "cli/common.h"
#include "core/fd.h"
#include "core/duration.h"

extern char** environ;

namespace dlock::cli {
using internal::Fd;
namespace {

using std::chrono::milliseconds;

constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

Result<milliseconds> ParseFlagDuration(std::string_view flag, const std::string& text) {
  auto d = internal::ParseDuration(text);
  if (!d.ok()) return d.status().WithContext(flag);
  return d;
}

// The child's environment: ours, with DLOCK_* replaced. DLOCK_KEY and
// DLOCK_TOKEN are the primary key's; with more keys, DLOCK_KEY_COUNT and
// DLOCK_KEY_<i> / DLOCK_TOKEN_<i> list every one, in the canonical order
// they were taken in.
// DLOCK_SESSION makes a dlock (or Client::Connect) run by the child one
// party with us in `dlock status --waits`: it acts for the holder.
std::vector<std::string> ChildEnvironment(const std::vector<Lease>& leases,
                                          const std::string& primary, const std::string& uri,
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
    if (l.token_ordered()) {
      env.push_back("DLOCK_TOKEN=" + std::to_string(l.token()));
    } else {
      env.push_back("DLOCK_TOKEN_UNORDERED=1");
    }
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
  env.push_back("DLOCK_BACKEND=" + uri);
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

void WriteAll(int fd, std::string_view s) {
  while (!s.empty()) {
    ssize_t n = ::write(fd, s.data(), s.size());
    if (n <= 0) return;
    s.remove_prefix(static_cast<std::size_t>(n));
  }
}

// Only async-signal-safe calls between fork and exec: the parent has threads.
[[noreturn]] void RunChild(pid_t parent, const sigset_t& old_mask, char** argv, char** envp,
                           const std::string& exec_error_prefix) {
  ::setpgid(0, 0);
  // If dlock dies (even by SIGKILL) the child must not keep running without
  // the lock. PDEATHSIG follows the thread that forked: the main thread,
  // which lives until dlock exits.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(kExitSoftware);
  struct sigaction dfl{};
  dfl.sa_handler = SIG_DFL;
  for (int s : kForwarded) ::sigaction(s, &dfl, nullptr);
  ::sigaction(SIGCHLD, &dfl, nullptr);
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  ::execvpe(argv[0], argv, envp);
  const int err = errno;
  WriteAll(2, exec_error_prefix);
  WriteAll(2, err == ENOENT ? "command not found\n"
              : err == EACCES ? "permission denied\n"
                              : "cannot execute\n");
  ::_exit(err == ENOENT ? 127 : 126);
}

int ExitCodeOfChild(int wstatus) {
  if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
  return kExitSoftware;
}

// Waits for SIGINT/SIGTERM/SIGHUP/SIGQUIT while Acquire blocks, and cancels
// it. Stops when `done` is signalled.
class InterruptWatcher {
 public:
  InterruptWatcher(int signal_fd, std::stop_source cancel)
      : done_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
        thread_([this, signal_fd, cancel]() mutable {
          pollfd fds[2] = {{signal_fd, POLLIN, 0}, {done_.get(), POLLIN, 0}};
          for (;;) {
            if (::poll(fds, 2, -1) < 0 && errno != EINTR) return;
            if (fds[1].revents) return;
            signalfd_siginfo si;
            while (::read(signal_fd, &si, sizeof si) == sizeof si) {
              if (si.ssi_signo == SIGCHLD) continue;
              signal_ = static_cast<int>(si.ssi_signo);
              cancel.request_stop();
              return;
            }
          }
        }) {}

  ~InterruptWatcher() { Stop(); }

  void Stop() {
    if (!thread_.joinable()) return;
    std::uint64_t one = 1;
    (void)!::write(done_.get(), &one, sizeof one);
    thread_.join();
  }
  int signal() const { return signal_; }

 private:
  Fd done_;
  std::atomic<int> signal_{0};
  std::thread thread_;
};

}  // namespace

int RunExec(const ExecFlags& flags) {
  auto ttl = ParseFlagDuration("--ttl", flags.ttl);
  if (!ttl.ok()) return Fail(ttl.status());
  auto wait = ParseFlagDuration("--wait", flags.wait);
  if (!wait.ok()) return Fail(wait.status());
  auto grace = ParseFlagDuration("--kill-grace", flags.kill_grace);
  if (!grace.ok()) return Fail(grace.status());
  if (Status s = ValidateKey(flags.key); !s.ok()) return Fail(s);
  for (const auto& k : flags.extra_keys) {
    if (Status s = ValidateKey(k); !s.ok()) return Fail(s.WithContext("--key"));
  }
  std::optional<std::chrono::milliseconds> max_hold;
  if (!flags.max_hold.empty()) {
    auto d = ParseFlagDuration("--max-hold", flags.max_hold);
    if (!d.ok()) return Fail(d.status());
    if (*d <= std::chrono::milliseconds(0)) return Fail(kExitUsage, "--max-hold must be positive");
    max_hold = *d;
  }
  std::chrono::milliseconds lock_delay{0};
  if (!flags.lock_delay.empty()) {
    auto d = ParseFlagDuration("--lock-delay", flags.lock_delay);
    if (!d.ok()) return Fail(d.status());
    lock_delay = *d;
  }
  if (Status s = ValidateTtl(*ttl); !s.ok()) return Fail(s.WithContext("--ttl"));
  if (flags.command.empty()) {
    return Fail(kExitUsage, "no command given: usage: dlock exec KEY [OPTIONS] -- CMD [ARGS...]");
  }

  // Block the signals we handle before any thread exists, so that every
  // thread inherits the mask and they arrive only through the signalfd.
  sigset_t handled, old_mask;
  sigemptyset(&handled);
  for (int s : kForwarded) sigaddset(&handled, s);
  sigaddset(&handled, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &handled, &old_mask);
  Fd signal_fd(::signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK));
  Fd lost_fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!signal_fd.valid() || !lost_fd.valid()) {
    return Fail(kExitSoftware, std::string("cannot set up signal handling: ") + std::strerror(errno));
  }

  if (flags.once && !flags.extra_keys.empty()) {
    return Fail(kExitUsage, "dlock once takes one key (no --key)");
  }
  auto store = OpenStore(flags.backend);
  if (!store.ok()) return Fail(store.status());
  // `dlock once`: done already? Then there is nothing to wait for.
  auto already_done = [&]() -> Result<bool> {
    if (!flags.once) return false;
    return store->client->IsDone(flags.key);
  };
  if (auto done = already_done(); !done.ok() || *done) {
    if (!done.ok()) return Fail(done.status());
    Fail(0, "'" + flags.key + "' is already done; not running it again");
    return kExitOk;
  }

  std::stop_source cancel;
  AcquireOptions options;
  options.ttl = *ttl;
  options.wait = *wait;
  options.cancel = cancel.get_token();
  const int lost_event = lost_fd.get();
  options.on_lost = [lost_event](const Status&) {
    std::uint64_t one = 1;
    (void)!::write(lost_event, &one, sizeof one);
  };
  options.max_hold = max_hold;
  options.lock_delay = lock_delay;
  options.shared = flags.shared;
  if (flags.permits < 1 || flags.permits > static_cast<int>(kMaxPermits)) {
    return Fail(kExitUsage, "--permits " + std::to_string(flags.permits) +
                                " is out of range: 1 to 65535");
  }
  options.permits = static_cast<std::uint32_t>(flags.permits);
  if (!flags.label.empty()) options.label = flags.label;
  std::vector<std::string> keys = flags.extra_keys;
  keys.push_back(flags.key);
  Result<std::vector<Lease>> acquired = InternalError("not acquired");
  int interrupted = 0;
  if (keys.size() == 1) {
    // One attempt first: an uncontended key needs no watcher thread.
    Result<Lease> one = store->client->TryAcquire(flags.key, options);
    if (!flags.no_wait && one.status().code() == StatusCode::kLockHeld) {
      InterruptWatcher watcher(signal_fd.get(), cancel);
      one = store->client->Acquire(flags.key, options);
      watcher.Stop();
      interrupted = watcher.signal();
    }
    if (one.ok()) {
      std::vector<Lease> v;
      v.push_back(std::move(*one));
      acquired = std::move(v);
    } else {
      acquired = one.status();
    }
  } else {
    // Several keys: all or nothing, in one canonical order (no deadlock
    // between two commands asking for the same keys in different orders).
    if (flags.no_wait) options.wait = std::chrono::milliseconds(0);
    InterruptWatcher watcher(signal_fd.get(), cancel);
    acquired = store->client->AcquireAll(keys, options);
    watcher.Stop();
    interrupted = watcher.signal();
  }
  if (interrupted != 0) {
    if (acquired.ok()) {
      for (auto& l : *acquired) (void)l.Release();
    }
    Fail(128 + interrupted, "interrupted by signal " + std::to_string(interrupted) +
                                " while waiting for key '" + flags.key + "'");
    return 128 + interrupted;
  }
  if (!acquired.ok()) return Fail(acquired.status());
  std::vector<Lease>& leases = *acquired;
  auto release_all = [&] {
    Status first;
    for (auto& l : leases) {
      Status s = l.Release();
      if (first.ok() && !s.ok()) first = s;
    }
    return first;
  };
  // The earliest valid_until, and the first loss, among the leases.
  auto earliest_valid_until = [&] {
    TimePoint t = TimePoint::max();
    for (const auto& l : leases) t = std::min(t, l.valid_until());
    return t;
  };
  auto first_loss = [&] {
    for (const auto& l : leases) {
      if (Status s = l.Check(); !s.ok()) return s;
    }
    return Status::Ok();
  };

  // Somebody may have finished it while we waited for the lock.
  if (auto done = already_done(); !done.ok() || *done) {
    (void)release_all();
    if (!done.ok()) return Fail(done.status());
    Fail(0, "'" + flags.key + "' was done while we waited; not running it again");
    return kExitOk;
  }

  std::vector<std::string> env = ChildEnvironment(leases, flags.key, store->uri, store->client->Session());
  std::vector<std::string> args = flags.command;
  std::vector<char*> envp = CStrings(env);
  std::vector<char*> argv = CStrings(args);
  const std::string exec_error_prefix = "dlock: cannot run '" + args[0] + "': ";

  // Orphaned members of the child's group are re-parented to us, so that
  // after a SIGKILL we can wait until the whole group is gone.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  if (child < 0) {
    (void)release_all();
    return Fail(kExitSoftware, std::string("fork failed: ") + std::strerror(errno));
  }
  if (child == 0) RunChild(parent, old_mask, argv.data(), envp.data(), exec_error_prefix);
  ::setpgid(child, child);  // also done by the child; whichever runs first wins

  const TimePoint started = MonotonicClock::now();
  auto past_max_hold = [&] { return max_hold && MonotonicClock::now() >= started + *max_hold; };
  // When to act, counted back from valid_until: valid_until is already a
  // drift margin before the store's own expiry.
  const Duration term_lead = std::min<Duration>(*grace, *ttl / 4);
  const Duration kill_lead = term_lead / 5;
  bool sent_term = false, sent_kill = false;
  Status lost_reason;
  int wstatus = 0;
  bool child_done = false;
  int forwarded = 0;

  auto reap = [&] {
    if (child_done) return;
    if (::waitpid(child, &wstatus, WNOHANG) == child) child_done = true;
  };

  while (!child_done) {
    const TimePoint now = MonotonicClock::now();
    const TimePoint valid_until = earliest_valid_until();
    if (lost_reason.ok()) lost_reason = first_loss();
    if (!sent_kill && (!lost_reason.ok() || now >= valid_until - kill_lead)) {
      ::killpg(child, SIGKILL);
      sent_kill = sent_term = true;
    } else if (!sent_term && now >= valid_until - term_lead) {
      Fail(0, "lease on key '" + flags.key + "' is about to expire " +
                  (past_max_hold() ? "(its max hold " + flags.max_hold + " is reached)"
                                   : "without a renewal") +
                  "; sending SIGTERM to process group " + std::to_string(child));
      ::killpg(child, SIGTERM);
      sent_term = true;
    }
    int timeout_ms = -1;
    if (!sent_kill) {
      const TimePoint next = sent_term ? valid_until - kill_lead : valid_until - term_lead;
      auto left = std::chrono::ceil<milliseconds>(next - MonotonicClock::now()).count();
      timeout_ms = static_cast<int>(std::clamp<long long>(left, 0, 60'000));
    }
    pollfd fds[2] = {{signal_fd.get(), POLLIN, 0}, {lost_fd.get(), POLLIN, 0}};
    ::poll(fds, 2, timeout_ms);
    std::uint64_t count;
    while (::read(lost_fd.get(), &count, sizeof count) == sizeof count) {
    }
    signalfd_siginfo si;
    while (::read(signal_fd.get(), &si, sizeof si) == sizeof si) {
      if (si.ssi_signo != SIGCHLD) {
        forwarded = static_cast<int>(si.ssi_signo);
        ::killpg(child, forwarded);
      }
    }
    reap();
  }
  if (sent_kill) {
    // Wait for the rest of the group (it was SIGKILLed) before we report.
    while (::waitpid(-child, nullptr, 0) > 0 || errno == EINTR) {
    }
  }

  // Recorded while the lease still holds (owner-checked in the store), and
  // only for a run that succeeded under it.
  Status marked;
  if (flags.once && !sent_term && lost_reason.ok() && ExitCodeOfChild(wstatus) == 0) {
    marked = store->client->MarkDone(leases.front());
  }
  Status released = release_all();
  if (!marked.ok()) {
    return Fail(marked.code() == StatusCode::kUnavailable ? kExitUnavailable : kExitLeaseLost,
                "'" + flags.key + "' ran, but could not be recorded as done (" +
                    marked.message() + "); the next caller will run it again");
  }
  if (sent_term || !lost_reason.ok()) {
    std::string why = !lost_reason.ok() ? lost_reason.message()
                      : past_max_hold() ? "its max hold " + flags.max_hold + " was reached"
                                        : "no renewal got through before its valid_until";
    return Fail(kExitLeaseLost, "lease on key '" + flags.key + "' lost (" + why +
                                    "); the command's process group was terminated");
  }
  if (released.code() == StatusCode::kLeaseLost) {
    return Fail(kExitLeaseLost, "lease on key '" + flags.key +
                                    "' was lost while the command ran: " + released.message());
  }
  if (!released.ok()) {
    Fail(0, "warning: could not release key '" + flags.key + "': " + released.message() +
                "; it expires by itself within " + internal::FormatDuration(*ttl));
  }
  (void)forwarded;
  return ExitCodeOfChild(wstatus);
}

}  // namespace dlock::cli
