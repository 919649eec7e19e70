// What every SQLite statement of the backend goes through: handles that
// finalize themselves, one cached statement's use (Query), the write
// transaction and its busy timeout, and SQLite's result codes said as dlock
// Statuses.
#ifndef DLOCK_SRC_BACKENDS_SQLITE_SQLITE_QUERY_H_
#define DLOCK_SRC_BACKENDS_SQLITE_SQLITE_QUERY_H_

#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "dlock/status.h"

namespace dlock::sqlite {

struct DbCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
using DbHandle = std::unique_ptr<sqlite3, DbCloser>;

struct StmtFinalizer {
  void operator()(sqlite3_stmt* stmt) const { sqlite3_finalize(stmt); }
};
using StmtHandle = std::unique_ptr<sqlite3_stmt, StmtFinalizer>;

// strerror's text for `err`.
std::string ErrnoText(int err);

// The one place SQLite result codes become dlock Statuses. `what` says what
// was being done ("acquire jobs/a"); the database path comes from `db`.
// Call it right after the failing call: a later call overwrites errmsg.
Status FromSqlite(int rc, sqlite3* db, std::string_view what);

inline bool IsError(int rc) { return rc != SQLITE_ROW && rc != SQLITE_DONE && rc != SQLITE_OK; }

// One use of a cached statement: binds by name, steps, and on scope exit
// resets it and clears its bindings, so no statement is left holding a read
// snapshot or a pointer to a caller's string.
class Query {
 public:
  explicit Query(sqlite3_stmt* stmt) : stmt_(stmt) {}
  ~Query() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  Query(const Query&) = delete;
  Query& operator=(const Query&) = delete;

  Query& Bind(const char* name, std::string_view value) {
    // A null data pointer would bind NULL instead of the empty string.
    const char* data = value.data() != nullptr ? value.data() : "";
    return Check(sqlite3_bind_text(stmt_, Index(name), data, static_cast<int>(value.size()),
                                   SQLITE_TRANSIENT));
  }
  Query& Bind(const char* name, std::int64_t value) {
    return Check(sqlite3_bind_int64(stmt_, Index(name), value));
  }
  Query& BindNull(const char* name) { return Check(sqlite3_bind_null(stmt_, Index(name))); }

  // SQLITE_ROW, SQLITE_DONE, or the error (including a failed bind).
  int Step() { return bind_rc_ != SQLITE_OK ? bind_rc_ : sqlite3_step(stmt_); }

  // Steps to the end, for statements whose rows do not matter any more.
  int Finish() {
    int rc;
    while ((rc = Step()) == SQLITE_ROW) {
    }
    return rc;
  }

  std::int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  bool IsNull(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
  std::string Text(int col) const {
    const auto* text = sqlite3_column_text(stmt_, col);
    if (text == nullptr) return {};
    return std::string(reinterpret_cast<const char*>(text),
                       static_cast<std::size_t>(sqlite3_column_bytes(stmt_, col)));
  }

 private:
  int Index(const char* name) const { return sqlite3_bind_parameter_index(stmt_, name); }
  Query& Check(int rc) {
    if (bind_rc_ == SQLITE_OK) bind_rc_ = rc;
    return *this;
  }

  sqlite3_stmt* stmt_;
  int bind_rc_ = SQLITE_OK;
};

// For the scope of a write that is repeated on a schedule anyway (Renew,
// KeepPlaces): waiting for another writer longer than `wait` would only
// delay the next round (and hold the connection's mutex meanwhile).
class ShorterBusyTimeout {
 public:
  ShorterBusyTimeout(sqlite3* db, std::chrono::milliseconds usual, std::chrono::milliseconds wait)
      : db_(db), usual_ms_(static_cast<int>(usual.count())) {
    sqlite3_busy_timeout(db_, static_cast<int>(std::min(usual, wait).count()));
  }
  ~ShorterBusyTimeout() { sqlite3_busy_timeout(db_, usual_ms_); }
  ShorterBusyTimeout(const ShorterBusyTimeout&) = delete;
  ShorterBusyTimeout& operator=(const ShorterBusyTimeout&) = delete;

 private:
  sqlite3* db_;
  int usual_ms_;
};

// BEGIN IMMEDIATE ... COMMIT. Destroying it before Commit() succeeded rolls
// back whatever is still open, so a failed call never leaves half its writes
// (or a held write lock) behind. IMMEDIATE takes the write lock up front: a
// deferred transaction that reads first and writes later can fail with
// SQLITE_BUSY_SNAPSHOT without waiting, where this one waits busy_timeout.
class WriteTransaction {
 public:
  WriteTransaction(sqlite3* db, sqlite3_stmt* begin, sqlite3_stmt* commit, sqlite3_stmt* rollback)
      : db_(db), begin_(begin), commit_(commit), rollback_(rollback) {}
  ~WriteTransaction() {
    // A failed COMMIT may leave the transaction open; an I/O error may have
    // rolled it back already. get_autocommit tells which.
    if (sqlite3_get_autocommit(db_) == 0) Query(rollback_).Finish();
  }
  WriteTransaction(const WriteTransaction&) = delete;
  WriteTransaction& operator=(const WriteTransaction&) = delete;

  int Begin() { return Query(begin_).Finish(); }
  int Commit() { return Query(commit_).Finish(); }

 private:
  sqlite3* db_;
  sqlite3_stmt* begin_;
  sqlite3_stmt* commit_;
  sqlite3_stmt* rollback_;
};

// Binds :lo and :hi to the range of keys that start with `prefix`
// (:hi NULL when it has no end).
void BindKeyRange(Query& query, std::string_view prefix);

// Wall-clock milliseconds, for retentions only (types.h).
inline std::int64_t UnixNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace dlock::sqlite

#endif  // DLOCK_SRC_BACKENDS_SQLITE_SQLITE_QUERY_H_
