#include "core/credentials.h"

#include <cstdlib>
#include <optional>
#include <string>

#include "core/read_file.h"

namespace dlock::internal {
namespace {

constexpr std::size_t kMaxPasswordBytes = 4096;

// A password is one line: a trailing newline (as `echo` writes) is dropped;
// more lines mean the wrong file.
Result<std::string> OneLine(std::string text, const std::string& what) {
  if (text.ends_with('\n')) text.pop_back();
  if (text.ends_with('\r')) text.pop_back();
  if (text.find('\0') != std::string::npos || text.find('\n') != std::string::npos) {
    return InvalidArgumentError(what + " holds more than one line: a password is one line");
  }
  if (text.empty()) return InvalidArgumentError(what + " is empty");
  return text;
}

Result<std::string> ReadPasswordFile(const std::string& path) {
  const std::string what = "password_file '" + path + "'";
  DLOCK_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path, kMaxPasswordBytes, what,
                                                         "is larger than 4 KiB: not a password file"));
  return OneLine(std::move(text), what);
}

Result<std::string> ReadPasswordEnv(const std::string& name) {
  const std::string what = "password_env '" + name + "'";
  const char* value = std::getenv(name.c_str());
  if (value == nullptr) return InvalidArgumentError(what + " names a variable that is not set");
  return OneLine(value, what);
}

// Removes parameter `name` from the query; its value, if it was there.
std::optional<std::string> TakeParam(Uri& uri, std::string_view name) {
  std::optional<std::string> value;
  std::erase_if(uri.query, [&](const auto& kv) {
    if (kv.first != name) return false;
    value = kv.second;
    return true;
  });
  return value;
}

}  // namespace

Status ResolveCredentials(Uri& uri) {
  std::optional<std::string> file = TakeParam(uri, "password_file");
  std::optional<std::string> env = TakeParam(uri, "password_env");
  if (!file && !env) return Status::Ok();
  if ((file && env) || uri.has_password) {
    return InvalidArgumentError("the " + uri.scheme + " URI gives its password more than one "
                                "way: use one of the URI, password_file= or password_env=");
  }
  if (file) {
    DLOCK_ASSIGN_OR_RETURN(uri.password, ReadPasswordFile(*file));
    uri.password_source = Uri::PasswordSource::kFile;
    uri.password_from = *file;
  } else {
    DLOCK_ASSIGN_OR_RETURN(uri.password, ReadPasswordEnv(*env));
    uri.password_source = Uri::PasswordSource::kEnv;
    uri.password_from = *env;
  }
  uri.has_password = true;
  return Status::Ok();
}

}  // namespace dlock::internal
