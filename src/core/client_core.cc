#include "core/client_core.h"

#include <unistd.h>

#include <algorithm>
#include <optional>
#include <thread>
#include <utility>

#include "core/acquire_step.h"
#include "core/async_driver.h"
#include "core/call_batcher.h"
#include "core/duration.h"
#include "core/place_keeper.h"

namespace dlock::internal {
namespace {

using std::chrono::milliseconds;

// With no lease to renew the loop still wakes now and then; harmless.
constexpr Duration kIdleTick = std::chrono::hours(1);

Duration DefaultDrift(milliseconds ttl) {
  return std::min<Duration>(ttl / 100 + milliseconds(2), ttl / 4);
}

// After a failed renewal, try again this much later (until valid_until).
Duration RenewRetryInterval(milliseconds ttl) {
  return std::max<Duration>(ttl / 10, milliseconds(1));
}

std::string Quoted(std::string_view key) { return "'" + std::string(key) + "'"; }

// A renewal answered after valid_until is of no use (ApplyRenewalLocked
// counts the lease lost): the store may take until then, not longer.
LeaseRequest RenewalRequest(const LeaseState& state) {
  LeaseRequest request{state.key, state.owner, state.ttl};
  request.deadline = state.valid_until;
  return request;
}

std::string DefaultLabel() {
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return std::string(host[0] ? host : "localhost") + ":" + std::to_string(getpid());
}

}  // namespace

ClientCore::ClientCore(std::unique_ptr<Backend> backend, ClientOptions options)
    : backend_(std::move(backend)),
      clock_(options.clock ? std::move(options.clock) : DefaultClock()),
      random_(options.random ? std::move(options.random) : DefaultRandom()),
      session_(options.session ? *options.session : random_->Next()),
      label_(options.label.empty() ? DefaultLabel() : std::move(options.label)),
      metrics_(options.record_metrics, std::move(options.on_metric)),
      async_threads_(options.async_threads) {}

ClientCore::~ClientCore() { loop_.reset(); }

void ClientCore::Start() {
  loop_ = std::make_unique<SharedLoop>(clock_);
  wake_renewal_ = loop_->Add([this](TimePoint now) { return Tick(now); });
}

Status ClientCore::CheckOptions(const AcquireOptions& options, bool wait) const {
  DLOCK_RETURN_IF_ERROR(ValidateTtl(options.ttl));
  if (wait && (options.wait < milliseconds(0) || options.wait > kMaxWait)) {
    return InvalidArgumentError("wait " + FormatDuration(options.wait) +
                                " is out of range: 0 (a single attempt) to 8760h");
  }
  if (options.max_hold &&
      (*options.max_hold <= milliseconds(0) || *options.max_hold > kMaxWait)) {
    return InvalidArgumentError("max hold " + FormatDuration(*options.max_hold) +
                                " is out of range: more than 0, up to 8760h");
  }
  const Duration drift =
      options.drift_margin ? Duration(*options.drift_margin) : DefaultDrift(options.ttl);
  if (drift < Duration::zero() || drift >= options.ttl) {
    return InvalidArgumentError("drift margin must be at least 0 and less than the ttl " +
                                FormatDuration(options.ttl));
  }
  if (options.lock_delay < milliseconds(0) || options.lock_delay > kMaxTtl) {
    return InvalidArgumentError("lock delay " + FormatDuration(options.lock_delay) +
                                " is out of range: 0 to 24h");
  }
  if (options.lock_delay > milliseconds(0) && !backend_->SupportsLockDelay()) {
    return InvalidArgumentError("lock-delay is not supported by " + backend_->Describe() +
                                ": it must be enforced by the store's own clock");
  }
  if (options.permits < 1 || options.permits > kMaxPermits) {
    return InvalidArgumentError("permits " + std::to_string(options.permits) +
                                " is out of range: 1 to 65535");
  }
  if (options.shared && options.permits != 1) {
    return InvalidArgumentError(
        "shared (a read lock) and permits (a semaphore) do not combine: use one");
  }
  if ((options.shared || options.permits != 1) && !backend_->SupportsSharing()) {
    return InvalidArgumentError("read-write locks and semaphores are not supported by " +
                                backend_->Describe());
  }
  return ValidateLabel(options.label ? *options.label : label_);
}

LeaseRequest ClientCore::MakeRequest(std::string_view key, const AcquireOptions& options,
                                     bool wait, TimePoint deadline) {
  LeaseRequest request{std::string(key), OwnerId(session_, random_->Next()), options.ttl,
                       wait ? kQueueTtl : milliseconds(0), options.lock_delay};
  request.limit = options.shared ? kSharedLimit : options.permits;
  request.label = options.label ? *options.label : label_;
  if (wait) request.deadline = deadline;
  return request;
}

Result<Lease> ClientCore::Acquire(std::string_view key, const AcquireOptions& options,
                                  bool wait) {
  AcquireTimes times{clock_->Now()};
  Result<Lease> lease = AcquireTimed(key, options, wait, times);
  if (!times.reentered) RecordAcquire(key, lease, times);
  return lease;
}

void ClientCore::RecordAcquire(std::string_view key, const Result<Lease>& lease,
                               const AcquireTimes& times) {
  const TimePoint end = lease.ok() ? lease->state_->granted_at : clock_->Now();
  if (times.held_since) metrics_.Waited(end - *times.held_since);
  if (!lease.ok()) {
    metrics_.AcquireFailed(lease.status().code());
    return;
  }
  metrics_.Grant(key, end - times.start);
  if (times.held_since && times.woke != TimePoint{}) metrics_.Handoff(end - times.woke);
}

Result<Lease> ClientCore::AcquireTimed(std::string_view key, const AcquireOptions& options,
                                       bool wait, AcquireTimes& times) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(key));
  DLOCK_RETURN_IF_ERROR(CheckOptions(options, wait));
  if (auto again = Reenter(key, options)) {
    times.reentered = again->ok();
    return std::move(*again);
  }
  const TimePoint deadline = times.start + (wait ? options.wait : milliseconds(0));
  // An acquire that may not wait asks once, as TryAcquire does: no place
  // in the queue, and the store's own timeout for its answer rather than
  // a deadline that has passed before the request is sent (which on a
  // busy machine turns "held" into "unavailable").
  const bool queues = wait && options.wait > milliseconds(0);
  const LeaseRequest request = MakeRequest(key, options, queues, deadline);
  // The acquisition owns this attempt's place in the store (if any) until
  // it is granted or abandoned.
  std::unique_ptr<Acquisition> acquisition = backend_->Begin(request);
  AcquireProgress progress(key, options, wait, deadline);
  Duration poll_interval = kFirstPollInterval;
  for (;;) {
    if (options.cancel.stop_requested()) {
      acquisition->Abandon();
      return CancelledError("acquire of key " + Quoted(key) + " was cancelled");
    }
    const TimePoint sent = clock_->Now();
    Result<Attempt> attempt = acquisition->Try();
    if (!attempt.ok()) metrics_.StoreCall(attempt.status());
    const NextStep next = progress.After(attempt, clock_->Now());
    times.held_since = progress.held_since();
    if (next.kind == NextStep::Kind::kGranted) return StartLease(request, options, *attempt, sent);
    if (next.kind == NextStep::Kind::kFail) {
      acquisition->Abandon();
      return next.failure;
    }
    if (!next.store_answered || !acquisition->Wait(next.until, options.cancel)) {
      Backoff(next.until, poll_interval, options.cancel);
    }
    times.woke = clock_->Now();
  }
}

void ClientCore::Backoff(TimePoint until, Duration& interval, std::stop_token cancel) {
  const Duration delay = PollDelay(interval, random_->Next());
  clock_->SleepUntil(std::min(until, clock_->Now() + delay), std::move(cancel));
}

Result<Lease> ClientCore::StartLease(const LeaseRequest& request, const AcquireOptions& options,
                                     const Attempt& attempt, TimePoint sent) {
  // The store may apply another TTL than asked for (etcd rounds up to whole
  // seconds and its minimum): believe the store, so that the client neither
  // gives up a lease the store still holds for it nor renews more often
  // than needed. An explicit drift margin stays (as long as it is below the
  // TTL); the default one follows the TTL.
  const milliseconds ttl = attempt.granted_ttl > milliseconds(0) ? attempt.granted_ttl : options.ttl;
  auto state = std::make_shared<LeaseState>();
  state->key = request.key;
  state->owner = request.owner;
  state->token = attempt.token;
  state->token_ordered = backend_->OrdersTokens();
  state->ttl = ttl;
  state->effective_ttl = ttl;
  state->drift = options.drift_margin && Duration(*options.drift_margin) < Duration(ttl)
                     ? Duration(*options.drift_margin)
                     : DefaultDrift(ttl);
  if (options.on_lost) state->on_lost.emplace_back(0, options.on_lost);
  state->limit = request.limit;
  state->reentrant = options.reentrant;
  state->thread = std::this_thread::get_id();
  const std::optional<SessionLiveness> session = backend_->Liveness();
  if (session && session->timeout > milliseconds(0)) {
    state->effective_ttl = std::min(ttl, session->timeout);
    // A session shorter than the ttl: the default margin follows it.
    if (!options.drift_margin) state->drift = DefaultDrift(state->effective_ttl);
  }
  if (options.max_hold) state->renew_until = sent + *options.max_hold;
  state->granted_at = clock_->Now();
  // A session-based store may vouch for the lease only from its session's
  // last keep-alive, sent before this request.
  const TimePoint from =
      attempt.valid_from != TimePoint{} && attempt.valid_from < sent ? attempt.valid_from : sent;
  TimePoint renew_by;
  {
    std::lock_guard lock(mu_);
    ExtendLocked(*state, from, session);
    held_.push_back(state);
    renew_by = state->next_renew_at;
  }
  // Wakes the loop (a thread switch) only if its next planned run is later.
  wake_renewal_(renew_by);
  return Lease(shared_from_this(), std::move(state));
}

Result<std::vector<Lease>> ClientCore::AcquireAll(std::vector<std::string> keys,
                                                  const AcquireOptions& options) {
  if (keys.empty()) return InvalidArgumentError("AcquireAll needs at least one key");
  for (const auto& k : keys) DLOCK_RETURN_IF_ERROR(ValidateKey(k));
  if (options.wait < milliseconds(0) || options.wait > kMaxWait) {
    return InvalidArgumentError("wait " + FormatDuration(options.wait) +
                                " is out of range: 0 (a single attempt) to 8760h");
  }
  // One canonical order for everyone: no two callers can each hold a key
  // the other waits for.
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  // One deadline for the whole set: each key waits only for what is left.
  const TimePoint deadline = clock_->Now() + options.wait;
  std::vector<Lease> held;
  held.reserve(keys.size());
  for (const auto& k : keys) {
    AcquireOptions each = options;
    each.wait = std::max(milliseconds(0),
                         std::chrono::floor<milliseconds>(deadline - clock_->Now()));
    auto lease = Acquire(k, each, /*wait=*/true);
    if (!lease.ok()) {
      for (auto& l : held) (void)l.Release();  // all or nothing
      return lease.status();
    }
    held.push_back(std::move(*lease));
  }
  return held;
}

Result<bool> ClientCore::IsDone(std::string_view key) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(key));
  return Counted(backend_->IsDone(key));
}

Status ClientCore::MarkDone(const LeaseState& state, std::chrono::milliseconds keep) {
  DLOCK_RETURN_IF_ERROR(ValidateRetention(keep).WithContext("mark " + state.key + " done"));
  DLOCK_RETURN_IF_ERROR(Check(state));
  return Counted(backend_->MarkDone(state.key, state.owner, keep));
}

Result<std::vector<HolderInfo>> ClientCore::List(std::string_view prefix) {
  if (prefix.size() > kMaxKeyBytes) {
    return InvalidArgumentError("prefix is longer than the 1024-byte key limit");
  }
  return Counted(backend_->List(prefix));
}

Result<std::vector<WaiterInfo>> ClientCore::Waiters(std::string_view prefix) {
  if (prefix.size() > kMaxKeyBytes) {
    return InvalidArgumentError("prefix is longer than the 1024-byte key limit");
  }
  return backend_->Waiters(prefix);
}

Result<std::optional<Leader>> ClientCore::CurrentLeader(std::string_view key) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(key));
  DLOCK_ASSIGN_OR_RETURN(const std::vector<HolderInfo> holders, Counted(backend_->List(key)));
  std::optional<Leader> leader;
  for (const HolderInfo& h : holders) {
    if (h.key != key) continue;  // a longer key with this prefix
    if (leader && leader->term >= h.token) continue;
    leader = Leader{h.owner, h.token, h.label, h.ttl_remaining, h.held_for};
  }
  return leader;
}

Result<std::optional<Leader>> ClientCore::AwaitLeader(std::string_view key,
                                                      FencingToken after_term,
                                                      milliseconds wait,
                                                      std::stop_token cancel) {
  if (wait < milliseconds(0) || wait > kMaxWait) {
    return InvalidArgumentError("wait " + FormatDuration(wait) + " is out of range: 0 to 8760h");
  }
  const TimePoint deadline = clock_->Now() + wait;
  Duration poll = kFirstPollInterval;
  for (;;) {
    auto leader = CurrentLeader(key);
    if (!leader.ok() || (*leader && (*leader)->term > after_term)) return leader;
    const TimePoint now = clock_->Now();
    if (now >= deadline || cancel.stop_requested()) return leader;
    clock_->SleepUntil(std::min(deadline, now + poll), cancel);
    poll = std::min<Duration>(poll * 2, milliseconds(100));
  }
}

void ClientCore::MarkLostLocked(const std::shared_ptr<LeaseState>& state, Status why,
                                LossCause cause, LeaseList& newly_lost) {
  state->phase = LeaseState::Phase::kLost;
  state->lost_reason = std::move(why);
  state->lost_cause = cause;
  newly_lost.push_back(state);
}

void ClientCore::NotifyLost(const LeaseList& newly_lost) {
  for (const auto& state : newly_lost) {
    metrics_.Lost(state->key, state->lost_cause, clock_->Now() - state->granted_at);
    state->lost.request_stop();
    for (const auto& [hold, on_lost] : state->on_lost) {
      try {
        on_lost(state->lost_reason);
      } catch (...) {
        // A throwing callback must not take the renewal thread (and every
        // other lease of this client) down with it.
      }
    }
  }
}

void ClientCore::ExtendLocked(LeaseState& state, TimePoint sent,
                              const std::optional<SessionLiveness>& session) {
  TimePoint valid = sent + state.ttl;
  const bool by_session = session && session->timeout > milliseconds(0);
  if (by_session) {
    // The store keeps the session (and so the lease) until at least the
    // last time it provably heard from us plus the session timeout.
    valid = std::min(valid, session->heard_at + session->timeout);
  }
  state.valid_until = std::max(state.valid_until, valid - state.drift);
  Duration period = state.effective_ttl / 3;
  if (by_session) {
    // When the store's promise is short (its last answer is old), renew
    // sooner: halfway to valid_until.
    period = std::max<Duration>(std::min(period, (state.valid_until - sent) / 2),
                                milliseconds(1));
  }
  state.next_renew_at = sent + period;
}

ClientCore::LeaseList ClientCore::TakeDueLocked(TimePoint now, LeaseList& newly_lost) {
  LeaseList due;
  for (const auto& state : held_) {
    if (now >= state->valid_until) {
      MarkLostLocked(state,
                     state->lost_reason.ok()
                         ? LeaseLostError("lease on key " + Quoted(state->key) +
                                          " reached its valid_until without a successful "
                                          "renewal")
                         : state->lost_reason,
                     state->lost_reason.ok() ? LossCause::kExpired : LossCause::kMaxHold,
                     newly_lost);
    } else if (now >= state->renew_until) {
      // Bounded holding: let it run out; the loss is reported at
      // valid_until like any other.
      if (state->lost_reason.ok()) {
        state->lost_reason = LeaseLostError("lease on key " + Quoted(state->key) +
                                            " reached its max hold; no more renewals");
      }
      state->next_renew_at = TimePoint::max();
    } else if (now >= state->next_renew_at - state->effective_ttl / 6) {
      // Due, or due soon: renewing a little early costs nothing and lets
      // leases acquired at different times share one store call.
      due.push_back(state);
    }
  }
  DropLostLocked();
  return due;
}

ClientCore::LeaseList ClientCore::RenewAtStore(const LeaseList& due, LeaseList& newly_lost) {
  std::vector<LeaseRequest> requests;
  requests.reserve(due.size());
  for (const auto& state : due) requests.push_back(RenewalRequest(*state));
  const TimePoint sent = clock_->Now();
  std::vector<Status> results = backend_->Renew(requests);
  const Renewal renewal{sent, clock_->Now(), backend_->Liveness()};
  CountRenewal(renewal, due, results);

  LeaseList give_back;
  std::lock_guard lock(mu_);
  for (std::size_t i = 0; i < due.size(); ++i) {
    if (due[i]->phase != LeaseState::Phase::kHeld) continue;  // released meanwhile
    Status result = i < results.size()
                        ? results[i]
                        : InternalError("backend returned too few renewal results");
    (void)ApplyRenewalLocked(due[i], std::move(result), renewal, newly_lost, give_back);
  }
  DropLostLocked();
  return give_back;
}

Status ClientCore::ApplyRenewalLocked(const std::shared_ptr<LeaseState>& state, Status result,
                                      const Renewal& renewal, LeaseList& newly_lost,
                                      LeaseList& give_back) {
  if (renewal.replied >= state->valid_until) {
    // The caller may already have seen the lease as lost; it must stay
    // lost even though the store extended it. Give the key back.
    if (result.ok()) give_back.push_back(state);
    result = LeaseLostError("renewal of key " + Quoted(state->key) +
                            " was answered after the lease's valid_until");
    MarkLostLocked(state, result, LossCause::kLateRenewal, newly_lost);
    return result;
  }
  if (result.ok()) {
    ExtendLocked(*state, renewal.sent, renewal.session);
  } else if (result.code() == StatusCode::kNotOwner ||
             result.code() == StatusCode::kLeaseLost) {
    result = LeaseLostError("the store no longer holds key " + Quoted(state->key) +
                            " for this owner: " + result.message());
    MarkLostLocked(state, result, LossCause::kNotOwner, newly_lost);
  } else {
    state->next_renew_at = renewal.replied + RenewRetryInterval(state->effective_ttl);
  }
  return result;
}

void ClientCore::CountRenewal(const Renewal& renewal, const LeaseList& leases,
                              const std::vector<Status>& results) {
  metrics_.Renewal(renewal.replied - renewal.sent);
  for (std::size_t i = 0; i < results.size() && i < leases.size(); ++i) {
    if (results[i].ok()) continue;
    metrics_.RenewalFailed(leases[i]->key, results[i].code());
    metrics_.StoreCall(results[i]);
  }
}

void ClientCore::DropLostLocked() {
  std::erase_if(held_, [](const auto& s) { return s->phase != LeaseState::Phase::kHeld; });
}

TimePoint ClientCore::Tick(TimePoint now) {
  // Being destroyed: nothing is held, and the destructor waits for this
  // tick (it joins the loop).
  if (weak_from_this().expired()) return now + kIdleTick;
  LeaseList newly_lost;
  LeaseList due;
  {
    std::lock_guard lock(mu_);
    due = TakeDueLocked(now, newly_lost);
  }
  LeaseList release_at_store;
  if (!due.empty()) release_at_store = RenewAtStore(due, newly_lost);
  for (const auto& state : release_at_store) {
    (void)backend_->Release(state->key, state->owner);
  }
  // Held only from here: an on_lost callback may drop the last Lease and
  // Client, and the core must outlive this tick. Not across the store calls
  // above: a Client destroyed meanwhile must wait for them (the core's
  // destructor joins this loop), or a process returning from main would
  // tear down the store's statics under them.
  std::shared_ptr<ClientCore> self = weak_from_this().lock();
  if (!self) return now + kIdleTick;
  NotifyLost(newly_lost);

  std::lock_guard lock(mu_);
  TimePoint next = now + kIdleTick;
  for (const auto& state : held_) {
    next = std::min({next, state->next_renew_at, state->valid_until});
  }
  return next;
}

Status ClientCore::Release(LeaseState& state, std::uint64_t hold) {
  ReleasePlan plan = BeginRelease(state, hold);
  if (!plan.ask_store) return plan.answer;
  // Owner-checked at the store, so this never drops another owner's lock.
  Status released = backend_->Release(state.key, state.owner);
  return EndRelease(state, plan, std::move(released));
}

ClientCore::ReleasePlan ClientCore::BeginRelease(LeaseState& state, std::uint64_t hold) {
  ReleasePlan plan;
  plan.now = clock_->Now();
  std::lock_guard lock(mu_);
  if (state.phase == LeaseState::Phase::kReleased) return plan;
  if (state.holds > 1) {
    plan.answer = DropHoldLocked(state, hold);
    return plan;
  }
  if (state.phase == LeaseState::Phase::kLost) {
    plan.was_lost = true;
    plan.answer = state.lost_reason;
  } else if (plan.now >= state.valid_until) {
    plan.was_lost = plan.expired_now = true;
    plan.answer = LeaseLostError("lease on key " + Quoted(state.key) +
                                 " passed its valid_until before release");
  }
  state.phase = LeaseState::Phase::kReleased;
  std::erase_if(held_, [&](const auto& s) { return s.get() == &state; });
  plan.ask_store = true;
  return plan;
}

Status ClientCore::EndRelease(const LeaseState& state, const ReleasePlan& plan, Status released) {
  metrics_.StoreCall(released);
  const Duration held = plan.now - state.granted_at;
  if (plan.expired_now) metrics_.Lost(state.key, LossCause::kExpired, held);
  if (plan.was_lost) return plan.answer;
  if (released.code() == StatusCode::kNotOwner) {
    metrics_.Lost(state.key, LossCause::kNotOwner, held);
    return LeaseLostError("lease on key " + Quoted(state.key) +
                          " was lost before release: " + released.message());
  }
  metrics_.Released(state.key, held);
  return released;
}

Status ClientCore::RenewNow(const std::shared_ptr<LeaseState>& state) {
  DLOCK_RETURN_IF_ERROR(Check(*state));
  const LeaseRequest request = RenewalRequest(*state);
  const TimePoint sent = clock_->Now();
  std::vector<Status> results = backend_->Renew(std::span<const LeaseRequest>(&request, 1));
  const Renewal renewal{sent, clock_->Now(), backend_->Liveness()};
  CountRenewal(renewal, {state}, results);
  Status result =
      results.size() == 1 ? results[0] : InternalError("backend returned no renewal result");
  LeaseList newly_lost, give_back;
  {
    std::lock_guard lock(mu_);
    if (state->phase != LeaseState::Phase::kHeld) return CheckLocked(*state);
    result = ApplyRenewalLocked(state, std::move(result), renewal, newly_lost, give_back);
    DropLostLocked();
  }
  for (const auto& lost : give_back) (void)backend_->Release(lost->key, lost->owner);
  NotifyLost(newly_lost);
  return result;
}

Status ClientCore::Check(const LeaseState& state) const {
  std::lock_guard lock(mu_);
  return CheckLocked(state);
}

Status ClientCore::CheckLocked(const LeaseState& state) const {
  switch (state.phase) {
    case LeaseState::Phase::kReleased:
      return FailedPreconditionError("lease on key " + Quoted(state.key) + " was released");
    case LeaseState::Phase::kLost:
      return state.lost_reason;
    case LeaseState::Phase::kHeld:
      break;
  }
  if (clock_->Now() >= state.valid_until) {
    return LeaseLostError("lease on key " + Quoted(state.key) + " passed its valid_until");
  }
  return Status::Ok();
}

TimePoint ClientCore::ValidUntil(const LeaseState& state) const {
  std::lock_guard lock(mu_);
  return state.valid_until;
}

}  // namespace dlock::internal

namespace dlock {

Lease::Lease(std::shared_ptr<internal::ClientCore> core,
             std::shared_ptr<internal::LeaseState> state, std::uint64_t hold)
    : core_(std::move(core)), state_(std::move(state)), hold_(hold) {}

Lease& Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    (void)Release();
    core_ = std::move(other.core_);
    state_ = std::move(other.state_);
    hold_ = other.hold_;
    released_ = other.released_;
  }
  return *this;
}

Lease::~Lease() { (void)Release(); }

const std::string& Lease::key() const { return state_->key; }
const OwnerId& Lease::owner() const { return state_->owner; }
FencingToken Lease::token() const { return state_->token; }
bool Lease::token_ordered() const { return state_->token_ordered; }
std::chrono::milliseconds Lease::ttl() const { return state_->ttl; }
TimePoint Lease::valid_until() const { return core_->ValidUntil(*state_); }
std::stop_token Lease::stop_token() const { return state_->lost.get_token(); }

std::uint32_t Lease::hold_count() const {
  return state_ && !released_ ? core_->HoldCount(*state_) : 0;
}

Status Lease::Usable() const {
  if (!state_) return FailedPreconditionError("empty Lease");
  if (released_) return FailedPreconditionError("lease on key '" + key() + "' was released");
  return Status::Ok();
}

Status Lease::Check() const {
  DLOCK_RETURN_IF_ERROR(Usable());
  return core_->Check(*state_);
}

Status Lease::Renew() {
  DLOCK_RETURN_IF_ERROR(Usable());  // RenewNow checks the holding itself
  return core_->RenewNow(state_);
}

Status Lease::Release() {
  if (!state_) return FailedPreconditionError("empty Lease");
  if (released_) return Status::Ok();
  released_ = true;
  return core_->Release(*state_, hold_);
}

}  // namespace dlock
