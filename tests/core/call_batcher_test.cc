#include "core/call_batcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <vector>

#include "core/async_driver.h"
#include "core/shared_loop.h"
#include "dlock/testing/simulated_clock.h"

namespace dlock::internal {
namespace {

using std::chrono::milliseconds;
using testing::SimulatedClock;

constexpr auto kPatience = std::chrono::seconds(30);

// A store whose batched calls take kPerCall each on the simulated clock,
// and which notes the shortest TTL in each batch.
class PacedBackend final : public Backend {
 public:
  static constexpr milliseconds kPerCall{10};

  explicit PacedBackend(SimulatedClock& clock) : clock_(clock) {}

  struct Batch {
    std::size_t calls = 0;
    milliseconds shortest_ttl{0};
  };
  std::vector<Batch> Batches() {
    std::lock_guard lock(mu_);
    return batches_;
  }

  std::vector<Result<Attempt>> TryAcquireMany(std::span<const LeaseRequest> requests) override {
    Pace(requests);
    Attempt granted;
    granted.granted = true;
    return std::vector<Result<Attempt>>(requests.size(), granted);
  }
  std::vector<Status> ReleaseMany(std::span<const LeaseRequest> holdings) override {
    Pace(holdings);
    return std::vector<Status>(holdings.size(), Status::Ok());
  }
  bool BatchesCalls() const override { return true; }

  Result<Attempt> TryAcquire(const LeaseRequest&) override { return Attempt{}; }
  Status Release(std::string_view, const OwnerId&) override { return Status::Ok(); }
  std::vector<Status> Renew(std::span<const LeaseRequest> leases) override {
    return std::vector<Status>(leases.size(), Status::Ok());
  }
  Result<std::vector<HolderInfo>> List(std::string_view) override {
    return std::vector<HolderInfo>{};
  }
  std::string Describe() const override { return "paced://"; }

 private:
  void Pace(std::span<const LeaseRequest> calls) {
    Batch batch{calls.size(), milliseconds::max()};
    for (const LeaseRequest& call : calls)
      batch.shortest_ttl = std::min(batch.shortest_ttl, call.ttl);
    {
      std::lock_guard lock(mu_);
      batches_.push_back(batch);
    }
    clock_.Advance(kPerCall * static_cast<int>(calls.size()));
  }

  SimulatedClock& clock_;
  std::mutex mu_;
  std::vector<Batch> batches_;
};

class CallBatcherTest : public ::testing::Test {
 protected:
  std::shared_ptr<SimulatedClock> clock_ = std::make_shared<SimulatedClock>();
  PacedBackend backend_{*clock_};
  SharedLoop loop_{clock_};
  AsyncDriver driver_{loop_, 1};
  CallBatcher batcher_{backend_, driver_, *clock_, 1};

  // Queues `ttls.size()` attempts, one per TTL, while the one worker is
  // held, so that they wait for the batches together; true once all are
  // answered.
  bool AttemptAll(const std::vector<milliseconds>& ttls) {
    std::promise<void> gate;
    std::shared_future<void> opened = gate.get_future().share();
    driver_.Post([opened] { opened.wait(); });
    // Shared with the answers: they may come after a failed wait.
    struct Answers {
      std::atomic<std::size_t> count{0};
      std::size_t want = 0;
      std::promise<void> all;
    };
    auto answers = std::make_shared<Answers>();
    answers->want = ttls.size();
    std::future<void> all = answers->all.get_future();
    for (std::size_t i = 0; i < ttls.size(); ++i) {
      LeaseRequest request{"k" + std::to_string(i), OwnerId(1, i + 1), ttls[i]};
      batcher_.QueueAttempt(std::move(request), [answers](Result<Attempt>, TimePoint) {
        if (answers->count.fetch_add(1) + 1 == answers->want) answers->all.set_value();
      });
    }
    gate.set_value();
    return all.wait_for(kPatience) == std::future_status::ready;
  }
};

// Each batch after the first takes at most a tenth of the shortest TTL in
// it at the pace measured (10 ms a call): 20 calls of 2 s leases, and a
// batch with a 500 ms lease in it at most 5.
TEST_F(CallBatcherTest, ABatchTakesATenthOfItsShortestTtlAtTheMeasuredPace) {
  std::vector<milliseconds> ttls(120, milliseconds(2000));
  ttls[70] = milliseconds(500);
  ASSERT_TRUE(AttemptAll(ttls));
  const std::vector<PacedBackend::Batch> batches = backend_.Batches();
  ASSERT_GE(batches.size(), 2U);
  EXPECT_EQ(batches[0].calls, CallBatcher::kFirstBatch);
  std::size_t total = 0, short_batch = 0;
  for (std::size_t i = 0; i < batches.size(); ++i) {
    total += batches[i].calls;
    if (i == 0) continue;
    const milliseconds took = PacedBackend::kPerCall * static_cast<int>(batches[i].calls);
    EXPECT_LE(took, batches[i].shortest_ttl / CallBatcher::kTtlShare) << "batch " << i;
    if (batches[i].shortest_ttl == milliseconds(500)) short_batch = batches[i].calls;
  }
  EXPECT_EQ(total, ttls.size());
  EXPECT_EQ(batches[1].calls, 20U) << "the pace measured by the first batch was not used";
  EXPECT_EQ(short_batch, 5U);
}

// A fast store gets full batches once measured.
TEST_F(CallBatcherTest, AFastStoreGetsFullBatches) {
  std::vector<milliseconds> ttls(16 + 2 * CallBatcher::kMaxBatch, milliseconds(60'000));
  ASSERT_TRUE(AttemptAll(ttls));
  const std::vector<PacedBackend::Batch> batches = backend_.Batches();
  ASSERT_EQ(batches.size(), 3U);
  EXPECT_EQ(batches[1].calls, CallBatcher::kMaxBatch);
  EXPECT_EQ(batches[2].calls, CallBatcher::kMaxBatch);
}

}  // namespace
}  // namespace dlock::internal
