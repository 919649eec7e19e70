#include "cli/break_view.h"

#include <time.h>

#include <cstdio>

#include "cli/text.h"

namespace dlock::cli {

std::string UtcTime(std::int64_t unix_ms) {
  const std::int64_t seconds = unix_ms >= 0 ? unix_ms / 1000 : (unix_ms - 999) / 1000;
  const time_t t = static_cast<time_t>(seconds);
  tm utc{};
  if (gmtime_r(&t, &utc) == nullptr) return std::to_string(unix_ms) + " ms";
  char text[96];  // room for any int in each field, as the compiler checks
  std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                static_cast<int>(unix_ms - seconds * 1000));
  return text;
}

nlohmann::json BreaksJson(const std::vector<BreakRecord>& records) {
  nlohmann::json out = nlohmann::json::array();
  for (const BreakRecord& r : records) {
    out.push_back({{"key", r.key},
                   {"at", UtcTime(r.at_unix_ms)},
                   {"at_unix_ms", r.at_unix_ms},
                   {"owner", r.owner.ToString()},
                   {"token", r.token},
                   {"label", r.label},
                   {"by", r.by},
                   {"break_token", r.break_token}});
  }
  return out;
}

void WriteBreaks(std::ostream& out, const std::vector<BreakRecord>& records,
                 const std::string& prefix, const std::string& store) {
  const std::string under = prefix.empty() ? "" : " under '" + Printable(prefix) + "'";
  if (records.empty()) {
    out << "no breaks recorded" << under << " in " << store << '\n';
    return;
  }
  for (const BreakRecord& r : records) {
    out << UtcTime(r.at_unix_ms) << "  '" << Printable(r.key) << "' broken by "
        << (r.by.empty() ? "(unnamed)" : Printable(r.by)) << ": evicted owner "
        << r.owner.ToString() << " (token " << r.token;
    if (!r.label.empty()) out << ", " << Printable(r.label);
    out << ")";
    if (r.break_token != 0) out << ", fenced from token " << r.break_token;
    out << '\n';
  }
}

}  // namespace dlock::cli
