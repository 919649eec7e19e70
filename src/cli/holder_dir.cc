#include "cli/holder_dir.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace dlock::cli {

Result<std::string> HolderDirectory(bool create) {
  std::string dir;
  // XDG: a relative XDG_RUNTIME_DIR is invalid and ignored.
  if (const char* runtime = std::getenv("XDG_RUNTIME_DIR"); runtime && runtime[0] == '/') {
    dir = std::string(runtime) + "/dlock";
  } else {
    dir = "/tmp/dlock-" + std::to_string(::getuid());
  }
  if (create && ::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return UnavailableError("cannot make the holders' directory " + dir + ": " +
                            std::strerror(errno));
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    return FailedPreconditionError("no holders' directory " + dir + ": " + std::strerror(errno));
  }
  // Another user's directory (say a /tmp name taken first) must not be used:
  // whoever owns it could answer in a holder's place.
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::getuid() || (st.st_mode & 077) != 0) {
    return PermissionDeniedError("the holders' directory " + dir +
                                 " is not a private directory of this user's (want mode 0700, "
                                 "owner uid " + std::to_string(::getuid()) + ", not a link)");
  }
  return dir;
}

std::string HolderSocket(const std::string& dir, const OwnerId& owner) {
  return dir + "/" + owner.ToString() + ".sock";
}

std::optional<sockaddr_un> SocketAddress(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof address.sun_path) return std::nullopt;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  return address;
}

}  // namespace dlock::cli
