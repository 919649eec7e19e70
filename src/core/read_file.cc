#include "core/read_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/fd.h"

namespace dlock::internal {

Result<std::string> ReadSmallFile(const std::string& path, std::size_t max_bytes,
                                  const std::string& what, const std::string& too_large) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return InvalidArgumentError(what + " cannot be read: " + std::strerror(errno));
  std::string text(max_bytes + 1, '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return InvalidArgumentError(what + " cannot be read: " + std::strerror(errno));
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  if (got > max_bytes) return InvalidArgumentError(what + " " + too_large);
  text.resize(got);
  return text;
}

}  // namespace dlock::internal
