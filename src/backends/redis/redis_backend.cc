#include "backends/redis/redis_backend.h"

namespace dlock::redis {

Result<std::unique_ptr<Backend>> Open(const internal::Uri&, const internal::BackendParams&) {
  return UnavailableError("the Redis backend is not implemented yet");
}

Result<std::unique_ptr<Backend>> OpenSentinel(const internal::Uri&,
                                              const internal::BackendParams&) {
  return UnavailableError("the Redis backend is not implemented yet");
}

Result<std::unique_ptr<Backend>> OpenRedlock(const internal::Uri&,
                                             const internal::BackendParams&) {
  return UnavailableError("the Redis backend is not implemented yet");
}

}  // namespace dlock::redis
