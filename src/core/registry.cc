#include "core/registry.h"

#include "backends/sqlite/sqlite_backend.h"
#include "core/uri.h"

namespace dlock::internal {
namespace {

using Factory = Result<std::unique_ptr<Backend>> (*)(const Uri&, const BackendParams&);

Result<std::unique_ptr<Backend>> OpenSqlite(const Uri& uri, const BackendParams& params) {
  auto options = sqlite::OptionsFromUri(uri);
  if (!options.ok()) return options.status();
  options->create_directory = params.is_default;
  return sqlite::Open(*options);
}

struct Entry {
  std::string_view scheme;
  std::string_view form;  // how a URI of this scheme looks
  Factory factory;        // null: not in this build
};

// Schemes that later backends will fill in are listed so that a user gets
// "not built" rather than "unknown".
constexpr Entry kEntries[] = {
    {"sqlite", "sqlite:///path/locks.db", &OpenSqlite},
};

}  // namespace

std::string SupportedSchemes() {
  std::string s;
  for (const Entry& e : kEntries) {
    if (!e.factory) continue;
    if (!s.empty()) s += ", ";
    s += e.form;
  }
  return s;
}

Result<std::unique_ptr<Backend>> OpenBackend(std::string_view text,
                                             const BackendParams& params) {
  auto uri = ParseUri(text);
  if (!uri.ok()) {
    return InvalidArgumentError(uri.status().message() + "; supported: " + SupportedSchemes());
  }
  for (const Entry& e : kEntries) {
    if (e.scheme != uri->scheme) continue;
    if (!e.factory) {
      return InvalidArgumentError("the " + std::string(e.scheme) +
                                  " backend is not in this build; supported: " +
                                  SupportedSchemes());
    }
    return e.factory(*uri, params);
  }
  return InvalidArgumentError("unknown store '" + uri->scheme + "' in " + uri->Redacted() +
                              "; supported: " + SupportedSchemes());
}

}  // namespace dlock::internal
