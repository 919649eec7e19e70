#include "cli/interrupt_watcher.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <optional>

#include "cli/job_control.h"

namespace dlock::cli {

InterruptWatcher::InterruptWatcher(SignalChannel& signals, std::stop_source cancel)
    : done_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      thread_([this, &signals, cancel]() mutable { Watch(signals, cancel); }) {}

void InterruptWatcher::Stop() {
  if (!thread_.joinable()) return;
  std::uint64_t one = 1;
  (void)!::write(done_.get(), &one, sizeof one);
  thread_.join();
}

void InterruptWatcher::Watch(SignalChannel& signals, std::stop_source& cancel) {
  pollfd fds[2] = {{signals.fd(), POLLIN, 0}, {done_.get(), POLLIN, 0}};
  for (;;) {
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) return;
    if (fds[1].revents) return;
    while (std::optional<int> s = signals.Next()) {
      if (IsJobStop(*s)) StopSelf(*s, Terminal::OnStdin().present());
      if (*s == SIGCHLD || IsJobStop(*s)) continue;
      signal_ = *s;
      cancel.request_stop();
      return;
    }
  }
}

}  // namespace dlock::cli
