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
#include "harness/linked_cluster.h"

namespace dlock::harness {

// Inside a holder's critical section:
//   pause       SIGSTOP it for 0.5-3x the TTL
//   kill        SIGKILL it; a new process replaces it
//   partition   cut it off from the store for 0.5-3x the TTL while it works
//               on (network stores: through its fault proxy)
// At any time:
//   clock-step  step one worker's wall clock by minutes to hours (libfaketime)
//   delay       delay one worker's store traffic by ttl/4..ttl for 2 TTLs
//   drop        reset one worker's store connections
//   store-restart  restart the store server (scripts/servers/<store>.sh restart)
// Inside the store (a LinkedCluster; harness/member_faults.h):
//   member-isolate, leader-isolate, leader-pause, leader-kill
inline constexpr const char* kFaultKinds[] = {
    "pause",          "kill",           "partition",    "clock-step",  "delay", "drop",
    "store-restart",  "member-isolate", "leader-isolate", "leader-pause", "leader-kill",
    "leader-lag-kill"};
// Faults that need a network store behind a proxy, or a server script.
bool NeedsProxy(std::string_view kind);
bool InCriticalSection(std::string_view kind);

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
  // store-restart: `<server_script> restart <server_dir>`.
  std::string server_script;
  std::string server_dir;
  // Member faults: the cluster the run plays them on (backend is its URI).
  // Worker i talks to member i % members + 1 only, through its proxy.
  LinkedCluster* cluster = nullptr;
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

// Asks the run in progress to end now, as at the end of its time: callable
// from a signal handler (SIGINT, SIGTERM), so that the workers are stopped
// and a cluster the run uses is taken down, not left running.
void RequestStop();
bool StopRequested();

}  // namespace dlock::harness

#endif  // DLOCK_HARNESS_RUNNER_H_
