#include "backends/postgres/postgres_backend.h"

namespace dlock::postgres {

Result<std::unique_ptr<Backend>> Open(const internal::Uri&, const internal::BackendParams&) {
  return UnavailableError("the PostgreSQL backend is not implemented yet");
}

}  // namespace dlock::postgres
