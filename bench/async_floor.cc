#include "async_floor.h"

namespace dlock::bench {

#ifdef DLOCK_BENCH_FLOOR_REDIS
std::optional<WriteFloor> RedisPipelinedWriteFloor(std::string_view uri, int writes);
#endif

// A store's floor goes here, found by its URI's scheme, as it is written.
std::optional<WriteFloor> PipelinedWriteFloor(std::string_view uri, int writes) {
#ifdef DLOCK_BENCH_FLOOR_REDIS
  if (uri.starts_with("redis")) return RedisPipelinedWriteFloor(uri, writes);
#endif
  (void)uri;
  (void)writes;
  return std::nullopt;
}

}  // namespace dlock::bench
