#include "cli/exported_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/credentials.h"
#include "core/fd.h"
#include "core/uri.h"

namespace dlock::cli {
namespace {

using internal::Fd;

// A directory only this user may enter: $XDG_RUNTIME_DIR is made for such
// files (a tmpfs, emptied at logout); $TMPDIR or /tmp otherwise.
std::string PrivateBase() {
  for (const char* var : {"XDG_RUNTIME_DIR", "TMPDIR"}) {
    const char* dir = std::getenv(var);
    struct stat st {};
    if (dir != nullptr && dir[0] == '/' && ::stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) {
      return dir;
    }
  }
  return "/tmp";
}

Status WriteAll(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return UnavailableError(std::string("cannot write it: ") + std::strerror(errno));
    text.remove_prefix(static_cast<std::size_t>(n));
  }
  return Status::Ok();
}

}  // namespace

Result<ExportedStore> ExportedStore::For(const std::string& uri_text) {
  DLOCK_ASSIGN_OR_RETURN(internal::Uri uri, internal::ParseUri(uri_text));
  DLOCK_RETURN_IF_ERROR(internal::ResolveCredentials(uri));
  ExportedStore store;
  if (!uri.has_password || uri.password_source != internal::Uri::PasswordSource::kUri) {
    store.uri_ = uri.Format(/*with_password=*/false);
    return store;
  }
  std::string dir = PrivateBase() + "/dlock-credentials.XXXXXX";
  if (::mkdtemp(dir.data()) == nullptr) {  // mode 0700
    return UnavailableError("cannot make a private directory for the store's password in " +
                            PrivateBase() + ": " + std::strerror(errno));
  }
  store.dir_ = dir;
  const std::string path = dir + "/password";
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd.valid()) {
    return UnavailableError("cannot create " + path + ": " + std::strerror(errno));
  }
  if (Status s = WriteAll(fd.get(), uri.password + "\n"); !s.ok()) {
    return s.WithContext(path);
  }
  uri.password_source = internal::Uri::PasswordSource::kFile;
  uri.password_from = path;
  store.uri_ = uri.Format(/*with_password=*/false);
  return store;
}

ExportedStore::ExportedStore(ExportedStore&& other) noexcept
    : uri_(std::move(other.uri_)), dir_(std::exchange(other.dir_, "")) {}

ExportedStore::~ExportedStore() {
  if (dir_.empty()) return;
  ::unlink((dir_ + "/password").c_str());
  ::rmdir(dir_.c_str());
}

}  // namespace dlock::cli
