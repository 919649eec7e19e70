#include "dlock/testing/faulty_backend.h"

#include <algorithm>
#include <utility>

namespace dlock::testing {

namespace {

// What the plan says of the next attempt: fail it before it reaches the
// store, or lose its reply on the way back.
struct AttemptFault {
  std::optional<Status> error;
  bool lose_reply = false;
};

AttemptFault NextAttemptFault(FaultPlan& plan) {
  std::lock_guard lock(plan.mu);
  if (plan.acquire_error) return {plan.acquire_error, false};
  if (plan.lose_acquire_replies == 0) return {};
  --plan.lose_acquire_replies;
  return {std::nullopt, true};
}

Status LostReply() { return UnavailableError("injected: reply to acquire was lost"); }

class FaultyAcquisition final : public Acquisition {
 public:
  FaultyAcquisition(std::unique_ptr<Acquisition> inner, Backend& store, LeaseRequest request,
                    std::shared_ptr<FaultPlan> plan)
      : inner_(std::move(inner)), store_(store), request_(std::move(request)),
        plan_(std::move(plan)) {}

  Result<Attempt> Try() override {
    {
      std::lock_guard lock(plan_->mu);
      ++plan_->tries;
    }
    AttemptFault fault = NextAttemptFault(*plan_);
    if (fault.error) return *fault.error;
    Result<Attempt> r = inner_->Try();
    if (!fault.lose_reply) return r;
    // The inner acquisition saw its answer; only we know it was lost.
    lost_a_reply_ = true;
    return LostReply();
  }
  bool Wait(TimePoint until, std::stop_token stop) override {
    const bool told = inner_->Wait(until, std::move(stop));
    std::lock_guard lock(plan_->mu);
    ++plan_->waits;
    if (!told) ++plan_->waits_blind;
    return told;
  }
  bool Notify(std::function<void()> wake) override {
    const bool told = inner_->Notify(std::move(wake));
    std::lock_guard lock(plan_->mu);
    ++plan_->notifies;
    if (!told) ++plan_->notifies_blind;
    return told;
  }
  void StopNotify() override { inner_->StopNotify(); }

  void Abandon() override {
    inner_->Abandon();
    if (lost_a_reply_) (void)store_.Release(request_.key, request_.owner);
  }

 private:
  std::unique_ptr<Acquisition> inner_;
  Backend& store_;
  const LeaseRequest request_;
  std::shared_ptr<FaultPlan> plan_;
  bool lost_a_reply_ = false;
};

}  // namespace

Result<Attempt> FaultyBackend::TryAcquire(const LeaseRequest& request) {
  AttemptFault fault = NextAttemptFault(*plan_);
  if (fault.error) return *fault.error;
  Result<Attempt> r = inner_->TryAcquire(request);
  if (fault.lose_reply) return LostReply();
  return r;
}

std::unique_ptr<Acquisition> FaultyBackend::Begin(const LeaseRequest& request) {
  return std::make_unique<FaultyAcquisition>(inner_->Begin(request), *inner_, request, plan_);
}

Status FaultyBackend::Release(std::string_view key, const OwnerId& owner) {
  {
    std::lock_guard lock(plan_->mu);
    if (plan_->release_error) return *plan_->release_error;
  }
  return inner_->Release(key, owner);
}

std::vector<Status> FaultyBackend::Renew(std::span<const LeaseRequest> leases) {
  {
    std::lock_guard lock(plan_->mu);
    ++plan_->renew_batches;
    if (plan_->renew_error) return std::vector<Status>(leases.size(), *plan_->renew_error);
  }
  return inner_->Renew(leases);
}

std::vector<Status> FaultyBackend::KeepPlaces(std::span<const LeaseRequest> waiters) {
  {
    std::lock_guard lock(plan_->mu);
    ++plan_->keep_places;
    plan_->places_asked += static_cast<int>(waiters.size());
    plan_->largest_keep = std::max(plan_->largest_keep, static_cast<int>(waiters.size()));
    if (plan_->keep_places_error) {
      return std::vector<Status>(waiters.size(), *plan_->keep_places_error);
    }
  }
  return inner_->KeepPlaces(waiters);
}

}  // namespace dlock::testing
