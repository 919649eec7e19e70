// URI parsing shared by the registry and every backend.
//
//   scheme://[user[:password]@]hosts[/path][?k=v&k=v]
//
// `hosts` is kept as written (it may be a comma-separated list). The password
// never leaves this struct except through password(); Redacted() is what
// messages and `dlock status` print.
#ifndef DLOCK_SRC_CORE_URI_H_
#define DLOCK_SRC_CORE_URI_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dlock/status.h"

namespace dlock::internal {

struct Uri {
  std::string scheme;    // lower-cased
  std::string user;      // percent-decoded
  std::string password;  // percent-decoded; never print
  bool has_password = false;
  std::string hosts;     // "h1:2379,h2:2379"; empty for sqlite:///path
  std::string path;      // percent-decoded, with its leading '/'
  std::vector<std::pair<std::string, std::string>> query;  // decoded

  // The URI with the password replaced by "***".
  std::string Redacted() const;

  // The value of query parameter `name`, if given.
  const std::string* Param(std::string_view name) const;
  // kInvalidArgument naming the first parameter not in `known`.
  Status CheckParams(std::initializer_list<std::string_view> known) const;
};

// Parses `text`. Errors are kInvalidArgument with a message that never
// contains the password.
Result<Uri> ParseUri(std::string_view text);

}  // namespace dlock::internal

#endif  // DLOCK_SRC_CORE_URI_H_
