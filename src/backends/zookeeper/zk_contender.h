// Contender: one acquisition's place in a lock path's queue of
// ephemeral-sequential nodes, as the backend knows it between the
// acquisition's calls and the session's watch events.
//
// Its standing is one of these, each with only the data it needs:
//
//   NoNode     nothing of ours on the store: the next step creates a node
//              (first looking whether the lock path exists, when the backend
//              does not know it does: then the looks are in flight here)
//   Creating   a create in flight, a look at the siblings pipelined behind it
//              (and the lock path's own create ahead of it, if it was missing)
//   Unsure     a reply was lost or our place is not yet known: look (for our
//              node by name, or by our guid when even the name is unknown)
//   Queued     our node waits behind others, and what it watches meanwhile
//   AtHead     nothing ahead stands in the way; lock-delays left by lost
//              holdings are checked (and our own marker made) before a grant
//   Granted    the holding is the backend's now (renewed and released by
//              key and owner)
//   Abandoned  the caller gave up
//
//   NoNode -> Creating -> Unsure -> Queued <-> Queued (each look)
//                           |         |
//                           +---------+--> AtHead -> Granted
//   A look that no longer finds our node, the keeper reaping a place that
//   was not refreshed, or a new session: back to NoNode.
//
// ApplyLook and AheadGone are the pure steps: the queue decision
// (dlock::DecideQueue) and what a watch event changes. The caller holds the
// backend's mutex around every read and write of `standing`.
//
// Only the acquisition's own calls (one at a time) move a contender, with
// two exceptions: watch events move Queued on (a new look, or AtHead), and
// the keeper takes the node of a place not refreshed in time (back to
// NoNode). A step that waited for the store without the mutex therefore
// applies its answer only to the standing it started from.
#ifndef DLOCK_SRC_BACKENDS_ZOOKEEPER_ZK_CONTENDER_H_
#define DLOCK_SRC_BACKENDS_ZOOKEEPER_ZK_CONTENDER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "backends/zookeeper/zk_path.h"
#include "backends/zookeeper/zk_session.h"
#include "dlock/clock.h"
#include "dlock/types.h"

namespace dlock::zookeeper {

// An exclusive waiter with at most this many nodes ahead watches every one
// of them, and holds the lock when the last goes, without another look (a
// node created later sorts after ours). A release so wakes at most this many
// waiters, however long the queue; farther back a waiter watches only the
// node just ahead and looks again when it goes.
inline constexpr std::size_t kWatchAhead = 4;

// Our node, once known.
struct OwnNode {
  std::string name;        // under the lock path
  FencingToken token = 0;  // its czxid
};

// Whether lock-delays may have been left behind: the markers are read before
// a grant only when one of these is set.
struct DelayHints {
  bool ahead_had_delay = false;  // a node ahead of ours carried one (its name says so)
  bool key_had_delays = false;   // the lock path's data says a marker was once made there
  bool any() const { return ahead_had_delay || key_had_delays; }
};

// What a queued contender watches: the store's side of a QueueDecision.
// A writer with at most kWatchAhead ahead: every node ahead not yet seen to
// go (full paths, in queue order); when the last goes, we are at the head.
struct WatchAhead {
  std::vector<std::string> left;
};
// The one node (full path) that must go before we can be granted; `gone`:
// it went, so look again.
struct WatchOne {
  std::string path;
  bool gone = false;
};
// No single node must go (a semaphore's waiter behind permits only): a
// watch on the lock path's children, and a look at each change.
struct WatchChildren {};
using Watch = std::variant<WatchAhead, WatchOne, WatchChildren>;

struct Contender {
  struct NoNode {
    // Looks in flight at a lock path not known to exist, and at its
    // lock-delay markers (null when none are sent): the create that follows
    // makes a missing path, flagged when markers wait for it.
    std::shared_ptr<Op> children;
    std::shared_ptr<Op> markers;
  };
  struct Creating {
    std::shared_ptr<Op> create;
    std::shared_ptr<Op> children;
    // The lock path's own create, sent first (null if it existed), with
    // its data, and the creates of its parents ahead of it, if they were
    // missing too.
    std::shared_ptr<Op> path;
    std::string path_data;
    std::vector<std::shared_ptr<Op>> parents;
  };
  struct Unsure {
    OwnNode node;  // name empty: find it by our guid; token 0: read it
  };
  struct Queued {
    OwnNode node;
    DelayHints hints;
    // The parent's cversion at the last look applied: looks answered out
    // of order (an event's racing the caller's) never undo a newer one.
    std::int64_t looked_at_cversion = -1;
    Watch watch;
    bool armed = false;  // the watch (or watches) are set on the store
  };
  struct AtHead {
    OwnNode node;
    DelayHints hints;
    // While lock-delays keep the key: until then (our clock) the next
    // attempt answers without asking the store.
    TimePoint delay_until{};
    // Our node was the lock path's only child at the look that put us
    // here: a key nobody else wanted, whose emptied path the release may
    // delete rather than leave it to the server's container reaper (a path
    // below the chroot is a container, whether dlock or Curator made it).
    bool alone = false;
    // The lock path's data version at that look: the release deletes the
    // path only at it, so a lock-delay flag set since keeps the path.
    std::int32_t path_version = -1;
  };
  struct Granted {};
  struct Abandoned {};
  using Standing = std::variant<NoNode, Creating, Unsure, Queued, AtHead, Granted, Abandoned>;

  // From the request; fixed.
  std::string key;
  OwnerId owner;
  std::string lock_path;
  std::string guid;
  std::string prefix;  // "_c_<guid>-[n<limit>-][d<ms>-]lock-"
  std::uint32_t limit = 1;
  std::uint32_t delay_ms = 0;  // this holding's own lock-delay
  std::string delay_path;      // the key's lock-delay markers (DelayPath)
  std::string data;            // our node's data (who made it, for people)

  // Under the backend's mutex.
  std::uint64_t gen = 0;   // the session `standing` refers to
  TimePoint expires_at{};  // the keeper deletes our node after this
  Standing standing = NoNode{};
  // Acquisition::Notify's wake-up, until it is called (by a watch's event,
  // a session's end or the keeper), dropped by StopNotify, or the
  // acquisition ends.
  std::function<void()> wake;

  std::string PathOf(std::string_view node) const { return lock_path + "/" + std::string(node); }
  const OwnNode* Node() const;
};

// Our node, in the standings that have one (its name may be empty in
// Unsure); null in the others.
const OwnNode* NodeOf(const Contender::Standing& standing);

// Whether `standing` has a place in the queue, or is making one: a node
// that waits (or is at the head, not yet granted), or may exist (Creating,
// Unsure). Not a holding.
bool HasPlace(const Contender::Standing& standing);

// Whether `q` has an exists watch on the node at `path`.
bool Watches(const Contender::Queued& q, const std::string& path);

enum class LookResult {
  kApplied,
  kStale,     // an older look than one applied, or a standing a look cannot change
  kNodeGone,  // our node is not among the siblings: it is gone
};

// Applies a look at the lock path's children (`sorted`, with the parent's
// Stat) to `c` when it is Queued, or Unsure with its node's name and token
// known: AtHead when DecideQueue grants, else Queued with what to watch.
// A watch already set on the same node(s) stays set.
LookResult ApplyLook(Contender& c, const std::vector<LockNode>& sorted, const NodeStat& parent);

// A node ahead of Queued `c` is gone (its watch fired, or it was gone when
// the watch was set). True when `c` must look at its siblings again; `c` is
// AtHead, without a look, when it was the last of WatchAhead's.
bool AheadGone(Contender& c, const std::string& path);

// Whether a Wait on `c` has something to report: its standing moved on from
// Queued, its watch needs setting again, or the node it watched went.
bool ReadyToTry(const Contender& c);

}  // namespace dlock::zookeeper

#endif  // DLOCK_SRC_BACKENDS_ZOOKEEPER_ZK_CONTENDER_H_
