// ClusterRouter: dlock's way around a Redis Cluster. It loads the slot map
// (CLUSTER SLOTS) from the seed nodes, keeps a small pool of connections to
// each primary, and runs each call on the primary of the call's slot:
//  - MOVED: the slot lives elsewhere for good; the map learns the new owner
//    at once, is reloaded whole before the next call (a failover or a
//    resharding moves many slots), and the call goes there;
//  - ASK: the slot is being migrated; this one call goes to the target,
//    after ASKING, and the map is left as it is;
//  - a node that cannot be reached: the map is reloaded and, if the slot
//    has a new primary, the call goes there; otherwise kUnavailable.
//  - TRYAGAIN: the slot is being migrated and the call's keys are not all
//    on one side; nothing ran, and the call is tried again after a pause
//    (10 ms, doubled up to 200 ms) while its deadline leaves room.
// A redirected or refused command was not run by the node that answered
// so, so following it is safe. CLUSTERDOWN, and TRYAGAIN once the deadline
// leaves no room, come back as replies (FromRedis makes them kUnavailable).
//
// Deadlines: every call takes one deadline, and everything it does on the
// network (the reloads of the map it waits for, each connect, each read,
// each redirection) keeps to what is left of it; nothing is sent once it
// has passed. A renewal that ends late would let the core report a lease
// lost only after the store may have granted the key again.
//
// Thread-safety: thread-safe; connections are taken from the pools by one
// thread at a time.
#ifndef DLOCK_SRC_BACKENDS_REDIS_REDIS_CLUSTER_H_
#define DLOCK_SRC_BACKENDS_REDIS_REDIS_CLUSTER_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/redis/redis_conn.h"
#include "backends/redis/redis_slot_map.h"

namespace dlock::redis {

class ClusterRouter {
 public:
  ClusterRouter(std::vector<Endpoint> seeds, ConnectOptions options);
  ~ClusterRouter();
  ClusterRouter(const ClusterRouter&) = delete;
  ClusterRouter& operator=(const ClusterRouter&) = delete;

  // What a routed call answered, and which node answered it.
  struct Routed {
    std::vector<ReplyPtr> replies;
    std::string server;
  };

  using SteadyTime = std::chrono::steady_clock::time_point;
  static constexpr SteadyTime kNoDeadline = SteadyTime::max();
  // The deadline of a call that may take `timeout` from now.
  static SteadyTime Within(std::chrono::milliseconds timeout) {
    return std::chrono::steady_clock::now() + timeout;
  }

  // Loads the slot map from the first node that answers: the primaries of
  // the map in hand, the other nodes it named, then the seeds (nodes that
  // failed lately last); each asked within a share of what is left before
  // `deadline` (kNoDeadline: each within the connect timeout).
  Status Refresh(std::string_view what, SteadyTime deadline = kNoDeadline);
  // The map should be reloaded before the next call (a node broke, a slot
  // moved, a subscription was told its slot left).
  void MarkStale();

  // Runs `commands` on the primary of `slot`, following redirections of
  // the first command's reply (the others, if any, ran wherever it did).
  Result<Routed> Run(std::uint16_t slot, std::span<const Command> commands, SteadyTime deadline,
                     std::string_view what);
  // Run, for a script (EVALSHA, EVAL when the node does not know it).
  Result<Routed> Eval(std::uint16_t slot, const Script& script, std::span<const std::string> keys,
                      std::span<const std::string> args, std::span<const Command> extra,
                      SteadyTime deadline, std::string_view what);

  // The primary of `slot` in the map in hand (reloaded first if stale).
  Result<Endpoint> PrimaryOf(std::uint16_t slot, std::string_view what, SteadyTime deadline);
  // Every primary in the map in hand (reloaded first if stale).
  Result<std::vector<Endpoint>> Primaries(std::string_view what, SteadyTime deadline);

  // Each node's commands, written to every node before any reply is read:
  // one round trip for all of them, the replies read as they arrive. No
  // redirection is followed here: the caller sees every reply.
  struct NodeBatch {
    Endpoint node;
    std::vector<Command> commands;
    Result<std::vector<ReplyPtr>> replies = UnavailableError("not sent");
  };
  void RunOnNodes(std::span<NodeBatch> batches, SteadyTime deadline, std::string_view what);

  // One script call for one slot, among many (EvalEach).
  struct SlotCall {
    std::uint16_t slot = 0;
    std::vector<std::string> keys, args;
    // The script's reply (an error reply too), and which node gave it.
    Result<ReplyPtr> reply = UnavailableError("not run");
    std::string server;
  };
  // What the `tail` commands after a node's calls answered (WAIT's count):
  // an error fails every call of that node.
  using TailCheck =
      std::function<Status(std::span<const ReplyPtr> tail, const std::string& server)>;
  // Runs `script` once per call, each on its slot's primary: a node's calls
  // in one pipeline with `tail` after them, every node at once (one round
  // trip). A call that was redirected, refused for now (TRYAGAIN) or whose
  // script the node did not know is run again alone, through Eval.
  void EvalEach(const Script& script, std::span<SlotCall> calls, std::span<const Command> tail,
                const TailCheck& check_tail, SteadyTime deadline, std::string_view what);

  // A fresh connection to `node`, for a subscriber (not pooled).
  Result<std::unique_ptr<Connection>> Open(const Endpoint& node, std::string_view what);

 private:
  class Pooled;
  struct Pool {
    std::vector<std::unique_ptr<Connection>> idle;
    std::uint64_t generation = 0;
  };
  // A connection that was sent commands and owes `want` replies.
  struct Exchange;

  // A pooled connection to `node`, or a new one made before `deadline`. A
  // node that cannot be reached marks the map stale.
  Result<Pooled> Take(const Endpoint& node, SteadyTime deadline, std::string_view what);
  std::optional<Pooled> TakeIdle(const Endpoint& node);
  // A connection for each batch (or its failure, in batch.replies), the
  // missing ones made in parallel.
  std::vector<std::optional<Pooled>> TakeAll(std::span<NodeBatch> batches, SteadyTime deadline,
                                             std::string_view what);
  // `node` refused, broke or did not answer: the map is reloaded before
  // the next call, and reloads ask the node after the others for a while.
  void NoteFailed(const Endpoint& node);
  // NoteFailed, for a node given `given` until `deadline`, unless that
  // deadline passed on a share under kMinShare: then our own deadline, not
  // the node, ended the exchange, and nothing is noted (false).
  bool NoteFailedWithin(const Endpoint& node, std::chrono::milliseconds given,
                        SteadyTime deadline);
  void Give(const Endpoint& node, std::unique_ptr<Connection> c, std::uint64_t generation);
  // Reloads the map if it is stale, unless a reload failed or succeeded a
  // moment ago; at most one reload at a time.
  void RefreshIfStale(std::string_view what, SteadyTime deadline);
  // One reload, whatever the map's state; *blamed (if given) counts the
  // nodes it noted failed.
  Status Reload(std::string_view what, SteadyTime deadline, int* blamed = nullptr);
  // CLUSTER SLOTS on `node`, before `deadline`.
  Result<SlotMap> AskForMap(const Endpoint& node, SteadyTime deadline, std::string_view doing);
  void Install(SlotMap map);
  // Reads every exchange's replies as they arrive, until each has its own
  // or `deadline` passes (then those still owed fail and their connections
  // are dropped).
  static void Collect(std::span<Exchange> exchanges, SteadyTime deadline, std::string_view what);
  // One try on `node` (ASKING first when `ask`): the replies, or the
  // failure; a broken connection marks the map stale. *sent is false when
  // nothing left this client.
  Result<std::vector<ReplyPtr>> RunAt(const Endpoint& node, bool ask,
                                      std::span<const Command> commands, SteadyTime deadline,
                                      std::string_view what, bool* sent);
  std::vector<Endpoint> RefreshCandidates();
  // EvalEach's one pass over calls[which]: by SHA-1 or by text, a node's
  // calls in one pipeline, every node at once. Calls to send again by text
  // go to *by_text_next (only from a pass by SHA-1), calls to run alone to
  // *alone; the others get their reply.
  void EvalBatched(const Script& script, bool by_text, std::span<SlotCall> calls,
                   const std::vector<std::size_t>& which, std::span<const Command> tail,
                   const TailCheck& check_tail, SteadyTime deadline, std::string_view what,
                   std::vector<std::size_t>* by_text_next, std::vector<std::size_t>* alone);

  const std::vector<Endpoint> seeds_;
  const ConnectOptions options_;

  std::mutex mu_;
  std::condition_variable reloaded_;  // a reload ended
  SlotMap map_;                       // guarded by mu_
  bool have_map_ = false;             // guarded by mu_
  bool stale_ = true;                 // guarded by mu_
  bool reloading_ = false;            // guarded by mu_
  // No reload before this (after one that succeeded: kRefreshInterval;
  // after failures: a growing backoff); guarded by mu_.
  SteadyTime next_reload_{};
  int failed_reloads_ = 0;             // in a row; guarded by mu_
  // When each node last failed (by Endpoint::Text()); guarded by mu_.
  std::map<std::string, SteadyTime> failed_at_;
  std::map<std::string, Pool> pools_;  // by Endpoint::Text(); guarded by mu_
};

}  // namespace dlock::redis

#endif  // DLOCK_SRC_BACKENDS_REDIS_REDIS_CLUSTER_H_
