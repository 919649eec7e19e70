#include "async_floor.h"

namespace dlock::bench {

// Each store's floor is in async_floor_<store>.cc, built (and announced by
// DLOCK_ASYNC_FLOOR_<STORE>) only where that store is built.
#ifdef DLOCK_ASYNC_FLOOR_REDIS
std::optional<WriteFloor> RedisPipelinedWriteFloor(std::string_view uri, int writes);
#endif
#ifdef DLOCK_ASYNC_FLOOR_ETCD
std::optional<WriteFloor> EtcdWriteFloor(std::string_view uri, int writes);
#endif
#ifdef DLOCK_ASYNC_FLOOR_ZOOKEEPER
std::optional<WriteFloor> ZooKeeperWriteFloor(std::string_view uri, int writes);
#endif

// A store's floor, found by its URI's scheme.
std::optional<WriteFloor> PipelinedWriteFloor(std::string_view uri, int writes) {
#ifdef DLOCK_ASYNC_FLOOR_REDIS
  if (uri.starts_with("redis")) return RedisPipelinedWriteFloor(uri, writes);
#endif
#ifdef DLOCK_ASYNC_FLOOR_ETCD
  if (uri.starts_with("etcd://")) return EtcdWriteFloor(uri, writes);
#endif
#ifdef DLOCK_ASYNC_FLOOR_POSTGRES
  if (uri.starts_with("postgres://") || uri.starts_with("postgresql://")) {
    return PostgresWriteFloor(uri, writes);
  }
#endif
#ifdef DLOCK_ASYNC_FLOOR_ZOOKEEPER
  if (uri.starts_with("zk://")) return ZooKeeperWriteFloor(uri, writes);
#endif
  (void)uri;
  (void)writes;
  return std::nullopt;
}

}  // namespace dlock::bench
