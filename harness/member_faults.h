// Faults inside a replicated store, played on a LinkedCluster while a
// worker holds the key (so that a holder, its waiters and the hand-off are
// caught in them):
//
//   member-isolate  cut a follower off from the others (the holder's member
//                   when it follows): the minority side of a partition
//   leader-isolate  cut the leader off
//   leader-pause    SIGSTOP the leader
//   leader-kill     SIGKILL the leader while the holder releases; it is
//                   started again when the fault ends
//
// Each lasts 0.5-3 x max(ttl, 1 s): long enough, at the top, for the
// members to notice and elect (ZooKeeper: syncLimit x tickTime = 2 s in
// scripts/servers/zookeeper.sh). Their events (worker -1, value = member):
// isolate/rejoin, member-pause/member-resume, member-kill/member-restart.
#ifndef DLOCK_HARNESS_MEMBER_FAULTS_H_
#define DLOCK_HARNESS_MEMBER_FAULTS_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "dlock/status.h"
#include "harness/linked_cluster.h"

namespace dlock::harness {

inline constexpr const char* kMemberFaultKinds[] = {"member-isolate", "leader-isolate",
                                                    "leader-pause", "leader-kill"};
bool IsMemberFault(std::string_view kind);

class MemberFaults {
 public:
  // Records one nemesis event: op, member, planned length, a note.
  using Recorder =
      std::function<void(const std::string&, int, std::int64_t, const std::string&)>;
  MemberFaults(LinkedCluster& cluster, Recorder record)
      : cluster_(cluster), record_(std::move(record)) {}

  // Starts `kind` now, for length_factor x max(ttl, 1 s) from when it is in
  // place. `holder_member` is the member the holder's client talks to.
  Status Inject(std::string_view kind, double length_factor, std::chrono::milliseconds ttl,
                int holder_member);
  // Ends the faults that are due.
  Status EndDue(std::int64_t now_ns);
  // When the next fault ends; INT64_MAX if none is on.
  std::int64_t NextEnd() const;
  // Ends every fault now: the end of a run.
  Status EndAll();
  // One member fault at a time: two would take the quorum away.
  bool busy() const { return !active_.empty(); }

 private:
  struct Active {
    std::string end_op;  // rejoin, member-resume, member-restart
    int member = 0;
    std::int64_t until_ns = 0;
  };
  Status End(const Active& fault);

  LinkedCluster& cluster_;
  Recorder record_;
  std::vector<Active> active_;
};

}  // namespace dlock::harness

#endif  // DLOCK_HARNESS_MEMBER_FAULTS_H_
