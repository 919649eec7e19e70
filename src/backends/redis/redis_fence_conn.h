// The Redis fence (dlock/fence_redis.h) on a dlock Connection rather than
// the caller's hiredis context, so that it runs over TLS too: Debian's
// hiredis 0.14 context has no TLS. Same scripts, same record, same errors.
#ifndef DLOCK_SRC_BACKENDS_REDIS_REDIS_FENCE_CONN_H_
#define DLOCK_SRC_BACKENDS_REDIS_REDIS_FENCE_CONN_H_

#include <chrono>
#include <string_view>

#include "backends/redis/redis_cluster.h"
#include "backends/redis/redis_conn.h"
#include "dlock/types.h"

namespace dlock::redis {

// fence::Redis::Set on `c`.
Status FenceSet(Connection& c, std::string_view lock_key, FencingToken token,
                std::string_view key, std::string_view value, std::chrono::milliseconds timeout);
// fence::Redis::Highest on `c`.
Result<FencingToken> FenceHighest(Connection& c, std::string_view lock_key,
                                  std::chrono::milliseconds timeout);

// The same on a Redis Cluster: on the primary of the fence record's slot
// (the caller's key must share it: fence::Redis::HashTag).
Status FenceSet(ClusterRouter& cluster, std::string_view lock_key, FencingToken token,
                std::string_view key, std::string_view value, std::chrono::milliseconds timeout);
Result<FencingToken> FenceHighest(ClusterRouter& cluster, std::string_view lock_key,
                                  std::chrono::milliseconds timeout);

}  // namespace dlock::redis

#endif  // DLOCK_SRC_BACKENDS_REDIS_REDIS_FENCE_CONN_H_
