// `dlock status --watch`: the store's holders and waiters, looked at again
// every --interval and redrawn in place (LiveScreen), or streamed as one JSON
// object per line for scripts.
#include <unistd.h>

#include <ctime>
#include <sstream>

#include "cli/common.h"
#include "cli/live_screen.h"
#include "cli/status_cmd.h"
#include "cli/status_view.h"
#include "cli/text.h"
#include "core/duration.h"

namespace dlock::cli {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kMinInterval{100};
constexpr milliseconds kMaxInterval = std::chrono::hours(1);

std::string LocalTime() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char text[16];
  std::strftime(text, sizeof text, "%H:%M:%S", &tm);
  return text;
}

// One look, for people: a header, the holders, then the waiters when the
// store keeps them. A store that cannot be read is said so, and looked at
// again next time.
std::string Frame(Store& store, const StatusFlags& flags) {
  const std::string where = store.client->Describe();
  std::ostringstream out;
  out << "dlock status --watch: " << where << ", every " << flags.interval << ", "
      << LocalTime() << " (q or Ctrl-C quits)\n\n";
  auto holders = store.client->List(flags.prefix);
  if (!holders.ok()) {
    out << "cannot read the store: " << Printable(holders.status().message())
        << "\n(looking again in " << flags.interval << ")\n";
    return out.str();
  }
  WriteHolders(out, *holders, flags.prefix, where);
  auto waiters = store.client->Waiters(flags.prefix);
  if (waiters.ok()) {
    out << '\n';
    WriteWaits(out, AnalyzeWaits(*holders, *waiters), holders->size(), flags.prefix, where);
  } else if (waiters.status().code() != StatusCode::kFailedPrecondition) {
    out << "\ncannot read the waiters: " << Printable(waiters.status().message()) << '\n';
  }
  return out.str();
}

Result<milliseconds> Interval(const std::string& text) {
  auto d = internal::ParseDuration(text);
  if (!d.ok()) return d.status().WithContext("--interval");
  if (*d < kMinInterval || *d > kMaxInterval) {
    return InvalidArgumentError("--interval " + text + " is out of range: 100ms to 1h");
  }
  return *d;
}

}  // namespace

int RunWatch(const StatusFlags& flags) {
  auto interval = Interval(flags.interval);
  if (!interval.ok()) return Fail(interval.status());
  if (flags.count < 0) {
    return Fail(InvalidArgumentError("--count " + std::to_string(flags.count) +
                                     " is out of range: 0 (no end) or more"));
  }
  const bool redraw = !flags.json && ::isatty(STDOUT_FILENO) == 1;
  // Before the store: the client's threads must inherit the signal mask.
  auto screen = LiveScreen::Open(redraw);
  if (!screen.ok()) return Fail(screen.status());
  auto store = OpenStore(flags.backend);
  if (!store.ok()) {
    screen->reset();  // the terminal back first, so the error is seen
    return Fail(store.status());
  }
  for (int looks = 1;; ++looks) {
    const std::string frame =
        flags.json ? JsonText(LookJson(*store->client, flags.prefix, flags.waits), -1) + "\n"
                   : Frame(*store, flags);
    (*screen)->Draw(redraw || flags.json ? frame : frame + "\n");
    if (flags.count > 0 && looks >= flags.count) break;
    if ((*screen)->WaitOrQuit(*interval)) break;
  }
  return kExitOk;
}

}  // namespace dlock::cli
