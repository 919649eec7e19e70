// fence::Postgres: the fence for rows of a PostgreSQL database (see
// dlock/fence.h for what a fence is).
//
// The highest admitted token per lock key lives in a table `dlock_fence` of
// the caller's own database, and the check runs on the caller's own
// connection inside the caller's own transaction: the token check and the
// caller's write commit or roll back together.
//
//   PQexec(conn, "BEGIN");
//   Status s = dlock::fence::Postgres::Admit(conn, "orders/42", lease.token());
//   if (!s.ok()) { PQexec(conn, "ROLLBACK"); return s; }   // kStaleToken: a newer
//   ... the caller's UPDATE/INSERT ...                      // holder has written
//   PQexec(conn, "COMMIT");
//
// Admit upserts the key's row (`highest = token` only where token >=
// highest), so it holds that row's lock until the transaction ends: writers
// under one lock key are serialised, and a stale writer that was paused
// between Admit and COMMIT cannot commit after a newer holder's write
// (the newer Admit waits for it, then sees its token). Under REPEATABLE READ
// or SERIALIZABLE a concurrent newer admit makes the older transaction fail
// with a serialization error (kUnavailable: retry the whole transaction).
//
// Thread-safety: as libpq's: one connection, one thread at a time.
#ifndef DLOCK_FENCE_POSTGRES_H_
#define DLOCK_FENCE_POSTGRES_H_

#include <functional>
#include <string_view>

#include "dlock/export.h"
#include "dlock/fence.h"
#include "dlock/status.h"
#include "dlock/types.h"

// libpq's connection type (libpq-fe.h); the same declaration, so both headers
// may be included together.
typedef struct pg_conn PGconn;

namespace dlock::fence {

class DLOCK_EXPORT Postgres {
 public:
  // Creates `dlock_fence` if it does not exist, outside any transaction of
  // the caller (kFailedPrecondition inside one). Safe when many processes
  // call it at once. Write calls it itself when the table is missing; users
  // of Admit call it once at start-up (or create the table themselves:
  // docs/backend-postgres.md has the DDL).
  static Status EnsureSchema(PGconn* conn);

  // Inside the caller's open transaction: admits and records `token` for
  // `key`, or returns kStaleToken ("stale token 33 < 34 for key ..."), after
  // which the caller must roll back. kFailedPrecondition outside a
  // transaction, in a failed one, or when `dlock_fence` does not exist (the
  // transaction is then aborted: roll back, EnsureSchema, retry).
  static Status Admit(PGconn* conn, std::string_view key, FencingToken token);

  // BEGIN; Admit; write(); COMMIT -- or ROLLBACK of everything when the
  // token is stale, `write` fails or the commit fails. Creates `dlock_fence`
  // first if it is missing.
  static Status Write(PGconn* conn, std::string_view key, FencingToken token,
                      const std::function<Status()>& write);

  // The highest admitted token for `key` (0 if none, or no table yet).
  static Result<FencingToken> Highest(PGconn* conn, std::string_view key);
};

}  // namespace dlock::fence

#endif  // DLOCK_FENCE_POSTGRES_H_
