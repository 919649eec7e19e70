#include "backends/sqlite/sqlite_backend.h"

#include <poll.h>
#include <sqlite3.h>
#include <sys/eventfd.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string_view>
#include <utility>
#include <vector>

#include "backends/sqlite/sqlite_backend_impl.h"
#include "backends/sqlite/sqlite_query.h"
#include "backends/sqlite/sqlite_sql.h"
#include "core/fd.h"
#include "dlock/sharing.h"

namespace dlock::sqlite {
namespace {

using internal::Fd;

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

}  // namespace

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

}  // namespace dlock::sqlite
