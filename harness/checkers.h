// Checkers: what a chaos history must satisfy. Each one answers pass, fail
// (with the violating operations), or unknown — when the history holds
// nothing that could have failed it. Unknown is never reported as pass.
//
//   a  tokens admitted by the resource never go backwards (writes, log order)
//   b  no two admitted writes come from overlapping critical sections (each
//      write read the value the previous admitted write wrote)
//   c  every stale write was rejected (no write admitted after the resource
//      had seen a larger token)
//   d  a grant that began after another grant completed has a larger token
//   e  no lost update: the final counter equals the number of admitted writes
//   f  after each fault the key is granted again within ttl + a stated bound
//   g  each pause left the paused holder with a stale write that was
//      rejected, or says it tested nothing
//   h  no grant from a member cut off from the others: no worker whose
//      member was isolated both asked for and got the key while it was
//   i  after each member fault ends (rejoin, resume, restart), the key is
//      granted again within ttl + a stated bound
#ifndef DLOCK_HARNESS_CHECKERS_H_
#define DLOCK_HARNESS_CHECKERS_H_

#include <chrono>
#include <string>
#include <vector>

#include "harness/history.h"

namespace dlock::harness {

enum class Verdict { kPass, kFail, kUnknown };
std::string_view VerdictName(Verdict v);

struct CheckResult {
  std::string id;    // "a".."i"
  std::string name;
  Verdict verdict = Verdict::kUnknown;
  std::string detail;                   // one sentence: why this verdict
  std::vector<std::string> violations;  // for kFail
  bool safety = true;                   // false for liveness (f)
};

struct CheckOptions {
  // (f): the key must be granted again within ttl + this.
  std::chrono::milliseconds recovery_bound{1000};
  // (i): after a member fault, within ttl + this: the members notice the
  // change (ZooKeeper: syncLimit x tickTime, 2 s in our script) and elect
  // (under 1 s measured), and the old holder's session expires (ttl).
  std::chrono::milliseconds member_recovery_bound{5000};
};

std::vector<CheckResult> RunCheckers(const History& history, const CheckOptions& options);

// Counts over a history, for summaries.
struct HistoryCounts {
  int operations = 0;             // completed acquire-read-write cycles attempted (write invokes)
  int grants = 0;
  int writes_admitted = 0;
  int stale_writes_rejected = 0;
  int faults = 0;
  std::vector<std::pair<std::string, int>> faults_by_kind;
};
HistoryCounts Count(const History& history);

}  // namespace dlock::harness

#endif  // DLOCK_HARNESS_CHECKERS_H_
