#include "backends/zookeeper/zk_contender.h"

#include <algorithm>

#include "dlock/sharing.h"

namespace dlock::zookeeper {
namespace {

// What to watch for a decision that is not a grant. On top of the
// decision, the store's own shortcut: a writer near the head watches every
// node ahead, so the last one going grants without another look.
Watch WatchFor(const Contender& c, const std::vector<LockNode>& sorted, std::size_t mine,
               const QueueDecision& decision) {
  if (decision.outcome == QueueDecision::Outcome::kWatchOne) {
    if (c.limit == 1 && mine <= kWatchAhead) {
      WatchAhead all;
      for (std::size_t i = 0; i < mine; ++i) all.left.push_back(c.PathOf(sorted[i].name));
      return all;
    }
    return WatchOne{c.PathOf(sorted[decision.watch].name)};
  }
  return WatchChildren{};
}

// A watch already set stays set when the new look watches the same nodes;
// a node not watched before needs its watch (one that went meanwhile is
// found gone when the watch is set).
bool StillArmed(const Contender::Queued& before, const Watch& next) {
  if (!before.armed) return false;
  if (const auto* ahead = std::get_if<WatchAhead>(&next)) {
    const auto* old = std::get_if<WatchAhead>(&before.watch);
    if (old == nullptr) return false;
    return std::all_of(ahead->left.begin(), ahead->left.end(), [&](const std::string& p) {
      return std::find(old->left.begin(), old->left.end(), p) != old->left.end();
    });
  }
  if (const auto* one = std::get_if<WatchOne>(&next)) {
    const auto* old = std::get_if<WatchOne>(&before.watch);
    return old != nullptr && old->path == one->path;
  }
  return std::holds_alternative<WatchChildren>(before.watch);
}

}  // namespace

const OwnNode* NodeOf(const Contender::Standing& standing) {
  if (const auto* u = std::get_if<Contender::Unsure>(&standing)) return &u->node;
  if (const auto* q = std::get_if<Contender::Queued>(&standing)) return &q->node;
  if (const auto* h = std::get_if<Contender::AtHead>(&standing)) return &h->node;
  return nullptr;
}

const OwnNode* Contender::Node() const { return NodeOf(standing); }

bool HasPlace(const Contender::Standing& standing) {
  return std::holds_alternative<Contender::Creating>(standing) || NodeOf(standing) != nullptr;
}

bool Watches(const Contender::Queued& q, const std::string& path) {
  if (const auto* ahead = std::get_if<WatchAhead>(&q.watch)) {
    return std::find(ahead->left.begin(), ahead->left.end(), path) != ahead->left.end();
  }
  if (const auto* one = std::get_if<WatchOne>(&q.watch)) return one->path == path;
  return false;
}

LookResult ApplyLook(Contender& c, const std::vector<LockNode>& sorted, const NodeStat& parent) {
  const Contender::Queued* before = std::get_if<Contender::Queued>(&c.standing);
  const auto* unsure = std::get_if<Contender::Unsure>(&c.standing);
  if (before != nullptr && parent.cversion < before->looked_at_cversion) return LookResult::kStale;
  if (before == nullptr && (unsure == nullptr || unsure->node.name.empty())) {
    return LookResult::kStale;  // AtHead: nothing undoes it; the rest have no node to place
  }
  const OwnNode node = before != nullptr ? before->node : unsure->node;
  const auto it = std::find_if(sorted.begin(), sorted.end(),
                               [&](const LockNode& n) { return n.name == node.name; });
  if (it == sorted.end()) return LookResult::kNodeGone;
  const auto mine = static_cast<std::size_t>(it - sorted.begin());

  DelayHints hints = before != nullptr ? before->hints : DelayHints{};
  if (parent.data_length > 0) hints.key_had_delays = true;
  std::vector<std::uint32_t> ahead;
  ahead.reserve(mine);
  for (std::size_t i = 0; i < mine; ++i) {
    ahead.push_back(sorted[i].limit);
    if (sorted[i].delay_ms != 0) hints.ahead_had_delay = true;
  }
  const QueueDecision decision = DecideQueue(ahead, {}, c.limit);
  if (decision.outcome == QueueDecision::Outcome::kGranted) {
    c.standing = Contender::AtHead{node, hints, TimePoint{}, sorted.size() == 1, parent.version};
    return LookResult::kApplied;
  }
  Contender::Queued next{node, hints, parent.cversion, WatchFor(c, sorted, mine, decision)};
  if (before != nullptr) {
    next.armed = StillArmed(*before, next.watch);
    // The same node still to go keeps what was seen of it.
    const auto* old_one = std::get_if<WatchOne>(&before->watch);
    auto* one = std::get_if<WatchOne>(&next.watch);
    if (old_one != nullptr && one != nullptr && old_one->path == one->path) one->gone = old_one->gone;
  }
  c.standing = std::move(next);
  return LookResult::kApplied;
}

bool AheadGone(Contender& c, const std::string& path) {
  auto* q = std::get_if<Contender::Queued>(&c.standing);
  if (q == nullptr) return false;
  if (auto* ahead = std::get_if<WatchAhead>(&q->watch)) {
    std::erase(ahead->left, path);
    // Every node ahead at our last look is gone, and later nodes sort
    // after ours: nothing is ahead of us now, no need to look.
    if (ahead->left.empty()) c.standing = Contender::AtHead{q->node, q->hints};
    return false;
  }
  auto* one = std::get_if<WatchOne>(&q->watch);
  if (one == nullptr || one->path != path) return false;
  one->gone = true;
  return true;
}

bool ReadyToTry(const Contender& c) {
  const auto* q = std::get_if<Contender::Queued>(&c.standing);
  if (q == nullptr || !q->armed) return true;
  const auto* one = std::get_if<WatchOne>(&q->watch);
  return one != nullptr && one->gone;
}

}  // namespace dlock::zookeeper
