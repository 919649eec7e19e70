#include <libpq-fe.h>

#include <cstdlib>
#include <limits>
#include <string>

#include "backends/postgres/pg_util.h"
#include "dlock/fence_postgres.h"
#include "dlock/metrics.h"

namespace dlock::fence {
namespace {

using postgres::CheckShape;
using postgres::FromPg;
using postgres::PgResultHandle;

// One row per lock key: the highest token admitted for it. The key is bytea
// because lock keys are any bytes but NUL, not necessarily UTF-8.
constexpr const char* kCreateSql = R"sql(
BEGIN;
SELECT pg_advisory_xact_lock(7150469437315711021);
CREATE TABLE IF NOT EXISTS dlock_fence (
  key     bytea PRIMARY KEY,
  highest bigint NOT NULL CHECK (highest > 0)
);
COMMIT;
)sql";

// Raises the key's highest token to ours, or leaves it (and reports not
// admitted) when ours is lower. The row stays locked until the caller's
// transaction ends, so a second writer under the same key waits for this
// one's COMMIT or ROLLBACK and then sees its token.
constexpr const char* kAdmitSql = R"sql(
WITH admitted AS (
  INSERT INTO dlock_fence AS f (key, highest) VALUES ($1, $2)
  ON CONFLICT (key) DO UPDATE SET highest = excluded.highest
  WHERE f.highest <= excluded.highest
  RETURNING 1)
SELECT EXISTS (SELECT 1 FROM admitted)
)sql";

constexpr const char* kHighestSql = "SELECT highest FROM dlock_fence WHERE key = $1";
constexpr const char* kTableExistsSql = "SELECT to_regclass('dlock_fence') IS NOT NULL";

// "database D at HOST:PORT", for messages (never the password).
std::string Where(PGconn* conn) {
  auto text = [](const char* s) { return std::string(s != nullptr ? s : "?"); };
  return "database " + text(PQdb(conn)) + " at " + text(PQhost(conn)) + ":" + text(PQport(conn));
}

Status CheckPostgresToken(FencingToken token) {
  // PostgreSQL's bigint is signed 64-bit.
  if (token == 0 ||
      token > static_cast<FencingToken>(std::numeric_limits<std::int64_t>::max())) {
    return InvalidArgumentError("fencing token " + std::to_string(token) +
                                " is out of range: tokens are 1 to 2^63-1");
  }
  return Status::Ok();
}

// Runs `sql` with `key` (bytea, binary) and optionally a token; blocking, as
// the caller's connection may be in either mode (PQexec* always block).
// `sqlstate` (optional) receives the failed statement's SQLSTATE.
Result<PgResultHandle> Exec(PGconn* conn, const char* sql, std::string_view key,
                            const std::string* token, const char* what,
                            std::string* sqlstate = nullptr) {
  const char* values[2] = {key.data(), token != nullptr ? token->c_str() : nullptr};
  const int lengths[2] = {static_cast<int>(key.size()), 0};
  const int formats[2] = {1, 0};
  PgResultHandle r(PQexecParams(conn, sql, token != nullptr ? 2 : 1, nullptr, values, lengths,
                                formats, 0));
  if (!r) return FromPg(conn, nullptr, std::string("fence: ") + what, Where(conn));
  const ExecStatusType status = PQresultStatus(r.get());
  if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) {
    const char* state = PQresultErrorField(r.get(), PG_DIAG_SQLSTATE);
    if (sqlstate != nullptr && state != nullptr) *sqlstate = state;
    return FromPg(conn, r.get(), std::string("fence: ") + what, Where(conn));
  }
  return r;
}

Status ExecPlain(PGconn* conn, const char* sql, const char* what) {
  PgResultHandle r(PQexec(conn, sql));
  if (!r) return FromPg(conn, nullptr, std::string("fence: ") + what, Where(conn));
  const ExecStatusType status = PQresultStatus(r.get());
  if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) {
    return FromPg(conn, r.get(), std::string("fence: ") + what, Where(conn));
  }
  return Status::Ok();
}

// Admit, telling a missing table apart (for Write's one retry).
Status AdmitImpl(PGconn* conn, std::string_view key, FencingToken token, bool* missing_table) {
  *missing_table = false;
  DLOCK_RETURN_IF_ERROR(CheckPostgresToken(token));
  DLOCK_RETURN_IF_ERROR(ValidateKey(key));
  switch (PQtransactionStatus(conn)) {
    case PQTRANS_INTRANS:
      break;
    case PQTRANS_IDLE:
      return FailedPreconditionError(
          "fence::Postgres::Admit must run inside the caller's transaction (BEGIN), so that "
          "the token check and the write commit together");
    case PQTRANS_INERROR:
      return FailedPreconditionError(
          "fence::Postgres::Admit: the caller's transaction has already failed: roll it back");
    default:
      return UnavailableError("fence::Postgres::Admit: the connection to " + Where(conn) +
                              " is busy or broken");
  }
  const std::string token_text = std::to_string(token);
  std::string sqlstate;
  auto admitted = Exec(conn, kAdmitSql, key, &token_text, "admit", &sqlstate);
  if (!admitted.ok()) {
    *missing_table = sqlstate == "42P01";  // undefined_table
    if (*missing_table) {
      return FailedPreconditionError(
          "fence: table dlock_fence does not exist in " + Where(conn) +
          ": roll back, call fence::Postgres::EnsureSchema once outside a transaction (or "
          "create it: docs/backend-postgres.md), and retry");
    }
    return admitted.status();
  }
  DLOCK_RETURN_IF_ERROR(CheckShape(admitted->get(), 1, 1, "fence: admit", Where(conn)));
  if (std::string_view(PQgetvalue(admitted->get(), 0, 0)) == "t") return Status::Ok();
  // Not admitted: a higher token is recorded. Read it in a new statement,
  // which (in READ COMMITTED) sees a row committed while we waited for it.
  auto highest = Exec(conn, kHighestSql, key, nullptr, "read the highest token");
  if (!highest.ok()) return highest.status();
  FencingToken h = 0;
  if (PQntuples(highest->get()) == 1 && PQnfields(highest->get()) >= 1) {
    h = std::strtoull(PQgetvalue(highest->get(), 0, 0), nullptr, 10);
  }
  return StaleToken(token, h, key);
}

}  // namespace

Status Postgres::EnsureSchema(PGconn* conn) {
  if (PQtransactionStatus(conn) != PQTRANS_IDLE) {
    return FailedPreconditionError(
        "fence::Postgres::EnsureSchema must run outside a transaction (it commits its own)");
  }
  PgResultHandle exists(PQexec(conn, kTableExistsSql));
  if (!exists || PQresultStatus(exists.get()) != PGRES_TUPLES_OK) {
    return FromPg(conn, exists.get(), "fence: look for table dlock_fence", Where(conn));
  }
  DLOCK_RETURN_IF_ERROR(
      CheckShape(exists.get(), 1, 1, "fence: look for table dlock_fence", Where(conn)));
  if (std::string_view(PQgetvalue(exists.get(), 0, 0)) == "t") return Status::Ok();
  Status s = ExecPlain(conn, kCreateSql, "create table dlock_fence");
  if (!s.ok() && PQtransactionStatus(conn) != PQTRANS_IDLE) {
    (void)ExecPlain(conn, "ROLLBACK", "roll back");
  }
  return s;
}

Status Postgres::Admit(PGconn* conn, std::string_view key, FencingToken token) {
  bool missing_table = false;
  Status decision = AdmitImpl(conn, key, token, &missing_table);
  RecordFenceDecision("postgres", decision);
  return decision;
}

Status Postgres::Write(PGconn* conn, std::string_view key, FencingToken token,
                       const std::function<Status()>& write) {
  DLOCK_RETURN_IF_ERROR(CheckPostgresToken(token));
  if (PQtransactionStatus(conn) != PQTRANS_IDLE) {
    return FailedPreconditionError(
        "fence::Postgres::Write runs its own transaction: call it outside one, or use Admit "
        "inside yours");
  }
  for (int attempt = 0;; ++attempt) {
    DLOCK_RETURN_IF_ERROR(ExecPlain(conn, "BEGIN", "begin"));
    bool missing_table = false;
    Status s = AdmitImpl(conn, key, token, &missing_table);
    RecordFenceDecision("postgres", s);
    if (s.ok() && write) s = write();
    if (s.ok()) s = ExecPlain(conn, "COMMIT", "commit");
    if (!s.ok() && PQtransactionStatus(conn) != PQTRANS_IDLE) {
      (void)ExecPlain(conn, "ROLLBACK", "roll back");
    }
    if (missing_table && attempt == 0) {
      DLOCK_RETURN_IF_ERROR(EnsureSchema(conn));
      continue;
    }
    return s;
  }
}

Result<FencingToken> Postgres::Highest(PGconn* conn, std::string_view key) {
  PgResultHandle exists(PQexec(conn, kTableExistsSql));
  if (!exists || PQresultStatus(exists.get()) != PGRES_TUPLES_OK) {
    return FromPg(conn, exists.get(), "fence: look for table dlock_fence", Where(conn));
  }
  DLOCK_RETURN_IF_ERROR(
      CheckShape(exists.get(), 1, 1, "fence: look for table dlock_fence", Where(conn)));
  if (std::string_view(PQgetvalue(exists.get(), 0, 0)) != "t") return FencingToken{0};
  auto highest = Exec(conn, kHighestSql, key, nullptr, "read the highest token");
  if (!highest.ok()) return highest.status();
  if (PQntuples(highest->get()) != 1 || PQnfields(highest->get()) < 1) return FencingToken{0};
  return static_cast<FencingToken>(std::strtoull(PQgetvalue(highest->get(), 0, 0), nullptr, 10));
}

}  // namespace dlock::fence
