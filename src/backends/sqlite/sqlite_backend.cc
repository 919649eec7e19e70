#include "backends/sqlite/sqlite_backend.h"

#include <fcntl.h>
#include <poll.h>
#include <sqlite3.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <stop_token>
#include <optional>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "backends/sqlite/wal_watches.h"
#include "core/duration.h"
#include "backends/sqlite/wal_watcher.h"
#include "core/fd.h"
#include "dlock/sharing.h"

namespace dlock::sqlite {
namespace {

using internal::Fd;

// Bumped when the layout changes; kept in dlock_meta rather than PRAGMA
// user_version so that a database shared with another application (which
// may use user_version itself) is not misread. Version 1 kept the holder and
// the token counter in one dlock_locks row per key (one holder per key);
// version 2 kept a counter per key in dlock_tokens, one row per key ever
// granted; version 3 keeps one counter for the whole store, so a released
// key leaves no row behind. Older files are migrated in place when opened
// (kMigrateV1Sql, kMigrateV2Sql), and the table the older dlock wrote its
// counters to is dropped: an older dlock that still has the file open then
// fails ("no such table") instead of granting a token below one already
// granted, and one that opens it later refuses the schema version.
constexpr std::int64_t kSchemaVersion = 3;

// dlock_meta 'last_token': the store's one token counter, the last token
// granted on any key. Every grant takes the next value, so a key's tokens
// increase however often its rows come and go.
//
// dlock_holders: one row per holding. A holding counts (for the sharing
// rule) iff boot_id is the current boot and expires_at_ms + lock_delay_ms >
// now; it is held iff expires_at_ms > now. Released holdings are deleted;
// lapsed ones are deleted by the next grant on their key.
//
// dlock_queue: one row per waiter, live iff boot_id is the current boot and
// expires_at_ms > now.
//
// dlock_done: one run-once record per key, kept until keep_until_unix_ms
// (wall-clock time: a retention of days is a calendar matter; NULL: kept
// for ever, as every record written before version 3).
//
// dlock_breaks: one row per holding a break evicted (BreakRecord), kept
// until keep_until_unix_ms as run-once records are. Added within version
// 3: a table an older dlock of the same version never reads.
constexpr const char* kSchemaSql = R"sql(
CREATE TABLE IF NOT EXISTS dlock_meta (
  name  TEXT PRIMARY KEY NOT NULL,
  value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO dlock_meta (name, value) VALUES ('schema_version', 3)
  ON CONFLICT (name) DO NOTHING;
INSERT INTO dlock_meta (name, value) VALUES ('last_token', 0)
  ON CONFLICT (name) DO NOTHING;
CREATE TABLE IF NOT EXISTS dlock_holders (
  key            TEXT NOT NULL,
  owner          TEXT NOT NULL,
  token          INTEGER NOT NULL,
  boot_id        TEXT NOT NULL,
  expires_at_ms  INTEGER NOT NULL,
  acquired_at_ms INTEGER NOT NULL,
  lock_delay_ms  INTEGER NOT NULL DEFAULT 0,
  ttl_ms         INTEGER NOT NULL DEFAULT 0,
  holder_limit   INTEGER NOT NULL DEFAULT 1,
  label          TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (key, owner)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS dlock_queue (
  key           TEXT NOT NULL,
  owner         TEXT NOT NULL,
  seq           INTEGER NOT NULL,
  boot_id       TEXT NOT NULL,
  expires_at_ms INTEGER NOT NULL,
  PRIMARY KEY (key, owner)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS dlock_queue_by_seq ON dlock_queue (key, seq);
CREATE TABLE IF NOT EXISTS dlock_done (
  key        TEXT PRIMARY KEY NOT NULL,
  owner      TEXT NOT NULL,
  token      INTEGER NOT NULL,
  done_at_ms INTEGER NOT NULL,
  keep_until_unix_ms INTEGER
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS dlock_breaks (
  key         TEXT NOT NULL,
  at_unix_ms  INTEGER NOT NULL,
  owner       TEXT NOT NULL,
  token       INTEGER NOT NULL,
  label       TEXT NOT NULL,
  broken_by   TEXT NOT NULL,
  break_token INTEGER NOT NULL,
  keep_until_unix_ms INTEGER
);
CREATE INDEX IF NOT EXISTS dlock_breaks_by_key ON dlock_breaks (key);
CREATE INDEX IF NOT EXISTS dlock_breaks_by_expiry ON dlock_breaks (keep_until_unix_ms)
  WHERE keep_until_unix_ms IS NOT NULL;
)sql";

// Columns added after a table was first released, for files created by an
// older dlock: (table, column, definition).
constexpr const char* kAddedColumns[][3] = {
    {"dlock_queue", "holder_limit", "INTEGER NOT NULL DEFAULT 1"},
    {"dlock_queue", "label", "TEXT NOT NULL DEFAULT ''"},
    {"dlock_queue", "since_ms", "INTEGER"},
    {"dlock_done", "keep_until_unix_ms", "INTEGER"},
};

// After kAddedColumns: the index that finds run-once records past their
// retention without reading the others.
constexpr const char* kAddedIndexesSql = R"sql(
CREATE INDEX IF NOT EXISTS dlock_done_by_expiry ON dlock_done (keep_until_unix_ms)
  WHERE keep_until_unix_ms IS NOT NULL;
)sql";

// Version 1 -> 2, in the transaction that checked the version (version 3
// follows at once): the counters move to dlock_tokens, the live holders to
// dlock_holders (their ttl unknown, 0). dlock_locks.lock_delay_ms was added during version 1 (the
// migration adds it first where it is missing).
constexpr const char* kMigrateV1Sql = R"sql(
CREATE TABLE dlock_tokens (key TEXT PRIMARY KEY NOT NULL, token INTEGER NOT NULL) WITHOUT ROWID;
INSERT INTO dlock_tokens (key, token) SELECT key, token FROM dlock_locks;
INSERT INTO dlock_holders (key, owner, token, boot_id, expires_at_ms, acquired_at_ms,
                           lock_delay_ms, ttl_ms, holder_limit, label)
SELECT key, owner, token, boot_id, expires_at_ms, coalesce(acquired_at_ms, expires_at_ms),
       lock_delay_ms, 0, 1, ''
FROM dlock_locks
WHERE owner IS NOT NULL AND boot_id IS NOT NULL AND expires_at_ms IS NOT NULL;
DROP TABLE dlock_locks;
UPDATE dlock_meta SET value = 2 WHERE name = 'schema_version';
)sql";

// Version 2 -> 3: the store's counter starts at the highest token any key
// was ever granted (a counter, a holding, a run-once record), so no key's
// next token goes down; then the per-key counters go.
constexpr const char* kMigrateV2Sql = R"sql(
UPDATE dlock_meta SET value = max(value,
    coalesce((SELECT max(token) FROM dlock_tokens), 0),
    coalesce((SELECT max(token) FROM dlock_holders), 0),
    coalesce((SELECT max(token) FROM dlock_done), 0))
  WHERE name = 'last_token';
DROP TABLE dlock_tokens;
UPDATE dlock_meta SET value = 3 WHERE name = 'schema_version';
)sql";

constexpr const char* kSchemaVersionSql =
    "SELECT value FROM dlock_meta WHERE name = 'schema_version'";

// Everything one grant decision needs about a key, read in one statement of
// two rows. Flat aggregates over the key's index range only: a FROM-clause
// subquery would be materialized into a temporary table on every grant,
// which doubled the cost of an uncontended acquire.
// Row with column 0 = 0, the holdings (C: the holding counts):
//  1 mine:       the token of :owner's unexpired holding (NULL: none)
//  2 mine_delay: 1 if :owner has a holding that expired but still counts
//  3 holders:    holdings that count (held, or expired within lock-delay)
//  4 holder_lim: the smallest limit among them
//  5 wait_ms:    until the first of them stops counting
//  6 stale:      holding rows that no longer count
// Row with column 0 = 1, the queue (L: the waiter is live):
//  1 ahead:      live waiters queued before :owner (all of them when
//                :owner has no live place)
//  2 ahead_lim:  the smallest limit among those
//  3 stale:      queue rows no longer live
//  4 queued:     1 if :owner has a queue row, live or not
constexpr const char* kStateSql = R"sql(
SELECT 0,
  max(token) FILTER (WHERE boot_id = :boot AND expires_at_ms + lock_delay_ms > :now_ms
                       AND owner = :owner AND expires_at_ms > :now_ms),
  coalesce(max(owner = :owner AND expires_at_ms <= :now_ms)
             FILTER (WHERE boot_id = :boot AND expires_at_ms + lock_delay_ms > :now_ms), 0),
  count(*) FILTER (WHERE boot_id = :boot AND expires_at_ms + lock_delay_ms > :now_ms),
  min(holder_limit) FILTER (WHERE boot_id = :boot AND expires_at_ms + lock_delay_ms > :now_ms),
  min(expires_at_ms + lock_delay_ms)
    FILTER (WHERE boot_id = :boot AND expires_at_ms + lock_delay_ms > :now_ms) - :now_ms,
  count(*) FILTER (WHERE NOT (boot_id = :boot AND expires_at_ms + lock_delay_ms > :now_ms))
FROM dlock_holders WHERE key = :key
UNION ALL
SELECT 1,
  count(*) FILTER (WHERE boot_id = :boot AND expires_at_ms > :now_ms AND owner <> :owner
                     AND seq < coalesce((SELECT seq FROM dlock_queue
                                         WHERE key = :key AND owner = :owner AND boot_id = :boot
                                           AND expires_at_ms > :now_ms),
                                        9223372036854775807)),
  min(holder_limit) FILTER (WHERE boot_id = :boot AND expires_at_ms > :now_ms AND owner <> :owner
                              AND seq < coalesce((SELECT seq FROM dlock_queue
                                                  WHERE key = :key AND owner = :owner
                                                    AND boot_id = :boot
                                                    AND expires_at_ms > :now_ms),
                                                 9223372036854775807)),
  count(*) FILTER (WHERE NOT (boot_id = :boot AND expires_at_ms > :now_ms)),
  coalesce(max(owner = :owner), 0),
  NULL, NULL
FROM dlock_queue WHERE key = :key
)sql";

// The store's token counter: one more than the last token of any key.
constexpr const char* kNextTokenSql = R"sql(
UPDATE dlock_meta SET value = value + 1 WHERE name = 'last_token' RETURNING value
)sql";

constexpr const char* kInsertHolderSql = R"sql(
INSERT INTO dlock_holders (key, owner, token, boot_id, expires_at_ms, acquired_at_ms,
                           lock_delay_ms, ttl_ms, holder_limit, label)
VALUES (:key, :owner, :token, :boot, :now_ms + :ttl_ms, :now_ms, :lock_delay_ms, :ttl_ms,
        :limit, :label)
)sql";

// A retried grant: the same token, a fresh expiry.
constexpr const char* kRegrantSql = R"sql(
UPDATE dlock_holders SET expires_at_ms = :now_ms + :ttl_ms, ttl_ms = :ttl_ms,
  lock_delay_ms = :lock_delay_ms
WHERE key = :key AND owner = :owner
)sql";

constexpr const char* kPurgeHoldersSql = R"sql(
DELETE FROM dlock_holders
WHERE key = :key AND (boot_id IS NOT :boot OR expires_at_ms + lock_delay_ms <= :now_ms)
)sql";

// The wait queue: waiters are served in arrival order, so that a process
// that releases and re-acquires in a loop cannot starve the others. An entry
// lives queue_ttl past its owner's last attempt (judged by the store clock),
// so a waiter that dies leaves the queue by itself. A lapsed entry that comes
// back goes to the end.
constexpr const char* kEnqueueSql = R"sql(
INSERT INTO dlock_queue (key, owner, seq, boot_id, expires_at_ms, holder_limit, label, since_ms)
VALUES (:key, :owner, (SELECT coalesce(max(seq), 0) + 1 FROM dlock_queue WHERE key = :key),
        :boot, :now_ms + :queue_ttl_ms, :limit, :label, :now_ms)
ON CONFLICT (key, owner) DO UPDATE SET
  seq = CASE WHEN dlock_queue.boot_id IS NOT excluded.boot_id
               OR dlock_queue.expires_at_ms <= :now_ms
             THEN excluded.seq ELSE dlock_queue.seq END,
  since_ms = CASE WHEN dlock_queue.boot_id IS NOT excluded.boot_id
                    OR dlock_queue.expires_at_ms <= :now_ms
                  THEN excluded.since_ms ELSE dlock_queue.since_ms END,
  boot_id = excluded.boot_id,
  expires_at_ms = excluded.expires_at_ms,
  holder_limit = excluded.holder_limit,
  label = excluded.label
)sql";

constexpr const char* kPurgeQueueSql = R"sql(
DELETE FROM dlock_queue
WHERE key = :key AND (boot_id IS NOT :boot OR expires_at_ms <= :now_ms)
)sql";

constexpr const char* kDequeueSql = "DELETE FROM dlock_queue WHERE key = :key AND owner = :owner";

// KeepPlaces: a live place lives another queue_ttl. A lapsed one is left as
// it is (the waiter's next attempt re-takes it, at the back), and holdings
// are another table.
constexpr const char* kKeepPlaceSql = R"sql(
UPDATE dlock_queue SET expires_at_ms = :now_ms + :queue_ttl_ms
WHERE key = :key AND owner = :owner AND boot_id = :boot AND expires_at_ms > :now_ms
)sql";

constexpr const char* kHeldByOwnerSql = R"sql(
SELECT token FROM dlock_holders
WHERE key = :key AND owner = :owner AND boot_id = :boot AND expires_at_ms > :now_ms
)sql";

constexpr const char* kMarkDoneSql = R"sql(
INSERT INTO dlock_done (key, owner, token, done_at_ms, keep_until_unix_ms)
VALUES (:key, :owner, :token, :now_ms, :keep_until)
ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, token = excluded.token,
  done_at_ms = excluded.done_at_ms, keep_until_unix_ms = excluded.keep_until_unix_ms
)sql";

constexpr const char* kIsDoneSql = R"sql(
SELECT 1 FROM dlock_done
WHERE key = :key AND (keep_until_unix_ms IS NULL OR keep_until_unix_ms > :unix_ms)
)sql";

// With every record written, a few past their retention go (by the index).
constexpr const char* kExpireDoneSql = R"sql(
DELETE FROM dlock_done WHERE key IN (
  SELECT key FROM dlock_done WHERE keep_until_unix_ms <= :unix_ms LIMIT 16)
)sql";

// A break record, and a few records past their retention with it.
constexpr const char* kRecordBreakSql = R"sql(
INSERT INTO dlock_breaks (key, at_unix_ms, owner, token, label, broken_by, break_token,
                          keep_until_unix_ms)
VALUES (:key, :unix_ms, :owner, :token, :label, :by, :break_token, :keep_until)
)sql";

constexpr const char* kExpireBreaksSql = R"sql(
DELETE FROM dlock_breaks WHERE rowid IN (
  SELECT rowid FROM dlock_breaks WHERE keep_until_unix_ms <= :unix_ms LIMIT 16)
)sql";

constexpr const char* kBreaksSql = R"sql(
SELECT key, owner, token, label, broken_by, break_token, at_unix_ms FROM dlock_breaks
WHERE key >= :lo AND (:hi IS NULL OR key < :hi)
  AND (keep_until_unix_ms IS NULL OR keep_until_unix_ms > :unix_ms)
ORDER BY key, rowid
)sql";

// Wall-clock milliseconds, for retentions only (types.h).
std::int64_t UnixNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Deletes this owner's holding unless it expired and is still inside its
// lock-delay (an unclean end keeps the key closed for the delay, even if the
// late holder then releases). Returns whether it was still held.
constexpr const char* kReleaseSql = R"sql(
DELETE FROM dlock_holders
WHERE key = :key AND owner = :owner
  AND NOT (boot_id = :boot AND expires_at_ms <= :now_ms AND expires_at_ms + lock_delay_ms > :now_ms)
RETURNING boot_id = :boot AND expires_at_ms > :now_ms
)sql";

constexpr const char* kHeldByAnyoneSql = R"sql(
SELECT 1 FROM dlock_holders
WHERE key = :key AND boot_id = :boot AND expires_at_ms > :now_ms
LIMIT 1
)sql";

constexpr const char* kRenewSql = R"sql(
UPDATE dlock_holders SET expires_at_ms = :now_ms + :ttl_ms, ttl_ms = :ttl_ms
WHERE key = :key AND owner = :owner AND boot_id = :boot AND expires_at_ms > :now_ms
)sql";

// A key range rather than LIKE or GLOB: keys may hold '%', '_', '*' and bytes
// that are not UTF-8, and TEXT compares with memcmp (BINARY collation).
constexpr const char* kListSql = R"sql(
SELECT key, owner, token, expires_at_ms - :now_ms, ttl_ms, :now_ms - acquired_at_ms,
       holder_limit, label
FROM dlock_holders
WHERE key >= :lo AND (:hi IS NULL OR key < :hi)
  AND boot_id = :boot AND expires_at_ms > :now_ms
ORDER BY key, token
)sql";

constexpr const char* kWaitersSql = R"sql(
SELECT key, owner, holder_limit, label, :now_ms - since_ms FROM dlock_queue
WHERE key >= :lo AND (:hi IS NULL OR key < :hi)
  AND boot_id = :boot AND expires_at_ms > :now_ms
ORDER BY key, seq
)sql";

// For the watcher of asynchronous waiters (wal_watcher.h), in one read
// transaction: the holdings of `key` that count, then its live queue in
// arrival order, read only as far as someone could be granted (the index
// on (key, seq) serves the order: no sort, so stepping stops early). With
// each row, how long until it stops counting.
constexpr const char* kTurnHoldersSql = R"sql(
SELECT owner, holder_limit, expires_at_ms + lock_delay_ms - :now_ms, expires_at_ms > :now_ms
FROM dlock_holders
WHERE key = :key AND boot_id = :boot AND expires_at_ms + lock_delay_ms > :now_ms
)sql";
constexpr const char* kTurnQueueSql = R"sql(
SELECT owner, holder_limit, expires_at_ms - :now_ms FROM dlock_queue
WHERE key = :key AND boot_id = :boot AND expires_at_ms > :now_ms
ORDER BY seq
)sql";

constexpr const char* kStoredObjectsSql = R"sql(
SELECT (SELECT count(*) FROM dlock_holders WHERE key >= :lo AND (:hi IS NULL OR key < :hi))
     + (SELECT count(*) FROM dlock_queue WHERE key >= :lo AND (:hi IS NULL OR key < :hi))
     + (SELECT count(*) FROM dlock_done WHERE key >= :lo AND (:hi IS NULL OR key < :hi))
     + (SELECT count(*) FROM dlock_breaks WHERE key >= :lo AND (:hi IS NULL OR key < :hi))
)sql";

struct DbCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
using DbHandle = std::unique_ptr<sqlite3, DbCloser>;

struct StmtFinalizer {
  void operator()(sqlite3_stmt* stmt) const { sqlite3_finalize(stmt); }
};
using StmtHandle = std::unique_ptr<sqlite3_stmt, StmtFinalizer>;

std::string ErrnoText(int err) {
  return std::error_code(err, std::generic_category()).message();
}

// The one place SQLite result codes become dlock Statuses. `what` says what
// was being done ("acquire jobs/a"); the database path comes from `db`.
// Call it right after the failing call: a later call overwrites errmsg.
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
      return InternalError(prefix + "unexpected SQLite error on " + path + ": " +
                           detail + " (code " + std::to_string(rc) + ")");
  }
}

bool IsError(int rc) { return rc != SQLITE_ROW && rc != SQLITE_DONE && rc != SQLITE_OK; }

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
    return Check(sqlite3_bind_text(stmt_, Index(name), data,
                                   static_cast<int>(value.size()), SQLITE_TRANSIENT));
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

// BEGIN IMMEDIATE ... COMMIT. Destroying it before Commit() succeeded rolls
// back whatever is still open, so a failed call never leaves half its writes
// (or a held write lock) behind. IMMEDIATE takes the write lock up front: a
// deferred transaction that reads first and writes later can fail with
// SQLITE_BUSY_SNAPSHOT without waiting, where this one waits busy_timeout.
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

class WriteTransaction {
 public:
  WriteTransaction(sqlite3* db, sqlite3_stmt* begin, sqlite3_stmt* commit,
                   sqlite3_stmt* rollback)
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

// The smallest string greater than every string that starts with `prefix`,
// or nullopt when there is none (empty prefix, or all 0xff bytes).
std::optional<std::string> PrefixEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    const auto last = static_cast<unsigned char>(end.back());
    if (last != 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  return std::nullopt;
}

std::string DirectoryOf(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == 0 ? "/" : path.substr(0, slash);
}

// mkdir -p with mode 0700: the default database holds lock names that other
// users need not see.
Status MakeDirectories(const std::string& dir) {
  std::size_t pos = 1;
  while (true) {
    const std::size_t slash = dir.find('/', pos);
    const std::string part = dir.substr(0, slash);
    struct stat st;
    if (stat(part.c_str(), &st) != 0) {
      // EEXIST: another process created it between stat and mkdir.
      if (mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) {
        return UnavailableError("cannot create directory " + part + ": " + ErrnoText(errno));
      }
    }
    if (slash == std::string::npos) return Status::Ok();
    pos = slash + 1;
  }
}

// SQLite would report a missing directory as "unable to open database file"
// and a read-only one only at the first write, or not at all (it silently
// opens read-only); WAL also needs to create -wal and -shm files beside the
// database. So check up front and say which.
Status CheckLocation(const std::string& path, bool create_directory) {
  const std::string dir = DirectoryOf(path);
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT && create_directory) {
      DLOCK_RETURN_IF_ERROR(MakeDirectories(dir));
      if (stat(dir.c_str(), &st) != 0) {
        return UnavailableError("directory " + dir + ": " + ErrnoText(errno));
      }
    } else if (err == ENOENT) {
      return UnavailableError("directory " + dir + " does not exist");
    } else if (err == ENOTDIR) {
      return UnavailableError("directory " + dir +
                              " does not exist: a part of its path is not a directory");
    } else {
      return UnavailableError("directory " + dir + ": " + ErrnoText(err));
    }
  }
  if (!S_ISDIR(st.st_mode)) return UnavailableError(dir + " is not a directory");
  // AT_EACCESS: judge by the effective ids, as open() will.
  if (faccessat(AT_FDCWD, dir.c_str(), W_OK | X_OK, AT_EACCESS) != 0) {
    const int err = errno;
    if (err == EACCES || err == EPERM) {
      return UnavailableError("directory " + dir + " is not writable");
    }
    return UnavailableError("directory " + dir + " is not writable: " + ErrnoText(err));
  }
  if (stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return UnavailableError(path + " is a directory");
    if (!S_ISREG(st.st_mode)) return UnavailableError(path + " is not a regular file");
    if (faccessat(AT_FDCWD, path.c_str(), R_OK | W_OK, AT_EACCESS) != 0) {
      return UnavailableError("file " + path + " is not writable: " + ErrnoText(errno));
    }
  }
  return Status::Ok();
}

const char* SynchronousPragma(Synchronous s) {
  switch (s) {
    case Synchronous::kFull: return "PRAGMA synchronous = FULL";
    case Synchronous::kNormal: return "PRAGMA synchronous = NORMAL";
    case Synchronous::kOff: return "PRAGMA synchronous = OFF";
  }
  return "PRAGMA synchronous = FULL";
}

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

Status ValidateAcquire(const LeaseRequest& request) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(request.key));
  DLOCK_RETURN_IF_ERROR(ValidateTtl(request.ttl));
  DLOCK_RETURN_IF_ERROR(ValidateLabel(request.label));
  if (request.owner.empty()) return InvalidArgumentError("acquire: the owner id is empty");
  if (request.limit == 0) return InvalidArgumentError("acquire: the limit is 0");
  return Status::Ok();
}

// Judges registered waiters (TurnWaiter) as TryAcquire would, from a key's
// counting holdings and then its live queue in order (kTurnHoldersSql,
// kTurnQueueSql): a waiter is granted iff Admits(everyone before it). Once
// one in the queue is not, nobody behind it is (it counts ahead of them,
// with its limit), so the walk stops there: flat work per key however long
// its queue, and only waiters that may be granted are woken.
class TurnScan {
 public:
  explicit TurnScan(const std::vector<TurnWaiter>& waiters) : waiters_(waiters) {
    for (std::size_t i = 0; i < waiters.size(); ++i) pending_.emplace(waiters[i].owner, i);
  }

  // A holding that counts, `lapse_ms` before it stops counting.
  void Holding(const std::string& owner, std::uint32_t limit, std::int64_t lapse_ms, bool held) {
    Lapses(lapse_ms);
    auto [first, last] = pending_.equal_range(owner);
    // An owner that holds the key is a retry whose reply was lost: granted
    // again. One in its own lock-delay waits it out like everyone else.
    for (auto it = first; held && it != last; ++it) verdict_.admitted.push_back(it->second);
    pending_.erase(first, last);
    Counts(limit);
  }

  // The next live place in the queue; false when it may not be granted.
  bool Place(const std::string& owner, std::uint32_t limit, std::int64_t lapse_ms) {
    Lapses(lapse_ms);
    const bool admitted = dlock::Admits(ahead_, smallest_, limit);
    auto [first, last] = pending_.equal_range(owner);
    for (auto it = first; admitted && it != last; ++it) verdict_.admitted.push_back(it->second);
    pending_.erase(first, last);
    Counts(limit);
    return admitted;
  }

  // `whole_queue`: every place was admitted. A waiter without a live place
  // (it lapsed) then comes after all of them.
  TurnVerdict End(bool whole_queue) {
    for (const auto& [owner, i] : pending_) {
      if (whole_queue && dlock::Admits(ahead_, smallest_, waiters_[i].limit)) {
        verdict_.admitted.push_back(i);
      }
    }
    return std::move(verdict_);
  }

 private:
  void Counts(std::uint32_t limit) {
    ++ahead_;
    smallest_ = std::min(smallest_, limit);
  }
  // Any row read may stop counting without a write, and let a waiter in.
  void Lapses(std::int64_t lapse_ms) {
    const std::chrono::milliseconds lapse(std::max<std::int64_t>(0, lapse_ms));
    if (!verdict_.lapse || lapse < *verdict_.lapse) verdict_.lapse = lapse;
  }

  const std::vector<TurnWaiter>& waiters_;
  std::multimap<std::string, std::size_t, std::less<>> pending_;  // owner -> index, unjudged
  std::size_t ahead_ = 0;
  std::uint32_t smallest_ = kSharedLimit;
  TurnVerdict verdict_;
};

class SqliteBackend final : public Backend {
 public:
  SqliteBackend(SqliteOptions options, DbHandle db)
      : options_(std::move(options)),
        db_(std::move(db)),
        wal_watches_(options_.path + "-wal"),
        watcher_(
            options_.path + "-wal",
            [this](std::string_view key, const std::vector<TurnWaiter>& waiters) {
              return JudgeTurns(key, waiters);
            },
            [this] { return CommittedSinceLastLook(); }) {}

  // Everything Open does once the file is known to be openable.
  Status Init(std::string_view what);

  Result<Attempt> TryAcquire(const LeaseRequest& request) override;
  Status Release(std::string_view key, const OwnerId& owner) override;
  std::vector<Status> Renew(std::span<const LeaseRequest> leases) override;
  // One write transaction for the batch, touching queue rows only.
  std::vector<Status> KeepPlaces(std::span<const LeaseRequest> waiters) override;
  bool KeepsPlaces() const override { return true; }
  Result<std::vector<HolderInfo>> List(std::string_view prefix) override;
  std::string Describe() const override { return "sqlite://" + options_.path; }
  Status Ping() override;
  bool WaitForRelease(std::string_view key, TimePoint until, std::stop_token stop) override;
  std::uint64_t NotifyOnRelease(const LeaseRequest& request,
                                std::function<void()> wake) override;
  void StopNotifyOnRelease(std::uint64_t handle) override { watcher_.Remove(handle); }
  std::size_t PendingNotifications() const { return watcher_.Registered(); }
  bool SupportsLockDelay() const override { return true; }
  bool SupportsSharing() const override { return true; }
  Result<std::vector<WaiterInfo>> Waiters(std::string_view prefix) override;
  Result<std::uint64_t> StoredObjects(std::string_view prefix) override;
  Result<bool> IsDone(std::string_view key) override;
  Status MarkDone(std::string_view key, const OwnerId& owner,
                  std::chrono::milliseconds keep) override;
  Status RecordBreak(const BreakRecord& record, std::chrono::milliseconds keep) override;
  Result<std::vector<BreakRecord>> Breaks(std::string_view prefix) override;

 private:
  // What the grant decision needs about `key` for `owner` (kStateSql).
  // Under mu_.
  struct KeyState {
    FencingToken mine = 0;    // owner's unexpired holding
    bool mine_delay = false;  // owner's expired holding, still counting
    std::int64_t holders = 0;
    std::int64_t holder_limit = kSharedLimit;
    std::int64_t wait_ms = 0;  // until the first counting holding lapses
    std::int64_t stale_holders = 0;
    std::int64_t ahead = 0;
    std::int64_t ahead_limit = kSharedLimit;
    std::int64_t stale_waiters = 0;
    bool queued = false;
    // The sharing rule of backend.h for a request with `limit`.
    bool Admits(std::uint32_t limit) const {
      const auto smallest = static_cast<std::uint32_t>(std::min(holder_limit, ahead_limit));
      return dlock::Admits(static_cast<std::size_t>(holders + ahead), smallest, limit);
    }
  };
  Result<KeyState> ReadState(std::string_view key, std::string_view owner, const BootTime& now);

  // The steps of TryAcquire, inside its write transaction (under mu_).
  // `owner` is request.owner as text, `now` the store's clock; an error is
  // said as "acquire <key>".
  //
  // Extends the holding `owner` already has (a retry whose reply was lost).
  Status Regrant(const LeaseRequest& request, std::string_view owner, const BootTime& now);
  // A new holding with the key's next token, which it returns; leaves the
  // queue and sweeps lapsed rows on the way.
  Result<FencingToken> Grant(const LeaseRequest& request, std::string_view owner,
                             const BootTime& now, const KeyState& state);
  // Takes or refreshes `owner`'s place in the key's queue.
  Status KeepPlace(const LeaseRequest& request, std::string_view owner, const BootTime& now,
                   const KeyState& state);
  Result<FencingToken> NextToken(std::string_view key);
  Result<std::int64_t> ReadSchemaVersion(std::string_view what);
  Status Migrate(std::string_view what);
  // Deletes `key`'s rows that no longer count (kPurgeHoldersSql, kPurgeQueueSql).
  Status Purge(sqlite3_stmt* purge, std::string_view key, const BootTime& now);
  // Steps `query` once.
  Status AcquireStep(Query& query, std::string_view key);
  // `owner` no longer waits for `key` through this connection. Under mu_.
  void ForgetWaiter(std::string_view key, const std::string& owner);

  // List and Waiters: the rows of `stmt` (key and owner in columns 0 and 1)
  // for the keys that start with `prefix`, the rest of each Info set by
  // `fill`. `row_name` names a row in the error for a malformed owner.
  template <typename Info, typename Fill>
  Result<std::vector<Info>> ListRows(sqlite3_stmt* stmt, std::string_view prefix,
                                     const std::string& what, std::string_view row_name, Fill fill);

  // Whether a waiter of ours may take `key` now by the sharing rule; if
  // not, *expiry_ms is how long until the first holding that blocks it
  // lapses (-1: none does; only a write can change the answer).
  Result<bool> MayTakeNow(std::string_view key, std::int64_t* expiry_ms);
  // The watcher's check (WalWatcher::Check) and its gate
  // (WalWatcher::Committed).
  Result<TurnVerdict> JudgeTurns(std::string_view key, const std::vector<TurnWaiter>& waiters);
  bool CommittedSinceLastLook();
  BootTime StoreNow() const {
    return options_.store_clock ? options_.store_clock() : ReadBootTime();
  }
  Status SetJournalModeWal(std::string_view what);
  Status CreateSchema(std::string_view what);
  Status Prepare(const char* sql, StmtHandle* out, std::string_view what);
  WriteTransaction Transaction() {
    return WriteTransaction(db_.get(), begin_.get(), commit_.get(), rollback_.get());
  }

  const SqliteOptions options_;
  std::mutex mu_;  // guards the connection and every statement below
  // Declared before the statements so that they are finalized first.
  DbHandle db_;
  StmtHandle begin_, commit_, rollback_;
  StmtHandle state_, next_token_, insert_holder_, regrant_, purge_holders_;
  StmtHandle release_, held_by_anyone_, renew_, list_, waiters_;
  StmtHandle enqueue_, purge_queue_, dequeue_, keep_place_;
  StmtHandle held_by_owner_, mark_done_, is_done_, expire_done_;
  StmtHandle record_break_, expire_breaks_, breaks_;
  StmtHandle read_begin_, turn_holders_, turn_queue_, data_version_;
  StmtHandle ping_;  // prepared on first use
  std::int64_t pings_ = 0;
  // Owners of this connection waiting in each key's queue, with the limit
  // each asked for: WaitForRelease wakes only when one of them may be
  // granted.
  std::map<std::string, std::map<std::string, std::uint32_t>, std::less<>> waiting_;
  // What WaitForRelease watches the -wal file with.
  WalWatches wal_watches_;
  // What CommittedSinceLastLook saw: PRAGMA data_version (others' commits)
  // and sqlite3_total_changes (this connection's).
  std::pair<std::int64_t, std::int64_t> seen_version_{-1, -1};
  // Last: its thread, which uses everything above, ends first.
  WalWatcher watcher_;
};

Status SqliteBackend::Prepare(const char* sql, StmtHandle* out, std::string_view what) {
  sqlite3_stmt* raw = nullptr;
  const int rc = sqlite3_prepare_v3(db_.get(), sql, -1, SQLITE_PREPARE_PERSISTENT, &raw, nullptr);
  out->reset(raw);
  if (rc != SQLITE_OK) return FromSqlite(rc, db_.get(), what);
  return Status::Ok();
}

Status SqliteBackend::SetJournalModeWal(std::string_view what) {
  // Switching a new file to WAL takes a brief exclusive lock, and SQLite can
  // report SQLITE_BUSY for it without consulting the busy handler when many
  // processes open the same new file at once. Retry within busy_timeout.
  const auto deadline = std::chrono::steady_clock::now() + options_.busy_timeout;
  while (true) {
    StmtHandle stmt;
    DLOCK_RETURN_IF_ERROR(Prepare("PRAGMA journal_mode = WAL", &stmt, what));
    Query query(stmt.get());
    const int rc = query.Step();
    if (rc == SQLITE_ROW) {
      const std::string mode = Lower(query.Text(0));
      if (mode == "wal") return Status::Ok();
      return UnavailableError(std::string(what) + ": cannot switch " + options_.path +
                              " to WAL journal mode (it stays in '" + mode +
                              "' mode; is it on a network file system?)");
    }
    if ((rc & 0xff) != SQLITE_BUSY || std::chrono::steady_clock::now() >= deadline) {
      return FromSqlite(rc == SQLITE_DONE ? SQLITE_ERROR : rc, db_.get(), what);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// 0 when the file has no version yet.
Result<std::int64_t> SqliteBackend::ReadSchemaVersion(std::string_view what) {
  StmtHandle stmt;
  DLOCK_RETURN_IF_ERROR(Prepare(kSchemaVersionSql, &stmt, what));
  Query query(stmt.get());
  const int rc = query.Step();
  if (IsError(rc)) return FromSqlite(rc, db_.get(), what);
  return rc == SQLITE_ROW ? query.Int(0) : 0;
}

// Brings an older file to kSchemaVersion, one version at a time, inside the
// caller's write transaction: every process sees either the old layout or
// the new one.
Status SqliteBackend::Migrate(std::string_view what) {
  static constexpr const char* kSteps[] = {nullptr, kMigrateV1Sql, kMigrateV2Sql};
  DLOCK_ASSIGN_OR_RETURN(std::int64_t version, ReadSchemaVersion(what));
  while (version >= 1 && version < kSchemaVersion) {
    const int rc = sqlite3_exec(db_.get(), kSteps[version], nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) return FromSqlite(rc, db_.get(), what);
    DLOCK_ASSIGN_OR_RETURN(version, ReadSchemaVersion(what));
  }
  if (version != kSchemaVersion) {
    return FailedPreconditionError(
        std::string(what) + ": " + options_.path + " has lock schema version " +
        std::to_string(version) + ", this dlock reads version " +
        std::to_string(kSchemaVersion) + " (was it written by a newer dlock?)");
  }
  return Status::Ok();
}

Status SqliteBackend::CreateSchema(std::string_view what) {
  // IF NOT EXISTS inside BEGIN IMMEDIATE: many processes may open a new file
  // at once; each waits for the write lock, and all but the first find the
  // tables there.
  WriteTransaction txn = Transaction();
  int rc = txn.Begin();
  if (IsError(rc)) return FromSqlite(rc, db_.get(), what);
  rc = sqlite3_exec(db_.get(), kSchemaSql, nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return FromSqlite(rc, db_.get(), what);
  auto add_column = [&](const char* table, const char* column, const char* definition) {
    StmtHandle probe;
    const std::string probe_sql = std::string("SELECT count(*) FROM pragma_table_info('") + table +
                                  "') WHERE name = '" + column + "'";
    DLOCK_RETURN_IF_ERROR(Prepare(probe_sql.c_str(), &probe, what));
    if (sqlite3_step(probe.get()) == SQLITE_ROW && sqlite3_column_int(probe.get(), 0) == 0) {
      const std::string alter = std::string("ALTER TABLE ") + table + " ADD COLUMN " + column +
                                " " + definition;
      const int alter_rc = sqlite3_exec(db_.get(), alter.c_str(), nullptr, nullptr, nullptr);
      if (alter_rc != SQLITE_OK) return FromSqlite(alter_rc, db_.get(), what);
    }
    return Status::Ok();
  };
  for (const auto& [table, column, definition] : kAddedColumns) {
    DLOCK_RETURN_IF_ERROR(add_column(table, column, definition));
  }
  rc = sqlite3_exec(db_.get(), kAddedIndexesSql, nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return FromSqlite(rc, db_.get(), what);
  DLOCK_ASSIGN_OR_RETURN(const std::int64_t version, ReadSchemaVersion(what));
  if (version == 1) {
    DLOCK_RETURN_IF_ERROR(add_column("dlock_locks", "lock_delay_ms", "INTEGER NOT NULL DEFAULT 0"));
  }
  DLOCK_RETURN_IF_ERROR(Migrate(what));
  rc = txn.Commit();
  if (IsError(rc)) return FromSqlite(rc, db_.get(), what);
  return Status::Ok();
}

Status SqliteBackend::Init(std::string_view what) {
  std::lock_guard lock(mu_);
  sqlite3* db = db_.get();
  sqlite3_extended_result_codes(db, 1);
  // SQLITE_OPEN_READWRITE falls back to read-only when the file is write
  // protected; a lock store that cannot write is useless, say so now.
  if (sqlite3_db_readonly(db, "main") == 1) {
    return UnavailableError(std::string(what) + ": file " + options_.path + " is not writable");
  }
  int rc = sqlite3_busy_timeout(db, static_cast<int>(options_.busy_timeout.count()));
  if (rc != SQLITE_OK) return FromSqlite(rc, db, what);
  rc = sqlite3_exec(db, SynchronousPragma(options_.synchronous), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return FromSqlite(rc, db, what);
  // Short-lived processes (`dlock exec`) are often the file's only
  // connection: keep the -wal file between them instead of deleting and
  // re-creating (and fsyncing) it each time. Truncating it at every
  // checkpoint (a limit of 0) costs steady-state throughput; 4 MiB is about
  // the size the default auto-checkpoint lets it reach anyway.
  int persist = 1;
  sqlite3_file_control(db, "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
  rc = sqlite3_exec(db, "PRAGMA journal_size_limit = 4194304", nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return FromSqlite(rc, db, what);
  // The first statement that reads the file: a non-database fails here.
  DLOCK_RETURN_IF_ERROR(SetJournalModeWal(what));
  DLOCK_RETURN_IF_ERROR(Prepare("BEGIN IMMEDIATE", &begin_, what));
  DLOCK_RETURN_IF_ERROR(Prepare("COMMIT", &commit_, what));
  DLOCK_RETURN_IF_ERROR(Prepare("ROLLBACK", &rollback_, what));
  DLOCK_RETURN_IF_ERROR(CreateSchema(what));
  DLOCK_RETURN_IF_ERROR(Prepare(kStateSql, &state_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kNextTokenSql, &next_token_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kInsertHolderSql, &insert_holder_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kRegrantSql, &regrant_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kPurgeHoldersSql, &purge_holders_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kWaitersSql, &waiters_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kReleaseSql, &release_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kHeldByAnyoneSql, &held_by_anyone_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kRenewSql, &renew_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kListSql, &list_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kEnqueueSql, &enqueue_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kPurgeQueueSql, &purge_queue_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kDequeueSql, &dequeue_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kKeepPlaceSql, &keep_place_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kHeldByOwnerSql, &held_by_owner_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kMarkDoneSql, &mark_done_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kIsDoneSql, &is_done_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kExpireDoneSql, &expire_done_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kRecordBreakSql, &record_break_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kExpireBreaksSql, &expire_breaks_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kBreaksSql, &breaks_, what));
  DLOCK_RETURN_IF_ERROR(Prepare("BEGIN", &read_begin_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kTurnHoldersSql, &turn_holders_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kTurnQueueSql, &turn_queue_, what));
  DLOCK_RETURN_IF_ERROR(Prepare("PRAGMA data_version", &data_version_, what));
  return Status::Ok();
}

Result<SqliteBackend::KeyState> SqliteBackend::ReadState(std::string_view key,
                                                          std::string_view owner,
                                                          const BootTime& now) {
  Query query(state_.get());
  query.Bind(":key", key).Bind(":owner", owner).Bind(":boot", now.boot_id)
      .Bind(":now_ms", now.now_ms);
  auto or_max = [&](int col) {
    return query.IsNull(col) ? static_cast<std::int64_t>(kSharedLimit) : query.Int(col);
  };
  KeyState state;
  int rc;
  int rows = 0;
  while ((rc = query.Step()) == SQLITE_ROW) {
    ++rows;
    if (query.Int(0) == 0) {
      state.mine = static_cast<FencingToken>(query.Int(1));
      state.mine_delay = query.Int(2) != 0;
      state.holders = query.Int(3);
      state.holder_limit = or_max(4);
      state.wait_ms = query.Int(5);
      state.stale_holders = query.Int(6);
    } else {
      state.ahead = query.Int(1);
      state.ahead_limit = or_max(2);
      state.stale_waiters = query.Int(3);
      state.queued = query.Int(4) != 0;
    }
  }
  if (IsError(rc) || rows != 2) {
    return FromSqlite(IsError(rc) ? rc : SQLITE_ERROR, db_.get(),
                      "read the state of " + std::string(key));
  }
  return state;
}

Status SqliteBackend::AcquireStep(Query& query, std::string_view key) {
  const int rc = query.Step();
  if (IsError(rc)) return FromSqlite(rc, db_.get(), "acquire " + std::string(key));
  return Status::Ok();
}

Status SqliteBackend::Purge(sqlite3_stmt* purge, std::string_view key, const BootTime& now) {
  Query query(purge);
  query.Bind(":key", key).Bind(":boot", now.boot_id).Bind(":now_ms", now.now_ms);
  return AcquireStep(query, key);
}

Status SqliteBackend::Regrant(const LeaseRequest& request, std::string_view owner,
                              const BootTime& now) {
  Query query(regrant_.get());
  query.Bind(":key", request.key)
      .Bind(":owner", owner)
      .Bind(":now_ms", now.now_ms)
      .Bind(":ttl_ms", static_cast<std::int64_t>(request.ttl.count()))
      .Bind(":lock_delay_ms", static_cast<std::int64_t>(request.lock_delay.count()));
  return AcquireStep(query, request.key);
}

Result<FencingToken> SqliteBackend::NextToken(std::string_view key) {
  Query query(next_token_.get());
  int rc = query.Step();
  if (rc != SQLITE_ROW) {
    return FromSqlite(rc == SQLITE_DONE ? SQLITE_ERROR : rc, db_.get(),
                      "acquire " + std::string(key));
  }
  const auto token = static_cast<FencingToken>(query.Int(0));
  rc = query.Finish();
  if (IsError(rc)) return FromSqlite(rc, db_.get(), "acquire " + std::string(key));
  return token;
}

Result<FencingToken> SqliteBackend::Grant(const LeaseRequest& request, std::string_view owner,
                                          const BootTime& now, const KeyState& state) {
  if (state.stale_holders > 0) {
    DLOCK_RETURN_IF_ERROR(Purge(purge_holders_.get(), request.key, now));
  }
  DLOCK_ASSIGN_OR_RETURN(const FencingToken token, NextToken(request.key));
  {
    Query query(insert_holder_.get());
    query.Bind(":key", request.key)
        .Bind(":owner", owner)
        .Bind(":token", static_cast<std::int64_t>(token))
        .Bind(":boot", now.boot_id)
        .Bind(":now_ms", now.now_ms)
        .Bind(":ttl_ms", static_cast<std::int64_t>(request.ttl.count()))
        .Bind(":lock_delay_ms", static_cast<std::int64_t>(request.lock_delay.count()))
        .Bind(":limit", static_cast<std::int64_t>(request.limit))
        .Bind(":label", request.label);
    DLOCK_RETURN_IF_ERROR(AcquireStep(query, request.key));
  }
  if (state.queued) {
    Query dequeue(dequeue_.get());
    dequeue.Bind(":key", request.key).Bind(":owner", owner);
    DLOCK_RETURN_IF_ERROR(AcquireStep(dequeue, request.key));
  }
  if (state.stale_waiters > 0) {
    DLOCK_RETURN_IF_ERROR(Purge(purge_queue_.get(), request.key, now));
  }
  return token;
}

Status SqliteBackend::KeepPlace(const LeaseRequest& request, std::string_view owner,
                                const BootTime& now, const KeyState& state) {
  if (state.stale_waiters > 0) {
    DLOCK_RETURN_IF_ERROR(Purge(purge_queue_.get(), request.key, now));
  }
  Query enqueue(enqueue_.get());
  enqueue.Bind(":key", request.key)
      .Bind(":owner", owner)
      .Bind(":boot", now.boot_id)
      .Bind(":now_ms", now.now_ms)
      .Bind(":queue_ttl_ms", static_cast<std::int64_t>(request.queue_ttl.count()))
      .Bind(":limit", static_cast<std::int64_t>(request.limit))
      .Bind(":label", request.label);
  return AcquireStep(enqueue, request.key);
}

void SqliteBackend::ForgetWaiter(std::string_view key, const std::string& owner) {
  auto it = waiting_.find(key);
  if (it == waiting_.end()) return;
  it->second.erase(owner);
  if (it->second.empty()) waiting_.erase(it);
}

Result<Attempt> SqliteBackend::TryAcquire(const LeaseRequest& request) {
  DLOCK_RETURN_IF_ERROR(ValidateAcquire(request));
  auto what = [&] { return "acquire " + request.key; };
  const std::string owner = request.owner.ToString();
  const bool queueing = request.queue_ttl > std::chrono::milliseconds(0);

  std::lock_guard lock(mu_);
  WriteTransaction txn = Transaction();
  int rc = txn.Begin();
  if (IsError(rc)) return FromSqlite(rc, db_.get(), what());
  // Read after BEGIN IMMEDIATE: the time spent waiting for the write lock
  // must not make us judge expiry by a stale clock.
  const BootTime now = StoreNow();
  // One read decides; the uncontended grant then costs two writes (the
  // counter and the holding).
  DLOCK_ASSIGN_OR_RETURN(const KeyState state, ReadState(request.key, owner, now));

  Attempt attempt;
  if (state.mine != 0) {
    // A retry by the owner that holds the key (its reply was lost): the same
    // grant back, with a fresh expiry.
    DLOCK_RETURN_IF_ERROR(Regrant(request, owner, now));
    attempt.granted = true;
    attempt.token = state.mine;
  } else if (!state.mine_delay && state.Admits(request.limit)) {
    // (An owner whose own holding lapsed into its lock-delay waits the delay
    // out like everyone else.)
    DLOCK_ASSIGN_OR_RETURN(attempt.token, Grant(request, owner, now, state));
    attempt.granted = true;
  } else {
    if (queueing) {
      DLOCK_RETURN_IF_ERROR(KeepPlace(request, owner, now, state));
    }
    if (state.holders > 0) {
      attempt.holder_ttl_remaining =
          std::chrono::milliseconds(std::max<std::int64_t>(0, state.wait_ms));
    }
  }
  rc = txn.Commit();
  if (IsError(rc)) return FromSqlite(rc, db_.get(), what());
  if (queueing && !attempt.granted) {
    waiting_[request.key][owner] = request.limit;
  } else {
    ForgetWaiter(request.key, owner);
  }
  return attempt;
}

Result<bool> SqliteBackend::MayTakeNow(std::string_view key, std::int64_t* expiry_ms) {
  *expiry_ms = -1;
  std::lock_guard lock(mu_);
  auto mine = waiting_.find(key);
  if (mine == waiting_.end()) return true;  // not queued here: let the core try
  const BootTime now = StoreNow();
  for (const auto& [owner, limit] : mine->second) {
    DLOCK_ASSIGN_OR_RETURN(const KeyState state, ReadState(key, owner, now));
    if (state.mine != 0 || (!state.mine_delay && state.Admits(limit))) return true;
    if (state.holders > 0 && (*expiry_ms < 0 || state.wait_ms < *expiry_ms)) {
      *expiry_ms = std::max<std::int64_t>(0, state.wait_ms);
    }
  }
  return false;
}

// Every commit appends to the -wal file, from any process on the host, so an
// inotify watch on it is a wake-up for "something changed": a release, a
// queue entry leaving. On each wake-up a read-only check decides whether one
// of our waiters is now at the head of a free key; expiries (which write
// nothing) are covered by `until`, which the core bounds by the holder's
// remaining TTL.
bool SqliteBackend::WaitForRelease(std::string_view key, TimePoint until, std::stop_token stop) {
  // A test that drives the store clock also drives the core's clock: waiting
  // here in real time would not follow it, so leave waiting to the core.
  if (options_.store_clock) return false;
  {
    std::lock_guard lock(mu_);
    if (!waiting_.count(key)) return false;
  }
  const WalWatches::Watch notify = wal_watches_.Start();
  if (!notify.valid()) return false;  // no inotify: the core polls
  Fd stopped(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  std::stop_callback on_stop(stop, [&] {
    std::uint64_t one = 1;
    (void)!::write(stopped.get(), &one, sizeof one);
  });
  // The -wal file changes when a commit's frames are written, a little
  // before the commit becomes visible (after its fsync, in the shared-memory
  // index, which inotify cannot see). So after each change, look again a few
  // times over the next ~25 ms (0.2, 0.4, 0.8, ... ms) before waiting for
  // the next change.
  std::int64_t recheck_us = 0;
  for (;;) {
    // Checked after the watch is armed, so a change in between is not missed.
    std::int64_t expiry_ms = -1;
    auto may = MayTakeNow(key, &expiry_ms);
    if (!may.ok() || *may || stop.stop_requested()) return true;
    // A holding that blocks us may lapse before `until` without any write
    // (a holder that died or paused): wake then too. The core's own bound
    // comes from the holder seen at its last attempt, which may have been
    // none (the key was free, another waiter first), or another holder.
    if (expiry_ms >= 0) {
      until = std::min(until, MonotonicClock::now() + std::chrono::milliseconds(expiry_ms + 1));
    }
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(
        until - MonotonicClock::now());
    if (left <= std::chrono::microseconds(0)) return true;
    std::int64_t timeout_us = std::min<std::int64_t>(left.count(), 60'000'000);
    if (recheck_us > 0) timeout_us = std::min(timeout_us, recheck_us);
    const timespec timeout{static_cast<time_t>(timeout_us / 1'000'000),
                           static_cast<long>(timeout_us % 1'000'000) * 1000};
    pollfd fds[2] = {{notify.fd(), POLLIN, 0}, {stopped.get(), POLLIN, 0}};
    const int ready = ::ppoll(fds, 2, &timeout, nullptr);
    if (ready > 0 && fds[1].revents) return true;
    if (ready > 0 && fds[0].revents) {
      notify.Drain();
      recheck_us = 200;
    } else if (recheck_us > 0) {
      recheck_us = recheck_us >= 12'800 ? 0 : recheck_us * 2;
    }
  }
}

std::uint64_t SqliteBackend::NotifyOnRelease(const LeaseRequest& request,
                                             std::function<void()> wake) {
  // As WaitForRelease: a test that drives the store clock also drives the
  // core's, which a watcher waiting in real time would not follow.
  if (options_.store_clock) return 0;
  return watcher_.Add(request.key, TurnWaiter{request.owner.ToString(), request.limit},
                      std::move(wake));
}

Result<TurnVerdict> SqliteBackend::JudgeTurns(std::string_view key,
                                              const std::vector<TurnWaiter>& waiters) {
  auto what = [&] { return "check the waiters for " + std::string(key); };
  std::lock_guard lock(mu_);
  // A deferred transaction that only reads: one snapshot for both queries.
  WriteTransaction txn = WriteTransaction(db_.get(), read_begin_.get(), commit_.get(),
                                          rollback_.get());
  int rc = txn.Begin();
  if (IsError(rc)) return FromSqlite(rc, db_.get(), what());
  const BootTime now = StoreNow();
  auto limit = [](std::int64_t v) { return static_cast<std::uint32_t>(v); };
  TurnScan scan(waiters);
  {
    Query holders(turn_holders_.get());
    holders.Bind(":key", key).Bind(":boot", now.boot_id).Bind(":now_ms", now.now_ms);
    while ((rc = holders.Step()) == SQLITE_ROW) {
      scan.Holding(holders.Text(0), limit(holders.Int(1)), holders.Int(2), holders.Int(3) != 0);
    }
    if (IsError(rc)) return FromSqlite(rc, db_.get(), what());
  }
  bool whole_queue = true;
  {
    Query queue(turn_queue_.get());
    queue.Bind(":key", key).Bind(":boot", now.boot_id).Bind(":now_ms", now.now_ms);
    while ((rc = queue.Step()) == SQLITE_ROW) {
      if (!scan.Place(queue.Text(0), limit(queue.Int(1)), queue.Int(2))) {
        whole_queue = false;
        break;
      }
    }
    if (IsError(rc)) return FromSqlite(rc, db_.get(), what());
  }
  rc = txn.Commit();
  if (IsError(rc)) return FromSqlite(rc, db_.get(), what());
  return scan.End(whole_queue);
}

bool SqliteBackend::CommittedSinceLastLook() {
  std::lock_guard lock(mu_);
  Query query(data_version_.get());
  if (query.Step() != SQLITE_ROW) return true;  // cannot tell: look
  const std::pair<std::int64_t, std::int64_t> seen{query.Int(0),
                                                   sqlite3_total_changes(db_.get())};
  return std::exchange(seen_version_, seen) != seen;
}

Result<bool> SqliteBackend::IsDone(std::string_view key) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(key));
  std::lock_guard lock(mu_);
  Query query(is_done_.get());
  query.Bind(":key", key).Bind(":unix_ms", UnixNowMs());
  const int rc = query.Step();
  if (IsError(rc)) return FromSqlite(rc, db_.get(), "read the done mark of " + std::string(key));
  return rc == SQLITE_ROW;
}

namespace {

// Binds :keep_until, the end of a retention of `keep` from `unix_ms` (NULL:
// for ever).
void BindKeepUntil(Query& query, std::int64_t unix_ms, std::chrono::milliseconds keep) {
  if (keep == kKeepDoneForever || keep.count() > std::numeric_limits<std::int64_t>::max() - unix_ms) {
    query.BindNull(":keep_until");
  } else {
    query.Bind(":keep_until", unix_ms + static_cast<std::int64_t>(keep.count()));
  }
}

}  // namespace

// Marked only by the current holder, in one transaction with the check.
Status SqliteBackend::MarkDone(std::string_view key, const OwnerId& owner,
                               std::chrono::milliseconds keep) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(key));
  const std::string what = "mark " + std::string(key) + " done";
  std::lock_guard lock(mu_);
  sqlite3* db = db_.get();
  WriteTransaction txn = Transaction();
  int rc = txn.Begin();
  if (IsError(rc)) return FromSqlite(rc, db, what);
  const BootTime now = StoreNow();
  std::int64_t token = 0;
  {
    Query held(held_by_owner_.get());
    held.Bind(":key", key).Bind(":owner", owner.ToString()).Bind(":boot", now.boot_id)
        .Bind(":now_ms", now.now_ms);
    rc = held.Step();
    if (IsError(rc)) return FromSqlite(rc, db, what);
    if (rc != SQLITE_ROW) {
      return NotOwnerError(what + ": this owner no longer holds the lock");
    }
    token = held.Int(0);
  }
  {
    const std::int64_t unix_ms = UnixNowMs();
    Query mark(mark_done_.get());
    mark.Bind(":key", key).Bind(":owner", owner.ToString()).Bind(":token", token)
        .Bind(":now_ms", now.now_ms);
    BindKeepUntil(mark, unix_ms, keep);
    rc = mark.Step();
    if (IsError(rc)) return FromSqlite(rc, db, what);
    Query expire(expire_done_.get());
    expire.Bind(":unix_ms", unix_ms);
    rc = expire.Step();
    if (IsError(rc)) return FromSqlite(rc, db, what);
  }
  rc = txn.Commit();
  if (IsError(rc)) return FromSqlite(rc, db, what);
  return Status::Ok();
}

Status SqliteBackend::RecordBreak(const BreakRecord& record, std::chrono::milliseconds keep) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(record.key));
  const std::string what = "record the break of " + std::string(record.key);
  std::lock_guard lock(mu_);
  sqlite3* db = db_.get();
  WriteTransaction txn = Transaction();
  int rc = txn.Begin();
  if (IsError(rc)) return FromSqlite(rc, db, what);
  const std::int64_t unix_ms = UnixNowMs();  // the file has no clock but this host's
  {
    Query insert(record_break_.get());
    insert.Bind(":key", record.key).Bind(":unix_ms", unix_ms)
        .Bind(":owner", record.owner.ToString())
        .Bind(":token", static_cast<std::int64_t>(record.token)).Bind(":label", record.label)
        .Bind(":by", record.by).Bind(":break_token", static_cast<std::int64_t>(record.break_token));
    BindKeepUntil(insert, unix_ms, keep);
    rc = insert.Step();
    if (IsError(rc)) return FromSqlite(rc, db, what);
    Query expire(expire_breaks_.get());
    expire.Bind(":unix_ms", unix_ms);
    rc = expire.Step();
    if (IsError(rc)) return FromSqlite(rc, db, what);
  }
  rc = txn.Commit();
  if (IsError(rc)) return FromSqlite(rc, db, what);
  return Status::Ok();
}

Result<std::vector<BreakRecord>> SqliteBackend::Breaks(std::string_view prefix) {
  const std::string what = "list the breaks of '" + std::string(prefix) + "'";
  const std::optional<std::string> end = PrefixEnd(prefix);
  std::lock_guard lock(mu_);
  Query query(breaks_.get());
  query.Bind(":lo", prefix).Bind(":unix_ms", UnixNowMs());
  if (end.has_value()) {
    query.Bind(":hi", *end);
  } else {
    query.BindNull(":hi");
  }
  std::vector<BreakRecord> records;
  int rc;
  while ((rc = query.Step()) == SQLITE_ROW) {
    BreakRecord r;
    r.key = query.Text(0);
    Result<OwnerId> owner = OwnerId::Parse(query.Text(1));
    if (!owner.ok()) {
      return InternalError(what + ": a break record for key " + r.key + " in " + options_.path +
                           " has a malformed owner id: " + owner.status().message());
    }
    r.owner = *owner;
    r.token = static_cast<FencingToken>(query.Int(2));
    r.label = query.Text(3);
    r.by = query.Text(4);
    r.break_token = static_cast<FencingToken>(query.Int(5));
    r.at_unix_ms = query.Int(6);
    records.push_back(std::move(r));
  }
  if (IsError(rc)) return FromSqlite(rc, db_.get(), what);
  return records;
}

// The floor: one single-row write transaction with the same durability as a
// grant, on its own row of dlock_meta ('ping'), which no grant touches.
Status SqliteBackend::Ping() {
  std::lock_guard lock(mu_);
  sqlite3* db = db_.get();
  WriteTransaction txn = Transaction();
  int rc = txn.Begin();
  if (IsError(rc)) return FromSqlite(rc, db, "ping");
  // Prepared once, like the lock statements, so that the floor is not
  // inflated by compiling SQL.
  if (!ping_) {
    DLOCK_RETURN_IF_ERROR(Prepare("INSERT INTO dlock_meta (name, value) VALUES ('ping', :n) "
                                  "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                                  &ping_, "ping"));
  }
  {
    Query query(ping_.get());
    query.Bind(":n", ++pings_);
    rc = query.Step();
    if (IsError(rc)) return FromSqlite(rc, db, "ping");
  }
  rc = txn.Commit();
  if (IsError(rc)) return FromSqlite(rc, db, "ping");
  return Status::Ok();
}

Status SqliteBackend::Release(std::string_view key, const OwnerId& owner) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(key));
  auto what = [&] { return "release " + std::string(key); };

  std::lock_guard lock(mu_);
  sqlite3* db = db_.get();
  WriteTransaction txn = Transaction();
  int rc = txn.Begin();
  if (IsError(rc)) return FromSqlite(rc, db, what());
  const BootTime now = StoreNow();
  bool released = false;
  {
    // Our own holding (the store's counter is not the key's); one that lapsed
    // into its lock-delay stays until the delay has passed.
    Query query(release_.get());
    query.Bind(":key", key).Bind(":owner", owner.ToString()).Bind(":boot", now.boot_id)
        .Bind(":now_ms", now.now_ms);
    while ((rc = query.Step()) == SQLITE_ROW) released = released || query.Int(0) != 0;
    if (IsError(rc)) return FromSqlite(rc, db, what());
  }
  Status result;
  // A waiter that gives up leaves the queue at once. Only owners that waited
  // through this connection can be queued: skip the statement otherwise.
  if (auto it = waiting_.find(key); it != waiting_.end() && it->second.count(owner.ToString())) {
    Query dequeue(dequeue_.get());
    dequeue.Bind(":key", key).Bind(":owner", owner.ToString());
    rc = dequeue.Step();
    if (IsError(rc)) return FromSqlite(rc, db, what());
    it->second.erase(owner.ToString());
    if (it->second.empty()) waiting_.erase(it);
  }
  if (!released) {
    Query query(held_by_anyone_.get());
    query.Bind(":key", key).Bind(":boot", now.boot_id).Bind(":now_ms", now.now_ms);
    rc = query.Step();
    if (IsError(rc)) return FromSqlite(rc, db, what());
    // Free or expired: releasing again is not an error.
    if (rc == SQLITE_ROW) {
      result = NotOwnerError("release " + std::string(key) + ": the lock is held by another owner");
    }
  }
  // Committed even when another owner holds the key: leaving the queue must
  // stick.
  rc = txn.Commit();
  if (IsError(rc)) return FromSqlite(rc, db, what());
  return result;
}

std::vector<Status> SqliteBackend::Renew(std::span<const LeaseRequest> leases) {
  std::vector<Status> result(leases.size());
  bool any_valid = false;
  for (std::size_t i = 0; i < leases.size(); ++i) {
    result[i] = ValidateKey(leases[i].key);
    if (result[i].ok()) result[i] = ValidateTtl(leases[i].ttl);
    any_valid = any_valid || result[i].ok();
  }
  if (!any_valid) return result;

  // Every OK verdict so far becomes `error`: the batch is one transaction, so
  // when it fails none of its renewals happened.
  auto fail_all = [&](const Status& error) {
    for (Status& s : result) {
      if (s.ok()) s = error;
    }
    return result;
  };
  std::lock_guard lock(mu_);
  sqlite3* db = db_.get();
  // A renewal that waits for another writer longer than a third of the
  // shortest TTL would only delay the retry the core makes anyway (and hold
  // this connection's mutex while it waits), so it waits less.
  std::chrono::milliseconds shortest = options_.busy_timeout * 3;
  for (std::size_t i = 0; i < leases.size(); ++i) {
    if (result[i].ok()) shortest = std::min(shortest, leases[i].ttl);
  }
  const ShorterBusyTimeout busy(db, options_.busy_timeout, shortest / 3);
  WriteTransaction txn = Transaction();
  int rc = txn.Begin();
  if (IsError(rc)) return fail_all(FromSqlite(rc, db, "renew"));
  const BootTime now = StoreNow();
  for (std::size_t i = 0; i < leases.size(); ++i) {
    if (!result[i].ok()) continue;
    const LeaseRequest& lease = leases[i];
    Query query(renew_.get());
    query.Bind(":key", lease.key)
        .Bind(":owner", lease.owner.ToString())
        .Bind(":boot", now.boot_id)
        .Bind(":now_ms", now.now_ms)
        .Bind(":ttl_ms", static_cast<std::int64_t>(lease.ttl.count()));
    rc = query.Step();
    if (IsError(rc)) {
      // Later entries are still OK here and get this error too.
      result[i] = FromSqlite(rc, db, "renew " + lease.key);
      return fail_all(result[i]);
    }
    if (sqlite3_changes(db) != 1) {
      result[i] = NotOwnerError("lease on key " + lease.key +
                                " is no longer held by this owner");
    }
  }
  rc = txn.Commit();
  // A NotOwner verdict stands even if the commit failed: a lease that was
  // not held cannot have become held again.
  if (IsError(rc)) return fail_all(FromSqlite(rc, db, "renew"));
  return result;
}

std::vector<Status> SqliteBackend::KeepPlaces(std::span<const LeaseRequest> waiters) {
  std::vector<Status> result(waiters.size());
  bool any_valid = false;
  std::chrono::milliseconds shortest = options_.busy_timeout * 3;
  for (std::size_t i = 0; i < waiters.size(); ++i) {
    result[i] = ValidateKey(waiters[i].key);
    if (result[i].ok() && waiters[i].queue_ttl <= std::chrono::milliseconds(0)) {
      result[i] = InvalidArgumentError("keep a place in the queue of " + waiters[i].key +
                                       ": queue_ttl is not positive");
    }
    if (result[i].ok()) shortest = std::min(shortest, waiters[i].queue_ttl);
    any_valid = any_valid || result[i].ok();
  }
  if (!any_valid) return result;
  // One transaction: when it fails, no place was kept.
  auto fail_all = [&](const Status& error) {
    for (Status& s : result) {
      if (s.ok()) s = error;
    }
    return result;
  };
  std::lock_guard lock(mu_);
  sqlite3* db = db_.get();
  // The core keeps places every third of queue_ttl: a keep that waits
  // longer for the write lock is better left to the next one.
  const ShorterBusyTimeout busy(db, options_.busy_timeout, shortest / 3);
  WriteTransaction txn = Transaction();
  int rc = txn.Begin();
  if (IsError(rc)) return fail_all(FromSqlite(rc, db, "keep places in the queue"));
  const BootTime now = StoreNow();
  for (std::size_t i = 0; i < waiters.size(); ++i) {
    if (!result[i].ok()) continue;
    const LeaseRequest& waiter = waiters[i];
    Query query(keep_place_.get());
    query.Bind(":key", waiter.key)
        .Bind(":owner", waiter.owner.ToString())
        .Bind(":boot", now.boot_id)
        .Bind(":now_ms", now.now_ms)
        .Bind(":queue_ttl_ms", static_cast<std::int64_t>(waiter.queue_ttl.count()));
    rc = query.Step();
    if (IsError(rc)) {
      return fail_all(FromSqlite(rc, db, "keep a place in the queue of " + waiter.key));
    }
    if (sqlite3_changes(db) != 1) {
      result[i] = NotFoundError("no place in the queue of " + waiter.key + " for this owner");
    }
  }
  rc = txn.Commit();
  // A kNotFound stands even if the commit failed: a place that was gone
  // cannot have come back.
  if (IsError(rc)) return fail_all(FromSqlite(rc, db, "keep places in the queue"));
  return result;
}

template <typename Info, typename Fill>
Result<std::vector<Info>> SqliteBackend::ListRows(sqlite3_stmt* stmt, std::string_view prefix,
                                                  const std::string& what,
                                                  std::string_view row_name, Fill fill) {
  const std::optional<std::string> end = PrefixEnd(prefix);

  std::lock_guard lock(mu_);
  const BootTime now = StoreNow();
  Query query(stmt);
  query.Bind(":lo", prefix).Bind(":boot", now.boot_id).Bind(":now_ms", now.now_ms);
  if (end.has_value()) {
    query.Bind(":hi", *end);
  } else {
    query.BindNull(":hi");
  }
  std::vector<Info> rows;
  int rc;
  while ((rc = query.Step()) == SQLITE_ROW) {
    Info info;
    info.key = query.Text(0);
    Result<OwnerId> owner = OwnerId::Parse(query.Text(1));
    if (!owner.ok()) {
      return InternalError(what + ": " + std::string(row_name) + " for key " + info.key + " in " +
                           options_.path +
                           " has a malformed owner id: " + owner.status().message());
    }
    info.owner = *owner;
    fill(query, info);
    rows.push_back(std::move(info));
  }
  if (IsError(rc)) return FromSqlite(rc, db_.get(), what);
  return rows;
}

Result<std::vector<HolderInfo>> SqliteBackend::List(std::string_view prefix) {
  return ListRows<HolderInfo>(
      list_.get(), prefix, "list '" + std::string(prefix) + "'", "row",
      [](const Query& query, HolderInfo& info) {
        info.token = static_cast<FencingToken>(query.Int(2));
        info.ttl_remaining = std::chrono::milliseconds(query.Int(3));
        info.ttl = std::chrono::milliseconds(query.Int(4));
        info.held_for = std::chrono::milliseconds(std::max<std::int64_t>(0, query.Int(5)));
        info.limit = static_cast<std::uint32_t>(query.Int(6));
        info.label = query.Text(7);
      });
}

Result<std::vector<WaiterInfo>> SqliteBackend::Waiters(std::string_view prefix) {
  return ListRows<WaiterInfo>(
      waiters_.get(), prefix, "list the waiters for '" + std::string(prefix) + "'", "queue row",
      [](const Query& query, WaiterInfo& info) {
        info.limit = static_cast<std::uint32_t>(query.Int(2));
        info.label = query.Text(3);
        // Entries queued by the previous dlock have no arrival time.
        if (!query.IsNull(4)) {
          info.waited_for = std::chrono::milliseconds(std::max<std::int64_t>(0, query.Int(4)));
        }
      });
}

Result<std::uint64_t> SqliteBackend::StoredObjects(std::string_view prefix) {
  const std::string what = "count the rows for '" + std::string(prefix) + "'";
  const std::optional<std::string> end = PrefixEnd(prefix);
  std::lock_guard lock(mu_);
  StmtHandle stmt;
  DLOCK_RETURN_IF_ERROR(Prepare(kStoredObjectsSql, &stmt, what));
  Query query(stmt.get());
  query.Bind(":lo", prefix);
  if (end.has_value()) {
    query.Bind(":hi", *end);
  } else {
    query.BindNull(":hi");
  }
  const int rc = query.Step();
  if (rc != SQLITE_ROW) return FromSqlite(rc == SQLITE_DONE ? SQLITE_ERROR : rc, db_.get(), what);
  return static_cast<std::uint64_t>(query.Int(0));
}

}  // namespace

std::size_t PendingNotifications(Backend& backend) {
  auto* sqlite = dynamic_cast<SqliteBackend*>(&backend);
  return sqlite != nullptr ? sqlite->PendingNotifications() : 0;
}

BootTime ReadBootTime() {
  // The boot id cannot change while this process lives, so read it once. If
  // /proc is unreadable it stays empty: after a reboot old leases then look
  // alive until the new boot's clock passes their expiry, which delays
  // takeover but never lets a lease expire early.
  static const std::string boot_id = [] {
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::string id;
    std::getline(in, id);
    return id;
  }();
  timespec ts{};
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return BootTime{boot_id, static_cast<std::int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000};
}

Result<SqliteOptions> OptionsFromUri(const internal::Uri& uri) {
  auto bad = [&](const std::string& why) {
    return InvalidArgumentError("bad SQLite URI '" + uri.Redacted() + "': " + why +
                                "; expected sqlite:///absolute/path/locks.db");
  };
  if (uri.scheme != "sqlite") return bad("the scheme is not sqlite");
  if (!uri.hosts.empty() || !uri.user.empty() || uri.has_password) {
    return bad("'" + uri.hosts + "' is read as a host name, but the file is on this machine "
               "(a path needs three slashes)");
  }
  if (uri.path.empty() || uri.path.front() != '/') return bad("the path is missing");
  if (uri.path.back() == '/') return bad("the path names a directory, not a file");
  if (uri.path.find('\0') != std::string::npos) return bad("the path contains a NUL byte");
  DLOCK_RETURN_IF_ERROR(uri.CheckParams({"synchronous", "busy_timeout"}));

  SqliteOptions options;
  options.path = uri.path;
  if (const std::string* value = uri.Param("synchronous")) {
    const std::string v = Lower(*value);
    if (v == "full") {
      options.synchronous = Synchronous::kFull;
    } else if (v == "normal") {
      options.synchronous = Synchronous::kNormal;
    } else if (v == "off") {
      options.synchronous = Synchronous::kOff;
    } else {
      return InvalidArgumentError("bad synchronous value '" + *value +
                                  "' in SQLite URI: accepted: full, normal, off");
    }
  }
  if (const std::string* value = uri.Param("busy_timeout")) {
    Result<std::chrono::milliseconds> timeout = internal::ParseDuration(*value);
    if (!timeout.ok()) return timeout.status().WithContext("busy_timeout in SQLite URI");
    if (*timeout > std::chrono::hours(1)) {
      return InvalidArgumentError("busy_timeout " + *value +
                                  " in SQLite URI is too long: at most 1h");
    }
    options.busy_timeout = *timeout;
  }
  return options;
}

Result<std::unique_ptr<Backend>> Open(const SqliteOptions& options) {
  const std::string& path = options.path;
  const std::string what = "cannot open lock database " + path;
  if (path.empty() || path.front() != '/' || path.back() == '/') {
    return InvalidArgumentError(what + ": the path must be an absolute file name");
  }
  if (options.busy_timeout < std::chrono::milliseconds(0) ||
      options.busy_timeout > std::chrono::hours(1)) {
    return InvalidArgumentError(what + ": busy_timeout must be 0 to 1h, got " +
                                internal::FormatDuration(options.busy_timeout));
  }
  DLOCK_RETURN_IF_ERROR(CheckLocation(path, options.create_directory).WithContext(what));

  sqlite3* raw = nullptr;
  // NOMUTEX: the backend's own mutex serializes every use of the connection.
  const int rc = sqlite3_open_v2(path.c_str(), &raw,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                                 nullptr);
  DbHandle db(raw);  // owns it even when the open failed
  if (rc != SQLITE_OK) return FromSqlite(rc, db.get(), what);
  auto backend = std::make_unique<SqliteBackend>(options, std::move(db));
  DLOCK_RETURN_IF_ERROR(backend->Init(what));
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace dlock::sqlite
