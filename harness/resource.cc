#include "harness/resource.h"

#include <sqlite3.h>

#include <functional>

#include "dlock/fence.h"

namespace dlock::harness {
namespace {

Status Exec(sqlite3* db, const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string m = err ? err : "error";
    sqlite3_free(err);
    return UnavailableError("resource: " + m);
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<CounterResource>> CounterResource::Open(const std::string& path,
                                                               bool fenced) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK) {
    std::string m = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close_v2(db);
    return UnavailableError("resource " + path + ": " + m);
  }
  std::unique_ptr<CounterResource> r(new CounterResource(db, fenced));
  sqlite3_busy_timeout(db, 10'000);
  DLOCK_RETURN_IF_ERROR(Exec(db, "PRAGMA journal_mode = WAL"));
  DLOCK_RETURN_IF_ERROR(Exec(db, "PRAGMA synchronous = NORMAL"));
  DLOCK_RETURN_IF_ERROR(Exec(db,
                             "CREATE TABLE IF NOT EXISTS counter (key TEXT PRIMARY KEY, value "
                             "INTEGER NOT NULL);"
                             "CREATE TABLE IF NOT EXISTS ops (seq INTEGER PRIMARY KEY "
                             "AUTOINCREMENT, is_write INTEGER NOT NULL, worker INTEGER NOT NULL, "
                             "token INTEGER NOT NULL, read_value INTEGER, value INTEGER NOT NULL)"));
  DLOCK_RETURN_IF_ERROR(fence::Sqlite::EnsureSchema(db));
  return r;
}

CounterResource::~CounterResource() { sqlite3_close_v2(db_); }

Status CounterResource::InTransaction(std::string_view key, FencingToken token,
                                      const std::function<Status()>& body) {
  if (fenced_) return fence::Sqlite::Write(db_, key, token, body);
  DLOCK_RETURN_IF_ERROR(Exec(db_, "BEGIN IMMEDIATE"));
  Status s = body();
  if (s.ok()) s = Exec(db_, "COMMIT");
  if (!s.ok()) (void)Exec(db_, "ROLLBACK");
  return s;
}

Result<std::int64_t> CounterResource::Read(std::string_view key, FencingToken token,
                                           int worker) {
  std::int64_t value = 0;
  Status s = InTransaction(key, token, [&]() -> Status {
    sqlite3_stmt* stmt = nullptr;
    sqlite3_prepare_v2(db_, "SELECT value FROM counter WHERE key = ?1", -1, &stmt, nullptr);
    sqlite3_bind_text(stmt, 1, key.data(), static_cast<int>(key.size()), SQLITE_TRANSIENT);
    value = sqlite3_step(stmt) == SQLITE_ROW ? sqlite3_column_int64(stmt, 0) : 0;
    sqlite3_finalize(stmt);
    return Exec(db_, "INSERT INTO ops (is_write, worker, token, value) VALUES (0, " +
                         std::to_string(worker) + ", " + std::to_string(token) + ", " +
                         std::to_string(value) + ")");
  });
  if (!s.ok()) return s;
  return value;
}

Status CounterResource::Write(std::string_view key, FencingToken token, int worker,
                              std::int64_t read_value, std::int64_t new_value) {
  return InTransaction(key, token, [&]() -> Status {
    sqlite3_stmt* stmt = nullptr;
    sqlite3_prepare_v2(db_,
                       "INSERT INTO counter (key, value) VALUES (?1, ?2) "
                       "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                       -1, &stmt, nullptr);
    sqlite3_bind_text(stmt, 1, key.data(), static_cast<int>(key.size()), SQLITE_TRANSIENT);
    sqlite3_bind_int64(stmt, 2, new_value);
    const int rc = sqlite3_step(stmt);
    sqlite3_finalize(stmt);
    if (rc != SQLITE_DONE) return UnavailableError("resource: write failed");
    return Exec(db_, "INSERT INTO ops (is_write, worker, token, read_value, value) VALUES (1, " +
                         std::to_string(worker) + ", " + std::to_string(token) + ", " +
                         std::to_string(read_value) + ", " + std::to_string(new_value) + ")");
  });
}

Status CounterResource::Load(const std::string& path, std::vector<LoggedOp>* log,
                             std::int64_t* final_counter) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close_v2(db);
    return UnavailableError("cannot open resource " + path);
  }
  sqlite3_stmt* stmt = nullptr;
  sqlite3_prepare_v2(db,
                     "SELECT seq, is_write, worker, token, coalesce(read_value, -1), value "
                     "FROM ops ORDER BY seq",
                     -1, &stmt, nullptr);
  while (stmt && sqlite3_step(stmt) == SQLITE_ROW) {
    LoggedOp op;
    op.seq = sqlite3_column_int64(stmt, 0);
    op.is_write = sqlite3_column_int(stmt, 1) != 0;
    op.worker = sqlite3_column_int(stmt, 2);
    op.token = static_cast<FencingToken>(sqlite3_column_int64(stmt, 3));
    op.read_value = sqlite3_column_int64(stmt, 4);
    op.value = sqlite3_column_int64(stmt, 5);
    log->push_back(op);
  }
  sqlite3_finalize(stmt);
  *final_counter = 0;
  sqlite3_prepare_v2(db, "SELECT coalesce(sum(value), 0) FROM counter", -1, &stmt, nullptr);
  if (stmt && sqlite3_step(stmt) == SQLITE_ROW) *final_counter = sqlite3_column_int64(stmt, 0);
  sqlite3_finalize(stmt);
  sqlite3_close_v2(db);
  return Status::Ok();
}

}  // namespace dlock::harness
