#include "async_floor.h"

namespace dlock::bench {

#ifdef DLOCK_FLOOR_ZOOKEEPER
std::optional<WriteFloor> ZooKeeperWriteFloor(std::string_view uri, int writes);  // async_floor_zookeeper.cc
#endif

// A store's floor goes here, found by its URI's scheme, as it is written.
std::optional<WriteFloor> PipelinedWriteFloor(std::string_view uri, int writes) {
#ifdef DLOCK_FLOOR_ZOOKEEPER
  if (uri.starts_with("zk://")) return ZooKeeperWriteFloor(uri, writes);
#endif
  (void)uri;
  (void)writes;
  return std::nullopt;
}

}  // namespace dlock::bench
