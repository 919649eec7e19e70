// The signals `dlock exec` acts on, read as events from a signalfd next to
// the lease's deadlines, so that nothing runs inside a signal handler.
#ifndef DLOCK_SRC_CLI_SIGNALS_H_
#define DLOCK_SRC_CLI_SIGNALS_H_

#include <signal.h>

#include <optional>

#include "core/fd.h"
#include "dlock/status.h"

namespace dlock::cli {

// Forwarded to the command's process group.
inline constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

class SignalChannel {
 public:
  // Blocks SIGCHLD, the forwarded signals and the job-control stops
  // (SIGTSTP, SIGTTIN, SIGTTOU) in the calling thread, and so in every
  // thread it starts later: call it before any thread exists.
  static Result<SignalChannel> Open();

  int fd() const { return fd_.get(); }
  // The mask before Open: what a child gets back before exec.
  const sigset_t& original_mask() const { return original_mask_; }
  // The next pending signal, if any (never blocks).
  std::optional<int> Next();

 private:
  internal::Fd fd_;
  sigset_t original_mask_{};
};

}  // namespace dlock::cli

#endif  // DLOCK_SRC_CLI_SIGNALS_H_
