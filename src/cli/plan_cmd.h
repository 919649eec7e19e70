// `dlock plan`: what a lock on one key costs, as sentences or --json. The
// arithmetic is src/plan/plan.h; this file parses flags and prints.
#ifndef DLOCK_SRC_CLI_PLAN_CMD_H_
#define DLOCK_SRC_CLI_PLAN_CMD_H_

#include <string>

namespace dlock::cli {

struct PlanFlags {
  std::string rate;      // "12/s", "1M/day"; required
  double peak = 1;       // peak / average
  std::string hold;      // "40ms"; required
  double hot_share = 1;  // (0, 1]
  std::string lease = "30s";
  std::string rtt;  // empty: from --from-bench, else the default
  // A `dlock bench --json` result: the number field "floor_rtt_us" (one lock
  // operation's raw round trip to the store, microseconds) becomes the rtt.
  std::string from_bench;
  std::string idempotent;  // "", "yes" or "no"
  bool json = false;
};

int RunPlan(const PlanFlags& flags);

}  // namespace dlock::cli

#endif  // DLOCK_SRC_CLI_PLAN_CMD_H_
