// The MariaDB backend: locks in tables of a MariaDB database you already
// run (MariaDB 10.6 or later, InnoDB).
//
//   mysql://user[:password]@host[:3306]/database[?table=dlock_locks]
//   mariadb://...                                (the same)
//
// One row per holding in `<table>` (every holder of a key, so readers and
// semaphore permits too), one row per key in use in `<table>_keys` (what
// each change to the key locks first), waiters in `<table>_queue`, run-once
// and break records in `<table>_done` and `<table>_breaks`; every grant
// takes its token from the sequence `<table>_tokens`, drawn under the key's
// lock, so tokens only go up per key while a released key leaves no row
// behind. Expiry is judged by the server's clock. Every operation is one
// stored procedure call: one round trip, one transaction.
//
// Waiters are woken without polling: each holder and waiter keeps a
// server-side user lock named after its owner (GET_LOCK) on its session,
// and a waiter blocks, on a connection of its own, until the one ahead of
// it lets go of its name. The names are only a wake-up: who holds the key
// is decided by the tables alone. docs/backend-mariadb.md has the schema,
// the procedures, the wake-ups and what survives what.
//
// Parameters: `table` (dlock's, [a-z_][a-z0-9_]{0,47}); `cacert`, `cert`,
// `key` (TLS, as on every store: any of them turns TLS on, and the server's
// certificate and host name are then checked); `tls=verify-full` (TLS with
// the system's CAs); `socket=PATH` (a Unix socket instead of TCP);
// `password_file`/`password_env` are resolved before this code runs.
//
// Each call is bounded: acquire, release and listing by the connect
// timeout, a renewal by a fifth of its shortest TTL (at least 20 ms). A call
// that misses its bound, or whose connection breaks, is kUnavailable (its
// outcome is unknown) and the next call reconnects.
//
// Thread-safety: thread-safe.
#ifndef DLOCK_SRC_BACKENDS_MARIADB_MARIADB_BACKEND_H_
#define DLOCK_SRC_BACKENDS_MARIADB_MARIADB_BACKEND_H_

#include <chrono>
#include <memory>
#include <string>

#include "backends/mariadb/mariadb_options.h"
#include "core/registry.h"
#include "core/uri.h"
#include "dlock/backend.h"

namespace dlock::mariadb {

// From a parsed mysql:// or mariadb:// URI (credentials already resolved).
// kInvalidArgument, in one line naming the part and what is accepted, for a
// bad host, port, database, table name or parameter.
Result<MariaDbOptions> OptionsFromUri(const internal::Uri& uri);

// Connects and creates the tables and procedures if they are missing.
Result<std::unique_ptr<Backend>> Open(const MariaDbOptions& options);

// mysql:// and mariadb:// URIs.
Result<std::unique_ptr<Backend>> Open(const internal::Uri& uri,
                                      const internal::BackendParams& params);

}  // namespace dlock::mariadb

#endif  // DLOCK_SRC_BACKENDS_MARIADB_MARIADB_BACKEND_H_
