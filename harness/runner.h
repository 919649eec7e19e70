// One chaos run: start the workers, inject the scheduled faults, collect the
// history, check it.
//
// The fault schedule is a pure function of the seed (kinds, planned times,
// pause lengths, targets, clock offsets), so --seed replays it; which worker
// is inside its critical section when a fault comes due depends on timing,
// as in any real test of a distributed system.
#ifndef DLOCK_HARNESS_RUNNER_H_
#define DLOCK_HARNESS_RUNNER_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "dlock/status.h"
#include "harness/checkers.h"
#include "harness/history.h"

namespace dlock::harness {

// pause: SIGSTOP a holder inside its critical section for 0.5-3x the TTL.
// kill: SIGKILL a holder inside its critical section; a new process replaces it.
// clock-step: step one worker's wall clock by minutes to hours (libfaketime).
inline constexpr const char* kFaultKinds[] = {"pause", "kill", "clock-step"};

struct PlannedFault {
  std::chrono::milliseconds at{0};  // after the run's start
  std::string kind;
  double ttl_factor = 0;            // pause length in TTLs
  int target = 0;                   // clock-step: which worker
  std::int64_t clock_offset_s = 0;  // clock-step
};

struct RunOptions {
  std::string backend;  // empty: a fresh SQLite store in the run directory
  bool fenced = true;
  std::vector<std::string> faults;
  std::chrono::milliseconds duration{10'000};
  std::chrono::milliseconds ttl{500};
  std::uint64_t seed = 1;
  int workers = 4;
  std::string dir;  // the run's files: history.jsonl, faults.log, resource.db
  std::string key = "chaos/counter";
  std::string self_exe = "/proc/self/exe";  // runs `dlock chaos-worker`
};

std::vector<PlannedFault> PlanFaults(const RunOptions& options);

struct RunResult {
  History history;
  std::vector<CheckResult> checks;
  HistoryCounts counts;
  int violations = 0;          // safety checkers
  int recovery_failures = 0;   // checker f
  std::string dir;
};

Result<RunResult> RunOnce(const RunOptions& options);

}  // namespace dlock::harness

#endif  // DLOCK_HARNESS_RUNNER_H_
