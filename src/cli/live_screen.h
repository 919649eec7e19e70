// LiveScreen: a view redrawn in place, as `top` does, for `dlock status
// --watch`. On a terminal: the alternate screen, no cursor, keys read one at
// a time (q quits), lines cut to the window, and the terminal put back as it
// was on exit, on Ctrl-C, and around Ctrl-Z. Elsewhere (a pipe, a file):
// each frame printed after the last, nothing else.
#ifndef DLOCK_SRC_CLI_LIVE_SCREEN_H_
#define DLOCK_SRC_CLI_LIVE_SCREEN_H_

#include <termios.h>

#include <memory>
#include <optional>
#include <string>

#include "core/fd.h"
#include "dlock/clock.h"
#include "dlock/status.h"

namespace dlock::cli {

class LiveScreen {
 public:
  // Reads SIGINT, SIGTERM, SIGHUP, SIGTSTP and SIGWINCH as events from
  // here on: call it before any thread exists. `redraw` false: frames are
  // printed one after another (not a terminal, or a stream for scripts).
  static Result<std::unique_ptr<LiveScreen>> Open(bool redraw);
  ~LiveScreen();
  LiveScreen(const LiveScreen&) = delete;
  LiveScreen& operator=(const LiveScreen&) = delete;

  void Draw(const std::string& frame);
  // Waits up to `d` for a key or a signal. True when the user asked to
  // quit (q, Ctrl-C, SIGTERM, SIGHUP); false when it is time to draw again
  // (the wait ended, the window changed size, the view came back from
  // Ctrl-Z).
  bool WaitOrQuit(Duration d);

 private:
  LiveScreen(internal::Fd signals, bool redraw);
  void Enter();  // the alternate screen, no cursor, keys unbuffered
  void Leave();  // everything as it was
  // A signal arrived: quit, or (after a stop or a resize) draw again.
  bool OnSignal();

  internal::Fd signals_;
  const bool redraw_;
  bool keys_ = false;  // stdin is a terminal: q quits
  std::optional<termios> saved_;
  sigset_t old_mask_{};
};

}  // namespace dlock::cli

#endif  // DLOCK_SRC_CLI_LIVE_SCREEN_H_
