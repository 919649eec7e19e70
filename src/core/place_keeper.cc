#include "core/place_keeper.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "core/async_driver.h"

namespace dlock::internal {

PlaceKeeper::PlaceKeeper(Backend& backend, AsyncDriver& driver, Clock& clock,
                         MetricsRecorder& metrics)
    : backend_(backend), driver_(driver), clock_(clock), metrics_(metrics) {}

std::uint64_t PlaceKeeper::Keep(const LeaseRequest& waiter, std::function<void()> lost) {
  std::uint64_t id = 0;
  bool arm = false;
  {
    std::lock_guard lock(mu_);
    id = next_id_++;
    entries_.emplace(id, Entry{waiter, std::move(lost)});
    arm = !std::exchange(ticking_, true);
  }
  if (arm) ArmTick();
  return id;
}

void PlaceKeeper::Forget(std::uint64_t id) {
  std::function<void()> dropped;  // destroyed outside the lock
  std::lock_guard lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  dropped = std::move(it->second.lost);
  entries_.erase(it);
}

void PlaceKeeper::ArmTick() {
  // A stopped driver drops the job: nothing ticks after the client closed.
  (void)driver_.At(clock_.Now() + kTick, [this] { Tick(); });
}

void PlaceKeeper::Tick() {
  bool send = false;
  {
    std::lock_guard lock(mu_);
    if (entries_.empty()) {
      ticking_ = false;  // the next Keep arms it again
      return;
    }
    // A tick that comes while the last one's calls are still at the store
    // (slower than kTick) does not overlap them: that one goes round again
    // when it is done, so no place waits a whole tick more.
    if (sending_) {
      behind_ = true;
    } else {
      send = sending_ = true;
    }
  }
  // The next tick is armed before this one's calls, so that it keeps to
  // the clock however long they take.
  ArmTick();
  if (!send) return;
  for (;;) {
    KeepAll();
    std::lock_guard lock(mu_);
    if (!std::exchange(behind_, false)) {
      sending_ = false;
      return;
    }
  }
}

void PlaceKeeper::KeepAll() {
  std::vector<std::uint64_t> ids;
  std::vector<LeaseRequest> waiters;
  {
    std::lock_guard lock(mu_);
    ids.reserve(entries_.size());
    waiters.reserve(entries_.size());
    for (const auto& [id, entry] : entries_) {
      ids.push_back(id);
      waiters.push_back(entry.waiter);
    }
  }
  for (std::size_t from = 0; from < ids.size(); from += kMaxBatch) {
    const std::size_t n = std::min(kMaxBatch, ids.size() - from);
    Send(std::span(ids).subspan(from, n), std::span(waiters).subspan(from, n));
  }
}

void PlaceKeeper::Send(std::span<const std::uint64_t> ids, std::span<const LeaseRequest> waiters) {
  const std::vector<Status> answers = backend_.KeepPlaces(waiters);
  std::vector<std::function<void()>> lost;
  Status failed;
  {
    std::lock_guard lock(mu_);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      // A missing answer is an unknown outcome, as kUnavailable is: if the
      // place lapsed meanwhile, the next tick says so.
      if (i >= answers.size()) break;
      if (answers[i].code() == StatusCode::kNotFound) {
        auto it = entries_.find(ids[i]);
        if (it != entries_.end()) lost.push_back(it->second.lost);
      } else if (!answers[i].ok() && failed.ok()) {
        failed = answers[i];
      }
    }
  }
  if (!failed.ok()) metrics_.StoreCall(failed);  // once a call, as one renewal call counts
  for (const auto& wake : lost) wake();
}

}  // namespace dlock::internal
