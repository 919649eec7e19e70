#include "core/duration.h"

#include <cstdint>
#include <limits>

namespace dlock::internal {

Result<std::chrono::milliseconds> ParseDuration(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return InvalidArgumentError("invalid duration '" + std::string(text) + "' (" +
                                std::string(why) +
                                "): expected a number and a unit, ms, s, m, h or d, "
                                "e.g. 250ms, 30s, 1.5s, 5m, 1h");
  };
  std::size_t i = 0;
  std::uint64_t whole = 0;
  std::uint64_t frac = 0, frac_scale = 1;
  bool digits = false;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    digits = true;
    if (whole > 1'000'000'000ULL) return bad("too large");
    whole = whole * 10 + static_cast<std::uint64_t>(text[i] - '0');
  }
  if (i < text.size() && text[i] == '.') {
    ++i;
    for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
      digits = true;
      if (frac_scale >= 1'000'000'000ULL) return bad("too many decimals");
      frac = frac * 10 + static_cast<std::uint64_t>(text[i] - '0');
      frac_scale *= 10;
    }
  }
  if (!digits) {
    if (!text.empty() && text[0] == '-') return bad("negative");
    return bad("no number");
  }
  std::string_view unit = text.substr(i);
  std::uint64_t unit_ms;
  if (unit == "ms") unit_ms = 1;
  else if (unit == "s") unit_ms = 1000;
  else if (unit == "m") unit_ms = 60'000;
  else if (unit == "h") unit_ms = 3'600'000;
  else if (unit == "d") unit_ms = 86'400'000;
  else if (unit.empty()) return bad("no unit");
  else return bad("unknown unit '" + std::string(unit) + "'");
  // frac / frac_scale * unit_ms must be a whole number of milliseconds.
  std::uint64_t frac_ms_num = frac * unit_ms;
  if (frac_ms_num % frac_scale != 0) return bad("finer than a millisecond");
  // `whole` has at most 10 digits, so this cannot overflow.
  const std::uint64_t ms = whole * unit_ms + frac_ms_num / frac_scale;
  if (ms > static_cast<std::uint64_t>(kMaxDuration.count())) {
    return bad("longer than the maximum, 8760h (a year)");
  }
  return std::chrono::milliseconds(static_cast<std::int64_t>(ms));
}

std::string FormatDuration(std::chrono::milliseconds d) {
  std::int64_t ms = d.count();
  std::string sign = ms < 0 ? "-" : "";
  if (ms < 0) ms = -ms;
  auto with_unit = [&](std::int64_t per, const char* unit) {
    std::string s = sign + std::to_string(ms / per);
    std::int64_t rest = ms % per;
    if (rest != 0) {
      // Up to three decimals, trailing zeros trimmed.
      std::string f = std::to_string(rest * 1000 / per + 1000).substr(1);
      while (!f.empty() && f.back() == '0') f.pop_back();
      if (!f.empty()) s += "." + f;
    }
    return s + unit;
  };
  if (ms < 1000) return sign + std::to_string(ms) + "ms";
  if (ms % 60'000 != 0) return with_unit(1000, "s");
  if (ms % 3'600'000 != 0) return with_unit(60'000, "m");
  return with_unit(3'600'000, "h");
}

}  // namespace dlock::internal
