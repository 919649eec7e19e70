#include "backends/etcd/etcd_queue.h"

#include <algorithm>
#include <limits>

#include "dlock/sharing.h"

namespace dlock::etcd {

void SetWriterAhead(QueueView& view, const std::optional<QueueMember>& head, bool predecessor_known,
                    const std::optional<QueueMember>& predecessor) {
  view.ahead.clear();
  view.last_is_predecessor = true;
  // Ours is the first member (or the queue read empty): nobody is ahead.
  if (!head || head->create_revision == view.revision) return;
  view.ahead.push_back(*head);
  const bool found = predecessor_known && predecessor;
  if (found && predecessor->create_revision != head->create_revision) {
    view.ahead.push_back(*predecessor);
  }
  // A predecessor "known" to be none while a head is ahead: the reads
  // disagree, so it is read again.
  view.last_is_predecessor = found;
}

std::vector<QueueMember> DelayedHoldings(std::vector<QueueMember> markers,
                                         std::span<const QueueMember> queue) {
  std::erase_if(markers, [&](const QueueMember& m) {
    return std::any_of(queue.begin(), queue.end(), [&](const QueueMember& q) {
      return q.key == m.key && q.create_revision == m.create_revision;
    });
  });
  return markers;
}

void SortMarkers(QueueView& view, std::vector<QueueMember> markers, std::string_view own_key,
                 std::span<const QueueMember> queue) {
  view.markers = static_cast<std::int64_t>(markers.size());
  const auto own = std::find_if(markers.begin(), markers.end(), [&](const QueueMember& m) {
    return m.key == own_key && m.create_revision == view.revision;
  });
  view.own_marker = own != markers.end();
  if (view.own_marker) markers.erase(own);
  view.delayed = DelayedHoldings(std::move(markers), queue);
}

QueueStep Decide(const QueueView& view, std::uint32_t limit) {
  std::vector<std::uint32_t> ahead;
  std::vector<std::uint32_t> delayed;
  for (const QueueMember& m : view.ahead) ahead.push_back(m.limit);
  for (const QueueMember& m : view.delayed) delayed.push_back(m.limit);
  const QueueDecision decision = DecideQueue(ahead, delayed, limit);
  using Outcome = QueueDecision::Outcome;
  using Kind = QueueStep::Kind;
  QueueStep step;
  switch (decision.outcome) {
    case Outcome::kGranted:
      return step;
    case Outcome::kWaitForDelays:
      // A lock-delay ends when etcd expires its marker's lease.
      step.kind = Kind::kWatchMarkers;
      step.blocker_lease = view.delayed.front().lease;
      return step;
    case Outcome::kWatchAll:
      step.kind = Kind::kWatchQueue;
      break;
    case Outcome::kWatchOne:
      if (decision.watch + 1 == view.ahead.size() && !view.last_is_predecessor) {
        step.kind = Kind::kFindPredecessor;
      } else {
        step.kind = Kind::kWatchMember;
        step.member = view.ahead[decision.watch];
      }
      break;
  }
  // Not admitted behind its members ahead: there is at least one.
  step.blocker_lease = view.ahead.front().lease;
  return step;
}

std::size_t HolderCount(std::span<const QueueMember> queue, std::span<const QueueMember> delayed) {
  std::size_t ahead = delayed.size();
  std::uint32_t smallest = std::numeric_limits<std::uint32_t>::max();
  for (const QueueMember& d : delayed) smallest = std::min(smallest, d.limit);
  for (std::size_t i = 0; i < queue.size(); ++i) {
    // Holders are a prefix: the first member not admitted ends them.
    if (!Admits(ahead, smallest, queue[i].limit)) return i;
    smallest = std::min(smallest, queue[i].limit);
    ++ahead;
  }
  return queue.size();
}

}  // namespace dlock::etcd
