#include <sqlite3.h>

#include <limits>
#include <memory>

#include "dlock/fence.h"
#include "dlock/metrics.h"

namespace dlock::fence {
namespace {

struct StmtDeleter {
  void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};
using Stmt = std::unique_ptr<sqlite3_stmt, StmtDeleter>;

Status Error(sqlite3* db, std::string_view what) {
  return UnavailableError("fence: " + std::string(what) + ": " + sqlite3_errmsg(db));
}

Result<Stmt> Prepare(sqlite3* db, const char* sql) {
  sqlite3_stmt* raw = nullptr;
  if (sqlite3_prepare_v2(db, sql, -1, &raw, nullptr) != SQLITE_OK) return Error(db, "prepare");
  return Stmt(raw);
}

Status CheckSqliteToken(FencingToken token) {
  // SQLite integers are signed 64-bit.
  if (token == 0 || token > static_cast<FencingToken>(std::numeric_limits<sqlite3_int64>::max())) {
    return InvalidArgumentError("fencing token " + std::to_string(token) +
                                " is out of range: tokens are 1 to 2^63-1");
  }
  return Status::Ok();
}

}  // namespace

Status Sqlite::EnsureSchema(sqlite3* db) {
  char* err = nullptr;
  int rc = sqlite3_exec(db,
                        "CREATE TABLE IF NOT EXISTS dlock_fence("
                        "  key TEXT PRIMARY KEY NOT NULL,"
                        "  highest INTEGER NOT NULL) WITHOUT ROWID",
                        nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string m = err ? err : "unknown error";
    sqlite3_free(err);
    return UnavailableError("fence: cannot create table dlock_fence: " + m);
  }
  return Status::Ok();
}

Status Sqlite::Admit(sqlite3* db, std::string_view key, FencingToken token) {
  DLOCK_RETURN_IF_ERROR(CheckSqliteToken(token));
  if (sqlite3_get_autocommit(db)) {
    return FailedPreconditionError(
        "fence::Sqlite::Admit must run inside the caller's write transaction "
        "(BEGIN IMMEDIATE), so that the check and the write commit together");
  }
  // Inside the caller's transaction, so it commits (or not) with the write.
  DLOCK_RETURN_IF_ERROR(EnsureSchema(db));
  // Raise the highest token, or leave the row alone if ours is lower: one
  // statement, so no other connection can slip in between check and record.
  auto upsert = Prepare(db,
                        "INSERT INTO dlock_fence(key, highest) VALUES(?1, ?2) "
                        "ON CONFLICT(key) DO UPDATE SET highest = excluded.highest "
                        "WHERE excluded.highest >= dlock_fence.highest");
  if (!upsert.ok()) return upsert.status();
  sqlite3_bind_text(upsert->get(), 1, key.data(), static_cast<int>(key.size()), SQLITE_TRANSIENT);
  sqlite3_bind_int64(upsert->get(), 2, static_cast<sqlite3_int64>(token));
  if (sqlite3_step(upsert->get()) != SQLITE_DONE) return Error(db, "admit");
  if (sqlite3_changes(db) == 1) {
    RecordFenceDecision("sqlite", Status::Ok());
    return Status::Ok();
  }
  auto highest = Highest(db, key);
  if (!highest.ok()) return highest.status();
  Status stale = StaleToken(token, *highest, key);
  RecordFenceDecision("sqlite", stale);
  return stale;
}

Status Sqlite::Write(sqlite3* db, std::string_view key, FencingToken token,
                     const std::function<Status()>& write) {
  DLOCK_RETURN_IF_ERROR(CheckSqliteToken(token));
  if (sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) != SQLITE_OK) {
    return Error(db, "begin");
  }
  Status s = Admit(db, key, token);
  if (s.ok() && write) s = write();
  if (s.ok() && sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) {
    s = Error(db, "commit");
  }
  if (!s.ok() && !sqlite3_get_autocommit(db)) {
    sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  return s;
}

Result<FencingToken> Sqlite::Highest(sqlite3* db, std::string_view key) {
  auto select = Prepare(db, "SELECT highest FROM dlock_fence WHERE key = ?1");
  if (!select.ok()) {
    // No table yet: no write was ever admitted.
    if (std::string_view(sqlite3_errmsg(db)).starts_with("no such table")) return FencingToken{0};
    return select.status();
  }
  sqlite3_bind_text(select->get(), 1, key.data(), static_cast<int>(key.size()), SQLITE_TRANSIENT);
  int rc = sqlite3_step(select->get());
  if (rc == SQLITE_ROW) return static_cast<FencingToken>(sqlite3_column_int64(select->get(), 0));
  if (rc == SQLITE_DONE) return FencingToken{0};
  return Error(db, "read highest token");
}

}  // namespace dlock::fence
