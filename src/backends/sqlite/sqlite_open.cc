#include "backends/sqlite/sqlite_open.h"

namespace dlock::sqlite {

Result<std::unique_ptr<Backend>> Open(const internal::Uri& uri,
                                      const internal::BackendParams& params) {
  DLOCK_ASSIGN_OR_RETURN(SqliteOptions options, OptionsFromUri(uri));
  options.create_directory = params.is_default;
  return Open(options);
}

}  // namespace dlock::sqlite
