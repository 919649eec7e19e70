// The Redis backend: one primary (optionally found through Sentinel), or
// opt-in Redlock over independent nodes. docs/backend-redis.md has the key
// layout, the scripts, the FIFO queue and what survives a failover.
//
//   redis://[user:pass@]host[:6379][/db][?timeout=5s][&wait_replicas=N]
//                                        [&wait_timeout=1s]
//   redis+sentinel://[user:pass@]h1[:26379],h2,h3/master-name[?db=N]
//                                        [&timeout=..][&wait_replicas=..][&wait_timeout=..]
//   redis+cluster://[user:pass@]h1[:6379],h2,...[?timeout=..][&wait_replicas=..]
//                                        [&wait_timeout=..]
//   redlock://[user:pass@]h1:6379,h2:6379,h3:6379[/db][?node_timeout=100ms]
//                                        [&drift_factor=0.01]
//
// user:pass authenticates to the Redis servers (not to Sentinel). Each form
// but redlock:// has a TLS twin (rediss://, rediss+sentinel://,
// rediss+cluster://, with cacert=, cert=, key=): OpenSSL under hiredis's
// reply reader (redis_transport.h), as Debian's hiredis 0.14 has no TLS.
//
// Acquire is one EVALSHA; with wait_replicas=N it is pipelined with
// `WAIT N wait_timeout`, and a grant fewer than N replicas confirmed is
// reported as kUnavailable (the core retries with the same owner, or
// releases). Waiters are served in arrival order and woken by pub/sub.
// redis:// and redis+sentinel:// share keys (read-write locks, semaphores:
// SupportsSharing), enforce lock-delay by Redis's clock, keep labels and
// list waiters; the uncontended exclusive acquire stays the five-call fast
// path of one script.
//
// On a Redis Cluster (redis_cluster.h) each key's lock, counter, queue and
// wake-ups live in its hash slot, served by that slot's primary; wake-ups go
// by sharded pub/sub (SPUBLISH/SSUBSCRIBE, Redis 7).
//
// Redlock has no ordered token across nodes: its grants carry token 0 (never
// a real token; dlock's fences refuse it) and Describe() says "contested".
//
// Thread-safety: the backends are thread-safe (a pool of connections).
#ifndef DLOCK_SRC_BACKENDS_REDIS_REDIS_BACKEND_H_
#define DLOCK_SRC_BACKENDS_REDIS_REDIS_BACKEND_H_

#include <memory>

#include "core/registry.h"
#include "core/uri.h"
#include "dlock/backend.h"

namespace dlock::redis {

// redis://[user:pass@]host:port[/db]
Result<std::unique_ptr<Backend>> Open(const internal::Uri& uri,
                                      const internal::BackendParams& params);
// redis+sentinel://h1:26379,h2:26379/master-name
Result<std::unique_ptr<Backend>> OpenSentinel(const internal::Uri& uri,
                                              const internal::BackendParams& params);
// redis+cluster://h1:6379,h2:6379,h3:6379 (seed nodes of a Redis Cluster)
Result<std::unique_ptr<Backend>> OpenCluster(const internal::Uri& uri,
                                             const internal::BackendParams& params);
// redlock://h1:6379,h2:6379,h3:6379 (opt-in; tokens are not ordered)
Result<std::unique_ptr<Backend>> OpenRedlock(const internal::Uri& uri,
                                             const internal::BackendParams& params);

// What Describe() of a Redlock backend starts with after the URI.
inline constexpr const char* kRedlockLabel =
    " (Redlock: contested; no ordered fencing token across nodes, token() is 0)";

}  // namespace dlock::redis

#endif  // DLOCK_SRC_BACKENDS_REDIS_REDIS_BACKEND_H_
