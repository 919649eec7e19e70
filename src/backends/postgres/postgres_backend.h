// The PostgreSQL backend: locks in one table of a database you already run.
//
// One row per key ever locked (`<table>`), kept after release because it
// carries the key's token counter. The row also carries every holder of the
// key: the first in its columns, further holders of a shared key (readers,
// semaphore permits) in its `sharers` jsonb, so that the sharing rule is
// checked under the row lock. A lease is held while its expiry is ahead of
// the *server's* clock_timestamp(); with a lock-delay it still counts until
// expiry + delay. Run-once marks live in `<table>_done`.
// Waiters queue in `<table>_queue` and are served in arrival order; releases
// NOTIFY the next waiter (pg_listener.h). docs/backend-postgres.md has the
// schema, every statement, and what survives what.
//
//   postgres://user:password@host:5432/db?table=dlock_locks&sslmode=require
//   postgresql://...   (the same)
//
// `table` (default dlock_locks) is dlock's; it must match
// [a-z_][a-z0-9_]{0,56} (dlock appends "_queue" and "_nn" to it, and
// PostgreSQL names are at most 63 bytes). Every other parameter is passed to
// libpq as a connection keyword (sslmode, application_name, options,
// target_session_attrs, ...); an unknown one is refused.
//
// Waiting acquires (Begin) keep their state in their Acquisition; the
// backend keeps none per attempt. Connections: one for operations (behind
// a mutex) and, only once some caller waits for a key, one for LISTEN.
// Each call is bounded: connecting and the statement together by the
// connect timeout, a renewal by a tenth of its shortest TTL (at least
// 20 ms), so a lost server makes a lease lost at its valid_until rather
// than hanging the renewal thread. A broken connection makes that call
// kUnavailable and is replaced on the next one.
//
// Thread-safety: thread-safe.
#ifndef DLOCK_SRC_BACKENDS_POSTGRES_POSTGRES_BACKEND_H_
#define DLOCK_SRC_BACKENDS_POSTGRES_POSTGRES_BACKEND_H_

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/registry.h"
#include "core/uri.h"
#include "dlock/backend.h"

namespace dlock::postgres {

inline constexpr const char* kDefaultTable = "dlock_locks";

struct PostgresOptions {
  // libpq connection keywords and values (user, password, host, port, dbname
  // and the URI's pass-through parameters).
  std::vector<std::pair<std::string, std::string>> conninfo;
  std::string table = kDefaultTable;
  std::chrono::milliseconds connect_timeout{5000};
  // The URI without its password, for messages.
  std::string describe;
  // The core's clock, to read Acquisition::Wait deadlines. Null: the real
  // one.
  std::shared_ptr<Clock> clock;
};

// From a parsed postgres:// or postgresql:// URI. kInvalidArgument for a bad
// table name or a parameter libpq does not know.
Result<PostgresOptions> OptionsFromUri(const internal::Uri& uri);

// Connects and creates the tables if they are missing. kUnavailable when the
// server cannot be reached or refuses the login (the message names the
// server, never the password); kFailedPrecondition when the table exists
// but is not dlock's, or the role may not create it.
Result<std::unique_ptr<Backend>> Open(const PostgresOptions& options);

// postgres:// and postgresql:// URIs (libpq's own syntax and parameters).
Result<std::unique_ptr<Backend>> Open(const internal::Uri& uri,
                                      const internal::BackendParams& params);

}  // namespace dlock::postgres

#endif  // DLOCK_SRC_BACKENDS_POSTGRES_POSTGRES_BACKEND_H_
