// `dlock acquire KEY` and `dlock release HANDLE`: a lock that spans several
// steps (a CI job's, a unit's ExecStartPre and ExecStopPost). acquire
// leaves a detached holder renewing the lease (detached_holder.h) and
// prints its handle; release asks that holder to release.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>

#include "cli/command.h"
#include "cli/common.h"
#include "cli/detached_holder.h"
#include "cli/handle.h"
#include "cli/holder_dir.h"
#include "cli/holder_line.h"
#include "cli/job_control.h"
#include "cli/lock_flags.h"
#include "cli/signals.h"

namespace dlock::cli {
namespace {

using internal::Fd;

// How long `dlock release` waits for the holder's answer: its release is
// one store call, bounded by the store's own timeouts well within this.
constexpr int kReleaseAnswerMs = 60'000;

struct AcquireFlags : LockFlags {
  std::string format = "word";
};

struct ReleaseFlags {
  std::optional<std::string> handle;
};

// Waits for the holder's one line, passing Ctrl-C and friends on to it as
// SIGTERM (it then gives up waiting, or releases what it got). Returns the
// line and the signal that interrupted, if any.
std::pair<Result<std::string>, int> AwaitHolder(int from, pid_t holder, SignalChannel& signals) {
  int interrupted = 0;
  std::string line;
  pollfd fds[2] = {{from, POLLIN, 0}, {signals.fd(), POLLIN, 0}};
  for (;;) {
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) break;
    while (std::optional<int> s = signals.Next()) {
      if (IsJobStop(*s)) StopSelf(*s, Terminal::OnStdin().present());
      if (*s == SIGCHLD || IsJobStop(*s) || interrupted != 0) continue;
      interrupted = *s;
      (void)::kill(holder, SIGTERM);
    }
    if (fds[0].revents == 0) continue;
    char buffer[512];
    const ssize_t n = ::read(from, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    line.append(buffer, static_cast<std::size_t>(n));
    if (line.find('\n') != std::string::npos) break;
  }
  return {ReadHolderLine(line, "the detached holder"), interrupted};
}

int RunAcquire(const AcquireFlags& flags) {
  auto plan = CheckLockFlags(flags, "dlock acquire KEY [--ttl D] [--wait D] [--format word|env]");
  if (!plan.ok()) return Fail(plan.status());
  if (flags.format != "word" && flags.format != "env") {
    return Fail(kExitUsage, "--format '" + flags.format + "' is not one of: word, env");
  }
  // Before the fork, so that the holder starts with these signals blocked.
  Result<SignalChannel> signals = SignalChannel::Open();
  if (!signals.ok()) return Fail(signals.status());
  int ends[2];
  if (::pipe2(ends, O_CLOEXEC) != 0) return Fail(kExitSoftware, std::strerror(errno));
  Fd read_end(ends[0]), write_end(ends[1]);
  const pid_t holder = ::fork();
  if (holder < 0) return Fail(kExitSoftware, std::string("cannot fork: ") + std::strerror(errno));
  if (holder == 0) {
    read_end.Reset();
    RunDetachedHolder(flags, std::move(*plan), std::move(write_end));
  }
  write_end.Reset();
  auto [answer, interrupted] = AwaitHolder(read_end.get(), holder, *signals);
  if (interrupted != 0) {
    return Fail(128 + interrupted, "interrupted by signal " + std::to_string(interrupted) +
                                       " while waiting for key '" + plan->primary + "'");
  }
  if (!answer.ok()) {
    (void)::waitpid(holder, nullptr, 0);  // it ends after an error
    return Fail(answer.status());
  }
  auto handle = ParseHandle(*answer);
  if (!handle.ok()) return Fail(kExitSoftware, "the holder's handle: " + handle.status().message());
  std::cout << (flags.format == "env" ? HandleAsShell(*handle, handle->token != 0)
                                      : FormatHandle(*handle) + "\n");
  return kExitOk;
}

// A connection to the holder's socket; invalid, with `error` set, if none.
Fd ConnectTo(const std::string& path, int& error) {
  std::optional<sockaddr_un> address = SocketAddress(path);
  error = ENAMETOOLONG;
  if (!address) return Fd();
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid() ||
      ::connect(fd.get(), reinterpret_cast<sockaddr*>(&*address), sizeof *address) != 0) {
    error = errno;
    return Fd();
  }
  return fd;
}

int RunRelease(const ReleaseFlags& flags) {
  std::string text;
  if (flags.handle) {
    text = *flags.handle;
  } else if (const char* env = std::getenv("DLOCK_HANDLE"); env && *env) {
    text = env;
  } else {
    return Fail(kExitUsage, "no handle given: dlock release HANDLE, or set DLOCK_HANDLE "
                            "(dlock acquire --format env does)");
  }
  auto handle = ParseHandle(text);
  if (!handle.ok()) return Fail(handle.status());
  const std::string gone = "no holder of key '" + handle->key + "' (token " +
                           std::to_string(handle->token) +
                           ") on this host: its lease was lost, or it was released already, or "
                           "acquired on another host";
  auto dir = HolderDirectory(/*create=*/false);
  if (!dir.ok() && dir.status().code() == StatusCode::kFailedPrecondition) {
    return Fail(kExitLeaseLost, gone);
  }
  if (!dir.ok()) return Fail(dir.status());
  const std::string socket = HolderSocket(*dir, handle->owner);
  int error = 0;
  Fd peer = ConnectTo(socket, error);
  if (!peer.valid()) {
    // Refused: a holder killed with -9 left its socket; nobody listens.
    if (error == ECONNREFUSED) (void)::unlink(socket.c_str());
    return Fail(kExitLeaseLost, gone);
  }
  const std::string request = "release " + FormatHandle(*handle) + "\n";
  if (::send(peer.get(), request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    return Fail(kExitLeaseLost, gone);
  }
  auto line = ReadLineFrom(peer.get(), kReleaseAnswerMs);
  if (!line.ok()) return Fail(line.status().WithContext("the holder of key '" + handle->key + "'"));
  auto answer = ReadHolderLine(*line, "the holder of key '" + handle->key + "'");
  return answer.ok() ? kExitOk : Fail(answer.status());
}

}  // namespace

void AddAcquireCommands(CLI::App& app, Commands& commands) {
  auto acquire = std::make_shared<AcquireFlags>();
  CLI::App* cmd = app.add_subcommand(
      "acquire", "Take KEY and keep it after this command returns: a detached holder renews "
                 "the lease until 'dlock release HANDLE'; prints the handle");
  AddLockFlags(*cmd, *acquire);
  AddHoldingFlags(*cmd, *acquire);
  cmd->add_option("--format", acquire->format,
                  "word: the handle alone (KEY:OWNER:TOKEN); env: export lines of "
                  "DLOCK_HANDLE, DLOCK_KEY and DLOCK_TOKEN for eval")
      ->capture_default_str();
  cmd->footer(
      "Usage: h=$(dlock acquire KEY [OPTIONS]) ... dlock release \"$h\"\n"
      "   or: eval \"$(dlock acquire KEY --format env)\" ... dlock release\n"
      "The holder lives on this host; if it dies, the lease expires as usual and release "
      "says it was lost.\nExit status: 0 held; 64 usage; 69 store unavailable; 75 gave up "
      "waiting; 77 credentials refused; 128+N interrupted by signal N.");
  commands.push_back({cmd, [acquire] { return RunAcquire(*acquire); }});

  auto release = std::make_shared<ReleaseFlags>();
  cmd = app.add_subcommand("release",
                           "Release a lock 'dlock acquire' holds, by its handle (or "
                           "$DLOCK_HANDLE); the detached holder then ends");
  cmd->add_option("handle", release->handle, "the handle dlock acquire printed");
  cmd->footer(
      "Exit status: 0 released; 64 not a handle; 69 the store could not be told (the lease "
      "expires by itself); 79 the lease was lost before the release, or no holder of it "
      "runs on this host.");
  commands.push_back({cmd, [release] { return RunRelease(*release); }});
}

}  // namespace dlock::cli
