// Reentrant acquires (AcquireOptions::reentrant): more handles on one
// holding, counted, and the store asked only for the first and the last.
#include <algorithm>
#include <thread>

#include "core/client_core.h"

namespace dlock::internal {
namespace {

std::string ModeName(std::uint32_t limit) {
  if (limit == kSharedLimit) return "shared";
  if (limit == 1) return "exclusive";
  return "as a semaphore of " + std::to_string(limit);
}

}  // namespace

std::optional<Result<Lease>> ClientCore::Reenter(std::string_view key,
                                                 const AcquireOptions& options) {
  if (!options.reentrant) return std::nullopt;
  const std::uint32_t limit = options.shared ? kSharedLimit : options.permits;
  const std::thread::id me = std::this_thread::get_id();
  const TimePoint now = clock_->Now();
  std::lock_guard lock(mu_);
  for (const auto& state : held_) {
    // A holding past its valid_until is as good as lost: the store decides.
    if (!state->reentrant || state->thread != me || state->key != key ||
        state->phase != LeaseState::Phase::kHeld || now >= state->valid_until) {
      continue;
    }
    if (state->limit != limit) {
      return Result<Lease>(FailedPreconditionError(
          "key '" + std::string(key) + "' is held " + ModeName(state->limit) +
          " by this thread; a reentrant acquire must ask the same way, not " +
          ModeName(limit)));
    }
    ++state->holds;
    const std::uint64_t hold = ++state->last_hold;
    if (options.on_lost) state->on_lost.emplace_back(hold, options.on_lost);
    return Result<Lease>(Lease(shared_from_this(), state, hold));
  }
  return std::nullopt;
}

Status ClientCore::DropHoldLocked(LeaseState& state, std::uint64_t hold) {
  --state.holds;
  // Once lost, the loss notification may be reading the callbacks.
  if (state.phase == LeaseState::Phase::kHeld) {
    std::erase_if(state.on_lost, [&](const auto& entry) { return entry.first == hold; });
  }
  return CheckLocked(state);
}

std::uint32_t ClientCore::HoldCount(const LeaseState& state) const {
  std::lock_guard lock(mu_);
  return state.phase == LeaseState::Phase::kReleased ? 0 : state.holds;
}

}  // namespace dlock::internal
