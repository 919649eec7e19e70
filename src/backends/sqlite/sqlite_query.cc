#include "backends/sqlite/sqlite_query.h"

#include <system_error>

#include "core/key_range.h"

namespace dlock::sqlite {

std::string ErrnoText(int err) { return std::error_code(err, std::generic_category()).message(); }

Status FromSqlite(int rc, sqlite3* db, std::string_view what) {
  const char* file = db != nullptr ? sqlite3_db_filename(db, "main") : nullptr;
  const std::string path = file != nullptr && *file != '\0' ? file : "(unnamed database)";
  std::string detail = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  const std::string prefix = std::string(what) + ": ";
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return UnavailableError(prefix + "database " + path +
                              " is busy: another connection kept its write lock "
                              "longer than busy_timeout");
    case SQLITE_NOTADB:
      return UnavailableError(prefix + "file " + path + " is not a SQLite database");
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_IOERR:
    case SQLITE_FULL:
    case SQLITE_CORRUPT:
    case SQLITE_PROTOCOL:
    case SQLITE_NOLFS:
    case SQLITE_NOMEM: {
      // The OS error says more than "disk I/O error" (EACCES, ENOSPC, ...).
      const int err = db != nullptr ? sqlite3_system_errno(db) : 0;
      if (err != 0) detail += " (" + ErrnoText(err) + ")";
      return UnavailableError(prefix + path + ": " + detail);
    }
    default:
      // SQL errors, constraint failures, misuse: none should happen with
      // dlock's own schema and statements.
      return InternalError(prefix + "unexpected SQLite error on " + path + ": " + detail +
                           " (code " + std::to_string(rc) + ")");
  }
}

void BindKeyRange(Query& query, std::string_view prefix) {
  query.Bind(":lo", prefix);
  if (const std::optional<std::string> end = internal::PrefixEnd(prefix)) {
    query.Bind(":hi", *end);
  } else {
    query.BindNull(":hi");
  }
}

}  // namespace dlock::sqlite
