// AsyncAcquire: one pending asynchronous acquisition (Client::AcquireAsync).
//
// The same steps as the blocking Acquire (AcquireProgress decides after each
// Try), but between attempts it holds no thread: it asks the store's
// Acquisition to Notify it, arms a timer on the client's AsyncDriver for the
// deadline, the holder's lease end or the queue place's refresh, and
// whichever comes first posts the next step to a worker. A store that
// cannot notify is polled by timers with the same capped backoff as the
// blocking path. On a store that keeps places in batches
// (Backend::KeepsPlaces) the client's PlaceKeeper keeps the place instead,
// from the first wait until the end: no attempt is then due for the
// refresh, and a place the keeper finds gone makes an attempt at once.
//
// Phases: kQueued (a step is posted or running), kArming (the step is
// asking for the notification and arming the timer: a wake-up, a timer, a
// lost place or a cancel that comes meanwhile is noted, and the step acts
// on it once both are set up, so that no other thread calls the store's
// Acquisition while Notify runs), kWaiting (a notification and/or a timer
// armed; `round_` numbers each wait, so that a late wake-up from an earlier
// one is ignored), kDone (the callback ran or is running).
#ifndef DLOCK_SRC_CORE_ASYNC_ACQUIRE_H_
#define DLOCK_SRC_CORE_ASYNC_ACQUIRE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>

#include "core/acquire_step.h"
#include "core/client_core.h"
#include "dlock/client.h"

namespace dlock::internal {

class AsyncDriver;

class AsyncAcquire : public std::enable_shared_from_this<AsyncAcquire> {
 public:
  AsyncAcquire(std::shared_ptr<ClientCore> core, AsyncDriver& driver, std::string_view key,
               AcquireOptions options, AcquireCallback done);

  // Checks the request and posts the first step (or the failure).
  void Start();
  // Ends the acquisition with kCancelled and `why`, unless it has ended.
  void Cancel(const std::string& why);
  bool Done() const;

 private:
  enum class Phase { kQueued, kArming, kWaiting, kDone };

  // The answer to the first attempt, sent in a batch (CallBatcher).
  void FirstAnswer(Result<Attempt> attempt, TimePoint sent);
  // One Try and what follows it; on a worker.
  void Step();
  // Arms the wait `next` asks for: a notification and a timer.
  void WaitFor(const NextStep& next);
  void Woken(std::uint64_t round);       // the store's notification
  void TimerFired(std::uint64_t round);  // on a worker
  void PlaceLost();                      // the PlaceKeeper's kNotFound
  // Hands the place to the client's PlaceKeeper, at the first wait.
  void KeepPlace();
  // Takes the acquisition out of kWaiting (round `round`) to run a step;
  // false if that wait already ended, or is still being armed (the arming
  // step then runs it).
  bool LeaveWait(std::uint64_t round, std::uint64_t& timer, bool& notifying);
  // Ends arming: kWaiting with `timer` and `notifying`, or false (and
  // kQueued) if the wait ended while it was armed.
  bool Armed(std::uint64_t timer, bool notifying);
  // After a wait ended (out of it by LeaveWait or Armed): drops its timer
  // and, if `notifying`, its notification, and posts the next step.
  void Resume(std::uint64_t timer, bool notifying);
  void Finish(Result<Lease> result);

  const std::shared_ptr<ClientCore> core_;
  AsyncDriver& driver_;
  const std::string key_;
  AcquireOptions options_;
  AcquireCallback done_;
  ClientCore::AcquireTimes times_;
  std::optional<LeaseRequest> request_;
  std::unique_ptr<Acquisition> acquisition_;  // from Start until Finish
  std::optional<AcquireProgress> progress_;
  Duration poll_interval_ = kFirstPollInterval;
  // The PlaceKeeper's id for this acquisition's place, 0 if none. Only the
  // step that runs (one at a time) reads or writes it.
  std::uint64_t kept_ = 0;
  std::optional<std::stop_callback<std::function<void()>>> on_cancel_;

  mutable std::mutex mu_;
  Phase phase_ = Phase::kQueued;
  std::uint64_t round_ = 0;
  std::uint64_t timer_ = 0;  // the current wait's timer, 0 if none
  bool notifying_ = false;   // the current wait asked the store to Notify
  bool ended_early_ = false;  // the wait being armed ended already
  std::optional<std::string> cancelled_;
};

}  // namespace dlock::internal

#endif  // DLOCK_SRC_CORE_ASYNC_ACQUIRE_H_
