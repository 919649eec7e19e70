// The MariaDB backend's class, shared by mariadb_backend.cc (the Backend
// calls) and mariadb_acquisition.cc (one waiting acquire).
#ifndef DLOCK_SRC_BACKENDS_MARIADB_MARIADB_BACKEND_IMPL_H_
#define DLOCK_SRC_BACKENDS_MARIADB_MARIADB_BACKEND_IMPL_H_

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "backends/mariadb/mariadb_backend.h"
#include "backends/mariadb/mariadb_conn.h"
#include "backends/mariadb/mariadb_sql.h"
#include "backends/mariadb/mariadb_waker.h"
#include "core/timed_mutex.h"

namespace dlock::mariadb {

// What stands ahead of a refused waiting attempt, in queue order (the
// acquire procedure's 'h', 'd' and 'w' rows).
struct Ahead {
  enum class Kind { kHolding, kDelayed, kWaiter };
  Kind kind = Kind::kHolding;
  std::string owner;
  std::uint32_t limit = 1;
};

// One attempt's answer: the Attempt, and when refused while waiting, who
// is ahead.
struct AttemptReply {
  Attempt attempt;
  std::vector<Ahead> ahead;
};

class MariaDbBackend final : public Backend {
 public:
  explicit MariaDbBackend(MariaDbOptions options);
  ~MariaDbBackend() override;

  // Connects, checks the server and creates the schema if missing.
  Status Init();

  Result<Attempt> TryAcquire(const LeaseRequest& request) override;
  std::unique_ptr<Acquisition> Begin(const LeaseRequest& request) override;
  Status Release(std::string_view key, const OwnerId& owner) override;
  std::vector<Status> Renew(std::span<const LeaseRequest> leases) override;
  Result<std::vector<HolderInfo>> List(std::string_view prefix) override;
  std::string Describe() const override { return options_.connect.describe; }
  Status Ping() override;
  bool SupportsLockDelay() const override { return true; }
  bool SupportsSharing() const override { return true; }
  Result<std::vector<WaiterInfo>> Waiters(std::string_view prefix) override;
  Result<std::uint64_t> StoredObjects(std::string_view prefix) override;
  Result<bool> IsDone(std::string_view key) override;
  Status MarkDone(std::string_view key, const OwnerId& owner,
                  std::chrono::milliseconds keep) override;
  Status RecordBreak(const BreakRecord& record, std::chrono::milliseconds keep) override;
  Result<std::vector<BreakRecord>> Breaks(std::string_view prefix) override;

  // For MariaDbAcquisition.
  // One attempt of a valid request; queue_ttl > 0 takes or refreshes a
  // place when refused. `lean_first`: try the lean form first (an attempt
  // that holds no place yet).
  Result<AttemptReply> RunAttempt(const LeaseRequest& request, bool lean_first);
  // A waiting acquisition dropped unabandoned (its waiter died): let go of
  // its wake-up name with the next call, so that whoever waits on it tries
  // again (its place lapses by itself).
  void DropName(const std::string& owner);
  Waker& waker() { return waker_; }
  Clock& clock() { return *clock_; }

 private:
  SteadyTime CallDeadline() const { return SteadyClock::now() + options_.connect.connect_timeout; }
  // Runs `sql` on the operations connection, connecting first if needed
  // (but not for a short call: the keeper does it); all of it before
  // `deadline`.
  Result<ResultSets> Run(const std::string& sql, SteadyTime deadline, const std::string& what,
                         std::vector<std::uint64_t>* affected = nullptr);
  Status EnsureConnectedLocked(SteadyTime deadline, const std::string& what);
  // What to do on the operations connection before the next statement: let
  // go of dropped waiters' names.
  Status TidyNamesLocked(SteadyTime deadline);
  Result<ResultSets> RunForPrefix(std::string (*sql)(const SchemaNames&, const std::string&,
                                                     const std::string&),
                                  std::string_view prefix, const std::string& what);

  // What the lean acquire answered, when it decided the attempt (nullopt:
  // the general form decides; *fresh: it made the key's row, try again).
  static std::optional<Attempt> LeanAttempt(const LeaseRequest& request, const ResultSets& sets,
                                            bool* fresh);

  // The wake-up names this backend's session should hold (owners it
  // acquires for, until released or given up): taken again after a
  // reconnect, so that waiters on them are still woken.
  void NoteHeld(const std::string& owner, bool held);

  // The keeper thread: replaces a broken operations connection at once
  // (RequestReconnect), so that a short call (a renewal) never has to, and
  // deletes what lapsed (the sweep procedure) every kSweepEvery while this
  // backend is in use, on a connection of its own, unless another backend
  // of the store is sweeping.
  void KeeperLoop(std::stop_token stop);
  void RequestReconnect();
  void ReconnectNow();
  void SweepOnce(std::unique_ptr<Connection>& conn, std::stop_token stop);

  const MariaDbOptions options_;
  const std::shared_ptr<Clock> clock_;
  const SchemaNames names_;

  internal::TimedMutex mu_;  // guards conn_
  std::unique_ptr<Connection> conn_;

  std::mutex names_mu_;  // guards the two below
  std::set<std::string> held_names_;
  std::vector<std::string> names_to_drop_;

  Waker waker_;
  std::atomic<bool> used_since_sweep_{false};
  // The key the next sweep call starts after ("": the start); the keeper
  // thread's only.
  std::string sweep_after_;
  std::mutex keeper_mu_;  // guards reconnect_wanted_
  std::condition_variable_any keeper_cv_;
  bool reconnect_wanted_ = false;
  std::jthread keeper_;  // last: stopped and joined before the rest goes
};

// Backend::Begin's acquisition (mariadb_acquisition.cc); `valid` is the
// request's validation, which each Try reports.
std::unique_ptr<Acquisition> MakeAcquisition(MariaDbBackend& backend, const LeaseRequest& request,
                                             Status valid);

}  // namespace dlock::mariadb

#endif  // DLOCK_SRC_BACKENDS_MARIADB_MARIADB_BACKEND_IMPL_H_
