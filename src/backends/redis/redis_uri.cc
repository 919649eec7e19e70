#include "backends/redis/redis_uri.h"

#include <charconv>

#include "core/credentials.h"
#include "core/duration.h"
#include "core/tls_files.h"

namespace dlock::redis {

Status BadUri(const internal::Uri& uri, std::string_view why, std::string_view form) {
  return InvalidArgumentError("bad " + uri.scheme + " URI '" + uri.Redacted() + "': " +
                              std::string(why) + "; expected " + std::string(form));
}

Result<int> ParseDb(std::string_view text, const internal::Uri& uri) {
  int db = -1;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), db);
  if (text.empty() || ec != std::errc() || p != text.data() + text.size() || db < 0 ||
      db > 100000) {
    return InvalidArgumentError("bad database index '" + std::string(text) + "' in " +
                                uri.Redacted() + ": expected a number such as 0 (the default)");
  }
  return db;
}

Result<std::chrono::milliseconds> DurationParam(const internal::Uri& uri, std::string_view name,
                                                std::chrono::milliseconds fallback,
                                                std::chrono::milliseconds lo,
                                                std::chrono::milliseconds hi) {
  const std::string* value = uri.Param(name);
  if (value == nullptr) return fallback;
  auto d = internal::ParseDuration(*value);
  if (!d.ok()) return d.status().WithContext(std::string(name) + " in " + uri.scheme + " URI");
  if (*d < lo || *d > hi) {
    return InvalidArgumentError(std::string(name) + " " + *value + " in " + uri.scheme +
                                " URI is out of range: " + internal::FormatDuration(lo) +
                                " to " + internal::FormatDuration(hi));
  }
  return *d;
}

ConnectOptions BaseConnectOptions(const internal::Uri& uri, const internal::BackendParams& params) {
  ConnectOptions o;
  o.user = uri.user;
  o.password = uri.password;
  o.has_password = uri.has_password;
  o.connect_timeout = params.connect_timeout > std::chrono::milliseconds(0)
                          ? params.connect_timeout
                          : std::chrono::milliseconds(5000);
  return o;
}

Status TlsFromUri(const internal::Uri& uri, ConnectOptions* o) {
  const bool tls = uri.scheme.starts_with("rediss");
  DLOCK_ASSIGN_OR_RETURN(internal::TlsFiles files,
                         internal::TlsFilesFromUri(uri, tls, tls ? uri.scheme : "rediss"));
  o->tls.enabled = tls;
  o->tls.ca_file = std::move(files.ca_file);
  o->tls.cert_file = std::move(files.cert_file);
  o->tls.key_file = std::move(files.key_file);
  return Status::Ok();
}

Status SentinelPasswordFromUri(const internal::Uri& uri, ConnectOptions* to_sentinel) {
  // The same rules as the data nodes' password_file= / password_env=.
  internal::Uri sentinel;
  sentinel.scheme = uri.scheme + " (sentinel)";
  for (std::string_view name : {"password_file", "password_env"}) {
    if (const std::string* v = uri.Param("sentinel_" + std::string(name))) {
      sentinel.query.emplace_back(std::string(name), *v);
    }
  }
  if (Status s = internal::ResolveCredentials(sentinel); !s.ok()) {
    return s.WithContext("sentinel password");
  }
  to_sentinel->password = std::move(sentinel.password);
  to_sentinel->has_password = sentinel.has_password;
  return Status::Ok();
}

}  // namespace dlock::redis
