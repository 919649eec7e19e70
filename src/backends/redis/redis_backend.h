// The Redis backend (being written).
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
// redlock://h1:6379,h2:6379,h3:6379 (opt-in; tokens are not ordered)
Result<std::unique_ptr<Backend>> OpenRedlock(const internal::Uri& uri,
                                             const internal::BackendParams& params);

}  // namespace dlock::redis

#endif  // DLOCK_SRC_BACKENDS_REDIS_REDIS_BACKEND_H_
