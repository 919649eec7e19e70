#include "core/acquire_step.h"

#include <algorithm>

#include "core/duration.h"

namespace dlock::internal {
namespace {

using std::chrono::milliseconds;

// Polling stores (SQLite) are asked again at most this long apart.
constexpr Duration kMaxPollInterval = milliseconds(50);

std::string KeyInQuotes(std::string_view key) { return "'" + std::string(key) + "'"; }

}  // namespace

AcquireProgress::AcquireProgress(std::string_view key, const AcquireOptions& options, bool wait,
                                 TimePoint deadline, PlaceKeeping keeping)
    : key_(key),
      wait_for_(options.wait),
      wait_(wait),
      deadline_(deadline),
      keeping_(keeping) {}

NextStep AcquireProgress::After(const Result<Attempt>& attempt, TimePoint now) {
  if (attempt.ok() && attempt->granted) return {NextStep::Kind::kGranted};
  // kUnavailable: the outcome is unknown; trying again with the same owner
  // re-grants a grant whose reply was lost. Any other error is final.
  if (!attempt.ok() && attempt.status().code() != StatusCode::kUnavailable) {
    return {NextStep::Kind::kFail, attempt.status()};
  }
  if (attempt.ok()) {
    last_answer_ = attempt->holder_ttl_remaining;
    if (wait_ && !held_since_) held_since_ = now;
  }
  if (now >= deadline_) return {NextStep::Kind::kFail, GaveUp(attempt)};
  const milliseconds holder_left = attempt.ok() ? attempt->holder_ttl_remaining : milliseconds(0);
  TimePoint until = deadline_;
  if (const std::optional<Duration> bound = PlaceBound(holder_left)) {
    until = std::min(until, now + *bound);
  }
  if (holder_left > milliseconds(0)) until = std::min(until, now + holder_left);
  return {NextStep::Kind::kWait, Status::Ok(), until, attempt.ok()};
}

std::optional<Duration> AcquireProgress::PlaceBound(milliseconds holder_left) const {
  // An attempt keeps the place unless the PlaceKeeper does.
  if (keeping_ == PlaceKeeping::kByAttempts) return kQueueTtl / 3;
  // Refused with no holder known: a place ahead blocks it. If that place's
  // waiter died, the place lapses within kQueueTtl, and not every store
  // tells of a lapse (only of a release), so look again by then.
  if (holder_left == milliseconds(0) && keeping_ == PlaceKeeping::kByKeeper) return kQueueTtl;
  return std::nullopt;  // the holder's lease end, or the store, bounds it
}

Status AcquireProgress::GaveUp(const Result<Attempt>& attempt) const {
  // A store that answered "held" during the wait was reachable: an attempt
  // cut short by the deadline does not make it "unavailable".
  if (!last_answer_) return attempt.status();
  const std::string left = *last_answer_ > milliseconds(0)
                               ? " (its lease has " + FormatDuration(*last_answer_) + " left)"
                               : "";
  Status gave_up =
      wait_ ? DeadlineExceededError("gave up waiting for key " + KeyInQuotes(key_) + " after " +
                                    FormatDuration(wait_for_) + ": still held by another owner" +
                                    left)
            : LockHeldError("key " + KeyInQuotes(key_) + " is held by another owner" + left);
  if (attempt.ok()) return gave_up;
  return Status(gave_up.code(),
                gave_up.message() + "; the last attempt had no answer: " + attempt.status().message());
}

Duration PollDelay(Duration& interval, std::uint64_t random) {
  // Jittered so that many waiters on one host neither spin nor march in
  // step; doubled up to the cap.
  const auto half = interval / 2;
  const Duration jittered =
      half + Duration(static_cast<Duration::rep>(random % static_cast<std::uint64_t>(half.count() + 1)));
  interval = std::min(interval * 2, kMaxPollInterval);
  return jittered;
}

}  // namespace dlock::internal
