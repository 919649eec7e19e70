// URI pieces shared by redis://, redis+sentinel:// and redlock://.
#ifndef DLOCK_SRC_BACKENDS_REDIS_REDIS_URI_H_
#define DLOCK_SRC_BACKENDS_REDIS_REDIS_URI_H_

#include <chrono>
#include <string>
#include <string_view>

#include "backends/redis/redis_conn.h"
#include "core/registry.h"
#include "core/uri.h"

namespace dlock::redis {

// "3" -> 3: a database index 0..100000 (the server decides the real limit).
Result<int> ParseDb(std::string_view text, const internal::Uri& uri);

// The value of duration parameter `name`, `fallback` if absent; must lie in
// [lo, hi].
Result<std::chrono::milliseconds> DurationParam(const internal::Uri& uri, std::string_view name,
                                                std::chrono::milliseconds fallback,
                                                std::chrono::milliseconds lo,
                                                std::chrono::milliseconds hi);

// User, password and connect timeout from the URI and the params.
ConnectOptions BaseConnectOptions(const internal::Uri& uri, const internal::BackendParams& params);

// The cacert=, cert= and key= files into o->tls: for a TLS scheme
// (rediss, rediss+sentinel) TLS is on, and a plaintext scheme refuses them.
Status TlsFromUri(const internal::Uri& uri, ConnectOptions* o);

// The sentinels' own password (Sentinel's requirepass), from
// sentinel_password_file= or sentinel_password_env=; none if neither.
Status SentinelPasswordFromUri(const internal::Uri& uri, ConnectOptions* to_sentinel);

// kInvalidArgument "bad <scheme> URI '<redacted>': <why>; expected <form>".
Status BadUri(const internal::Uri& uri, std::string_view why, std::string_view form);

}  // namespace dlock::redis

#endif  // DLOCK_SRC_BACKENDS_REDIS_REDIS_URI_H_
