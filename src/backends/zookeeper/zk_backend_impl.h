// What one ZooKeeperBackend shares with its acquisitions, its session's
// watch handlers and its keeper thread: the session, the leases it holds
// (by key and owner, for Renew, Release and MarkDone), the acquisitions in
// progress (so that watch events and the keeper reach them), and the nodes
// the keeper is to delete. Internal to src/backends/zookeeper/.
//
// Files: zookeeper_backend.cc (sessions, events, the Backend calls),
// zk_acquisition.cc (the lock recipe: create, look, watch, grant),
// zk_watches.cc (the waiters' watches and Notify wake-ups),
// zk_lock_delay.cc (markers left by lost holdings), zk_keeper.cc (the
// heartbeat and the reaping of expired nodes), zk_done.cc (run-once
// records), zk_breaks.cc (break records), zk_footprint.cc (counting what
// is stored).
#ifndef DLOCK_SRC_BACKENDS_ZOOKEEPER_ZK_BACKEND_IMPL_H_
#define DLOCK_SRC_BACKENDS_ZOOKEEPER_ZK_BACKEND_IMPL_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends/zookeeper/zk_contender.h"
#include "backends/zookeeper/zk_path.h"
#include "backends/zookeeper/zk_session.h"
#include "backends/zookeeper/zookeeper_backend.h"

namespace dlock::zookeeper {

// One attempt waits at most this long for the ensemble (connecting, or one
// reply); the core retries an kUnavailable attempt until its own deadline,
// so a short bound keeps "store unreachable" within the caller's wait.
inline constexpr std::chrono::milliseconds kAttemptTimeout{1000};
// The session timeout for a session opened by List or Ping, before any
// acquisition said what ttl it wants.
inline constexpr std::chrono::milliseconds kDefaultSessionTimeout{30000};
// How often, within a session timeout, the backend's own heartbeat goes out.
inline constexpr int kHeartbeatsPerTimeout = 4;
// A node the keeper could not delete is tried again this much later.
inline constexpr std::chrono::milliseconds kReapRetry{200};

inline std::string Quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

// This host's wall clock in Unix ms: records' retentions are calendar
// matters, judged by it.
inline std::int64_t UnixNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// kUnavailable when the ensemble did not answer (`r` null) within
// `timeout`, else the mapped error of its answer.
Status ReplyError(const Reply* r, std::string_view what, std::chrono::milliseconds timeout);

// A lease this backend holds.
struct Holding {
  std::string key;
  OwnerId owner;
  std::string lock_path;
  std::string node;  // its name under lock_path
  FencingToken token = 0;
  std::string delay_path;
  // Its lock-delay marker (delay_path/node) exists: a clean release deletes
  // it with the node.
  bool marker_made = false;
  // Granted alone, with no lock-delay about (Contender::AtHead::alone): the
  // release also deletes the lock path if it is empty by then and its data
  // still at this version (no lock-delay flag set since).
  bool delete_path = false;
  std::int32_t lock_path_version = -1;
  std::uint64_t gen = 0;  // the session it lives on
  // An exists watch on the node tells us if someone deletes it.
  bool node_watch_armed = false;
  bool deleted = false;  // someone did: the lease is lost
  // The keeper deletes the node after this: ttl after the last renewal.
  TimePoint expires_at{};

  std::string NodePath() const { return lock_path + "/" + node; }
};

// A node for the keeper to delete.
struct Reap {
  std::string key;
  OwnerId owner;
  std::string lock_path;
  std::string node;  // empty: not known (a lost reply): delete every node with the owner's guid
  std::uint64_t gen = 0;
  TimePoint due{};

  std::string NodePath() const { return lock_path + "/" + node; }
};

// The data of a lock path once a holding with a lock-delay was made there.
inline constexpr std::string_view kKeyHadDelays = "dlock:lock-delay";

// The data to make `c`'s missing lock path with, from the listing of its
// lock-delay markers (`marks`; null: not answered within `timeout`):
// kKeyHadDelays when markers remain (zk_lock_delay.cc).
Result<std::string_view> LockPathData(const Contender& c, const Reply* marks,
                                      std::chrono::milliseconds timeout);

// The node `c` has, or may have (Creating, or Unsure by guid), for the
// keeper to delete at `due`; nullopt when it has none.
std::optional<Reap> NodeToReap(const Contender& c, TimePoint due);

struct ZooKeeperBackendImpl {
  explicit ZooKeeperBackendImpl(ZkOptions o);
  ~ZooKeeperBackendImpl();

  struct Live {
    std::shared_ptr<Session> session;
    std::uint64_t gen = 0;
  };

  // --- sessions (zookeeper_backend.cc) ----------------------------------

  // `provisional`: the caller (a read before any acquisition, such as
  // IsDone) has no ttl to ask for; the session it opens is replaced by the
  // first acquisition's, while nothing is locked on it, so that the
  // session's timeout follows the lease's ttl as without the read.
  Result<Live> EnsureSession(std::chrono::milliseconds ttl_hint, bool provisional = false);
  std::optional<Live> Current();
  void OnSessionState(std::uint64_t gen, Session::State state);
  void OnNodeEvent(std::uint64_t gen, int type, const std::string& path);
  // Whether any node of ours is (or may be) on the current session.
  bool SessionInUseLocked() const;
  Status CreateParents(const Live& live, const std::string& path, std::string_view leaf_data = {});
  // Lock paths known to exist: a node of this backend was made under each,
  // and it has not seen the path go (or deleted it) since. An acquisition
  // of a key whose path is not known looks before it creates: a create
  // under a missing path is a failed write and one more round trip.
  bool PathKnownLocked(const std::string& lock_path) const;
  void NotePathLocked(const std::string& lock_path, bool exists);
  // Deletes every node of `owner` (by its guid) under `lock_path`; `found`
  // says whether there was one, `others` (if given) gets the rest.
  Status DeleteOwn(const Live& live, const std::string& lock_path, const OwnerId& owner,
                   bool* found, std::vector<LockNode>* others);

  // --- acquisitions in progress (zk_acquisition.cc) ---------------------

  // Registers an acquisition's contender for watch events and the keeper
  // (zk_keeper.cc); the acquisition removes it when it ends.
  void AddContender(const std::shared_ptr<Contender>& c);
  // For a contender AtHead: how long lock-delays left by lost holdings
  // still keep the key (zero: none; then our own marker, if we carry a
  // lock-delay, is made and the grant may stand). zk_lock_delay.cc.
  Result<std::chrono::milliseconds> ClearLockDelays(const Live& live, Contender& c);

  // --- waiters' watches and wake-ups (zk_watches.cc) ---------------------

  // A watch event for `c` (a node it watches went or changed, or the lock
  // path's children changed): true when its waiter should wake; `look` set
  // when it must look at its siblings again.
  bool ContenderEventLocked(Contender& c, int type, const std::string& path, bool* look);
  // On the completion thread, when a waiter's watched node goes: look again
  // at once, without waiting for the waiter's thread to wake.
  void LookOnEvent(const std::shared_ptr<Session>& s, const std::shared_ptr<Contender>& c);
  // Sets the watches of queued `c` on the store (armed beforehand).
  void ArmWatches(const std::shared_ptr<Session>& s, const std::shared_ptr<Contender>& c,
                  const Watch& watch);
  // Notify's wake-ups, taken under mu and called after it is released (a
  // wake-up may call back into the acquisition's owner, which may call
  // StopNotify).
  using Wakes = std::vector<std::function<void()>>;
  // Whether `c` has a wake-up registered and another Try may succeed now:
  // what it watched went (ReadyToTry), its place lapsed, its session is
  // gone, or it is at the head with no lock-delay left at `now`.
  bool WakeDueLocked(const Contender& c, TimePoint now) const;
  // Moves `c`'s wake-up into `out` when it is due.
  void TakeWakeLocked(Contender& c, TimePoint now, Wakes& out);
  static void RunWakes(Wakes& wakes);

  // --- held leases (zookeeper_backend.cc) --------------------------------

  std::shared_ptr<Holding> TakeHolding(std::string_view key, const OwnerId& owner);
  Status ReleaseHolding(const Live& live, const Holding& h);
  // ReleaseMany's holdings on `live`, their nodes deleted by one multi
  // (zk_batch.cc); one answer each, in order.
  std::vector<Status> ReleaseHoldings(const Live& live,
                                      const std::vector<std::shared_ptr<Holding>>& held);
  // The lock paths of holdings released alone (DeletesPathAtRelease), not
  // waited for.
  void DeleteEmptiedPaths(const Live& live, const std::vector<const Holding*>& emptied);
  void ArmNodeWatch(const Live& live, const std::shared_ptr<Holding>& h);

  // --- the keeper (zk_keeper.cc) -----------------------------------------

  void ReapLaterLocked(Reap reap);
  void ReapLater(Reap reap);
  void KeeperLoop(std::stop_token stop);
  // The heartbeat starts with the first lease or acquisition.
  void WakeKeeperForHeartbeatLocked();
  MultiOp Heartbeat() const;

  // Backend::KeepPlaces: moves each waiter's expires_at, no request.
  std::vector<Status> KeepPlaces(std::span<const LeaseRequest> waiters);

  // --- listing (zookeeper_backend.cc) ------------------------------------

  // The nodes of the queues under `prefix` that hold (`holders`) or wait,
  // each still there handed to `fn` with its data.
  using NodeFn = std::function<void(const std::string& key, const LockNode& node,
                                    const Reply& reply, const Live& live)>;
  Status ForEachNode(std::string_view prefix, bool holders, const NodeFn& fn);
  Result<std::vector<std::pair<std::string, std::vector<LockNode>>>> Walk(const Live& live,
                                                                          std::string_view prefix);
  // A directory of records (DoneDir, BreaksDir), persistent.
  Status CreateRecordDir(const Live& live, const std::string& dir);

  // --- run-once records (zk_done.cc) ---------------------------------------
  bool DropExpiredRecords(const Live& live, const std::string& dir,
                          const std::vector<std::string>& children);
  Status CreateDoneKeyNode(const Live& live, const std::string& dir);
  void AfterMarking(const Live& live, const std::string& dir, const std::string& kept);

  // --- break records (zk_breaks.cc) ----------------------------------------
  Result<std::vector<std::string>> BreakNodes(const Live& live);
  void DeleteExpiredBreaks(const Live& live, const std::vector<std::string>& names);
  Result<std::uint64_t> CountBreaks(const Live& live, std::string_view prefix);

  // --- counting what is stored (zk_footprint.cc) -------------------------
  Result<std::uint64_t> CountSubtrees(const Live& live, std::vector<std::string> tops);
  Result<std::vector<std::string>> ChildrenFor(const Live& live, const std::string& dir,
                                               std::string_view partial);

  TimePoint Now() const { return clock->Now(); }
  std::chrono::nanoseconds Left(TimePoint until) const {
    return std::max<std::chrono::nanoseconds>(until - Now(), std::chrono::nanoseconds(0));
  }
  std::string Describe() const { return "zk://" + options.hosts + options.chroot; }

  const ZkOptions options;
  const std::shared_ptr<Clock> clock;
  const std::chrono::milliseconds attempt_timeout;
  const std::string root;  // the chroot, or "/"

  mutable std::mutex mu;
  std::condition_variable_any cv;         // waiters: watch fired, session changed
  std::condition_variable_any keeper_cv;  // the keeper: new work, reconnect
  std::shared_ptr<Session> session;
  std::uint64_t gen = 0;
  bool session_provisional = false;  // opened by EnsureSession(.., true)
  std::map<std::pair<std::string, OwnerId>, std::shared_ptr<Holding>> holdings;
  std::set<std::shared_ptr<Contender>> contenders;
  // Nodes the keeper is deleting (async), and those it is still to delete.
  std::vector<std::pair<std::shared_ptr<Op>, Reap>> reaping;
  std::vector<Reap> to_reap;
  // The nodes (full paths) the keeper has decided to delete, from that
  // decision (under mu, with their owner found neither holding nor
  // contending for the key) until their delete is answered. An attempt of
  // the owner never takes one as its own (ZkAcquisition::Place): adopted,
  // it would be granted and then deleted under its holder.
  std::set<std::string> being_reaped;
  // PathKnownLocked's paths, each with its place in known_order, which
  // keeps them oldest first so that the oldest are forgotten first.
  std::unordered_map<std::string, std::uint64_t> known_paths;
  std::deque<std::pair<std::uint64_t, std::string>> known_order;
  std::uint64_t known_next = 0;
  // Lock paths a release of this backend deleted within kReuseWindow, and
  // when (DeletesPathAtRelease); the same, oldest first, for forgetting.
  std::map<std::string, TimePoint> emptied_paths;
  std::deque<std::pair<TimePoint, std::string>> emptied_order;
  bool heartbeat_now = false;
  // A Notify the watches will not answer (something to try already, or a
  // lock-delay to wait out): the keeper looks at the wake-ups at once.
  bool wake_soon = false;
  TimePoint last_heartbeat{};
  TimePoint keeper_next{};  // when the keeper, asleep, plans to wake
  std::jthread keeper;      // last: started in the constructor body

 private:
  // Whether a release of `h` deletes its lock path too (emptied_paths).
  bool DeletesPathAtRelease(const Holding& h);
  // zk_lock_delay.cc
  Result<std::chrono::milliseconds> WaitForLostHoldings(const Live& live, Contender& c,
                                                        const OwnNode& node);
  Status MakeMarker(const Live& live, const Contender& c, const std::string& node);
  // zk_keeper.cc
  void CollectFinishedDeletesLocked(TimePoint now);
  void CollectExpiredLocked(TimePoint now);
  Wakes TakeDueWakesLocked(TimePoint now);
  std::vector<Reap> TakeDueReapsLocked(TimePoint now);
  bool OwnerStillThereLocked(const Reap& r) const;
  void RunReaps(const std::shared_ptr<Session>& s, std::uint64_t g, bool connected,
                std::vector<Reap> due);
  void SendReap(const std::shared_ptr<Session>& s, Reap r);
  void ReapByGuid(const std::shared_ptr<Session>& s, Reap r);
  void SleepLocked(std::unique_lock<std::mutex>& lock, std::stop_token stop, bool connected,
                   std::chrono::milliseconds period);
};

// A new acquisition (zk_acquisition.cc): Backend::Begin, and TryAcquire's
// single attempt.
std::unique_ptr<Acquisition> NewZkAcquisition(std::shared_ptr<ZooKeeperBackendImpl> m,
                                              const LeaseRequest& request);
// TryAcquireMany: a single attempt of each request (as TryAcquire), all
// in flight on the session at once (zk_acquisition.cc).
std::vector<Result<Attempt>> TryEach(const std::shared_ptr<ZooKeeperBackendImpl>& m,
                                     std::span<const LeaseRequest> requests);

}  // namespace dlock::zookeeper

#endif  // DLOCK_SRC_BACKENDS_ZOOKEEPER_ZK_BACKEND_IMPL_H_
