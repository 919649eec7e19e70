#include "cli/detached_holder.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <optional>
#include <string>

#include "cli/common.h"
#include "cli/handle.h"
#include "cli/holder_dir.h"
#include "cli/holder_line.h"
#include "cli/interrupt_watcher.h"
#include "cli/signals.h"

namespace dlock::cli {
namespace {

using internal::Fd;

// How long a connected `dlock release` may take to send its request.
constexpr int kRequestTimeoutMs = 5000;

// A session of its own (no terminal's signals, no hang-up when the
// parent's shell exits), /dev/null for 0-2 so that `$(dlock acquire)`
// sees its end of file, and no other inherited descriptor held open
// (a CI runner's pipe, a caller's 3>log). `report` becomes descriptor 3.
Fd Detach(Fd report) {
  (void)::setsid();
  // A reader gone (the parent, a release) is an error to handle, not death.
  (void)::signal(SIGPIPE, SIG_IGN);
  const int null = ::open("/dev/null", O_RDWR);
  for (int fd = 0; fd <= 2 && null >= 0; ++fd) (void)::dup2(null, fd);
  const int raw = report.Release();
  if (raw != 3) {
    (void)::dup2(raw, 3);
    (void)::close(raw);
  }
  (void)::close_range(4, ~0U, 0);
  return Fd(3);
}

// Tells the parent; false if it is gone (nobody will learn the handle).
bool Report(const Fd& report, const Status& status, std::string_view handle = {}) {
  const std::string line = HolderLine(status, handle);
  return ::write(report.get(), line.data(), line.size()) == static_cast<ssize_t>(line.size());
}

// Tells the parent why no lock is held, and gives the holder's exit code.
int Failed(const Fd& report, const Status& status) {
  (void)Report(report, status);
  return 1;
}

Result<Fd> Listen(const std::string& path) {
  std::optional<sockaddr_un> address = SocketAddress(path);
  if (!address) {
    return InvalidArgumentError("the holders' directory path is too long for a socket: " + path);
  }
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  (void)::unlink(path.c_str());  // a holder killed with -9 leaves its socket
  if (!fd.valid() ||
      ::bind(fd.get(), reinterpret_cast<sockaddr*>(&*address), sizeof *address) != 0 ||
      ::chmod(path.c_str(), 0600) != 0 || ::listen(fd.get(), 4) != 0) {
    return UnavailableError("cannot listen on " + path + ": " + std::strerror(errno));
  }
  return fd;
}

// One connection: a release of this holding, answered with how it went.
// True when the holding ended.
bool Answer(int listener, Lease& lease, const std::string& handle) {
  Fd peer(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
  if (!peer.valid()) return false;
  ucred who{};
  socklen_t size = sizeof who;
  if (::getsockopt(peer.get(), SOL_SOCKET, SO_PEERCRED, &who, &size) != 0 ||
      who.uid != ::getuid()) {
    return false;  // the directory is private; this is belt and braces
  }
  Result<std::string> request = ReadLineFrom(peer.get(), kRequestTimeoutMs);
  std::string reply;
  bool ended = false;
  if (request.ok() && *request == "release " + handle + "\n") {
    // A store answers a release of a holding that is gone (broken, say)
    // as it answers a second release: OK. One renewal first tells the two
    // apart, so that the step that releases learns its lock was lost.
    Status held = lease.Renew();
    Status released = lease.Release();
    if (held.code() == StatusCode::kLeaseLost && released.ok()) released = held;
    reply = HolderLine(released, "released");
    ended = true;
  } else {
    reply = HolderLine(InvalidArgumentError("this holder holds another handle"));
  }
  (void)!::write(peer.get(), reply.data(), reply.size());
  return ended;
}

// Until a release, a signal or the lease's loss.
void Serve(int listener, SignalChannel& signals, int lost, Lease& lease,
           const std::string& handle) {
  pollfd fds[3] = {{listener, POLLIN, 0}, {signals.fd(), POLLIN, 0}, {lost, POLLIN, 0}};
  for (;;) {
    if (::poll(fds, 3, -1) < 0 && errno != EINTR) break;
    if (fds[2].revents) return;  // lost: nothing to release
    if (fds[1].revents) {
      bool ending = false;
      while (std::optional<int> s = signals.Next()) {
        for (int forwarded : kForwardedSignals) ending = ending || *s == forwarded;
      }
      if (ending) break;
    }
    if (fds[0].revents && Answer(listener, lease, handle)) return;
  }
  (void)lease.Release();
}

int Hold(const LockFlags& flags, LockPlan& plan, Fd& report, SignalChannel& signals) {
  auto store = OpenStore(flags.backend);
  if (!store.ok()) return Failed(report, store.status());
  Fd lost(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  plan.options.on_lost = [fd = lost.get()](const Status&) {
    std::uint64_t one = 1;
    (void)!::write(fd, &one, sizeof one);
  };
  std::stop_source cancel;
  plan.options.cancel = cancel.get_token();
  InterruptWatcher watcher(signals, cancel);
  Result<Lease> lease = store->client->Acquire(plan.primary, plan.options);
  watcher.Stop();
  if (watcher.signal() != 0) {
    return Failed(report, CancelledError("interrupted by signal " +
                                         std::to_string(watcher.signal()) +
                                         " while waiting for key '" + plan.primary + "'"));
  }
  if (!lease.ok()) return Failed(report, lease.status());
  const std::string handle = FormatHandle({lease->key(), lease->owner(), lease->token()});
  Result<std::string> dir = HolderDirectory(/*create=*/true);
  const std::string path = dir.ok() ? HolderSocket(*dir, lease->owner()) : "";
  Result<Fd> listener = dir.ok() ? Listen(path) : Result<Fd>(dir.status());
  if (!listener.ok()) {
    (void)lease->Release();
    return Failed(report, listener.status());
  }
  (void)!::chdir("/");  // pins no directory (a CI workspace) while it holds
  if (Report(report, Status::Ok(), handle)) {
    report.Reset();  // the parent's read ends here
    Serve(listener->get(), signals, lost.get(), *lease, handle);
  } else {
    (void)lease->Release();  // the parent is gone: nobody has the handle
  }
  (void)::unlink(path.c_str());
  return 0;
}

}  // namespace

void RunDetachedHolder(const LockFlags& flags, LockPlan plan, Fd report) {
  Fd channel = Detach(std::move(report));
  Result<SignalChannel> signals = SignalChannel::Open();
  if (!signals.ok()) {
    (void)Report(channel, signals.status());
    ::_exit(1);
  }
  ::_exit(Hold(flags, plan, channel, *signals));
}

}  // namespace dlock::cli
