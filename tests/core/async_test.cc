// The asynchronous API on the in-memory store (which notifies on release,
// as the real stores do) and on a store that cannot notify (polled): grants,
// hand-offs, cancels, deadlines, closing the client, coroutines, and the
// threads it takes. Real clock: the driver's threads are real; no test
// depends on how fast they run.
#include <atomic>
#include <coroutine>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "dlock/async.h"
#include "dlock/client.h"
#include "dlock/testing/faulty_backend.h"
#include "dlock/testing/in_memory_backend.h"
#include "eventually.h"
#include "threads.h"

namespace dlock {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::FaultPlan;
using testing::FaultyBackend;
using testing::InMemoryBackend;
using testing::InMemoryOptions;
using testing::InMemoryStore;

// Longer than any of these tests may take: a hung test fails rather than
// hangs, and no answer below depends on it.
constexpr auto kPatience = seconds(60);

using dlock::testing_support::ThreadsOfThisProcess;

class AsyncTest : public ::testing::Test {
 protected:
  std::unique_ptr<Client> NewClient(bool notifying = true) {
    std::unique_ptr<Backend> backend = std::make_unique<InMemoryBackend>(store_);
    // FaultyBackend forwards Notify; without it the default acquisition
    // (which cannot notify) is what a polled store looks like.
    if (!notifying) backend = std::make_unique<PollOnly>(std::move(backend));
    return Client::FromBackend(std::move(backend));
  }
  static AcquireOptions Waiting(milliseconds wait = milliseconds(30000)) {
    AcquireOptions o;
    o.ttl = seconds(30);
    o.wait = wait;
    return o;
  }

  // Hides the inner store's own acquisitions: what a store without Notify
  // looks like to the core.
  class PollOnly final : public Backend {
   public:
    explicit PollOnly(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
    Result<Attempt> TryAcquire(const LeaseRequest& r) override { return inner_->TryAcquire(r); }
    Status Release(std::string_view k, const OwnerId& o) override { return inner_->Release(k, o); }
    std::vector<Status> Renew(std::span<const LeaseRequest> l) override { return inner_->Renew(l); }
    Result<std::vector<HolderInfo>> List(std::string_view p) override { return inner_->List(p); }
    std::string Describe() const override { return "poll-only"; }

   private:
    std::unique_ptr<Backend> inner_;
  };

  std::shared_ptr<InMemoryStore> store_ = std::make_shared<InMemoryStore>(DefaultClock());
};

TEST_F(AsyncTest, AGrantArrivesThroughTheCallbackOnAnotherThread) {
  auto client = NewClient();
  std::promise<std::pair<Result<Lease>, std::thread::id>> answer;
  auto got = answer.get_future();
  client->AcquireAsync("k", Waiting(), [&](Result<Lease> lease) {
    answer.set_value({std::move(lease), std::this_thread::get_id()});
  });
  ASSERT_EQ(got.wait_for(kPatience), std::future_status::ready);
  auto [lease, thread] = got.get();
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_GT(lease->token(), 0U);
  EXPECT_NE(thread, std::this_thread::get_id());
  EXPECT_TRUE(lease->Release().ok());
}

TEST_F(AsyncTest, AWaiterIsGrantedByTheReleaseItWasNotifiedOf) {
  auto holder_client = NewClient();
  auto waiter_client = NewClient();
  auto held = holder_client->Acquire("k", Waiting());
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  auto waiting = waiter_client->AcquireFuture("k", Waiting());
  // Held, so it cannot have been granted; it waits on a watch, not a thread.
  ASSERT_TRUE(testing_support::Eventually([&] { return store_->Watches() == 1; }));
  EXPECT_EQ(waiting.wait_for(milliseconds(0)), std::future_status::timeout);
  const FencingToken before = held->token();
  ASSERT_TRUE(held->Release().ok());
  ASSERT_EQ(waiting.wait_for(kPatience), std::future_status::ready);
  auto lease = waiting.get();
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_GT(lease->token(), before);
  EXPECT_EQ(store_->Watches(), 0U);
}

TEST_F(AsyncTest, AStoreThatCannotNotifyIsPolledUntilTheKeyIsFree) {
  auto holder_client = NewClient();
  auto waiter_client = NewClient(/*notifying=*/false);
  auto held = holder_client->Acquire("k", Waiting());
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  auto waiting = waiter_client->AcquireFuture("k", Waiting());
  EXPECT_EQ(waiting.wait_for(milliseconds(0)), std::future_status::timeout);
  ASSERT_TRUE(held->Release().ok());
  ASSERT_EQ(waiting.wait_for(kPatience), std::future_status::ready);
  auto lease = waiting.get();
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ(store_->Watches(), 0U);
}

TEST_F(AsyncTest, ThousandsPendingTakeNoThreadEach) {
  auto holder_client = NewClient();
  ClientOptions options;
  options.async_threads = 2;
  auto waiter_client = Client::FromBackend(std::make_unique<InMemoryBackend>(store_), options);
  constexpr int kKeys = 2000;
  std::vector<Lease> held;
  for (int i = 0; i < kKeys; ++i) {
    auto lease = holder_client->Acquire("k" + std::to_string(i), Waiting());
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    held.push_back(std::move(*lease));
  }
  const int threads_before = ThreadsOfThisProcess();
  std::atomic<int> granted{0}, answered{0};
  std::promise<void> all;
  for (int i = 0; i < kKeys; ++i) {
    waiter_client->AcquireAsync("k" + std::to_string(i), Waiting(), [&](Result<Lease> lease) {
      if (lease.ok()) ++granted;
      if (answered.fetch_add(1) + 1 == kKeys) all.set_value();
      // The lease is released here, on the async thread, as it goes.
    });
  }
  ASSERT_TRUE(testing_support::Eventually([&] { return store_->Watches() == kKeys; }));
  // Two workers and the timer: nothing per pending acquisition.
  EXPECT_LE(ThreadsOfThisProcess() - threads_before, 3);
  for (Lease& lease : held) ASSERT_TRUE(lease.Release().ok());
  ASSERT_EQ(all.get_future().wait_for(kPatience), std::future_status::ready);
  EXPECT_EQ(granted.load(), kKeys);
}

TEST_F(AsyncTest, CancelEndsAPendingAcquisitionAndLeavesTheQueue) {
  auto holder_client = NewClient();
  auto waiter_client = NewClient();
  auto held = holder_client->Acquire("k", Waiting());
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  std::promise<Result<Lease>> answer;
  PendingAcquire pending = waiter_client->AcquireAsync(
      "k", Waiting(), [&](Result<Lease> lease) { answer.set_value(std::move(lease)); });
  ASSERT_TRUE(testing_support::Eventually([&] { return store_->Watches() == 1; }));
  EXPECT_FALSE(pending.done());
  pending.Cancel();
  pending.Cancel();  // harmless
  auto got = answer.get_future();
  ASSERT_EQ(got.wait_for(kPatience), std::future_status::ready);
  EXPECT_EQ(got.get().status().code(), StatusCode::kCancelled);
  EXPECT_TRUE(pending.done());
  EXPECT_TRUE(store_->Waiters("k").empty());
  EXPECT_EQ(store_->Watches(), 0U);
}

TEST_F(AsyncTest, TheCancelTokenEndsItToo) {
  auto holder_client = NewClient();
  auto waiter_client = NewClient();
  auto held = holder_client->Acquire("k", Waiting());
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  std::stop_source stop;
  AcquireOptions options = Waiting();
  options.cancel = stop.get_token();
  auto waiting = waiter_client->AcquireFuture("k", options);
  stop.request_stop();
  ASSERT_EQ(waiting.wait_for(kPatience), std::future_status::ready);
  EXPECT_EQ(waiting.get().status().code(), StatusCode::kCancelled);
  // A token stopped before the start: cancelled without a grant.
  auto late = waiter_client->AcquireFuture("free", options);
  ASSERT_EQ(late.wait_for(kPatience), std::future_status::ready);
  EXPECT_EQ(late.get().status().code(), StatusCode::kCancelled);
}

TEST_F(AsyncTest, TheWaitRunsOutWithDeadlineExceeded) {
  auto holder_client = NewClient();
  auto waiter_client = NewClient();
  auto held = holder_client->Acquire("k", Waiting());
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  auto waiting = waiter_client->AcquireFuture("k", Waiting(milliseconds(50)));
  ASSERT_EQ(waiting.wait_for(kPatience), std::future_status::ready);
  auto lease = waiting.get();
  EXPECT_EQ(lease.status().code(), StatusCode::kDeadlineExceeded) << lease.status().ToString();
  EXPECT_TRUE(store_->Waiters("k").empty());
  // wait 0: one attempt, as TryAcquire.
  auto once = waiter_client->AcquireFuture("k", Waiting(milliseconds(0)));
  ASSERT_EQ(once.wait_for(kPatience), std::future_status::ready);
  EXPECT_EQ(once.get().status().code(), StatusCode::kDeadlineExceeded);
}

TEST_F(AsyncTest, BadRequestsAnswerThroughTheCallback) {
  auto client = NewClient();
  auto bad_key = client->AcquireFuture("", Waiting());
  ASSERT_EQ(bad_key.wait_for(kPatience), std::future_status::ready);
  EXPECT_EQ(bad_key.get().status().code(), StatusCode::kInvalidArgument);
  AcquireOptions reentrant = Waiting();
  reentrant.reentrant = true;
  auto re = client->AcquireFuture("k", reentrant);
  ASSERT_EQ(re.wait_for(kPatience), std::future_status::ready);
  auto lease = re.get();
  EXPECT_EQ(lease.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(lease.status().message().find("per thread"), std::string::npos);
}

TEST_F(AsyncTest, DestroyingTheClientCancelsWhatIsPendingFirst) {
  auto holder_client = NewClient();
  auto waiter_client = NewClient();
  auto held = holder_client->Acquire("k", Waiting());
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  std::atomic<int> cancelled{0};
  for (int i = 0; i < 10; ++i) {
    waiter_client->AcquireAsync("k", Waiting(), [&](Result<Lease> lease) {
      if (lease.status().code() == StatusCode::kCancelled) ++cancelled;
    });
  }
  waiter_client.reset();  // returns after every callback ran
  EXPECT_EQ(cancelled.load(), 10);
  EXPECT_TRUE(store_->Waiters("k").empty());
  EXPECT_EQ(store_->Watches(), 0U);
}

TEST_F(AsyncTest, ACallbackMayCloseItsOwnClient) {
  auto client = NewClient();
  std::promise<void> closed;
  Client* raw = client.release();
  raw->AcquireAsync("k", Waiting(), [&, raw](Result<Lease> lease) {
    EXPECT_TRUE(lease.ok()) << lease.status().ToString();
    if (lease.ok()) {
      EXPECT_TRUE(lease->Release().ok());
    }
    delete raw;
    closed.set_value();
  });
  EXPECT_EQ(closed.get_future().wait_for(kPatience), std::future_status::ready);
}

// A store that pipelines: first attempts and releases go in batches.
class BatchedAsyncTest : public AsyncTest {
 protected:
  std::unique_ptr<Client> NewBatchedClient() {
    return Client::FromBackend(
        std::make_unique<InMemoryBackend>(store_, InMemoryOptions{.batches = true}));
  }
};

TEST_F(BatchedAsyncTest, ManyKeysAreTakenAndGivenBackInBatches) {
  auto backend = std::make_unique<InMemoryBackend>(store_, InMemoryOptions{.batches = true});
  InMemoryBackend* seen = backend.get();
  ClientOptions options;
  options.async_threads = 1;
  auto client = Client::FromBackend(std::move(backend), options);
  // The one worker is held in a first callback while the rest are asked
  // for, so they wait for the next batch together (whatever the timing).
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  client->AcquireAsync("gate", Waiting(), [opened](Result<Lease>) { opened.wait(); });
  constexpr int kKeys = 3000;
  struct Answers {
    std::atomic<int> released{0}, answered{0};
    std::promise<void> all;
  };
  auto answers = std::make_shared<Answers>();
  for (int i = 0; i < kKeys; ++i) {
    client->AcquireAsync("d" + std::to_string(i), Waiting(), [answers](Result<Lease> lease) {
      auto count = [answers](bool ok) {
        if (ok) ++answers->released;
        if (answers->answered.fetch_add(1) + 1 == kKeys) answers->all.set_value();
      };
      if (!lease.ok()) return count(false);
      lease->ReleaseAsync([count](Status released) { count(released.ok()); });
    });
  }
  gate.set_value();
  ASSERT_EQ(answers->all.get_future().wait_for(kPatience), std::future_status::ready);
  EXPECT_EQ(answers->released.load(), kKeys);
  EXPECT_TRUE(store_->List("d").empty());
  EXPECT_EQ(seen->LargestBatch(), 256U);  // CallBatcher::kMaxBatch
}

TEST_F(BatchedAsyncTest, AHeldKeyWaitsInTheQueueAfterItsBatchedAttempt) {
  auto holder_client = NewClient();
  auto waiter_client = NewBatchedClient();
  auto held = holder_client->Acquire("k", Waiting());
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  auto waiting = waiter_client->AcquireFuture("k", Waiting());
  ASSERT_TRUE(testing_support::Eventually([&] { return store_->Waiters("k").size() == 1; }));
  const FencingToken before = held->token();
  ASSERT_TRUE(held->Release().ok());
  ASSERT_EQ(waiting.wait_for(kPatience), std::future_status::ready);
  auto lease = waiting.get();
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_GT(lease->token(), before);
}

TEST_F(BatchedAsyncTest, ReleasesStillQueuedAreSentBeforeTheClientCloses) {
  auto client = NewBatchedClient();
  std::vector<Lease> leases;
  for (int i = 0; i < 500; ++i) {
    auto lease = client->Acquire("c" + std::to_string(i), Waiting());
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    leases.push_back(std::move(*lease));
  }
  std::atomic<int> released{0};
  for (Lease& lease : leases) lease.ReleaseAsync([&](Status s) { released += s.ok(); });
  client.reset();
  EXPECT_EQ(released.load(), 500);
  EXPECT_TRUE(store_->List("c").empty());
  // A second release of the same handle, and one of an empty handle.
  std::promise<Status> again, empty;
  leases[0].ReleaseAsync([&](Status s) { again.set_value(s); });
  Lease().ReleaseAsync([&](Status s) { empty.set_value(s); });
  EXPECT_TRUE(again.get_future().get().ok());
  EXPECT_EQ(empty.get_future().get().code(), StatusCode::kFailedPrecondition);
}

TEST_F(AsyncTest, AnAsynchronousReleaseIsSentBeforeTheClientCloses) {
  ClientOptions options;
  options.async_threads = 1;  // a store that does not batch: each release a job
  auto client = Client::FromBackend(std::make_unique<InMemoryBackend>(store_), options);
  std::vector<Lease> leases;
  for (int i = 0; i < 200; ++i) {
    auto lease = client->Acquire("r" + std::to_string(i), Waiting());
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    leases.push_back(std::move(*lease));
  }
  // The one worker is held until the client is closing, so every release
  // is still queued then, however fast the machine.
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  auto gated = client->AcquireFuture("gate", Waiting());  // taken first: the worker is free
  ASSERT_TRUE(gated.get().ok());
  client->AcquireAsync("gate2", Waiting(), [opened](Result<Lease>) { opened.wait(); });
  std::atomic<int> released{0};
  for (Lease& lease : leases) lease.ReleaseAsync([&](Status s) { released += s.ok(); });
  std::thread opener([&] {
    std::this_thread::sleep_for(milliseconds(50));  // any delay: only order matters
    gate.set_value();
  });
  client.reset();
  opener.join();
  EXPECT_EQ(released.load(), 200);
  EXPECT_TRUE(store_->List("r").empty());
}

// The smallest coroutine type that runs its body at once: enough to show
// co_await on an acquisition, as any framework's task type would.
struct Eager {
  struct promise_type {
    Eager get_return_object() { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() {}
    void unhandled_exception() { std::terminate(); }
  };
};

Eager TakeAndRelease(Client& client, std::promise<std::string>& out) {
  Result<Lease> lease = co_await Acquiring(client, "k", {.ttl = seconds(30), .wait = seconds(30)});
  if (!lease.ok()) {
    out.set_value(lease.status().message());
    co_return;
  }
  Result<Lease> again = co_await Acquiring(client, "k", {.ttl = seconds(30), .wait = seconds(0)});
  out.set_value(again.ok() ? "a second grant of a held key"
                           : "held:" + std::to_string(lease->Release().ok()));
}

TEST_F(AsyncTest, ACoroutineAwaitsAnAcquisition) {
  auto client = NewClient();
  std::promise<std::string> out;
  TakeAndRelease(*client, out);
  auto got = out.get_future();
  ASSERT_EQ(got.wait_for(kPatience), std::future_status::ready);
  EXPECT_EQ(got.get(), "held:1");
}

}  // namespace
}  // namespace dlock
