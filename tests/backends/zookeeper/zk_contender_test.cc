// The contender's pure steps (zk_contender.h): what a look at the siblings
// and a watch event do to one acquisition's standing. No server.
#include "backends/zookeeper/zk_contender.h"

#include <gtest/gtest.h>

namespace dlock::zookeeper {
namespace {

constexpr std::uint32_t R = kSharedLimit;

LockNode Node(int seq, std::uint32_t limit = 1, std::uint32_t delay_ms = 0) {
  LockNode n;
  n.sequence = seq;
  n.name = "n" + std::to_string(seq);
  n.limit = limit;
  n.delay_ms = delay_ms;
  return n;
}

NodeStat Parent(std::int32_t cversion, std::int32_t data_length = 0) {
  NodeStat s;
  s.cversion = cversion;
  s.data_length = data_length;
  return s;
}

// A contender of `limit` whose node is `sorted[mine]`, Unsure: created, its
// place not yet looked at.
Contender Created(const std::vector<LockNode>& sorted, std::size_t mine, std::uint32_t limit = 1) {
  Contender c;
  c.lock_path = "/locks/k";
  c.limit = limit;
  c.standing = Contender::Unsure{{sorted[mine].name, 100}};
  return c;
}

const Contender::Queued& Queued(const Contender& c) {
  return std::get<Contender::Queued>(c.standing);
}

TEST(ZkContenderTest, TheFirstNodeIsAtTheHead) {
  const std::vector<LockNode> sorted = {Node(1)};
  Contender c = Created(sorted, 0);
  EXPECT_EQ(ApplyLook(c, sorted, Parent(1)), LookResult::kApplied);
  ASSERT_TRUE(std::holds_alternative<Contender::AtHead>(c.standing));
  EXPECT_EQ(c.Node()->name, "n1");
  EXPECT_EQ(c.Node()->token, 100);
}

TEST(ZkContenderTest, AWriterNearTheHeadWatchesEveryNodeAheadAndNeedsNoLook) {
  const std::vector<LockNode> sorted = {Node(1), Node(2), Node(3)};
  Contender c = Created(sorted, 2);
  ASSERT_EQ(ApplyLook(c, sorted, Parent(3)), LookResult::kApplied);
  const auto& ahead = std::get<WatchAhead>(Queued(c).watch);
  EXPECT_EQ(ahead.left, (std::vector<std::string>{"/locks/k/n1", "/locks/k/n2"}));
  EXPECT_FALSE(Queued(c).armed);
  EXPECT_TRUE(ReadyToTry(c)) << "its watches are not set yet";
  std::get<Contender::Queued>(c.standing).armed = true;
  EXPECT_FALSE(ReadyToTry(c));
  // One going is not worth a wake-up; the last grants without a look.
  EXPECT_FALSE(AheadGone(c, "/locks/k/n2"));
  EXPECT_FALSE(ReadyToTry(c));
  EXPECT_FALSE(AheadGone(c, "/locks/k/n1"));
  EXPECT_TRUE(std::holds_alternative<Contender::AtHead>(c.standing));
  EXPECT_TRUE(ReadyToTry(c));
}

TEST(ZkContenderTest, AWriterFartherBackWatchesItsPredecessorAndLooksAgain) {
  std::vector<LockNode> sorted;
  for (int i = 1; i <= static_cast<int>(kWatchAhead) + 2; ++i) sorted.push_back(Node(i));
  Contender c = Created(sorted, sorted.size() - 1);
  ASSERT_EQ(ApplyLook(c, sorted, Parent(1)), LookResult::kApplied);
  const auto& one = std::get<WatchOne>(Queued(c).watch);
  EXPECT_EQ(one.path, "/locks/k/" + sorted[sorted.size() - 2].name);
  std::get<Contender::Queued>(c.standing).armed = true;
  EXPECT_FALSE(AheadGone(c, "/locks/k/n1")) << "not watched";
  EXPECT_TRUE(AheadGone(c, one.path)) << "its predecessor went: look again";
  EXPECT_TRUE(ReadyToTry(c));
  EXPECT_TRUE(std::holds_alternative<Contender::Queued>(c.standing));
}

TEST(ZkContenderTest, AReaderWatchesTheNearestWriterAhead) {
  // A writer holds, a reader waits, a reader arrives: it waits for the writer.
  const std::vector<LockNode> sorted = {Node(1), Node(2, R), Node(3, R)};
  Contender c = Created(sorted, 2, R);
  ASSERT_EQ(ApplyLook(c, sorted, Parent(1)), LookResult::kApplied);
  EXPECT_EQ(std::get<WatchOne>(Queued(c).watch).path, "/locks/k/n1");
  // Readers behind a holding reader share with it.
  const std::vector<LockNode> readers = {Node(1, R), Node(2, R)};
  Contender d = Created(readers, 1, R);
  ASSERT_EQ(ApplyLook(d, readers, Parent(1)), LookResult::kApplied);
  EXPECT_TRUE(std::holds_alternative<Contender::AtHead>(d.standing));
}

TEST(ZkContenderTest, ASemaphoreWaiterBehindPermitsOnlyWatchesTheChildren) {
  const std::vector<LockNode> sorted = {Node(1, 2), Node(2, 2), Node(3, 2)};
  Contender c = Created(sorted, 2, 2);
  ASSERT_EQ(ApplyLook(c, sorted, Parent(1)), LookResult::kApplied);
  EXPECT_TRUE(std::holds_alternative<WatchChildren>(Queued(c).watch));
}

TEST(ZkContenderTest, AnOlderLookChangesNothingAndASetWatchStaysSet) {
  std::vector<LockNode> sorted;
  for (int i = 1; i <= 7; ++i) sorted.push_back(Node(i));
  Contender c = Created(sorted, 6);
  ASSERT_EQ(ApplyLook(c, sorted, Parent(10)), LookResult::kApplied);
  std::get<Contender::Queued>(c.standing).armed = true;
  const std::vector<LockNode> older = {Node(1), Node(7)};
  EXPECT_EQ(ApplyLook(c, older, Parent(9)), LookResult::kStale);
  EXPECT_EQ(std::get<WatchOne>(Queued(c).watch).path, "/locks/k/n6");
  // A newer look with the same node just ahead keeps its watch.
  std::vector<LockNode> fewer = sorted;
  fewer.erase(fewer.begin());
  ASSERT_EQ(ApplyLook(c, fewer, Parent(11)), LookResult::kApplied);
  EXPECT_TRUE(Queued(c).armed);
  // One with another node just ahead needs a new watch.
  fewer.erase(fewer.begin() + 4);  // n6
  ASSERT_EQ(ApplyLook(c, fewer, Parent(12)), LookResult::kApplied);
  EXPECT_EQ(std::get<WatchAhead>(Queued(c).watch).left.back(), "/locks/k/n5");
  EXPECT_FALSE(Queued(c).armed);
}

TEST(ZkContenderTest, ALookWithoutOurNodeSaysSoAndChangesNothing) {
  const std::vector<LockNode> sorted = {Node(1), Node(2)};
  Contender c = Created(sorted, 1);
  ASSERT_EQ(ApplyLook(c, sorted, Parent(1)), LookResult::kApplied);
  EXPECT_EQ(ApplyLook(c, {Node(1)}, Parent(2)), LookResult::kNodeGone);
  EXPECT_TRUE(std::holds_alternative<Contender::Queued>(c.standing));
}

TEST(ZkContenderTest, NothingUndoesTheHeadAndANodeWithoutANameIsNotPlaced) {
  const std::vector<LockNode> sorted = {Node(1), Node(2)};
  Contender head = Created(sorted, 0);
  ASSERT_EQ(ApplyLook(head, sorted, Parent(1)), LookResult::kApplied);
  EXPECT_EQ(ApplyLook(head, {Node(0), Node(1)}, Parent(2)), LookResult::kStale);
  EXPECT_TRUE(std::holds_alternative<Contender::AtHead>(head.standing));
  Contender lost;
  lost.standing = Contender::Unsure{};
  EXPECT_EQ(ApplyLook(lost, sorted, Parent(1)), LookResult::kStale);
}

TEST(ZkContenderTest, LockDelayHintsComeFromTheNamesAheadAndTheLockPathsData) {
  const std::vector<LockNode> sorted = {Node(1, 1, 500), Node(2)};
  Contender c = Created(sorted, 1);
  ASSERT_EQ(ApplyLook(c, sorted, Parent(1)), LookResult::kApplied);
  EXPECT_TRUE(Queued(c).hints.ahead_had_delay);
  EXPECT_FALSE(Queued(c).hints.key_had_delays);
  std::get<Contender::Queued>(c.standing).armed = true;
  // The node ahead goes: at the head, with what the look saw.
  EXPECT_FALSE(AheadGone(c, "/locks/k/n1"));
  const auto& head = std::get<Contender::AtHead>(c.standing);
  EXPECT_TRUE(head.hints.any());

  const std::vector<LockNode> alone = {Node(3)};
  Contender d = Created(alone, 0);
  ASSERT_EQ(ApplyLook(d, alone, Parent(1, /*data_length=*/16)), LookResult::kApplied);
  EXPECT_TRUE(std::get<Contender::AtHead>(d.standing).hints.key_had_delays);
}

}  // namespace
}  // namespace dlock::zookeeper
