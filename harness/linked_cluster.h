// A replicated store (a ZooKeeper ensemble, an etcd cluster) whose members
// reach each other only through fault proxies, so that a chaos run can cut
// one member off from the others while its own clients still reach it: the
// minority side of a partition.
//
// The store's script starts and stops it: `<script> configure-linked DIR`
// writes the members' configuration and DIR/links ("FROM TO LISTEN TARGET"
// per link), the proxies are put on those ports, then `<script> launch DIR`
// starts the members. Member faults use the script's verbs too: leader,
// pause, resume, kill, restart, port, member-id.
//
// A link is one direction between two members (ZooKeeper: each member's
// configuration names its own ports for the others), or, with FROM 0, every
// member's way into member TO (etcd: one advertised peer URL per member);
// such a proxy tells the members apart by the X-Server-From header etcd
// puts on every peer request, and cuts only the isolated member's.
//
// A leader-follower store (Redis with Sentinel, or a Redis Cluster, whose
// "leader" is the primary serving the run's key: DIR/key) has no links: its
// script writes DIR/members instead, and has two more verbs: `hold-back DIR`,
// which keeps the followers from replicating what the leader writes next
// (leader-lag-kill), and `settle DIR`, which Heal runs between runs: until
// every follower follows the current leader, in sync.
//
// Thread-compatible: one thread (the chaos run's) uses it.
#ifndef DLOCK_HARNESS_LINKED_CLUSTER_H_
#define DLOCK_HARNESS_LINKED_CLUSTER_H_

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "dlock/status.h"
#include "harness/proxy.h"

namespace dlock::harness {

class LinkedCluster {
 public:
  // Starts the store with `script` in `dir` (created; removed by the
  // destructor, which stops the members). `check`, if given, sees the
  // cluster configured, its links known, before any member starts: what it
  // refuses costs no start-up.
  using Check = std::function<Status(const LinkedCluster&)>;
  static Result<std::unique_ptr<LinkedCluster>> Start(const std::string& script,
                                                      const std::string& dir,
                                                      const Check& check = {});
  ~LinkedCluster();
  LinkedCluster(const LinkedCluster&) = delete;
  LinkedCluster& operator=(const LinkedCluster&) = delete;

  const std::string& uri() const { return uri_; }  // every member
  int members() const { return members_; }         // numbered 1..members()
  bool has_links() const { return !links_.empty(); }  // a quorum store's
  // Member n's client port (its own, not through a proxy).
  Result<int> ClientPort(int member) const;
  Result<int> Leader() const;

  // Cuts every link to and from `member` (bytes wait, connections stay
  // open, as in a partition); Rejoin restores them.
  void Isolate(int member);
  void Rejoin(int member);
  Status Pause(int member);
  Status Resume(int member);
  Status Kill(int member);
  Status Restart(int member);  // after Kill; waits until it serves
  // Keeps the followers from replicating the leader's next writes; the
  // member held back (resumed by Resume or Heal).
  Result<int> HoldBack();
  // Every member joined, running and serving: between runs.
  Status Heal();
  // The key the run's workers lock, in DIR/key: on a sharded store (Redis
  // Cluster) the leader is the member serving it.
  Status SetKey(const std::string& key);
  // Copies the members' logs and the script's own (every *.log under the
  // cluster's directory, and its .log beside it) into `dest`: a kept run
  // then shows what the store did.
  Status CopyLogsTo(const std::string& dest) const;

 private:
  struct Link {
    int from = 0, to = 0;  // from 0: any member, told apart by member id
    std::unique_ptr<FaultProxy> proxy;
  };
  // The links `member` sends or receives on, cut (or not).
  void CutLinks(int member, bool cut);
  LinkedCluster(std::string script, std::string dir) : script_(std::move(script)), dir_(std::move(dir)) {}
  Status Script(std::vector<std::string> args, std::string* out = nullptr) const;
  Status ReadLinks();

  std::string script_, dir_, uri_;
  int members_ = 0;
  std::vector<Link> links_;
  std::vector<std::string> ids_;  // member n's id is ids_[n - 1], for FROM 0 links
  std::set<int> isolated_, paused_, killed_;
};

}  // namespace dlock::harness

#endif  // DLOCK_HARNESS_LINKED_CLUSTER_H_
