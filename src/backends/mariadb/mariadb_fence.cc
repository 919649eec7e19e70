#include <mysql.h>
#include <mysqld_error.h>

#include <cstdlib>
#include <string>

#include "backends/mariadb/mariadb_conn.h"
#include "backends/mariadb/mariadb_status.h"
#include "dlock/fence_mariadb.h"
#include "dlock/metrics.h"

namespace dlock::fence {
namespace {

using mariadb::FromMaria;
using mariadb::HexLiteral;

// One row per lock key: the highest token admitted for it. The key is
// binary because lock keys are any bytes but NUL, not necessarily UTF-8.
constexpr const char* kCreateSql =
    "CREATE TABLE IF NOT EXISTS dlock_fence ("
    " lock_key VARBINARY(1024) NOT NULL PRIMARY KEY,"
    " highest BIGINT UNSIGNED NOT NULL"
    ") ENGINE=InnoDB COMMENT='dlock fence'";

// "database D at HOST:PORT", for messages (never the password).
std::string Where(MYSQL* conn) {
  auto text = [](const char* s) { return std::string(s != nullptr ? s : "?"); };
  return "database " + text(conn->db) + " at " + text(conn->host) + ":" +
         std::to_string(conn->port);
}

// Runs `sql` on the caller's connection; the first column of the first row
// of its result ("" when it has none), or the error.
Result<std::string> Query(MYSQL* conn, const std::string& sql, const char* what,
                          unsigned int* error = nullptr) {
  if (error != nullptr) *error = 0;
  if (mysql_real_query(conn, sql.data(), static_cast<unsigned long>(sql.size())) != 0) {
    if (error != nullptr) *error = mysql_errno(conn);
    return FromMaria(conn, std::string("fence: ") + what, Where(conn));
  }
  std::string value;
  if (mysql_field_count(conn) > 0) {
    mariadb::ResultHandle result(mysql_store_result(conn));
    if (!result) return FromMaria(conn, std::string("fence: ") + what, Where(conn));
    if (MYSQL_ROW row = mysql_fetch_row(result.get()); row != nullptr && row[0] != nullptr) {
      value = row[0];
    }
  }
  return value;
}

bool InTransaction(MYSQL* conn) {
  unsigned int status = 0;
  if (mariadb_get_infov(conn, MARIADB_CONNECTION_SERVER_STATUS, &status) != 0) return false;
  return (status & SERVER_STATUS_IN_TRANS) != 0 || (status & SERVER_STATUS_AUTOCOMMIT) == 0;
}

// Admit, telling a missing table apart (for Write's one retry).
Status AdmitImpl(MYSQL* conn, std::string_view key, FencingToken token, bool* missing_table) {
  *missing_table = false;
  DLOCK_RETURN_IF_ERROR(CheckToken(token));
  DLOCK_RETURN_IF_ERROR(ValidateKey(key));
  if (!InTransaction(conn)) {
    return FailedPreconditionError(
        "fence::MariaDb::Admit must run inside the caller's transaction (START TRANSACTION), "
        "so that the token check and the write commit together");
  }
  const std::string t = std::to_string(token);
  unsigned int error = 0;
  auto highest = Query(conn,
                       "INSERT INTO dlock_fence (lock_key, highest) VALUES (" + HexLiteral(key) +
                           ", " + t + ") ON DUPLICATE KEY UPDATE highest = IF(highest <= " + t +
                           ", " + t + ", highest) RETURNING highest",
                       "admit", &error);
  if (!highest.ok()) {
    *missing_table = error == ER_NO_SUCH_TABLE;
    if (*missing_table) {
      return FailedPreconditionError(
          "fence: table dlock_fence does not exist in " + Where(conn) +
          ": roll back, call fence::MariaDb::EnsureSchema once outside a transaction (or "
          "create it: docs/backend-mariadb.md), and retry");
    }
    return highest.status();
  }
  if (*highest == t) return Status::Ok();
  return StaleToken(token, std::strtoull(highest->c_str(), nullptr, 10), key);
}

}  // namespace

Status MariaDb::EnsureSchema(MYSQL* conn) {
  if (InTransaction(conn)) {
    return FailedPreconditionError(
        "fence::MariaDb::EnsureSchema must run outside a transaction (CREATE TABLE commits it)");
  }
  return Query(conn, kCreateSql, "create table dlock_fence").status();
}

Status MariaDb::Admit(MYSQL* conn, std::string_view key, FencingToken token) {
  bool missing_table = false;
  Status decision = AdmitImpl(conn, key, token, &missing_table);
  RecordFenceDecision("mariadb", decision);
  return decision;
}

Status MariaDb::Write(MYSQL* conn, std::string_view key, FencingToken token,
                      const std::function<Status()>& write) {
  DLOCK_RETURN_IF_ERROR(CheckToken(token));
  if (InTransaction(conn)) {
    return FailedPreconditionError(
        "fence::MariaDb::Write runs its own transaction: call it outside one, or use Admit "
        "inside yours");
  }
  for (int attempt = 0;; ++attempt) {
    DLOCK_RETURN_IF_ERROR(Query(conn, "START TRANSACTION", "begin").status());
    bool missing_table = false;
    Status s = AdmitImpl(conn, key, token, &missing_table);
    RecordFenceDecision("mariadb", s);
    if (s.ok() && write) s = write();
    if (s.ok()) s = Query(conn, "COMMIT", "commit").status();
    if (!s.ok()) (void)Query(conn, "ROLLBACK", "roll back");
    if (missing_table && attempt == 0) {
      DLOCK_RETURN_IF_ERROR(EnsureSchema(conn));
      continue;
    }
    return s;
  }
}

Result<FencingToken> MariaDb::Highest(MYSQL* conn, std::string_view key) {
  unsigned int error = 0;
  auto highest = Query(conn, "SELECT highest FROM dlock_fence WHERE lock_key = " + HexLiteral(key),
                       "read the highest token", &error);
  if (!highest.ok()) {
    if (error == ER_NO_SUCH_TABLE) return FencingToken{0};
    return highest.status();
  }
  if (highest->empty()) return FencingToken{0};
  return static_cast<FencingToken>(std::strtoull(highest->c_str(), nullptr, 10));
}

}  // namespace dlock::fence
