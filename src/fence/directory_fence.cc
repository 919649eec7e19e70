// The file fence. Layout inside the fenced directory DIR:
//
//   DIR/NAME                         the files being written
//   DIR/.dlock-fence/<key>.lock      flock(2)ed while one write is checked and made
//   DIR/.dlock-fence/<key>.token     "dlock-fence 1\nhighest N\nkey K\n"
//
// One write: lock; read the highest token; if ours is lower, reject; write
// the content to a temporary file and fsync it; record our token (new record
// file, fsync, rename, fsync the directory); rename the content over NAME;
// fsync DIR. Recording before the rename means a crash can lose the write,
// but can never leave a file written by a token the record does not cover.
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "core/fd.h"
#include "dlock/clock.h"
#include "dlock/fence.h"
#include "dlock/metrics.h"

namespace dlock::fence {
namespace {

using ScopedFd = internal::Fd;

Status SysError(std::string_view what, const std::string& path, int err = errno) {
  return UnavailableError("cannot " + std::string(what) + " " + path + ": " + std::strerror(err));
}

// A file name for a lock key: safe characters kept, the rest %XX; long keys
// are cut and suffixed with a hash (the record holds the full key).
std::string RecordName(std::string_view key) {
  std::string name;
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '.' || c == '_' || c == '-') {
      name += static_cast<char>(c);
    } else {
      static const char* kHex = "0123456789ABCDEF";
      name += '%';
      name += kHex[c >> 4];
      name += kHex[c & 0xF];
    }
  }
  if (name.size() > 200) {
    std::uint64_t h = 1469598103934665603ULL;  // FNV-1a
    for (unsigned char c : key) h = (h ^ c) * 1099511628211ULL;
    char suffix[20];
    std::snprintf(suffix, sizeof suffix, "~%016llx", static_cast<unsigned long long>(h));
    name = name.substr(0, 150) + suffix;
  }
  return name;
}

std::string EscapeForRecord(std::string_view key) {
  std::string out;
  for (unsigned char c : key) {
    if (c == '\n' || c == '%') {
      out += c == '\n' ? "%0A" : "%25";
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// `mode`: none for 0644 less the umask, else exactly that; `owner`: a
// replaced file's, to keep (root only).
struct FileAttributes {
  std::optional<mode_t> mode;
  std::optional<std::pair<uid_t, gid_t>> owner;
};

Status WriteFileSynced(const std::string& path, std::string_view content,
                       const FileAttributes& attributes = {}) {
  ScopedFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (fd.get() < 0) return SysError("create", path);
  if ((attributes.mode && ::fchmod(fd.get(), *attributes.mode) != 0) ||
      (attributes.owner &&
       ::fchown(fd.get(), attributes.owner->first, attributes.owner->second) != 0)) {
    Status s = SysError("set the mode or owner of", path);
    ::unlink(path.c_str());
    return s;
  }
  while (!content.empty()) {
    ssize_t n = ::write(fd.get(), content.data(), content.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      Status s = SysError("write", path);
      ::unlink(path.c_str());
      return s;
    }
    content.remove_prefix(static_cast<std::size_t>(n));
  }
  if (::fsync(fd.get()) != 0) {
    Status s = SysError("fsync", path);
    ::unlink(path.c_str());
    return s;
  }
  return Status::Ok();
}

Status SyncDir(const std::string& dir) {
  ScopedFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0 || ::fsync(fd.get()) != 0) return SysError("fsync directory", dir);
  return Status::Ok();
}

// Reads the record; 0 when there is none yet.
Result<FencingToken> ReadHighest(const std::string& path, std::string_view key) {
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) return FencingToken{0};
    if (errno == ELOOP) return UnavailableError("fence record " + path + " is a symbolic link");
    return SysError("read fence record", path);
  }
  std::string text;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return SysError("read fence record", path);
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  unsigned long long highest = 0;
  const std::string key_line = "key " + EscapeForRecord(key) + "\n";
  if (std::sscanf(text.c_str(), "dlock-fence 1\nhighest %llu\n", &highest) != 1 ||
      text.find(key_line) == std::string::npos) {
    return DataLossError("fence record " + path + " is damaged or belongs to another key: "
                         "move it away only if no newer token can have been accepted");
  }
  return static_cast<FencingToken>(highest);
}

Status CheckName(std::string_view name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string_view::npos ||
      name.find('\0') != std::string_view::npos || name.size() > 255 ||
      name.starts_with(".dlock-fence")) {
    return InvalidArgumentError("file name '" + std::string(name) +
                                "' is not a plain name: use 1 to 255 bytes without '/', "
                                "not '.', '..' or .dlock-fence*");
  }
  return Status::Ok();
}

Status CheckDir(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) return UnavailableError("fence directory " + dir + " does not exist");
    return SysError("open fence directory", dir);
  }
  if (!S_ISDIR(st.st_mode)) return UnavailableError(dir + " is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return UnavailableError("fence directory " + dir + " is not writable");
  }
  return Status::Ok();
}

std::string TempSuffix() {
  return std::to_string(::getpid()) + "." + std::to_string(DefaultRandom()->Next());
}

// The fence's own directory, DIR/.dlock-fence: made if missing, and never
// a symbolic link (it could point the records somewhere else).
Status MakeMetaDir(const std::string& meta) {
  if (::mkdir(meta.c_str(), 0755) != 0 && errno != EEXIST) return SysError("create", meta);
  struct stat st;
  if (::lstat(meta.c_str(), &st) != 0) return SysError("open", meta);
  if (!S_ISDIR(st.st_mode)) return UnavailableError(meta + " is not a directory (a link?)");
  return Status::Ok();
}

// Holds the key's flock for the duration of one write.
Result<ScopedFd> LockKey(const std::string& path) {
  ScopedFd lock(::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (lock.get() < 0) {
    if (errno == ELOOP) return UnavailableError("fence lock " + path + " is a symbolic link");
    return SysError("open", path);
  }
  while (::flock(lock.get(), LOCK_EX) != 0) {
    if (errno != EINTR) return SysError("lock", path);
  }
  return lock;
}

// What the new file takes: the replaced file's mode (and owner, as root),
// else the requested mode, else 0644 less the umask.
FileAttributes AttributesFor(const std::string& target, std::optional<mode_t> mode) {
  FileAttributes attributes{mode, std::nullopt};
  struct stat st;
  if (::lstat(target.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    attributes.mode = st.st_mode & 07777;
    if (::geteuid() == 0) attributes.owner = std::make_pair(st.st_uid, st.st_gid);
  }
  return attributes;
}

Status RecordToken(const std::string& meta, const std::string& base, std::string_view key,
                   FencingToken token) {
  const std::string record = "dlock-fence 1\nhighest " + std::to_string(token) + "\nkey " +
                             EscapeForRecord(key) + "\n";
  const std::string record_temp = base + ".token.tmp." + TempSuffix();
  DLOCK_RETURN_IF_ERROR(WriteFileSynced(record_temp, record));
  if (::rename(record_temp.c_str(), (base + ".token").c_str()) != 0) {
    Status s = SysError("record token in", base + ".token");
    ::unlink(record_temp.c_str());
    return s;
  }
  return SyncDir(meta);
}

}  // namespace

Status Directory::Write(std::string_view key, FencingToken token, std::string_view name,
                        std::string_view content, const WriteOptions& options) const {
  DLOCK_RETURN_IF_ERROR(ValidateKey(key));
  DLOCK_RETURN_IF_ERROR(CheckName(name));
  DLOCK_RETURN_IF_ERROR(CheckToken(token));
  DLOCK_RETURN_IF_ERROR(CheckDir(dir_));
  const std::string meta = dir_ + "/.dlock-fence";
  DLOCK_RETURN_IF_ERROR(MakeMetaDir(meta));
  const std::string base = meta + "/" + RecordName(key);
  DLOCK_ASSIGN_OR_RETURN(ScopedFd lock, LockKey(base + ".lock"));
  DLOCK_ASSIGN_OR_RETURN(const FencingToken highest, ReadHighest(base + ".token", key));
  if (token < highest) {
    Status stale = StaleToken(token, highest, key);
    RecordFenceDecision("directory", stale);
    return stale;
  }

  const std::string target = dir_ + "/" + std::string(name);
  const std::string temp = meta + "/" + RecordName(std::string(name)) + ".tmp." + TempSuffix();
  DLOCK_RETURN_IF_ERROR(WriteFileSynced(temp, content, AttributesFor(target, options.mode)));
  if (token > highest) {
    if (Status s = RecordToken(meta, base, key, token); !s.ok()) {
      ::unlink(temp.c_str());
      return s;
    }
  }
  if (::rename(temp.c_str(), target.c_str()) != 0) {
    Status s = SysError("replace", target);
    ::unlink(temp.c_str());
    return s;
  }
  Status synced = SyncDir(dir_);
  RecordFenceDecision("directory", synced);
  return synced;
}

Result<FencingToken> Directory::Highest(std::string_view key) const {
  DLOCK_RETURN_IF_ERROR(ValidateKey(key));
  struct stat st;
  if (::stat(dir_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return UnavailableError("fence directory " + dir_ + " does not exist");
  }
  const std::string base = dir_ + "/.dlock-fence/" + RecordName(key);
  return ReadHighest(base + ".token", key);
}

}  // namespace dlock::fence
