#include "async_floor.h"

namespace dlock::bench {

// A store's floor goes here, found by its URI's scheme, as it is written.
std::optional<WriteFloor> PipelinedWriteFloor(std::string_view uri, int writes) {
#ifdef DLOCK_ASYNC_FLOOR_POSTGRES
  if (uri.starts_with("postgres://") || uri.starts_with("postgresql://")) return PostgresWriteFloor(uri, writes);
#endif
  (void)uri;
  (void)writes;
  return std::nullopt;
}

}  // namespace dlock::bench
