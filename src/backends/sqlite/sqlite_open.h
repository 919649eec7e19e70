// The SQLite store's factory for the registry, of the same shape as the
// other stores' Open(uri, params).
#ifndef DLOCK_SRC_BACKENDS_SQLITE_SQLITE_OPEN_H_
#define DLOCK_SRC_BACKENDS_SQLITE_SQLITE_OPEN_H_

#include <memory>

#include "backends/sqlite/sqlite_backend.h"
#include "core/registry.h"
#include "core/uri.h"
#include "dlock/backend.h"

namespace dlock::sqlite {

// Opens a sqlite:// URI; for dlock's default file (params.is_default), its
// directory is created first.
Result<std::unique_ptr<Backend>> Open(const internal::Uri& uri,
                                      const internal::BackendParams& params);

}  // namespace dlock::sqlite

#endif  // DLOCK_SRC_BACKENDS_SQLITE_SQLITE_OPEN_H_
