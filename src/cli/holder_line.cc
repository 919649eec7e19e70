#include "cli/holder_line.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

namespace dlock::cli {

std::string HolderLine(const Status& status, std::string_view text) {
  std::string line = status.ok() ? "OK " + std::string(text)
                                 : "ERR " + std::to_string(static_cast<int>(status.code())) +
                                       " " + status.message();
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return line + "\n";
}

Result<std::string> ReadHolderLine(std::string_view line, std::string_view who) {
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  if (line.starts_with("OK ")) return std::string(line.substr(3));
  if (line.starts_with("ERR ")) {
    line.remove_prefix(4);
    int code = 0;
    const auto [end, error] = std::from_chars(line.data(), line.data() + line.size(), code);
    if (error == std::errc() && code > 0 && code <= static_cast<int>(StatusCode::kInternal) && end < line.data() + line.size()) {
      return Status(static_cast<StatusCode>(code), std::string(end + 1, line.data() + line.size()));
    }
  }
  if (line.empty()) return InternalError(std::string(who) + " ended without an answer");
  return InternalError(std::string(who) + " answered something unexpected");
}

Result<std::string> ReadLineFrom(int fd, int timeout_ms) {
  std::string line;
  char buffer[512];
  while (line.size() < 65536 && line.find('\n') == std::string::npos) {
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, timeout_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) return UnavailableError("no answer within " + std::to_string(timeout_ms) + " ms");
    const ssize_t n = ready < 0 ? -1 : ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return UnavailableError(std::string("cannot read the answer: ") + std::strerror(errno));
    if (n == 0) break;
    line.append(buffer, static_cast<std::size_t>(n));
  }
  return line;
}

}  // namespace dlock::cli
