// What a lock on one key costs, computed: the arithmetic behind `dlock plan`.
//
// A lock serialises everything touching its key, so one key serves at most
// 1 / (hold + coordination) operations per second, however many servers ask.
// Plan() takes a workload (rate, peak, hold, hottest key's share, lease, store
// round trip) and returns every figure a capacity review needs: the ceiling,
// the hot key's utilisation, Little's-law concurrency, queueing delay (M/M/1,
// see plan.cc), growth headroom, the cost of a holder crash at this lease and
// at a shorter one, a verdict, the remedies that apply, and which mechanism
// the operation's idempotency calls for.
//
// Pure functions, no I/O, no clock: safe from any thread.
#ifndef DLOCK_SRC_PLAN_PLAN_H_
#define DLOCK_SRC_PLAN_PLAN_H_

#include <chrono>
#include <optional>
#include <string_view>
#include <vector>

#include "dlock/status.h"

namespace dlock::plan {

// A span of time as a real number of seconds: queueing delays and drain times
// are rarely whole microseconds.
using Seconds = std::chrono::duration<double>;

// Acquire and Release are one store round trip each; see PlanInput::rtt.
inline constexpr int kCoordinationRoundTrips = 2;

// The default round trip for one lock operation: a leader hop plus a quorum
// replication hop at 0.5 ms each, as in a datacenter consensus store. With
// two of them per operation this gives the 20% overhead on a 10 ms hold that
// the source text quotes.
inline constexpr std::chrono::nanoseconds kDefaultRtt = std::chrono::milliseconds(1);

inline constexpr std::chrono::microseconds kDefaultLease = std::chrono::seconds(30);

// Above this utilisation a key is failing even though it is not saturated:
// the M/M/1 p99 wait is already ln(80)/0.2 ≈ 22 service times and doubles
// again by 90%. "Holds" means at or under it.
inline constexpr double kUtilisationLimit = 0.8;

struct PlanInput {
  double rate_per_s = 0;              // average operations per second, all keys together
  double peak_factor = 1;             // peak rate / average rate, >= 1
  std::chrono::microseconds hold{0};  // the critical section, > 0
  double hot_share = 1;               // the hottest key's share of all operations, (0, 1]
  std::chrono::microseconds lease = kDefaultLease;  // > 0
  // One lock operation's round trip to the store as the client sees it
  // (replication included), >= 0. Zero prices the critical section alone,
  // as the source text's worked answers do. Nanoseconds: an embedded store's
  // round trip, as `dlock bench` measures it, can be under a microsecond.
  std::chrono::nanoseconds rtt = kDefaultRtt;
  std::optional<bool> idempotent;  // unset: no mechanism is recommended
};

enum class Verdict {
  kHolds,                     // under kUtilisationLimit even at twice the peak
  kHoldsFailsBeforeDoubling,  // under the limit now, over it before 2× growth
  kFailsAtP99,                // not saturated, but over the limit now
  kSaturated,                 // hot-key demand >= ceiling: the queue never drains
};

enum class Remedy {
  kShrinkCriticalSection,
  kSplitKey,
  kAtomicOperation,    // INCR, a conditional update on a version column
  kCutCoordination,    // coordination is a large share of the hold
  kFenceAndTuneLease,  // a long lease: let a fencing token carry safety
};

enum class Mechanism {
  kExistingStoreLock,  // idempotent: the cheapest lock already run, e.g. a row
  kFencingOrDedup,     // not idempotent: a fencing token or a deduplication key
};

// What one holder crash costs on the hot key: the key stays blocked for the
// whole lease, arrivals queue, and the queue drains only at the slack.
struct CrashCost {
  std::chrono::microseconds lease{0};
  double backlog_ops = 0;             // hot-key rate × lease
  std::optional<Seconds> drain_s;     // backlog / slack; unset when saturated
  std::optional<Seconds> degraded_s;  // lease + drain; unset when saturated
};

struct PlanReport {
  double avg_rate_per_s = 0;
  double peak_rate_per_s = 0;
  double hold_ceiling_ops_per_s = 0;       // 1 / hold: the critical section alone
  Seconds coordination_overhead_s{0};      // kCoordinationRoundTrips × rtt
  double coordination_overhead_share = 0;  // overhead / hold
  Seconds service_s{0};                    // hold + overhead: one operation's time on the key
  double ceiling_ops_per_s = 0;            // 1 / service
  double hot_key_rate_per_s = 0;           // hot share × peak
  double utilisation = 0;                  // hot-key rate / ceiling; >= 1 is saturated
  bool saturated = false;
  double slack_ops_per_s = 0;  // ceiling − hot-key rate; <= 0 when saturated
  double concurrency = 0;      // Little's law: rate × service, in the lock
  // Little's law over the queue as well: rate × (wait + service). The queue
  // figures are unset when saturated: they grow without bound.
  std::optional<double> concurrency_with_queue;
  std::optional<Seconds> queue_wait_mean_s;
  std::optional<Seconds> queue_wait_p99_s;
  double growth_headroom_factor = 0;       // peak growth before kUtilisationLimit
  double saturation_headroom_factor = 0;   // peak growth before saturation
  CrashCost crash;                         // at the input lease
  CrashCost comparison_crash;              // at ComparisonLease(lease)
  std::optional<double> crash_cost_ratio;  // crash / comparison degraded time
  Verdict verdict = Verdict::kHolds;
  std::vector<Remedy> remedies;
  std::optional<Mechanism> mechanism;
};

// kInvalidArgument (naming the input) for a rate that is not positive and
// finite, a peak below 1, a hold that is not positive, a hot share outside
// (0, 1], a lease that is not positive, or a negative rtt. A saturated key is
// a report, not an error.
Result<PlanReport> Plan(const PlanInput& input);

// The shorter lease a crash is compared against: 30 s when the lease is
// longer, else a tenth of it.
std::chrono::microseconds ComparisonLease(std::chrono::microseconds lease);

// A rate as people write it: a positive decimal number, an optional k, M or G
// multiplier, and an optional per-unit (s, sec, min, h, hour, d, day; per
// second when absent): "12", "12/s", "500/min", "3.5k/h", "1M/day".
// Returns operations per second.
Result<double> ParseRate(std::string_view text);

// Like core/duration.h's ParseDuration, but to the microsecond, for round
// trips and short critical sections: "200us", "0.5ms", "40ms", "30s", "5m".
Result<std::chrono::microseconds> ParseFineDuration(std::string_view text);

// Stable identifiers for --json: "holds_now_fails_before_doubling", ...
std::string_view VerdictName(Verdict verdict);
std::string_view RemedyName(Remedy remedy);
std::string_view MechanismName(Mechanism mechanism);

// One sentence each, for people.
std::string_view VerdictText(Verdict verdict);
std::string_view RemedyText(Remedy remedy);
std::string_view MechanismText(Mechanism mechanism);

}  // namespace dlock::plan

#endif  // DLOCK_SRC_PLAN_PLAN_H_
