// ClientCore: the acquire/wait loop, renewal and loss detection, written once
// for every backend.
//
// One ClientCore per Client. It owns the backend and one Loop (a thread under
// RealClock) that renews every held lease in one batched Backend::Renew call
// per tick, at ttl/3, and declares a lease lost when its valid_until passes
// without a successful renewal or the store names another owner.
//
// Leases hold a shared_ptr to the core, so a Lease may outlive its Client and
// is still renewed until released.
#ifndef DLOCK_SRC_CORE_CLIENT_CORE_H_
#define DLOCK_SRC_CORE_CLIENT_CORE_H_

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/metrics_recorder.h"
#include "core/shared_loop.h"
#include "dlock/backend.h"
#include "dlock/client.h"
#include "dlock/clock.h"
#include "dlock/lease.h"
#include "dlock/metrics.h"

namespace dlock::internal {

class AsyncAcquire;
class AsyncDriver;
class CallBatcher;
class PlaceKeeper;

// What the core knows about one granted lease. Immutable fields are set
// before the state is shared; the rest are guarded by ClientCore::mu_.
struct LeaseState {
  enum class Phase { kHeld, kLost, kReleased };

  std::string key;
  OwnerId owner;
  FencingToken token = 0;
  bool token_ordered = true;
  std::chrono::milliseconds ttl{0};
  // min(ttl, the session timeout) for a session-based store, else ttl: what
  // renewal timing follows.
  std::chrono::milliseconds effective_ttl{0};
  Duration drift{0};
  std::uint32_t limit = 1;  // LeaseRequest::limit: the mode a re-entry must ask in
  bool reentrant = false;   // AcquireOptions::reentrant of the first acquire
  std::thread::id thread;   // the thread that acquired it: the one that may re-enter
  std::stop_source lost;  // requested on loss
  // No renewal from then on (AcquireOptions::max_hold); max() if unbounded.
  TimePoint renew_until = TimePoint::max();
  TimePoint granted_at{};  // when the grant's answer came: hold time counts from it

  // Guarded by ClientCore::mu_.
  Phase phase = Phase::kHeld;
  TimePoint valid_until{};
  TimePoint next_renew_at{};
  Status lost_reason;
  LossCause lost_cause = LossCause::kExpired;
  // Handles holding it: 1, plus one per re-entry not yet released. Handle 0
  // is the first acquire's; re-entries number on from last_hold.
  std::uint32_t holds = 1;
  std::uint64_t last_hold = 0;
  // Each handle's AcquireOptions::on_lost, by handle. Frozen once the phase
  // leaves kHeld, so the loss notification reads it without mu_.
  std::vector<std::pair<std::uint64_t, std::function<void(const Status&)>>> on_lost;
};

class ClientCore : public std::enable_shared_from_this<ClientCore> {
 public:
  ClientCore(std::unique_ptr<Backend> backend, ClientOptions options);
  ~ClientCore();

  // Starts the renewal loop. Separate from the constructor because the loop
  // must not run before the object is fully built.
  void Start();

  Result<Lease> Acquire(std::string_view key, const AcquireOptions& options,
                        bool wait);
  Result<std::vector<Lease>> AcquireAll(std::vector<std::string> keys,
                                        const AcquireOptions& options);
  Result<BreakReport> Break(std::string_view key, const BreakOptions& options);  // break.cc
  Result<std::vector<BreakRecord>> Breaks(std::string_view prefix);             // break.cc
  Result<std::vector<HolderInfo>> List(std::string_view prefix);
  Result<std::vector<WaiterInfo>> Waiters(std::string_view prefix);
  Result<std::optional<Leader>> CurrentLeader(std::string_view key);
  Result<std::optional<Leader>> AwaitLeader(std::string_view key, FencingToken after_term,
                                            std::chrono::milliseconds wait,
                                            std::stop_token cancel);
  std::string Describe() const { return backend_->Describe(); }
  std::uint64_t Session() const { return session_; }
  Status Ping() { return backend_->Ping(); }
  ClientMetrics Metrics() const { return metrics_.Read(); }
  Result<bool> IsDone(std::string_view key);
  Status MarkDone(const LeaseState& state, std::chrono::milliseconds keep);

  // The asynchronous API (client_async.cc): starts an acquisition that
  // runs on the client's AsyncDriver, made at the first call.
  std::shared_ptr<AsyncAcquire> AcquireAsync(std::string_view key, const AcquireOptions& options,
                                             AcquireCallback done);
  // Ends every pending asynchronous acquisition with kCancelled, waits for
  // their callbacks, and stops the driver: the Client's destructor.
  void StopAsync();
  // An asynchronous acquisition ran its callback.
  void AsyncFinished(const AsyncAcquire* op);
  // Lease::ReleaseAsync: `done` gets what Release would return, on an
  // async thread (or at once, when nothing need be asked of the store).
  void ReleaseAsync(std::shared_ptr<LeaseState> state, std::uint64_t hold,
                    std::function<void(Status)> done);

  // For Lease. Release ends the handle `hold`; the store is asked when it
  // is the holding's last.
  Status Release(LeaseState& state, std::uint64_t hold);
  std::uint32_t HoldCount(const LeaseState& state) const;
  Status RenewNow(const std::shared_ptr<LeaseState>& state);
  Status Check(const LeaseState& state) const;
  TimePoint ValidUntil(const LeaseState& state) const;

 private:
  friend class AsyncAcquire;  // the same steps as Acquire, without a thread

  // The options' own errors (kInvalidArgument), and what this store cannot do.
  Status CheckOptions(const AcquireOptions& options, bool wait) const;
  // When one acquire started, first found the key held, and last woke from
  // a wait: what its metrics are made of.
  struct AcquireTimes {
    TimePoint start;
    std::optional<TimePoint> held_since;
    TimePoint woke{};
    bool reentered = false;  // a re-entry: no store grant to record
  };
  // A reentrant acquire of a key this thread holds reentrantly: another
  // handle on that holding; nullopt when there is none (reentry.cc).
  std::optional<Result<Lease>> Reenter(std::string_view key, const AcquireOptions& options);
  // After a break evicted holders up to token `evicted`: the token of a
  // grant made since, the break's own or a waiter's (break.cc).
  Result<FencingToken> TokenAfterBreak(std::string_view key, FencingToken evicted,
                                       const std::string& label);
  // `failure`, after recording the evictions `report` holds (break.cc).
  Status FailedAfterEvicting(const BreakReport& report, const std::string& by,
                             const BreakOptions& options, Status failure);
  // The store's records of a break's evictions, kept for `keep` (break.cc).
  Status RecordBreaks(const BreakReport& report, const std::string& by,
                      std::chrono::milliseconds keep);
  // A release in two halves around the store's answer, so that the
  // asynchronous one (ReleaseAsync) can batch the store calls: Begin ends
  // the holding here (ask_store false: `answer` is the whole answer), End
  // makes the store's answer the caller's.
  struct ReleasePlan {
    bool ask_store = false;
    Status answer;
    bool was_lost = false;
    bool expired_now = false;  // lost, but not yet counted as lost
    TimePoint now{};
  };
  ReleasePlan BeginRelease(LeaseState& state, std::uint64_t hold);
  Status EndRelease(const LeaseState& state, const ReleasePlan& plan, Status released);
  // Ends handle `hold` of a holding that keeps others. Under mu_.
  Status DropHoldLocked(LeaseState& state, std::uint64_t hold);
  Result<Lease> AcquireTimed(std::string_view key, const AcquireOptions& options, bool wait,
                             AcquireTimes& times);
  void RecordAcquire(std::string_view key, const Result<Lease>& lease,
                     const AcquireTimes& times);
  LeaseRequest MakeRequest(std::string_view key, const AcquireOptions& options, bool wait,
                           TimePoint deadline);
  // The lease a granted attempt sent at `sent` starts; renewed from now on.
  Result<Lease> StartLease(const LeaseRequest& request, const AcquireOptions& options,
                           const Attempt& attempt, TimePoint sent);
  // Sleeps PollDelay (at most until `until`): the wait of a store that
  // cannot notify.
  void Backoff(TimePoint until, Duration& interval, std::stop_token cancel);
  Status CheckLocked(const LeaseState& state) const;  // under mu_
  // valid_until and next_renew_at after a grant or renewal sent at `sent`,
  // bounded by the store's session when it has one. Under mu_ for `state`.
  void ExtendLocked(LeaseState& state, TimePoint sent,
                    const std::optional<SessionLiveness>& session);
  // Counts a store call's error in the metrics, and passes the answer on.
  template <typename T>
  T Counted(T answer) {
    if constexpr (std::is_same_v<T, Status>) {
      metrics_.StoreCall(answer);
    } else if (!answer.ok()) {
      metrics_.StoreCall(answer.status());
    }
    return answer;
  }
  using LeaseList = std::vector<std::shared_ptr<LeaseState>>;
  // One renewal tick; returns when it wants to run next.
  TimePoint Tick(TimePoint now);
  // The tick's first step, under mu_: marks the leases past valid_until
  // lost, stops renewing those past their max hold, and returns those due
  // for renewal.
  LeaseList TakeDueLocked(TimePoint now, LeaseList& newly_lost);
  // Renews `due` in one store call and applies each answer; returns the
  // leases the store renewed too late, which the tick gives back.
  LeaseList RenewAtStore(const LeaseList& due, LeaseList& newly_lost);
  // One renewal call: when it was sent and answered, and the session it
  // found. A renewal counts from `sent`, never from `replied`.
  struct Renewal {
    TimePoint sent;
    TimePoint replied;
    std::optional<SessionLiveness> session;
  };
  // What the store's answer `result` to one renewal means for `state`, the
  // same for the renewal loop and Lease::Renew. Returns the lease's status
  // after it; a lease the store extended too late joins `give_back`.
  Status ApplyRenewalLocked(const std::shared_ptr<LeaseState>& state, Status result,
                            const Renewal& renewal, LeaseList& newly_lost, LeaseList& give_back);
  // Records one renewal call in the metrics: its round trip, and each lease
  // it failed to renew. Outside mu_, as every metrics hook call is.
  void CountRenewal(const Renewal& renewal, const LeaseList& leases,
                    const std::vector<Status>& results);
  // Forgets the leases no longer held. Under mu_.
  void DropLostLocked();
  // Marks `state` lost (under mu_) and queues it for notification.
  void MarkLostLocked(const std::shared_ptr<LeaseState>& state, Status why, LossCause cause,
                      LeaseList& newly_lost);
  void NotifyLost(const LeaseList& newly_lost);

  std::unique_ptr<Backend> backend_;
  std::shared_ptr<Clock> clock_;
  std::shared_ptr<Random> random_;
  const std::uint64_t session_;
  const std::string label_;
  MetricsRecorder metrics_;

  mutable std::mutex mu_;
  std::vector<std::shared_ptr<LeaseState>> held_;  // phase == kHeld

  // The asynchronous acquisitions still pending (owned here while they
  // wait: nothing else holds one), and what runs them.
  const unsigned async_threads_;
  std::mutex async_mu_;
  std::condition_variable async_done_;
  std::unordered_map<const AsyncAcquire*, std::shared_ptr<AsyncAcquire>> pending_;
  bool async_stopped_ = false;
  int releasing_ = 0;  // ReleaseAsync calls not yet answered
  // For a store that keeps places in batches (Backend::KeepsPlaces); made
  // with async_, and declared before it so that its ticks (jobs of async_)
  // have ended before it goes.
  std::unique_ptr<PlaceKeeper> keeper_;
  std::unique_ptr<AsyncDriver> async_;
  // For a store that pipelines (Backend::BatchesCalls); made with async_.
  std::unique_ptr<CallBatcher> batcher_;
  // The driver (and batcher and keeper), made at the first call; null once
  // stopped.
  AsyncDriver* DriverLocked();

  // Renewals, and the driver's timers once it is made: one thread.
  SharedLoop::Waker wake_renewal_;
  std::unique_ptr<SharedLoop> loop_;  // last member: stopped first
};

}  // namespace dlock::internal

#endif  // DLOCK_SRC_CORE_CLIENT_CORE_H_
