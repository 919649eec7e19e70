// The SQLite backend's class, shared by its files: sqlite_backend.cc (the
// lock: grants, the queue, releases, renewals, waiting), sqlite_setup.cc
// (opening a file and its schema), sqlite_records.cc (run-once marks,
// break records, listings).
#ifndef DLOCK_SRC_BACKENDS_SQLITE_SQLITE_BACKEND_IMPL_H_
#define DLOCK_SRC_BACKENDS_SQLITE_SQLITE_BACKEND_IMPL_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <stop_token>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backends/sqlite/sqlite_backend.h"
#include "backends/sqlite/sqlite_query.h"
#include "backends/sqlite/wal_watcher.h"
#include "backends/sqlite/wal_watches.h"
#include "dlock/backend.h"
#include "dlock/sharing.h"

namespace dlock::sqlite {

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
  std::uint64_t NotifyOnRelease(const LeaseRequest& request, std::function<void()> wake) override;
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

}  // namespace dlock::sqlite

#endif  // DLOCK_SRC_BACKENDS_SQLITE_SQLITE_BACKEND_IMPL_H_
