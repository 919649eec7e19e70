// `dlock exec --metrics-file PATH`: what one run did — waited, held, token,
// outcome — in the format of node_exporter's textfile collector, so that a
// cron job under a lock can be watched like any other.
#ifndef DLOCK_SRC_CLI_EXEC_METRICS_H_
#define DLOCK_SRC_CLI_EXEC_METRICS_H_

#include <optional>
#include <string>

#include "dlock/clock.h"
#include "dlock/status.h"
#include "dlock/types.h"

namespace dlock::cli {

// Filled in as the run goes.
struct ExecRecord {
  std::string key;
  TimePoint started = MonotonicClock::now();
  std::optional<TimePoint> granted;   // the lease (every key) was granted
  std::optional<TimePoint> released;  // ... and given back
  std::optional<FencingToken> token;  // the key's token, when ordered
  bool command_ran = false;
  bool lease_lost = false;  // exit 79 was dlock's, not the command's
  bool done_not_recorded = false;  // `once`: ran, but could not be marked done
};

// Before anything is acquired: PATH's directory must exist and be writable,
// and PATH must not be a directory. kInvalidArgument naming what is wrong.
Status CheckMetricsFile(const std::string& path);

// Replaces PATH atomically (a temporary file in its directory, renamed over
// it), so the collector never reads half a file. `exit_code` is dlock's.
Status WriteMetricsFile(const std::string& path, const ExecRecord& record, int exit_code);

}  // namespace dlock::cli

#endif  // DLOCK_SRC_CLI_EXEC_METRICS_H_
