#include "cli/signals.h"

#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace dlock::cli {

Result<SignalChannel> SignalChannel::Open() {
  SignalChannel channel;
  sigset_t handled;
  sigemptyset(&handled);
  for (int s : kForwardedSignals) sigaddset(&handled, s);
  for (int s : {SIGCHLD, SIGTSTP, SIGTTIN, SIGTTOU}) sigaddset(&handled, s);
  ::pthread_sigmask(SIG_BLOCK, &handled, &channel.original_mask_);
  channel.fd_ = internal::Fd(::signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!channel.fd_.valid()) {
    return InternalError(std::string("cannot set up signal handling: ") + std::strerror(errno));
  }
  return channel;
}

std::optional<int> SignalChannel::Next() {
  signalfd_siginfo info;
  if (::read(fd_.get(), &info, sizeof info) != sizeof info) return std::nullopt;
  return static_cast<int>(info.ssi_signo);
}

}  // namespace dlock::cli
