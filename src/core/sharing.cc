#include "dlock/sharing.h"

namespace dlock {
namespace {

std::uint32_t Smallest(std::span<const std::uint32_t> limits, std::uint32_t start) {
  for (std::uint32_t l : limits) start = std::min(start, l);
  return start;
}

}  // namespace

QueueDecision DecideQueue(std::span<const std::uint32_t> ahead,
                          std::span<const std::uint32_t> delayed, std::uint32_t limit) {
  using Outcome = QueueDecision::Outcome;
  const std::uint32_t smallest_ahead = Smallest(ahead, limit);
  if (Admits(ahead.size() + delayed.size(), Smallest(delayed, smallest_ahead), limit)) {
    return {Outcome::kGranted};
  }
  if (Admits(ahead.size(), smallest_ahead, limit)) return {Outcome::kWaitForDelays};
  // A writer waits for its predecessor. A reader or a permit waits for the
  // nearest writer ahead (it will share with the others); with no writer
  // ahead, any one leaving may be enough.
  if (limit == 1) return {Outcome::kWatchOne, ahead.size() - 1};
  for (std::size_t i = ahead.size(); i-- > 0;) {
    if (ahead[i] == 1) return {Outcome::kWatchOne, i};
  }
  return {Outcome::kWatchAll};
}

}  // namespace dlock
