// How long a client's renewal thread may run: destroying the Client with
// its last Lease waits for a store call that thread has in flight. Were it
// to return first, the program could go on (return from main, tearing down
// the store's statics) under that call: a use after free that ThreadSanitizer
// once caught in a Redis test's child process.
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include <gtest/gtest.h>

#include "dlock/client.h"
#include "dlock/clock.h"
#include "dlock/testing/in_memory_backend.h"

namespace dlock {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::InMemoryBackend;
using testing::InMemoryStore;

// Where the renewal thread is, as the test sees it.
struct RenewalGate {
  std::mutex mu;
  std::condition_variable cv;
  bool renewing = false;  // a Renew reached the store
  bool let_go = false;    // the test lets it answer
  bool answered = false;  // and it did
};

// A store whose Renew waits for the test's word before it answers.
class HeldRenewals final : public Backend {
 public:
  HeldRenewals(std::unique_ptr<Backend> inner, std::shared_ptr<RenewalGate> gate)
      : inner_(std::move(inner)), gate_(std::move(gate)) {}
  Result<Attempt> TryAcquire(const LeaseRequest& r) override { return inner_->TryAcquire(r); }
  Status Release(std::string_view k, const OwnerId& o) override { return inner_->Release(k, o); }
  std::vector<Status> Renew(std::span<const LeaseRequest> leases) override {
    std::unique_lock lock(gate_->mu);
    gate_->renewing = true;
    gate_->cv.notify_all();
    gate_->cv.wait(lock, [&] { return gate_->let_go; });
    std::vector<Status> answer = inner_->Renew(leases);
    gate_->answered = true;
    return answer;
  }
  Result<std::vector<HolderInfo>> List(std::string_view p) override { return inner_->List(p); }
  std::string Describe() const override { return "held renewals"; }

 private:
  std::unique_ptr<Backend> inner_;
  std::shared_ptr<RenewalGate> gate_;
};

TEST(ClientLifetimeTest, DestroyingTheClientWaitsForARenewalAtTheStore) {
  auto gate = std::make_shared<RenewalGate>();
  auto store = std::make_shared<InMemoryStore>(DefaultClock());
  std::unique_ptr<Client> client = Client::FromBackend(
      std::make_unique<HeldRenewals>(std::make_unique<InMemoryBackend>(store), gate), {});
  AcquireOptions options;
  options.ttl = milliseconds(300);  // renewed from about 100 ms on
  auto acquired = client->TryAcquire("k", options);
  ASSERT_TRUE(acquired.ok()) << acquired.status().ToString();
  std::optional<Lease> lease(std::move(*acquired));
  bool renewing = false;
  {
    std::unique_lock lock(gate->mu);
    renewing = gate->cv.wait_for(lock, seconds(60), [&] { return gate->renewing; });
  }
  bool answered_first = false;
  bool destroyed = false;
  std::thread destroyer([&] {
    lease.reset();  // the release is not held up; only the renewal is
    client.reset();
    std::lock_guard lock(gate->mu);
    answered_first = gate->answered;
    destroyed = true;
    gate->cv.notify_all();
  });
  {
    // Long enough for a destruction that does not wait to be over, on a
    // loaded machine too; a destruction that waits is let go after it.
    std::unique_lock lock(gate->mu);
    gate->cv.wait_for(lock, seconds(2), [&] { return destroyed; });
    gate->let_go = true;
    gate->cv.notify_all();
  }
  destroyer.join();
  ASSERT_TRUE(renewing) << "no renewal reached the store within 60 s";
  EXPECT_TRUE(answered_first)
      << "the Client was destroyed while its renewal thread was still at the store";
}

}  // namespace
}  // namespace dlock
