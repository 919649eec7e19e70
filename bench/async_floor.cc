#include "async_floor.h"

namespace dlock::bench {

#if DLOCK_ASYNC_FLOOR_ETCD
std::optional<WriteFloor> EtcdWriteFloor(std::string_view uri, int writes);  // async_floor_etcd.cc
#endif

// A store's floor goes here, found by its URI's scheme, as it is written.
std::optional<WriteFloor> PipelinedWriteFloor(std::string_view uri, int writes) {
#if DLOCK_ASYNC_FLOOR_ETCD
  if (uri.starts_with("etcd://")) return EtcdWriteFloor(uri, writes);
#endif
  (void)uri;
  (void)writes;
  return std::nullopt;
}

}  // namespace dlock::bench
