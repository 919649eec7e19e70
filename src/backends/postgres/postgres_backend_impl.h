// The PostgreSQL backend's classes, shared by postgres_backend.cc (the
// calls one at a time, the session, the sweep) and postgres_batch.cc (the
// calls many at a time: TryAcquireMany, ReleaseMany, KeepPlaces).
#ifndef DLOCK_SRC_BACKENDS_POSTGRES_POSTGRES_BACKEND_IMPL_H_
#define DLOCK_SRC_BACKENDS_POSTGRES_POSTGRES_BACKEND_IMPL_H_

#include <libpq-fe.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backends/postgres/pg_listener.h"
#include "backends/postgres/pg_pipeline.h"
#include "backends/postgres/pg_sweeper.h"
#include "backends/postgres/pg_util.h"
#include "backends/postgres/pg_values.h"
#include "backends/postgres/postgres_backend.h"
#include "backends/postgres/postgres_sql.h"

namespace dlock::postgres {

using SteadyClock = std::chrono::steady_clock;

// A waiting acquire that begins this soon after this backend's own release
// of the key leaves the nudge to the head that release told (see
// PostgresBackend::NoteReleased).
inline constexpr std::chrono::milliseconds kJustReleased{1000};

// The statements a single attempt runs in turn until one decides: the
// lean form (an exclusive request on a key whose row has no sharers), the
// fresh form (a key without a row, nobody waiting), the template (any).
enum class SingleForm { kLean, kFresh, kTemplate };
SingleForm FirstSingleForm(const LeaseRequest& request);
SingleForm NextSingleForm(SingleForm form);
const char* SingleStatement(SingleForm form);
// What the statement of `form` answered: the attempt, or nullopt when it
// leaves the decision to the next form (the template always decides).
Result<std::optional<Attempt>> ReadSingle(SingleForm form, const PGresult* r,
                                          const std::string& what, const std::string& where);

class PostgresAcquisition;

class PostgresBackend final : public Backend {
 public:
  explicit PostgresBackend(PostgresOptions options);
  // Stops the listener's thread, then sweeps once more if this backend
  // freed rows not yet swept.
  ~PostgresBackend() override;
  // Connects, creating the tables when missing.
  Status Init();

  // Always a single attempt, even with queue_ttl > 0: waiters queue only
  // through Begin.
  Result<Attempt> TryAcquire(const LeaseRequest& request) override;
  std::unique_ptr<Acquisition> Begin(const LeaseRequest& request) override;
  Status Release(std::string_view key, const OwnerId& owner) override;
  std::vector<Status> Renew(std::span<const LeaseRequest> leases) override;
  Result<std::vector<HolderInfo>> List(std::string_view prefix) override;
  std::string Describe() const override { return options_.describe; }
  bool SupportsLockDelay() const override { return true; }
  bool SupportsSharing() const override { return true; }
  Result<std::vector<WaiterInfo>> Waiters(std::string_view prefix) override;
  Result<std::uint64_t> StoredObjects(std::string_view prefix) override;
  Result<bool> IsDone(std::string_view key) override;
  Status MarkDone(std::string_view key, const OwnerId& owner,
                  std::chrono::milliseconds keep) override;
  Status RecordBreak(const BreakRecord& record, std::chrono::milliseconds keep) override;
  Result<std::vector<BreakRecord>> Breaks(std::string_view prefix) override;
  Status Ping() override { return Run("dlock_ping", Params(), CallDeadline(), "ping").status(); }

  // Many at a time (postgres_batch.cc): each batch's statements in one
  // round trip and one transaction (libpq's pipeline mode), in key order.
  std::vector<Result<Attempt>> TryAcquireMany(std::span<const LeaseRequest> requests) override;
  std::vector<Status> ReleaseMany(std::span<const LeaseRequest> holdings) override;
  bool BatchesCalls() const override { return true; }
  // One statement for all of them.
  std::vector<Status> KeepPlaces(std::span<const LeaseRequest> waiters) override;
  bool KeepsPlaces() const override { return true; }
  // KeepPlaces answers kNotFound for a place first in line on a free key
  // (postgres_sql.cc, kKeepPlacesSql).
  bool NoticesLapsedPlaces() const override { return true; }

 private:
  friend class PostgresAcquisition;

  // What a waiting attempt sends beyond a single attempt's parameters.
  struct QueueArgs {
    std::uint64_t key_hash = 0;
    // False: do not wake the head of the queue when refused on a free key.
    bool may_nudge = true;
  };

  SteadyTime CallDeadline() const { return SteadyClock::now() + options_.connect_timeout; }

  // One attempt of a valid request: a single one (queue null) or a waiting
  // one, which takes or refreshes the owner's place in the queue.
  Result<Attempt> RunAttempt(const LeaseRequest& request, const QueueArgs* queue);
  Params AttemptParams(const LeaseRequest& request, const QueueArgs* queue) const;
  // The general release: frees any holding of `owner` and its place in the
  // queue, and tells kNotOwner from "nobody holds it".
  Status ReleaseAndLeaveQueue(std::string_view key, const std::string& owner, SteadyTime deadline);
  Params ReleaseParams(std::string_view key, const std::string& owner) const;
  // The general release's answer (dlock_release).
  Status ReadRelease(const PGresult* r, const std::string& what);
  // Acquisition::Wait for a waiter of this backend's listener.
  bool WaitFor(const Listener::Waiter& waiter, TimePoint until, std::stop_token stop);

  // Runs prepared statement `name` on the operations connection, connecting
  // first if needed; all of it before `deadline`.
  Result<PgResultHandle> Run(const char* name, const Params& params, SteadyTime deadline,
                             const std::string& what);
  // The same for many statements, pipelined (RunPipeline).
  Result<PipelineOutcome> RunMany(std::span<const PreparedCall> calls, SteadyTime deadline,
                                  const std::string& what);
  // The operations connection for one call, before `deadline`: locked, an
  // earlier call's late reply collected, connected.
  Result<std::unique_lock<TimedMutex>> TakeConnection(SteadyTime deadline,
                                                      const std::string& what);
  // Renew's first step: the session opened again if the server ended it,
  // with the time the leases have left (postgres_backend.cc).
  Status ReconnectForRenewal(std::span<const LeaseRequest> leases,
                             std::chrono::milliseconds budget);
  // postgres_batch.cc: one round of a batch, the `entries` of `requests`
  // (their indexes, and for attempts the form each is at); see there.
  using PendingAttempt = std::pair<std::size_t, SingleForm>;
  std::vector<PendingAttempt> AttemptRound(std::span<const LeaseRequest> requests,
                                           std::vector<PendingAttempt> entries,
                                           std::vector<Result<Attempt>>& out);
  void ReleaseRound(std::span<const LeaseRequest> holdings, std::vector<std::size_t> entries,
                    bool lean, std::vector<Status>& out, std::vector<std::size_t>* undecided);
  Result<PgResultHandle> RunForPrefix(const char* statement, std::string_view prefix,
                                      const std::string& what);
  static Status ReadKeyAndOwner(const PGresult* r, int row, const std::string& table,
                                const std::string& what, std::string* key, OwnerId* owner);
  Status EnsureConnectedLocked(SteadyTime deadline, const std::string& what);
  // Checks the tables (creating or migrating them when needed) and
  // prepares the statements on a new connection.
  Status SetUpSessionLocked(PGconn* conn, SteadyTime deadline);
  // Whether the tables must be created or migrated; kFailedPrecondition
  // when one exists but is not dlock's.
  Result<bool> CheckTablesLocked(PGconn* conn, SteadyTime deadline);
  Status CreateTablesLocked(PGconn* conn, SteadyTime deadline);

  // A row freed (a release, or a record that expires): the sweeper plans
  // a round, on the listener's thread.
  void NoteReleaseForSweep();
  // As the backend closes, after a release the rounds have not swept.
  void LastSweep();
  // With mu_ held, on the operations connection: whether a sweep would
  // delete anything now (false when that cannot be told).
  bool SweepDueLocked(SteadyTime deadline);

  // The last release by this backend of a key, which NOTIFYed the head of
  // its queue: a waiting acquire of that key that begins at once (a process
  // queueing again right after its release) need not nudge the head on its
  // first attempt: that release told the head, and the head, if refused
  // because another place turned out first, nudges that one itself. Saves
  // a NOTIFY (a database-wide lock at commit, and a signal to every
  // listener) per contended hand-off.
  void NoteReleased(std::string_view key) {
    std::lock_guard lock(releases_mu_);
    if (recent_releases_.size() > 1024) recent_releases_.clear();
    recent_releases_[std::string(key)] = SteadyClock::now();
  }
  // Whether this backend released the key within kJustReleased; forgets
  // that release.
  bool TakeRecentRelease(std::string_view key) {
    std::lock_guard lock(releases_mu_);
    auto it = recent_releases_.find(std::string(key));
    if (it == recent_releases_.end()) return false;
    const bool recent = SteadyClock::now() - it->second < kJustReleased;
    recent_releases_.erase(it);
    return recent;
  }

  const PostgresOptions options_;
  const std::shared_ptr<Clock> clock_;
  const TableNames tables_;

  std::mutex releases_mu_;
  std::map<std::string, SteadyTime> recent_releases_;

  TimedMutex mu_;  // guards conn_ and the two below
  PgConnHandle conn_;
  bool awaiting_stale_reply_ = false;  // a timed-out statement's reply is due
  SteadyTime stale_since_{};

  Sweeper sweeper_;    // the chore of listener_'s thread: outlives it
  Listener listener_;  // stopped first (the destructor)
};

// One acquire of one key by one owner (Backend::Begin). A waiting one
// (queue_ttl > 0) keeps a place in the key's queue between its attempts and
// waits as a Listener waiter; a single one (queue_ttl 0) is one TryAcquire
// per Try. Its calls may come from different threads, one after the other.
class PostgresAcquisition final : public Acquisition {
 public:
  PostgresAcquisition(PostgresBackend& backend, LeaseRequest request);
  ~PostgresAcquisition() override;

  Result<Attempt> Try() override;
  bool Wait(TimePoint until, std::stop_token stop) override;
  // Wait's callback form, over the same listener (Listener::Notify).
  bool Notify(std::function<void()> wake) override;
  void StopNotify() override;
  void Abandon() override;

 private:
  bool waiting() const { return request_.queue_ttl > std::chrono::milliseconds(0); }
  // One attempt; a waiting one first tells the listener.
  Result<Attempt> Send();

  PostgresBackend& backend_;
  const LeaseRequest request_;
  const Status valid_;  // the request's validation
  const Listener::Waiter waiter_;
  // False for the first attempt of an acquire that follows this backend's
  // own release of the key (PostgresBackend::NoteReleased).
  bool may_nudge_ = true;
  // A waiting attempt was sent and no grant answered it: the owner may
  // have a place in the queue.
  bool may_hold_place_ = false;
  // The last attempt's outcome is unknown: it may have granted.
  bool may_be_granted_ = false;
  bool granted_ = false;
};

// kInvalidArgument for a request no statement should see.
Status ValidateRequest(const LeaseRequest& request);
// Both acquire forms answer (token or NULL, ms the holder has left or NULL),
// the lean form with a third column.
Result<Attempt> ReadAttempt(const PGresult* r, int columns, const std::string& what,
                            const std::string& where);

}  // namespace dlock::postgres

#endif  // DLOCK_SRC_BACKENDS_POSTGRES_POSTGRES_BACKEND_IMPL_H_
