// Durations as people type them: "250ms", "30s", "1.5s", "5m", "1h", "30d".
#ifndef DLOCK_SRC_CORE_DURATION_H_
#define DLOCK_SRC_CORE_DURATION_H_

#include <chrono>
#include <string>
#include <string_view>

#include "dlock/status.h"

namespace dlock::internal {

// The longest duration ParseDuration accepts: a year (kMaxWait). Any
// longer, a deadline counted from now could overflow a clock's time point.
inline constexpr std::chrono::milliseconds kMaxDuration = std::chrono::hours(8760);

// A non-negative decimal number followed by ms, s, m, h or d, with a whole
// number of milliseconds, at most kMaxDuration. kInvalidArgument otherwise,
// with a message that quotes `text` and says what is accepted.
Result<std::chrono::milliseconds> ParseDuration(std::string_view text);

// 1500ms -> "1.5s", 250ms -> "250ms", 300000ms -> "5m".
std::string FormatDuration(std::chrono::milliseconds d);

}  // namespace dlock::internal

#endif  // DLOCK_SRC_CORE_DURATION_H_
