#include "cli/live_screen.h"

#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

namespace dlock::cli {
namespace {

constexpr int kWatched[] = {SIGINT, SIGTERM, SIGHUP, SIGTSTP, SIGWINCH};

void WriteAll(const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(STDOUT_FILENO, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // stdout gone: nothing to show it on
    done += static_cast<std::size_t>(n);
  }
}

// The frame cut to the window: at most rows-1 lines of at most cols bytes,
// and a last line saying how many more there were.
std::string Fitted(const std::string& frame) {
  winsize ws{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) != 0 || ws.ws_row < 2 || ws.ws_col < 10) {
    return frame;
  }
  std::istringstream in(frame);
  std::string out, line;
  std::size_t rows = 0, dropped = 0;
  while (std::getline(in, line)) {
    if (rows + 1 >= ws.ws_row) {
      ++dropped;
      continue;
    }
    if (line.size() > ws.ws_col) line.resize(ws.ws_col);
    out += line + "\x1b[K\n";  // clear what the last frame left on the line
    ++rows;
  }
  if (dropped > 0) out += "… " + std::to_string(dropped) + " more line(s)\x1b[K";
  return out;
}

}  // namespace

Result<std::unique_ptr<LiveScreen>> LiveScreen::Open(bool redraw) {
  sigset_t set;
  sigemptyset(&set);
  for (int s : kWatched) sigaddset(&set, s);
  sigset_t old;
  if (int e = ::pthread_sigmask(SIG_BLOCK, &set, &old); e != 0) {
    return InternalError(std::string("cannot block signals: ") + std::strerror(e));
  }
  internal::Fd fd(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!fd.valid()) {
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return InternalError(std::string("cannot read signals: ") + std::strerror(errno));
  }
  std::unique_ptr<LiveScreen> screen(new LiveScreen(std::move(fd), redraw));
  screen->old_mask_ = old;
  screen->keys_ = redraw && ::isatty(STDIN_FILENO) == 1;
  screen->Enter();
  return screen;
}

LiveScreen::LiveScreen(internal::Fd signals, bool redraw)
    : signals_(std::move(signals)), redraw_(redraw) {}

LiveScreen::~LiveScreen() {
  Leave();
  ::pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
}

void LiveScreen::Enter() {
  if (!redraw_) return;
  if (keys_) {
    termios t{};
    if (::tcgetattr(STDIN_FILENO, &t) == 0) {
      saved_ = t;
      t.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);  // ISIG stays: Ctrl-C, Ctrl-Z
      t.c_cc[VMIN] = 1;
      t.c_cc[VTIME] = 0;
      ::tcsetattr(STDIN_FILENO, TCSANOW, &t);
    }
  }
  WriteAll("\x1b[?1049h\x1b[?25l");
}

void LiveScreen::Leave() {
  if (!redraw_) return;
  WriteAll("\x1b[?25h\x1b[?1049l");
  if (saved_) ::tcsetattr(STDIN_FILENO, TCSANOW, &*saved_);
  saved_.reset();
}

void LiveScreen::Draw(const std::string& frame) {
  if (!redraw_) {
    WriteAll(frame);
    return;
  }
  WriteAll("\x1b[H" + Fitted(frame) + "\x1b[J");
}

bool LiveScreen::OnSignal() {
  signalfd_siginfo info{};
  bool quit = false;
  while (::read(signals_.get(), &info, sizeof info) == sizeof info) {
    const int s = static_cast<int>(info.ssi_signo);
    if (s == SIGTSTP) {
      // Put the terminal back before stopping, and take it again after.
      Leave();
      ::raise(SIGSTOP);
      Enter();
    } else if (s != SIGWINCH) {
      quit = true;
    }
  }
  return quit;
}

bool LiveScreen::WaitOrQuit(Duration d) {
  const TimePoint until = MonotonicClock::now() + d;
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - MonotonicClock::now());
    if (left.count() <= 0) return false;
    pollfd fds[2] = {{signals_.get(), POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}};
    const int n = ::poll(fds, keys_ ? 2 : 1, static_cast<int>(left.count()));
    if (n < 0 && errno != EINTR) return false;
    if (n <= 0) continue;
    if (fds[0].revents != 0) return OnSignal();
    if (keys_ && fds[1].revents != 0) {
      char c = 0;
      if (::read(STDIN_FILENO, &c, 1) != 1) {
        keys_ = false;  // stdin closed: no more keys, the view goes on
      } else if (c == 'q' || c == 'Q') {
        return true;
      }
    }
  }
}

}  // namespace dlock::cli
