// While a command blocks in Acquire: SIGINT/SIGTERM/SIGHUP/SIGQUIT cancel the
// acquire; a job-control stop stops dlock (the acquire goes on when it is
// continued).
#ifndef DLOCK_SRC_CLI_INTERRUPT_WATCHER_H_
#define DLOCK_SRC_CLI_INTERRUPT_WATCHER_H_

#include <atomic>
#include <stop_token>
#include <thread>

#include "cli/signals.h"
#include "core/fd.h"

namespace dlock::cli {

class InterruptWatcher {
 public:
  // Watches `signals` on a thread of its own until Stop, requesting a stop
  // of `cancel` on the first interrupting signal.
  InterruptWatcher(SignalChannel& signals, std::stop_source cancel);
  ~InterruptWatcher() { Stop(); }
  InterruptWatcher(const InterruptWatcher&) = delete;
  InterruptWatcher& operator=(const InterruptWatcher&) = delete;

  void Stop();
  // The signal that cancelled the acquire, or 0.
  int signal() const { return signal_; }

 private:
  void Watch(SignalChannel& signals, std::stop_source& cancel);

  internal::Fd done_;
  std::atomic<int> signal_{0};
  std::thread thread_;
};

}  // namespace dlock::cli

#endif  // DLOCK_SRC_CLI_INTERRUPT_WATCHER_H_
