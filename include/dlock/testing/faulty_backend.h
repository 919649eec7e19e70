// FaultyBackend: wraps any Backend and injects the failures a network gives.
//
// The test keeps the FaultPlan and changes it while the client runs:
//
//   auto plan = std::make_shared<dlock::testing::FaultPlan>();
//   auto client = Client::FromBackend(
//       std::make_unique<FaultyBackend>(std::move(inner), plan), options);
//   plan->renew_error = UnavailableError("partitioned");   // renewals fail
//   plan->lose_acquire_replies = 1;  // next grant happens, reply is lost
//
// Faults apply to TryAcquire and to the Try of every Acquisition it begins,
// and keep_places_error to KeepPlaces.
//
// Thread-safety: FaultPlan fields are read under its mutex by the wrapper;
// set them through the setters or while no call is in flight.
#ifndef DLOCK_TESTING_FAULTY_BACKEND_H_
#define DLOCK_TESTING_FAULTY_BACKEND_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "dlock/backend.h"

namespace dlock::testing {

struct FaultPlan {
  std::mutex mu;
  // When set, every call of that kind fails with it and the store is not
  // touched.
  std::optional<Status> acquire_error;
  std::optional<Status> release_error;
  std::optional<Status> renew_error;
  std::optional<Status> record_error;  // RecordBreak
  std::optional<Status> keep_places_error;  // every KeepPlaces entry answers it
  // The next N TryAcquire calls reach the store (and may grant) but report
  // kUnavailable: a reply lost on the way back.
  int lose_acquire_replies = 0;
  // Counts, for assertions.
  int renew_batches = 0;  // Renew calls (one per tick, however many leases)
  int waits = 0;           // Acquisition::Wait calls
  int waits_blind = 0;     // ... that returned false: the core then polled
  int tries = 0;           // Acquisition::Try calls
  int notifies = 0;        // Acquisition::Notify calls
  int notifies_blind = 0;  // ... that returned false: the core then polled
  int keep_places = 0;     // KeepPlaces calls (one per tick of up to a batch of places)
  int places_asked = 0;    // ... and the places they asked to keep, in all
  int largest_keep = 0;    // ... and in the largest call

  int RenewBatches() {
    std::lock_guard l(mu);
    return renew_batches;
  }
  int Waits() {
    std::lock_guard l(mu);
    return waits;
  }
  int BlindWaits() {
    std::lock_guard l(mu);
    return waits_blind;
  }
  int Tries() {
    std::lock_guard l(mu);
    return tries;
  }
  int Notifies() {
    std::lock_guard l(mu);
    return notifies;
  }
  int BlindNotifies() {
    std::lock_guard l(mu);
    return notifies_blind;
  }
  int KeepPlacesCalls() {
    std::lock_guard l(mu);
    return keep_places;
  }
  int PlacesAsked() {
    std::lock_guard l(mu);
    return places_asked;
  }
  int LargestKeep() {
    std::lock_guard l(mu);
    return largest_keep;
  }

  void SetRenewError(std::optional<Status> s) {
    std::lock_guard l(mu);
    renew_error = std::move(s);
  }
  void SetAcquireError(std::optional<Status> s) {
    std::lock_guard l(mu);
    acquire_error = std::move(s);
  }
  void SetReleaseError(std::optional<Status> s) {
    std::lock_guard l(mu);
    release_error = std::move(s);
  }
  void SetKeepPlacesError(std::optional<Status> s) {
    std::lock_guard l(mu);
    keep_places_error = std::move(s);
  }
  void LoseAcquireReplies(int n) {
    std::lock_guard l(mu);
    lose_acquire_replies = n;
  }
};

class FaultyBackend final : public Backend {
 public:
  FaultyBackend(std::unique_ptr<Backend> inner, std::shared_ptr<FaultPlan> plan)
      : inner_(std::move(inner)), plan_(std::move(plan)) {}

  Result<Attempt> TryAcquire(const LeaseRequest& request) override;
  // The inner store's acquisition, with the plan's acquire faults on Try.
  std::unique_ptr<Acquisition> Begin(const LeaseRequest& request) override;
  Status Release(std::string_view key, const OwnerId& owner) override;
  std::vector<Status> Renew(std::span<const LeaseRequest> leases) override;
  std::vector<Status> KeepPlaces(std::span<const LeaseRequest> waiters) override;
  bool KeepsPlaces() const override { return inner_->KeepsPlaces(); }
  bool NoticesLapsedPlaces() const override { return inner_->NoticesLapsedPlaces(); }
  Result<std::vector<HolderInfo>> List(std::string_view prefix) override {
    return inner_->List(prefix);
  }
  bool WaitForRelease(std::string_view key, TimePoint until,
                      std::stop_token stop) override {
    return inner_->WaitForRelease(key, until, stop);
  }
  std::uint64_t NotifyOnRelease(const LeaseRequest& request,
                                std::function<void()> wake) override {
    return inner_->NotifyOnRelease(request, std::move(wake));
  }
  void StopNotifyOnRelease(std::uint64_t handle) override {
    inner_->StopNotifyOnRelease(handle);
  }
  std::string Describe() const override { return inner_->Describe(); }
  Status Ping() override { return inner_->Ping(); }
  bool SupportsLockDelay() const override { return inner_->SupportsLockDelay(); }
  bool SupportsSharing() const override { return inner_->SupportsSharing(); }
  bool OrdersTokens() const override { return inner_->OrdersTokens(); }
  Result<std::vector<WaiterInfo>> Waiters(std::string_view prefix) override {
    return inner_->Waiters(prefix);
  }
  Result<bool> IsDone(std::string_view key) override { return inner_->IsDone(key); }
  Status MarkDone(std::string_view key, const OwnerId& owner,
                  std::chrono::milliseconds keep) override {
    return inner_->MarkDone(key, owner, keep);
  }
  Status RecordBreak(const BreakRecord& record, std::chrono::milliseconds keep) override {
    {
      std::lock_guard l(plan_->mu);
      if (plan_->record_error) return *plan_->record_error;
    }
    return inner_->RecordBreak(record, keep);
  }
  Result<std::vector<BreakRecord>> Breaks(std::string_view prefix) override {
    return inner_->Breaks(prefix);
  }
  Result<std::uint64_t> StoredObjects(std::string_view prefix) override {
    return inner_->StoredObjects(prefix);
  }
  std::optional<SessionLiveness> Liveness() override { return inner_->Liveness(); }

 private:
  std::unique_ptr<Backend> inner_;
  std::shared_ptr<FaultPlan> plan_;
};

}  // namespace dlock::testing

#endif  // DLOCK_TESTING_FAULTY_BACKEND_H_
