#include "cli/exec_metrics.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "cli/common.h"
#include "core/fd.h"
#include "core/prometheus_writer.h"

namespace dlock::cli {
namespace {

using internal::PrometheusWriter;

std::string DirectoryOf(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

// One word for what happened, for alerts: ok, command_failed, lease_lost,
// not_recorded, skipped, timed_out, unavailable, no_permission, usage,
// interrupted, error.
std::string Outcome(const ExecRecord& r, int exit_code) {
  if (r.lease_lost) return "lease_lost";
  if (r.done_not_recorded) return "not_recorded";
  if (r.command_ran) return exit_code == 0 ? "ok" : "command_failed";
  switch (exit_code) {
    case kExitOk: return "skipped";  // `once`: done already
    case kExitTimedOut: return "timed_out";
    case kExitUnavailable: return "unavailable";
    case kExitNoPermission: return "no_permission";
    case kExitUsage: return "usage";
    default: return exit_code > 128 ? "interrupted" : "error";
  }
}

double Seconds(Duration d) { return std::chrono::duration<double>(d).count(); }

std::string Text(const ExecRecord& r, int exit_code) {
  auto w = PrometheusWriter::Make({{"key", r.key}});
  const TimePoint now = MonotonicClock::now();
  const TimePoint granted = r.granted.value_or(now);
  w->Gauge("dlock_exec_end_timestamp_seconds", "When the run ended, in Unix time.", {},
           std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
               .count());
  w->Gauge("dlock_exec_waited_seconds", "From the start to the grant, or to giving up.", {},
           Seconds(granted - r.started));
  w->Gauge("dlock_exec_held_seconds", "From the grant to the release; 0 if never granted.",
           {}, r.granted ? Seconds(r.released.value_or(now) - *r.granted) : 0.0);
  if (r.token) {
    w->Gauge("dlock_exec_token", "The fencing token the run held.", {},
             static_cast<double>(*r.token));
  }
  w->Gauge("dlock_exec_exit_code", "dlock's exit status: the command's own, or dlock's.", {},
           exit_code);
  w->Gauge("dlock_exec_outcome", "1 for what happened (label outcome).",
           {{"outcome", Outcome(r, exit_code)}}, 1);
  return w->Take();
}

}  // namespace

Status CheckMetricsFile(const std::string& path) {
  const std::string what = "--metrics-file " + path + ": ";
  if (path.empty()) return InvalidArgumentError("--metrics-file needs a file name");
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return InvalidArgumentError(what + "is a directory; a file name is needed (NAME.prom)");
  }
  const std::string dir = DirectoryOf(path);
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return InvalidArgumentError(what + "directory " + dir + " does not exist");
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return InvalidArgumentError(what + "directory " + dir + " is not writable by this user");
  }
  return Status::Ok();
}

Status WriteMetricsFile(const std::string& path, const ExecRecord& record, int exit_code) {
  const std::string text = Text(record, exit_code);
  const std::filesystem::path target(path);
  const std::string temp = DirectoryOf(path) + "/." + target.filename().string() + ".tmp." +
                           std::to_string(::getpid());
  internal::Fd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
                         0644));
  if (fd.get() < 0) {
    return UnavailableError("cannot write metrics file " + temp + ": " + std::strerror(errno));
  }
  const bool written =
      ::write(fd.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size());
  if (!written || ::rename(temp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(temp.c_str());
    return UnavailableError("cannot write metrics file " + path + ": " + why);
  }
  return Status::Ok();
}

}  // namespace dlock::cli
