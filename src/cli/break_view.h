// What `dlock status --breaks` shows: the break records a store keeps
// (BreakRecord), as text for people or as JSON.
#ifndef DLOCK_SRC_CLI_BREAK_VIEW_H_
#define DLOCK_SRC_CLI_BREAK_VIEW_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dlock/types.h"

namespace dlock::cli {

// "2026-12-04T19:30:01.250Z": Unix milliseconds as UTC, for records that
// outlive the host's time zone.
std::string UtcTime(std::int64_t unix_ms);

// [{"key", "at" (UTC text), "at_unix_ms", "owner", "token", "label", "by",
//   "break_token"}], in the store's order.
nlohmann::json BreaksJson(const std::vector<BreakRecord>& records);

// One line per record, oldest first within each key, or "no breaks
// recorded [under PREFIX] in STORE".
void WriteBreaks(std::ostream& out, const std::vector<BreakRecord>& records,
                 const std::string& prefix, const std::string& store);

}  // namespace dlock::cli

#endif  // DLOCK_SRC_CLI_BREAK_VIEW_H_
