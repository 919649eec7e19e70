// URI parsing shared by the registry and every backend.
//
//   scheme://[user[:password]@]hosts[/path][?k=v&k=v]
//
// `hosts` is kept as written (it may be a comma-separated list). The password
// is never printed: Redacted() is what messages and `dlock status` print.
#ifndef DLOCK_SRC_CORE_URI_H_
#define DLOCK_SRC_CORE_URI_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dlock/status.h"

namespace dlock::internal {

struct Uri {
  // Where the password came from: the URI's user information, or the file
  // or environment variable named by password_file= / password_env=
  // (ResolveCredentials, core/credentials.h).
  enum class PasswordSource { kUri, kFile, kEnv };

  std::string scheme;    // lower-cased
  std::string user;      // percent-decoded
  std::string password;  // percent-decoded; never print
  bool has_password = false;
  PasswordSource password_source = PasswordSource::kUri;
  std::string password_from;  // kFile: the path; kEnv: the variable's name
  std::string hosts;     // "h1:2379,h2:2379"; empty for sqlite:///path
  std::string path;      // percent-decoded, with its leading '/'
  std::vector<std::pair<std::string, std::string>> query;  // decoded

  // The URI with the password and every secret parameter (IsSecretParam)
  // replaced by "***": what messages print.
  std::string Redacted() const;
  // The URI as text again, every part escaped so that ParseUri gives this
  // Uri back. A password from a file or variable is named by its
  // password_file= / password_env= parameter. Without the password, one
  // from the URI itself and every secret parameter are left out.
  std::string Format(bool with_password) const;

  // The value of query parameter `name`, if given.
  const std::string* Param(std::string_view name) const;
  // kInvalidArgument naming the first parameter not in `known`.
  Status CheckParams(std::initializer_list<std::string_view> known) const;
};

// Whether query parameter `name` holds a secret (a password, token,
// secret; but not a *_file or *_env parameter, which says where one is).
bool IsSecretParam(std::string_view name);

// Parses `text`. The user information ends at the last '@', so a password
// may hold any character unescaped; an '@' after the host is written %40. Errors are kInvalidArgument with a message that never
// contains the password.
Result<Uri> ParseUri(std::string_view text);

}  // namespace dlock::internal

#endif  // DLOCK_SRC_CORE_URI_H_
