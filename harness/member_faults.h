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
//   leader-lag-kill (leader-follower stores) the followers held back, so
//                   that the leader's writes are not replicated; at the
//                   fault's end the leader is killed and the followers let
//                   go: a failover that loses what was granted meanwhile.
//                   The old leader is started again after as long again.
//
// Each lasts 0.5-3 x max(ttl, 1 s): long enough, at the top, for the
// members to notice and elect (ZooKeeper: syncLimit x tickTime = 2 s in
// scripts/servers/zookeeper.sh). Their events (worker -1, value = member):
// isolate/rejoin, member-pause/member-resume, member-kill/member-restart,
// member-hold-back/member-resume (then member-kill-unreplicated, not a
// fault of its own, and member-restart).
#ifndef DLOCK_HARNESS_MEMBER_FAULTS_H_
#define DLOCK_HARNESS_MEMBER_FAULTS_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <stop_token>
#include <thread>
#include <string>
#include <string_view>
#include <vector>

#include "dlock/status.h"
#include "harness/linked_cluster.h"

namespace dlock::harness {

inline constexpr const char* kMemberFaultKinds[] = {"member-isolate", "leader-isolate",
                                                    "leader-pause", "leader-kill",
                                                    "leader-lag-kill"};
bool IsMemberFault(std::string_view kind);

class MemberFaults {
 public:
  // Records one nemesis event: op, member, planned length, a note. Called
  // from the faults' own thread.
  using Recorder =
      std::function<void(const std::string&, int, std::int64_t, const std::string&)>;
  MemberFaults(LinkedCluster& cluster, Recorder record);
  ~MemberFaults();  // ends every fault
  MemberFaults(const MemberFaults&) = delete;
  MemberFaults& operator=(const MemberFaults&) = delete;

  // Starts `kind` soon, for length_factor x max(ttl, 1 s) from when it is
  // in place, on the faults' own thread: finding the leader and running the
  // store's script take a while, and the run must not wait (a holder kept
  // waiting past its ttl would be a pause, not this fault). `holder_member`
  // is the member the holder's client talks to. False, and nothing done,
  // while another member fault is on: two would take the quorum away.
  bool TryStart(std::string_view kind, double length_factor, std::chrono::milliseconds ttl,
                int holder_member);
  // Ends the faults that are due (on the faults' thread).
  void EndDue(std::int64_t now_ns);
  // When the next fault ends; INT64_MAX if none is on.
  std::int64_t NextEnd() const;
  // Ends every fault and waits until that is done: the end of a run.
  void EndAll();

 private:
  struct Active {
    std::string end_op;  // rejoin, member-resume, member-restart, kill-leader
    int member = 0;
    std::int64_t until_ns = 0;
    int held = 0;               // kill-leader: the follower held back
    std::int64_t length_ns = 0;  // kill-leader: how long the leader stays down
  };
  Status Start(const std::string& kind, double length_factor, std::chrono::milliseconds ttl,
               int holder_member);
  // `last`: the run is ending; a fault's second act (a kill) is not begun.
  Status End(const Active& fault, bool last);
  Status KillLeader(const Active& fault, bool last);
  void Post(std::function<Status()> task);  // runs it on the thread
  void Loop(std::stop_token stop);

  LinkedCluster& cluster_;
  Recorder record_;
  mutable std::mutex mu_;
  std::condition_variable_any wake_;
  std::deque<std::function<Status()>> tasks_;  // guarded by mu_
  std::vector<Active> active_;                 // guarded by mu_
  bool starting_ = false;                      // a TryStart not yet in place; mu_
  bool working_ = false;                       // the thread runs a task; mu_
  std::jthread thread_;
};

}  // namespace dlock::harness

#endif  // DLOCK_HARNESS_MEMBER_FAULTS_H_
