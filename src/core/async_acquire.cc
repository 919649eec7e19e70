#include "core/async_acquire.h"

#include <utility>

#include "core/async_driver.h"
#include "core/call_batcher.h"
#include "core/place_keeper.h"

namespace dlock::internal {

AsyncAcquire::AsyncAcquire(std::shared_ptr<ClientCore> core, AsyncDriver& driver,
                           std::string_view key, AcquireOptions options, AcquireCallback done)
    : core_(std::move(core)),
      driver_(driver),
      key_(key),
      options_(std::move(options)),
      done_(std::move(done)) {
  times_.start = core_->clock_->Now();
}

void AsyncAcquire::Start() {
  Status valid = ValidateKey(key_);
  if (valid.ok()) valid = core_->CheckOptions(options_, /*wait=*/true);
  // Reentrancy belongs to a thread; an asynchronous acquire has none.
  if (valid.ok() && options_.reentrant) {
    valid = InvalidArgumentError("a reentrant acquire cannot be asynchronous: reentrancy is per "
                                 "thread, and an asynchronous acquire belongs to none");
  }
  if (!valid.ok()) {
    driver_.Post([self = shared_from_this(), valid] { self->Finish(valid); });
    return;
  }
  const TimePoint deadline = times_.start + options_.wait;
  const bool queues = options_.wait > std::chrono::milliseconds(0);
  request_ = core_->MakeRequest(key_, options_, queues, deadline);
  // With a PlaceKeeper, the keeper keeps the place while it waits (KeepPlace).
  PlaceKeeping keeping = PlaceKeeping::kByAttempts;
  if (queues && core_->keeper_) {
    keeping = core_->backend_->NoticesLapsedPlaces() ? PlaceKeeping::kByKeeperLapsesNoticed
                                                     : PlaceKeeping::kByKeeper;
  }
  progress_.emplace(key_, options_, /*wait=*/true, deadline, keeping);
  // Before the first step is sent (which may end it): a token already
  // stopped runs Cancel here, and that step sees it.
  std::weak_ptr<AsyncAcquire> weak = weak_from_this();
  on_cancel_.emplace(options_.cancel, std::function<void()>([weak] {
                       if (auto self = weak.lock()) self->Cancel("its cancel token was stopped");
                     }));
  if (core_->batcher_) {
    // The first attempt rides in a batch, as a single attempt: the place in
    // the queue, if it must wait, comes with its next one.
    LeaseRequest single = *request_;
    single.queue_ttl = std::chrono::milliseconds(0);
    core_->batcher_->QueueAttempt(std::move(single),
                             [self = shared_from_this()](Result<Attempt> attempt, TimePoint sent) {
                               self->FirstAnswer(std::move(attempt), sent);
                             });
    return;
  }
  acquisition_ = core_->backend_->Begin(*request_);
  driver_.Post([self = shared_from_this()] { self->Step(); });
}

void AsyncAcquire::FirstAnswer(Result<Attempt> attempt, TimePoint sent) {
  if (!attempt.ok()) core_->metrics_.StoreCall(attempt.status());
  const NextStep next = progress_->After(attempt, core_->clock_->Now());
  std::optional<std::string> cancelled;
  {
    std::lock_guard lock(mu_);
    cancelled = cancelled_;
  }
  const bool maybe_granted = attempt.ok() ? attempt->granted
                                          : attempt.status().code() == StatusCode::kUnavailable;
  if (next.kind == NextStep::Kind::kGranted && !cancelled) {
    Finish(core_->StartLease(*request_, options_, *attempt, sent));
    return;
  }
  if (next.kind != NextStep::Kind::kWait || cancelled) {
    // A grant it will not take, or one whose answer was lost: given back.
    if (maybe_granted) (void)core_->backend_->Release(request_->key, request_->owner);
    Finish(cancelled ? CancelledError("acquire of key '" + key_ + "' was cancelled: " + *cancelled)
                     : next.failure);
    return;
  }
  // Held (or no answer): from here on as any waiting acquisition, whose
  // first queued attempt also re-grants a grant whose answer was lost.
  acquisition_ = core_->backend_->Begin(*request_);
  Step();
}

void AsyncAcquire::Cancel(const std::string& why) {
  std::uint64_t timer = 0;
  bool notifying = false;
  {
    std::lock_guard lock(mu_);
    if (phase_ == Phase::kDone || cancelled_) return;
    cancelled_ = why;
    if (phase_ != Phase::kWaiting) return;  // the running step will see it
    phase_ = Phase::kQueued;
    ++round_;
    timer = std::exchange(timer_, 0);
    notifying = std::exchange(notifying_, false);
  }
  driver_.CancelTimer(timer);
  driver_.Post([self = shared_from_this(), notifying] {
    if (notifying) self->acquisition_->StopNotify();
    self->Step();
  });
}

bool AsyncAcquire::Done() const {
  std::lock_guard lock(mu_);
  return phase_ == Phase::kDone;
}

void AsyncAcquire::Step() {
  std::optional<std::string> cancelled;
  {
    std::lock_guard lock(mu_);
    if (phase_ == Phase::kDone) return;
    cancelled = cancelled_;
  }
  if (cancelled) {
    acquisition_->Abandon();
    Finish(CancelledError("acquire of key '" + key_ + "' was cancelled: " + *cancelled));
    return;
  }
  const TimePoint sent = core_->clock_->Now();
  Result<Attempt> attempt = acquisition_->Try();
  if (!attempt.ok()) core_->metrics_.StoreCall(attempt.status());
  const NextStep next = progress_->After(attempt, core_->clock_->Now());
  times_.held_since = progress_->held_since();
  if (next.kind == NextStep::Kind::kGranted) {
    Finish(core_->StartLease(*request_, options_, *attempt, sent));
  } else if (next.kind == NextStep::Kind::kFail) {
    acquisition_->Abandon();
    Finish(next.failure);
  } else {
    WaitFor(next);
  }
}

void AsyncAcquire::WaitFor(const NextStep& next) {
  KeepPlace();
  std::uint64_t round = 0;
  {
    std::lock_guard lock(mu_);
    if (cancelled_) {  // cancelled while the step ran: end at once
      driver_.Post([self = shared_from_this()] { self->Step(); });
      return;
    }
    round = ++round_;
    phase_ = Phase::kArming;
    ended_early_ = false;
  }
  // Neither call is made under mu_: a store may call `wake` under its own
  // lock, and the timer may fire at once. What ends the wait meanwhile
  // waits for this step (kArming).
  std::weak_ptr<AsyncAcquire> weak = weak_from_this();
  const bool notifying = next.store_answered && acquisition_->Notify([weak, round] {
    if (auto self = weak.lock()) self->Woken(round);
  });
  TimePoint until = next.until;
  if (!notifying) {
    until = std::min(until, core_->clock_->Now() +
                                PollDelay(poll_interval_, core_->random_->Next()));
  }
  const std::uint64_t timer = driver_.At(until, [weak, round] {
    if (auto self = weak.lock()) self->TimerFired(round);
  });
  if (Armed(timer, notifying)) return;
  // Woken, timed out, its place lost or cancelled while it was armed.
  Resume(timer, notifying);
}

void AsyncAcquire::Resume(std::uint64_t timer, bool notifying) {
  driver_.CancelTimer(timer);
  if (notifying) acquisition_->StopNotify();
  times_.woke = core_->clock_->Now();
  driver_.Post([self = shared_from_this()] { self->Step(); });
}

bool AsyncAcquire::Armed(std::uint64_t timer, bool notifying) {
  std::lock_guard lock(mu_);
  if (ended_early_ || cancelled_) {
    phase_ = Phase::kQueued;
    return false;
  }
  phase_ = Phase::kWaiting;
  timer_ = timer;
  notifying_ = notifying;
  return true;
}

bool AsyncAcquire::LeaveWait(std::uint64_t round, std::uint64_t& timer, bool& notifying) {
  std::lock_guard lock(mu_);
  if (round_ != round) return false;
  if (phase_ == Phase::kArming) ended_early_ = true;
  if (phase_ != Phase::kWaiting) return false;
  phase_ = Phase::kQueued;
  timer = std::exchange(timer_, 0);
  notifying = std::exchange(notifying_, false);
  return true;
}

void AsyncAcquire::Woken(std::uint64_t round) {
  std::uint64_t timer = 0;
  bool notifying = false;
  if (!LeaveWait(round, timer, notifying)) return;
  Resume(timer, /*notifying=*/false);  // its notification is the one that came
}

void AsyncAcquire::TimerFired(std::uint64_t round) {
  std::uint64_t timer = 0;
  bool notifying = false;
  if (!LeaveWait(round, timer, notifying)) return;
  if (notifying) acquisition_->StopNotify();
  times_.woke = core_->clock_->Now();
  Step();
}

void AsyncAcquire::KeepPlace() {
  if (kept_ != 0 || !core_->keeper_ || request_->queue_ttl <= std::chrono::milliseconds(0)) {
    return;
  }
  std::weak_ptr<AsyncAcquire> weak = weak_from_this();
  kept_ = core_->keeper_->Keep(*request_, [weak] {
    if (auto self = weak.lock()) self->PlaceLost();
  });
}

void AsyncAcquire::PlaceLost() {
  // Whichever wait it is in: a place found gone is gone for this one too
  // (one from before its last attempt costs an attempt, nothing more).
  // LeaveWait ignores it when attempting already, or done.
  std::uint64_t round = 0;
  {
    std::lock_guard lock(mu_);
    round = round_;
  }
  std::uint64_t timer = 0;
  bool notifying = false;
  if (!LeaveWait(round, timer, notifying)) return;
  // Posted: the keeper's worker has the other lost places to hand on.
  Resume(timer, notifying);
}

void AsyncAcquire::Finish(Result<Lease> result) {
  {
    std::lock_guard lock(mu_);
    if (phase_ == Phase::kDone) return;
    phase_ = Phase::kDone;
  }
  // Kept no more: granted, given up or cancelled. A tick already at the
  // store for it gets kNotFound (it never re-creates a place), which finds
  // this acquisition done.
  if (kept_ != 0) core_->keeper_->Forget(std::exchange(kept_, 0));
  on_cancel_.reset();
  acquisition_.reset();
  core_->RecordAcquire(key_, result, times_);
  // No longer pending before the callback runs: a callback that closes the
  // client must not wait for itself.
  core_->AsyncFinished(this);
  AcquireCallback done = std::move(done_);
  done(std::move(result));
}

}  // namespace dlock::internal
