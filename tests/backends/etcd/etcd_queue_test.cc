// The etcd backend's queue decision (etcd_queue.h), without a server: what
// an acquisition does with what its read showed, and who List counts as
// holding. The sharing rule itself is DecideQueue's (tests/core).
#include "backends/etcd/etcd_queue.h"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "conformance/sharing_cases.h"
#include "dlock/types.h"

namespace dlock::etcd {
namespace {

using Kind = QueueStep::Kind;
constexpr std::uint32_t R = kSharedLimit;

QueueMember M(std::int64_t revision, std::uint32_t limit = 1, std::int64_t lease = 0) {
  return {"q/" + std::to_string(revision), revision, lease, "", limit, ""};
}

// A view of the member at `revision` with `ahead` before it.
QueueView View(std::int64_t revision, std::vector<QueueMember> ahead,
               std::vector<QueueMember> delayed = {}) {
  QueueView v;
  v.revision = revision;
  v.ahead = std::move(ahead);
  v.delayed = std::move(delayed);
  return v;
}

TEST(EtcdQueueTest, AWriterFirstInLineIsGrantedUnlessALockDelayRuns) {
  EXPECT_EQ(Decide(View(10, {}), 1).kind, Kind::kGranted);
  const QueueStep step = Decide(View(10, {}, {M(4, 1, 77)}), 1);
  EXPECT_EQ(step.kind, Kind::kWatchMarkers);
  EXPECT_EQ(step.blocker_lease, 77) << "the delay lasts as long as the marker's lease";
}

TEST(EtcdQueueTest, AWriterWatchesItsPredecessorOnceKnown) {
  QueueView v;
  v.revision = 10;
  SetWriterAhead(v, M(3, 1, 30), /*predecessor_known=*/true, M(8, 1, 80));
  QueueStep step = Decide(v, 1);
  EXPECT_EQ(step.kind, Kind::kWatchMember);
  EXPECT_EQ(step.member.create_revision, 8);
  EXPECT_EQ(step.blocker_lease, 30) << "the head's lease: how long the holder may last";

  SetWriterAhead(v, M(3), /*predecessor_known=*/false, std::nullopt);
  EXPECT_EQ(Decide(v, 1).kind, Kind::kFindPredecessor) << "a longer name's key hid it";
  SetWriterAhead(v, M(3), /*predecessor_known=*/true, std::nullopt);
  EXPECT_EQ(Decide(v, 1).kind, Kind::kFindPredecessor) << "reads that disagree: read again";
  SetWriterAhead(v, M(3), /*predecessor_known=*/true, M(3));
  step = Decide(v, 1);
  EXPECT_EQ(step.kind, Kind::kWatchMember) << "the head is the predecessor";
  EXPECT_EQ(step.member.create_revision, 3);

  SetWriterAhead(v, M(10), /*predecessor_known=*/false, std::nullopt);
  EXPECT_EQ(Decide(v, 1).kind, Kind::kGranted) << "ours is the head";
  SetWriterAhead(v, std::nullopt, /*predecessor_known=*/false, std::nullopt);
  EXPECT_EQ(Decide(v, 1).kind, Kind::kGranted) << "an empty queue";
}

TEST(EtcdQueueTest, SharingWaitersWatchWhatTheyCannotPass) {
  // A reader behind a writer and another (waiting) reader watches the writer.
  QueueStep step = Decide(View(10, {M(2, R), M(5, 1), M(7, R)}), R);
  EXPECT_EQ(step.kind, Kind::kWatchMember);
  EXPECT_EQ(step.member.create_revision, 5);
  // A permit behind three other permits of three: any one of them leaving.
  EXPECT_EQ(Decide(View(10, {M(2, 3), M(5, 3), M(7, 3)}), 3).kind, Kind::kWatchQueue);
  // Readers share, even behind a delayed reader.
  EXPECT_EQ(Decide(View(10, {M(2, R)}, {M(1, R)}), R).kind, Kind::kGranted);
  // Two permits of three held, the third in its lock-delay: wait it out.
  step = Decide(View(10, {M(2, 3, 20), M(5, 3, 50)}, {M(1, 3, 11)}), 3);
  EXPECT_EQ(step.kind, Kind::kWatchMarkers);
  EXPECT_EQ(step.blocker_lease, 11);
}

TEST(EtcdQueueTest, MarkersAreOursLiveHoldersOrDelayedHoldings) {
  QueueView v;
  v.revision = 10;
  const std::vector<QueueMember> queue = {M(2, R), M(10, R)};
  SortMarkers(v, {M(1, R), M(2, R), M(10, R)}, "q/10", queue);
  EXPECT_TRUE(v.own_marker);
  EXPECT_EQ(v.markers, 3);
  ASSERT_EQ(v.delayed.size(), 1u) << "a live holder's marker is no delay";
  EXPECT_EQ(v.delayed[0].create_revision, 1);

  // Our key, re-created (a new revision): the marker is an old holding's.
  v.revision = 12;
  SortMarkers(v, {M(10)}, "q/10", {});
  EXPECT_FALSE(v.own_marker);
  EXPECT_EQ(v.delayed.size(), 1u);
  // A marker of a member re-created since is a delayed holding too.
  EXPECT_EQ(DelayedHoldings({M(2)}, std::vector<QueueMember>{{"q/2", 9, 0, "", 1, ""}}).size(), 1u);
}

TEST(EtcdQueueTest, HoldersAreThePrefixTheRuleAdmits) {
  EXPECT_EQ(HolderCount(std::vector<QueueMember>{M(1, R), M(2, R), M(3, 1), M(4, R)}, {}), 2u);
  EXPECT_EQ(HolderCount(std::vector<QueueMember>{M(1, 2), M(2, 5), M(3, 5)}, {}), 2u);
  EXPECT_EQ(HolderCount(std::vector<QueueMember>{M(2, R)}, std::vector<QueueMember>{M(1, 1)}), 0u)
      << "a writer's lock-delay keeps readers out";
  EXPECT_EQ(
      HolderCount(std::vector<QueueMember>{M(2, 3), M(3, 3)}, std::vector<QueueMember>{M(1, 3)}),
      2u);
  EXPECT_EQ(HolderCount({}, {}), 0u);
}

// The table of sharing_cases.h, played on one queue: an attempt is granted
// exactly when its member is among those List counts as holding, and
// Decide says so too.
TEST(EtcdQueueTest, DecideAndHolderCountFollowTheTableOfCases) {
  for (const dlock::testing::SharingCase& c : dlock::testing::SharingCases()) {
    std::vector<QueueMember> queue;  // by arrival, in create order
    std::vector<std::int64_t> revision_of;
    auto attempt = [&](std::size_t who) {
      const std::int64_t rev = revision_of[who];
      std::vector<QueueMember> ahead;
      std::size_t position = 0;
      for (const QueueMember& m : queue) {
        if (m.create_revision == rev) break;
        ahead.push_back(m);
        ++position;
      }
      const bool granted = Decide(View(rev, ahead), queue[position].limit).kind == Kind::kGranted;
      EXPECT_EQ(granted, position < HolderCount(queue, {})) << c.name << ", arrival " << who;
      return granted;
    };
    for (std::size_t s = 0; s < c.steps.size(); ++s) {
      const dlock::testing::SharingStep& step = c.steps[s];
      using StepKind = dlock::testing::SharingStep::Kind;
      if (step.kind == StepKind::kLeave) {
        std::erase_if(queue, [&](const QueueMember& m) {
          return m.create_revision == revision_of[step.who];
        });
        continue;
      }
      std::size_t who = step.who;
      if (step.kind == StepKind::kArrive) {
        who = revision_of.size();
        revision_of.push_back(static_cast<std::int64_t>(who) + 1);
        queue.push_back(M(revision_of.back(), step.limit));
      }
      EXPECT_EQ(attempt(who), step.granted) << c.name << ", step " << s;
    }
  }
}

}  // namespace
}  // namespace dlock::etcd
