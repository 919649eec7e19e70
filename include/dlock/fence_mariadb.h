// fence::MariaDb: the fence for rows of a MariaDB database (see dlock/fence.h
// for what a fence is).
//
// The highest admitted token per lock key lives in a table `dlock_fence` of
// the caller's own database (InnoDB), and the check runs on the caller's
// own connection inside the caller's own transaction: the token check and
// the caller's write commit or roll back together.
//
//   mysql_query(conn, "START TRANSACTION");
//   Status s = dlock::fence::MariaDb::Admit(conn, "orders/42", lease.token());
//   if (!s.ok()) { mysql_query(conn, "ROLLBACK"); return s; }  // kStaleToken: a newer
//   ... the caller's UPDATE/INSERT (InnoDB tables) ...        // holder has written
//   mysql_query(conn, "COMMIT");
//
// Admit is one upsert of the key's row (`highest = token` only where token
// >= highest, RETURNING what the row holds after it), so it holds that
// row's lock until the transaction ends: writers under one lock key are
// serialised, and a stale writer paused between Admit and COMMIT cannot
// commit after a newer holder's write (the newer Admit waits for it, then
// sees its token). It works at any isolation level: the upsert always reads
// the latest version of the row.
//
// Thread-safety: as Connector/C's: one connection, one thread at a time.
#ifndef DLOCK_FENCE_MARIADB_H_
#define DLOCK_FENCE_MARIADB_H_

#include <functional>
#include <string_view>

#include "dlock/export.h"
#include "dlock/fence.h"
#include "dlock/status.h"
#include "dlock/types.h"

// Connector/C's connection type (mysql.h); the same declaration, so both
// headers may be included together.
typedef struct st_mysql MYSQL;

namespace dlock::fence {

class DLOCK_EXPORT MariaDb {
 public:
  // Creates `dlock_fence` if it does not exist, outside any transaction of
  // the caller (kFailedPrecondition inside one: DDL commits it). Safe when
  // many processes call it at once. Write calls it itself when the table is
  // missing; users of Admit call it once at start-up (or create the table
  // themselves: docs/backend-mariadb.md has the DDL).
  static Status EnsureSchema(MYSQL* conn);

  // Inside the caller's open transaction: admits and records `token` for
  // `key`, or returns kStaleToken ("stale token 33 < 34 for key ..."), after
  // which the caller must roll back. kFailedPrecondition outside a
  // transaction (autocommit on and no START TRANSACTION), or when
  // `dlock_fence` does not exist.
  static Status Admit(MYSQL* conn, std::string_view key, FencingToken token);

  // START TRANSACTION; Admit; write(); COMMIT -- or ROLLBACK of everything
  // when the token is stale, `write` fails or the commit fails. Creates
  // `dlock_fence` first if it is missing.
  static Status Write(MYSQL* conn, std::string_view key, FencingToken token,
                      const std::function<Status()>& write);

  // The highest admitted token for `key` (0 if none, or no table yet).
  static Result<FencingToken> Highest(MYSQL* conn, std::string_view key);
};

}  // namespace dlock::fence

#endif  // DLOCK_FENCE_MARIADB_H_
