// What the SQLite store keeps beside the locks, and its listings: run-once
// marks (dlock once), break records (dlock break), the holders, waiters
// and rows under a prefix.
#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backends/sqlite/sqlite_backend_impl.h"
#include "backends/sqlite/sqlite_query.h"
#include "backends/sqlite/sqlite_sql.h"

namespace dlock::sqlite {

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
  if (keep == kKeepDoneForever ||
      keep.count() > std::numeric_limits<std::int64_t>::max() - unix_ms) {
    query.BindNull(":keep_until");
  } else {
    query.Bind(":keep_until", unix_ms + static_cast<std::int64_t>(keep.count()));
  }
}

// The end of a write that added a record: deletes the records past their
// retention at `unix_ms` (`expire`), so the table never needs a sweeper of
// its own, and commits.
Status SweepAndCommit(sqlite3* db, sqlite3_stmt* expire, std::int64_t unix_ms,
                      WriteTransaction& txn, const std::string& what) {
  int rc;
  {
    Query sweep(expire);
    sweep.Bind(":unix_ms", unix_ms);
    rc = sweep.Step();
  }  // reset before the commit, as every statement of the transaction
  if (!IsError(rc)) rc = txn.Commit();
  return IsError(rc) ? FromSqlite(rc, db, what) : Status::Ok();
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
    held.Bind(":key", key)
        .Bind(":owner", owner.ToString())
        .Bind(":boot", now.boot_id)
        .Bind(":now_ms", now.now_ms);
    rc = held.Step();
    if (IsError(rc)) return FromSqlite(rc, db, what);
    if (rc != SQLITE_ROW) {
      return NotOwnerError(what + ": this owner no longer holds the lock");
    }
    token = held.Int(0);
  }
  const std::int64_t unix_ms = UnixNowMs();
  {
    Query mark(mark_done_.get());
    mark.Bind(":key", key)
        .Bind(":owner", owner.ToString())
        .Bind(":token", token)
        .Bind(":now_ms", now.now_ms);
    BindKeepUntil(mark, unix_ms, keep);
    rc = mark.Step();
    if (IsError(rc)) return FromSqlite(rc, db, what);
  }
  return SweepAndCommit(db, expire_done_.get(), unix_ms, txn, what);
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
    insert.Bind(":key", record.key)
        .Bind(":unix_ms", unix_ms)
        .Bind(":owner", record.owner.ToString())
        .Bind(":token", static_cast<std::int64_t>(record.token))
        .Bind(":label", record.label)
        .Bind(":by", record.by)
        .Bind(":break_token", static_cast<std::int64_t>(record.break_token));
    BindKeepUntil(insert, unix_ms, keep);
    rc = insert.Step();
    if (IsError(rc)) return FromSqlite(rc, db, what);
  }
  return SweepAndCommit(db, expire_breaks_.get(), unix_ms, txn, what);
}

Result<std::vector<BreakRecord>> SqliteBackend::Breaks(std::string_view prefix) {
  const std::string what = "list the breaks of '" + std::string(prefix) + "'";
  std::lock_guard lock(mu_);
  Query query(breaks_.get());
  query.Bind(":unix_ms", UnixNowMs());
  BindKeyRange(query, prefix);
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

template <typename Info, typename Fill>
Result<std::vector<Info>> SqliteBackend::ListRows(sqlite3_stmt* stmt, std::string_view prefix,
                                                  const std::string& what,
                                                  std::string_view row_name, Fill fill) {
  std::lock_guard lock(mu_);
  const BootTime now = StoreNow();
  Query query(stmt);
  query.Bind(":boot", now.boot_id).Bind(":now_ms", now.now_ms);
  BindKeyRange(query, prefix);
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
  std::lock_guard lock(mu_);
  StmtHandle stmt;
  DLOCK_RETURN_IF_ERROR(Prepare(kStoredObjectsSql, &stmt, what));
  Query query(stmt.get());
  BindKeyRange(query, prefix);
  const int rc = query.Step();
  if (rc != SQLITE_ROW) return FromSqlite(rc == SQLITE_DONE ? SQLITE_ERROR : rc, db_.get(), what);
  return static_cast<std::uint64_t>(query.Int(0));
}

}  // namespace dlock::sqlite
