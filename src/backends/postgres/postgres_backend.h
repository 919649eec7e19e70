// The PostgreSQL backend (being written).
#ifndef DLOCK_SRC_BACKENDS_POSTGRES_POSTGRES_BACKEND_H_
#define DLOCK_SRC_BACKENDS_POSTGRES_POSTGRES_BACKEND_H_

#include <memory>

#include "core/registry.h"
#include "core/uri.h"
#include "dlock/backend.h"

namespace dlock::postgres {

// postgres:// and postgresql:// URIs (libpq's own syntax and parameters).
Result<std::unique_ptr<Backend>> Open(const internal::Uri& uri,
                                      const internal::BackendParams& params);

}  // namespace dlock::postgres

#endif  // DLOCK_SRC_BACKENDS_POSTGRES_POSTGRES_BACKEND_H_
