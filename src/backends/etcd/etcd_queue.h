// The etcd backend's queue decision, apart from the network: what one read
// of a lock's queue showed an acquisition (QueueView), and what it does next
// (Decide), by the sharing rule of dlock/sharing.h. docs/backend-etcd.md
// ("Words") defines member, head, predecessor, marker and delayed holding.
//
// Thread-safety: values and pure functions.
#ifndef DLOCK_SRC_BACKENDS_ETCD_ETCD_QUEUE_H_
#define DLOCK_SRC_BACKENDS_ETCD_ETCD_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dlock::etcd {

// One key in a lock's queue (a member), as etcd has it. A lock-delay
// marker is read into one too, as the member it stands for (its key and
// create_revision, owner, limit and label) on the marker's own lease.
struct QueueMember {
  std::string key;
  std::int64_t create_revision = 0;
  std::int64_t lease = 0;
  std::string value;        // dlock: the owner id (hex); etcdctl and Go: empty
  std::uint32_t limit = 1;  // from the value (1 for etcdctl, Go, older dlock)
  std::string label;
};

// What one read of a lock's queue showed the acquisition whose member has
// create_revision `revision`.
struct QueueView {
  std::int64_t revision = 0;
  std::int64_t read_at = 0;  // the store revision the read saw
  // The members ahead of ours, oldest first. A sharing request reads them
  // all; a limit-1 request reads only the head and, when the read could
  // tell, its predecessor: a writer's decision needs no more.
  std::vector<QueueMember> ahead;
  // Whether ahead.back() is the predecessor (false: not read yet).
  bool last_is_predecessor = true;
  // How many keys of the queue's range (longer names' too) were created
  // before ours: what a watch on the whole range counts down from.
  std::int64_t keys_ahead = 0;
  // Holdings inside their lock-delay (markers whose member is gone), whether
  // our own member's marker is there, and how many markers the read found.
  std::vector<QueueMember> delayed;
  bool own_marker = false;
  std::int64_t markers = 0;
};

// A limit-1 request's members ahead, from the two reads its transaction
// makes: the head (nullopt for an empty queue) and, when `predecessor_known`,
// the member just ahead of ours (nullopt: none).
void SetWriterAhead(QueueView& view, const std::optional<QueueMember>& head, bool predecessor_known,
                    const std::optional<QueueMember>& predecessor);

// The markers (as QueueMembers, see above) whose member is not in `queue`
// with that create_revision: the holdings inside their lock-delay.
std::vector<QueueMember> DelayedHoldings(std::vector<QueueMember> markers,
                                         std::span<const QueueMember> queue);

// Sorts a name's markers (as QueueMembers, see above) into `view`: ours
// (the marker of `own_key` at view.revision), those of members still in
// `queue` (live holders'), and the rest, the delayed holdings. A limit-1
// request does not read the queue (`queue` empty): every marker but its own
// then counts as a delayed holding, which is harmless, since a live
// holder's member is ahead of it and keeps it waiting anyway.
void SortMarkers(QueueView& view, std::vector<QueueMember> markers, std::string_view own_key,
                 std::span<const QueueMember> queue);

// What the acquisition does next.
struct QueueStep {
  enum class Kind {
    kGranted,
    kWatchMember,      // wait for `member` to go
    kFindPredecessor,  // wait for the predecessor, once it is read
    kWatchQueue,       // wait for any member ahead to go (a semaphore's waiter)
    kWatchMarkers,     // wait for a delayed holding's marker to go
  };
  Kind kind = Kind::kGranted;
  QueueMember member;  // kWatchMember
  // The lease of what stands in the way first (the head, or a delayed
  // holding's marker): how long it may last. 0 when granted.
  std::int64_t blocker_lease = 0;
};

// The sharing rule (DecideQueue) over `view` for a request of `limit`.
QueueStep Decide(const QueueView& view, std::uint32_t limit);

// How many members at the front of `queue` (in create order) hold, behind
// the `delayed` holdings: what List shows as holders and Waiters as not.
std::size_t HolderCount(std::span<const QueueMember> queue, std::span<const QueueMember> delayed);

}  // namespace dlock::etcd

#endif  // DLOCK_SRC_BACKENDS_ETCD_ETCD_QUEUE_H_
