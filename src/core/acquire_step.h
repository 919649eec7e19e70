// What one attempt of an acquisition means, and what comes next: the rule
// the blocking loop (ClientCore::AcquireTimed) and the asynchronous one
// (async_acquire.cc) both follow, so that they cannot drift apart.
//
// After each Try the caller asks After(): a grant ends the acquisition; an
// error that retrying cannot mend, or a deadline that passed, ends it with
// that error (after Abandon); otherwise it waits until `until` at the
// latest — on the store's notification when the store answered, else by
// polling with the backoff PollDelay gives. `until` is the earliest of the
// deadline, the end of the holder's lease as the store reported it (an
// expiry writes nothing, so no notification says it), and — unless the
// client keeps the place by other means (PlaceKeeper) — a third of
// kQueueTtl, by when an attempt must refresh the waiter's queue place. A
// kept place refused with no holder named looks again within kQueueTtl,
// unless the store notices the lapse of a place ahead
// (Backend::NoticesLapsedPlaces).
#ifndef DLOCK_SRC_CORE_ACQUIRE_STEP_H_
#define DLOCK_SRC_CORE_ACQUIRE_STEP_H_

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "dlock/backend.h"
#include "dlock/client.h"
#include "dlock/clock.h"
#include "dlock/status.h"

namespace dlock::internal {

// How long a queueing backend keeps a waiter's place between its attempts
// (or Backend::KeepPlaces calls); whichever keeps it does so at least every
// third of it.
inline constexpr std::chrono::milliseconds kQueueTtl{3000};

struct NextStep {
  enum class Kind { kGranted, kFail, kWait };
  Kind kind = Kind::kWait;
  Status failure;  // kFail: what the acquire returns (Abandon first)
  TimePoint until{};  // kWait: attempt again by then at the latest
  // kWait: the store answered, so its notification may end the wait early;
  // false: the attempt had no answer, so only polling may.
  bool store_answered = false;
};

// Who keeps a waiter's queue place between its attempts.
enum class PlaceKeeping {
  kByAttempts,  // its own attempts, every third of kQueueTtl
  kByKeeper,    // the client's PlaceKeeper: no attempt is due for it
  // The PlaceKeeper, on a store that also tells a waiter when a place
  // ahead of it ends (Backend::NoticesLapsedPlaces).
  kByKeeperLapsesNoticed,
};

class AcquireProgress {
 public:
  // `wait`: Acquire (true) or TryAcquire (false); `deadline` ends waiting.
  AcquireProgress(std::string_view key, const AcquireOptions& options, bool wait,
                  TimePoint deadline, PlaceKeeping keeping = PlaceKeeping::kByAttempts);

  // What `attempt`, answered at `now`, means.
  NextStep After(const Result<Attempt>& attempt, TimePoint now);

  // When the key was first found held (for the wait metrics), if ever.
  const std::optional<TimePoint>& held_since() const { return held_since_; }

 private:
  Status GaveUp(const Result<Attempt>& attempt) const;
  // How long a waiting attempt may rest for its queue place's sake.
  std::optional<Duration> PlaceBound(std::chrono::milliseconds holder_left) const;

  std::string key_;
  std::chrono::milliseconds wait_for_;
  bool wait_;
  TimePoint deadline_;
  PlaceKeeping keeping_;
  std::optional<TimePoint> held_since_;
  // The holder's time left when the store last answered: set once the store
  // was reachable at all during this acquisition.
  std::optional<std::chrono::milliseconds> last_answer_;
};

// Capped, jittered, exponential polling for a store that cannot notify:
// the delay before the next attempt, from `interval`, which it doubles up
// to the cap. `random` is one draw of the client's Random.
Duration PollDelay(Duration& interval, std::uint64_t random);
inline constexpr Duration kFirstPollInterval = std::chrono::milliseconds(1);

}  // namespace dlock::internal

#endif  // DLOCK_SRC_CORE_ACQUIRE_STEP_H_
