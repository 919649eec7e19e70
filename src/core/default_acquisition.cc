// Backend::Begin's default, and the one-at-a-time defaults of the batched
// calls. Begin's: an acquisition for a store that keeps no
// per-attempt state of its own (SQLite, the in-memory store, Redlock). Each
// Try is one TryAcquire (which takes or refreshes the owner's queue place
// when queue_ttl > 0), Wait is WaitForRelease, Notify is NotifyOnRelease,
// Abandon is Release.
#include "dlock/backend.h"

#include <cstdint>
#include <utility>

namespace dlock {
namespace {

class DefaultAcquisition final : public Acquisition {
 public:
  DefaultAcquisition(Backend& backend, LeaseRequest request)
      : backend_(backend), request_(std::move(request)) {}
  // The store's thread must never call a `wake` whose acquisition is gone.
  ~DefaultAcquisition() override { StopNotify(); }

  Result<Attempt> Try() override {
    Result<Attempt> attempt = backend_.TryAcquire(request_);
    // A lost reply may hide a grant: Abandon must release it.
    if (!attempt.ok() && attempt.status().code() == StatusCode::kUnavailable) {
      maybe_granted_ = true;
    }
    return attempt;
  }

  bool Wait(TimePoint until, std::stop_token stop) override {
    return backend_.WaitForRelease(request_.key, until, std::move(stop));
  }

  bool Notify(std::function<void()> wake) override {
    StopNotify();  // a handle whose wake ran: already gone, but be sure
    notify_ = backend_.NotifyOnRelease(request_, std::move(wake));
    return notify_ != 0;
  }

  void StopNotify() override {
    if (notify_ != 0) backend_.StopNotifyOnRelease(std::exchange(notify_, 0));
  }

  void Abandon() override {
    StopNotify();
    // A single attempt that was answered took no place and no grant.
    if (maybe_granted_ || request_.queue_ttl > std::chrono::milliseconds(0)) {
      (void)backend_.Release(request_.key, request_.owner);
    }
  }

 private:
  Backend& backend_;
  const LeaseRequest request_;
  bool maybe_granted_ = false;
  std::uint64_t notify_ = 0;  // NotifyOnRelease's handle, 0 if none
};

}  // namespace

std::unique_ptr<Acquisition> Backend::Begin(const LeaseRequest& request) {
  return std::make_unique<DefaultAcquisition>(*this, request);
}

std::vector<Result<Attempt>> Backend::TryAcquireMany(std::span<const LeaseRequest> requests) {
  std::vector<Result<Attempt>> answers;
  answers.reserve(requests.size());
  for (const LeaseRequest& r : requests) answers.push_back(TryAcquire(r));
  return answers;
}

std::vector<Status> Backend::ReleaseMany(std::span<const LeaseRequest> holdings) {
  std::vector<Status> answers;
  answers.reserve(holdings.size());
  for (const LeaseRequest& h : holdings) answers.push_back(Release(h.key, h.owner));
  return answers;
}

std::vector<Status> Backend::KeepPlaces(std::span<const LeaseRequest> waiters) {
  return std::vector<Status>(waiters.size(),
                             FailedPreconditionError(Describe() + " keeps no places in batches"));
}

}  // namespace dlock
