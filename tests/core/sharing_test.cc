// The sharing rule, written once (src/core/sharing.h): the table every store
// must follow, and whom a waiter watches.
#include "dlock/sharing.h"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "../conformance/sharing_cases.h"

namespace dlock {
namespace {

using Outcome = QueueDecision::Outcome;
using testing::SharingCases;
using testing::SharingStep;
constexpr std::uint32_t R = kSharedLimit;

// Plays a case on one queue of arrivals, as a queueing store keeps them.
class QueueModel {
 public:
  bool Attempt(std::size_t who) {
    std::vector<std::uint32_t> ahead;
    for (std::size_t i = 0; i < who; ++i) {
      if (limits_[i]) ahead.push_back(*limits_[i]);
    }
    return DecideQueue(ahead, {}, *limits_[who]).outcome == Outcome::kGranted;
  }
  std::size_t Arrive(std::uint32_t limit) {
    limits_.push_back(limit);
    return limits_.size() - 1;
  }
  void Leave(std::size_t who) { limits_[who].reset(); }

 private:
  std::vector<std::optional<std::uint32_t>> limits_;  // by arrival; empty once gone
};

TEST(SharingRuleTest, EveryCaseOfTheTable) {
  for (const auto& c : SharingCases()) {
    QueueModel queue;
    for (std::size_t s = 0; s < c.steps.size(); ++s) {
      const SharingStep& step = c.steps[s];
      switch (step.kind) {
        case SharingStep::Kind::kArrive:
          EXPECT_EQ(queue.Attempt(queue.Arrive(step.limit)), step.granted)
              << c.name << ", step " << s;
          break;
        case SharingStep::Kind::kRetry:
          EXPECT_EQ(queue.Attempt(step.who), step.granted) << c.name << ", step " << s;
          break;
        case SharingStep::Kind::kLeave:
          queue.Leave(step.who);
          break;
      }
    }
  }
}

TEST(SharingRuleTest, AdmitsCountsEveryoneAheadAgainstTheSmallestLimit) {
  EXPECT_TRUE(Admits(0, 1, 1));
  EXPECT_FALSE(Admits(1, 1, 1));
  EXPECT_TRUE(Admits(2, 3, 3));
  EXPECT_FALSE(Admits(2, 2, 3)) << "the smallest limit ahead rules";
  EXPECT_FALSE(Admits(2, 3, 2)) << "so does our own";
  EXPECT_TRUE(Admits(1000, R, R));
  EXPECT_TRUE(Admits(0, 1, R)) << "an empty queue admits anyone";
}

TEST(SharingRuleTest, AWriterWatchesItsPredecessor) {
  const std::vector<std::uint32_t> ahead = {R, R, 1, R};
  EXPECT_EQ(DecideQueue(ahead, {}, 1), (QueueDecision{Outcome::kWatchOne, 3}));
}

TEST(SharingRuleTest, AReaderWatchesTheNearestWriterAhead) {
  const std::vector<std::uint32_t> ahead = {1, R, 1, R, R};
  EXPECT_EQ(DecideQueue(ahead, {}, R), (QueueDecision{Outcome::kWatchOne, 2}));
}

TEST(SharingRuleTest, APermitWithNoWriterAheadWatchesThemAll) {
  const std::vector<std::uint32_t> ahead = {2, 2};
  EXPECT_EQ(DecideQueue(ahead, {}, 2), (QueueDecision{Outcome::kWatchAll}));
}

TEST(SharingRuleTest, HoldingsInTheirLockDelayCountButAreWaitedOutApart) {
  const std::vector<std::uint32_t> none;
  const std::vector<std::uint32_t> one_writer = {1};
  EXPECT_EQ(DecideQueue(none, one_writer, 1).outcome, Outcome::kWaitForDelays);
  EXPECT_EQ(DecideQueue(none, one_writer, R).outcome, Outcome::kWaitForDelays);
  const std::vector<std::uint32_t> reader = {R};
  EXPECT_EQ(DecideQueue(reader, reader, R).outcome, Outcome::kGranted)
      << "readers share with a lapsed reader";
  const std::vector<std::uint32_t> two = {2};
  EXPECT_EQ(DecideQueue(two, two, 2).outcome, Outcome::kWaitForDelays)
      << "a lapsed permit still takes its place";
  EXPECT_EQ(DecideQueue(one_writer, one_writer, 1), (QueueDecision{Outcome::kWatchOne, 0}))
      << "a live holder ahead is waited for first";
}

}  // namespace
}  // namespace dlock
