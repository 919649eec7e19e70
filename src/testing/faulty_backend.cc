#include "dlock/testing/faulty_backend.h"

namespace dlock::testing {

Result<Attempt> FaultyBackend::TryAcquire(const LeaseRequest& request) {
  bool lose_reply = false;
  {
    std::lock_guard lock(plan_->mu);
    if (plan_->acquire_error) return *plan_->acquire_error;
    if (plan_->lose_acquire_replies > 0) {
      --plan_->lose_acquire_replies;
      lose_reply = true;
    }
  }
  Result<Attempt> r = inner_->TryAcquire(request);
  if (lose_reply) return UnavailableError("injected: reply to acquire was lost");
  return r;
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

}  // namespace dlock::testing
