// While an asynchronous waiter asks its Acquisition to Notify, nothing else
// calls that Acquisition (backend.h: between Notify and `wake` the core
// makes no other call), even when the wait ends before Notify returns: a
// wake-up the store sends at once, or a cancel. The step arming the wait
// acts on it once Notify has returned (AsyncAcquire's kArming). Before,
// another worker could Try, Abandon or destroy the Acquisition while
// Notify still ran in it (a use after free, seen once as a crash in CI).
//
// The store here holds Notify open for a grace period after the wait has
// ended, and counts any call that arrives meanwhile. A correct core never
// makes one, however slow the machine; the grace only decides how surely a
// wrong one is caught.
#include <atomic>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <stop_token>
#include <thread>

#include <gtest/gtest.h>

#include "dlock/client.h"
#include "dlock/testing/in_memory_backend.h"

namespace dlock {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::InMemoryBackend;
using testing::InMemoryStore;

constexpr auto kPatience = seconds(60);  // for answers that must come
// How long Notify stays open after the wait ended: many times what a
// worker takes to pick up a posted step, so that a wrong call shows.
constexpr auto kGrace = milliseconds(300);

// What the store saw: calls into an Acquisition while its Notify ran.
struct Overlaps {
  std::mutex mu;
  std::condition_variable changed;
  bool in_notify = false;
  int count = 0;

  void Call() {
    std::lock_guard lock(mu);
    if (in_notify) ++count;
    changed.notify_all();
  }
};

// The in-memory store's acquisition, with a hook that runs (on a thread of
// its own, as a store's wake-up would) inside Notify, after which Notify
// stays open for kGrace or until a call overlaps it.
class HeldOpenAcquisition final : public Acquisition {
 public:
  HeldOpenAcquisition(std::unique_ptr<Acquisition> inner, std::shared_ptr<Overlaps> overlaps,
                      std::function<void()> hook)
      : inner_(std::move(inner)), overlaps_(std::move(overlaps)), hook_(std::move(hook)) {}
  ~HeldOpenAcquisition() override { overlaps_->Call(); }

  Result<Attempt> Try() override {
    overlaps_->Call();
    return inner_->Try();
  }
  bool Wait(TimePoint until, std::stop_token stop) override { return inner_->Wait(until, stop); }
  bool Notify(std::function<void()> wake) override {
    const bool notifying = inner_->Notify(std::move(wake));
    std::unique_lock lock(overlaps_->mu);
    overlaps_->in_notify = true;
    lock.unlock();
    if (hook_) std::thread(std::exchange(hook_, nullptr)).join();
    lock.lock();
    const int before = overlaps_->count;
    overlaps_->changed.wait_for(lock, kGrace, [&] { return overlaps_->count != before; });
    overlaps_->in_notify = false;
    return notifying;
  }
  void StopNotify() override {
    overlaps_->Call();
    inner_->StopNotify();
  }
  void Abandon() override {
    overlaps_->Call();
    inner_->Abandon();
  }

 private:
  std::unique_ptr<Acquisition> inner_;
  std::shared_ptr<Overlaps> overlaps_;
  std::function<void()> hook_;
};

class HeldOpenBackend final : public Backend {
 public:
  HeldOpenBackend(std::shared_ptr<InMemoryStore> store, std::shared_ptr<Overlaps> overlaps,
                  std::function<void()> hook)
      : inner_(std::move(store)), overlaps_(std::move(overlaps)), hook_(std::move(hook)) {}

  std::unique_ptr<Acquisition> Begin(const LeaseRequest& request) override {
    return std::make_unique<HeldOpenAcquisition>(inner_.Begin(request), overlaps_,
                                                 std::exchange(hook_, nullptr));
  }
  Result<Attempt> TryAcquire(const LeaseRequest& r) override { return inner_.TryAcquire(r); }
  Status Release(std::string_view k, const OwnerId& o) override { return inner_.Release(k, o); }
  std::vector<Status> Renew(std::span<const LeaseRequest> l) override { return inner_.Renew(l); }
  Result<std::vector<HolderInfo>> List(std::string_view p) override { return inner_.List(p); }
  std::string Describe() const override { return "held-open"; }

 private:
  InMemoryBackend inner_;
  std::shared_ptr<Overlaps> overlaps_;
  std::function<void()> hook_;  // for the first acquisition only
};

class AsyncArmingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto held = store_->TryAcquire(LeaseRequest{"k", kHolder, seconds(60)});
    ASSERT_TRUE(held.ok() && held->granted);
  }

  // Waits on "k" (held by kHolder) with `hook` run inside its first Notify;
  // returns the acquisition's answer.
  Result<Lease> WaitWith(std::function<void()> hook, std::stop_token cancel = {}) {
    ClientOptions options;
    options.async_threads = 2;  // a second worker, free to overlap
    auto client = Client::FromBackend(
        std::make_unique<HeldOpenBackend>(store_, overlaps_, std::move(hook)), options);
    std::promise<Result<Lease>> answer;
    auto pending = client->AcquireAsync(
        "k", {.ttl = seconds(30), .wait = seconds(300), .cancel = cancel},
        [&](Result<Lease> lease) { answer.set_value(std::move(lease)); });
    auto future = answer.get_future();
    if (future.wait_for(kPatience) != std::future_status::ready) {
      return DeadlineExceededError("no answer in " + std::to_string(kPatience.count()) + " s");
    }
    return future.get();
  }

  static inline const OwnerId kHolder{9, 9};
  std::shared_ptr<InMemoryStore> store_ = std::make_shared<InMemoryStore>(DefaultClock());
  std::shared_ptr<Overlaps> overlaps_ = std::make_shared<Overlaps>();
};

TEST_F(AsyncArmingTest, AWakeUpDuringNotifyIsActedOnAfterIt) {
  // The release wakes the waiter while its Notify still runs.
  Result<Lease> lease = WaitWith([this] { (void)store_->Release("k", kHolder); });
  ASSERT_TRUE(lease.ok()) << lease.status().message();
  EXPECT_EQ(overlaps_->count, 0) << "a call reached the Acquisition while Notify ran";
}

TEST_F(AsyncArmingTest, ACancelDuringNotifyIsActedOnAfterIt) {
  std::stop_source cancel;
  Result<Lease> lease = WaitWith([&] { cancel.request_stop(); }, cancel.get_token());
  ASSERT_FALSE(lease.ok());
  EXPECT_EQ(lease.status().code(), StatusCode::kCancelled) << lease.status().message();
  EXPECT_EQ(overlaps_->count, 0) << "a call reached the Acquisition while Notify ran";
}

}  // namespace
}  // namespace dlock
