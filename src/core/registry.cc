#include "core/registry.h"

#include "core/credentials.h"
#include "core/store_table.h"
#include "core/uri.h"

// Lookups in the table of schemes; the stores themselves are named only in
// that table, which CMake generates (core/store_table.h).
namespace dlock::internal {
namespace {

const SchemeEntry* FindScheme(std::string_view scheme) {
  for (const SchemeEntry& e : KnownSchemes()) {
    if (e.scheme == scheme) return &e;
  }
  return nullptr;
}

}  // namespace

Result<std::unique_ptr<Backend>> HandOverFailed(const Uri& uri, const BackendParams&) {
  return UnavailableError("the " + uri.scheme + " store is served by dlock-full, next to dlock, "
                          "which could not be run");
}

bool ServedByFullBinary(std::string_view scheme) {
  const SchemeEntry* e = FindScheme(scheme);
  return e != nullptr && e->served_by_full;
}

std::string SupportedSchemes() {
  std::string s;
  for (const SchemeEntry& e : KnownSchemes()) {
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
  DLOCK_RETURN_IF_ERROR(ResolveCredentials(*uri));
  const SchemeEntry* e = FindScheme(uri->scheme);
  if (e == nullptr) {
    return InvalidArgumentError("unknown store '" + uri->scheme + "' in " + uri->Redacted() +
                                "; supported: " + SupportedSchemes());
  }
  if (!e->factory) {
    return InvalidArgumentError("the " + std::string(e->scheme) + " store is not in this build (" +
                                std::string(e->why_not) + "); supported: " + SupportedSchemes());
  }
  return e->factory(*uri, params);
}

}  // namespace dlock::internal
