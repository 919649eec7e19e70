// The asynchronous API's entry points: Client::AcquireAsync and its future,
// PendingAcquire, and the client's pending acquisitions (ClientCore).
#include <future>
#include <thread>
#include <utility>

#include "core/async_acquire.h"
#include "core/async_driver.h"
#include "core/call_batcher.h"
#include "core/client_core.h"
#include "core/place_keeper.h"
#include "dlock/client.h"

namespace dlock {
namespace internal {

std::shared_ptr<AsyncAcquire> ClientCore::AcquireAsync(std::string_view key,
                                                       const AcquireOptions& options,
                                                       AcquireCallback done) {
  std::shared_ptr<AsyncAcquire> op;
  {
    std::lock_guard lock(async_mu_);
    if (async_stopped_) {
      // Only a callback running while the client closes can get here.
      done(CancelledError("acquire of key '" + std::string(key) + "' was cancelled: the client "
                          "is closing"));
      return nullptr;
    }
    op = std::make_shared<AsyncAcquire>(shared_from_this(), *DriverLocked(), key, options,
                                        std::move(done));
    pending_.emplace(op.get(), op);
  }
  op->Start();
  return op;
}

AsyncDriver* ClientCore::DriverLocked() {
  if (async_stopped_) return nullptr;
  if (!async_) {
    async_ = std::make_unique<AsyncDriver>(*loop_, async_threads_);
    if (backend_->BatchesCalls()) {
      batcher_ = std::make_unique<CallBatcher>(*backend_, *async_, *clock_, async_threads_);
    }
    if (backend_->KeepsPlaces()) {
      keeper_ = std::make_unique<PlaceKeeper>(*backend_, *async_, *clock_, metrics_);
    }
  }
  return async_.get();
}

void ClientCore::ReleaseAsync(std::shared_ptr<LeaseState> state, std::uint64_t hold,
                              std::function<void(Status)> done) {
  if (!done) done = [](const Status&) {};
  ReleasePlan plan = BeginRelease(*state, hold);
  if (!plan.ask_store) return done(plan.answer);
  std::unique_lock lock(async_mu_);
  AsyncDriver* driver = DriverLocked();
  if (driver == nullptr) {  // the client is closing: release here
    lock.unlock();
    Status released = backend_->Release(state->key, state->owner);
    return done(EndRelease(*state, plan, std::move(released)));
  }
  ++releasing_;  // under async_mu_: closing the client waits for it
  lock.unlock();
  auto finish = [self = shared_from_this(), state, plan, done](Status released) {
    Status answer = self->EndRelease(*state, plan, std::move(released));
    {
      // Counted out before `done` runs: a `done` that closes the client
      // must not wait for itself.
      std::lock_guard count(self->async_mu_);
      if (--self->releasing_ == 0) self->async_done_.notify_all();
    }
    done(std::move(answer));
  };
  if (batcher_) {
    batcher_->QueueRelease(LeaseRequest{state->key, state->owner, state->ttl}, std::move(finish));
    return;
  }
  driver->Post([self = shared_from_this(), state, finish] {
    finish(self->backend_->Release(state->key, state->owner));
  });
}

void ClientCore::AsyncFinished(const AsyncAcquire* op) {
  std::shared_ptr<AsyncAcquire> last;  // the caller still holds it; dropped outside the lock
  std::lock_guard lock(async_mu_);
  auto it = pending_.find(op);
  if (it == pending_.end()) return;
  last = std::move(it->second);
  pending_.erase(it);
  if (pending_.empty()) async_done_.notify_all();
}

void ClientCore::StopAsync() {
  std::vector<std::shared_ptr<AsyncAcquire>> ops;
  {
    std::lock_guard lock(async_mu_);
    async_stopped_ = true;
    if (!async_) return;
    for (const auto& [key, op] : pending_) ops.push_back(op);
  }
  for (const auto& op : ops) op->Cancel("the client was closed");
  ops.clear();
  // A worker (a callback closing the client) runs queued steps itself
  // rather than wait for a queue only it might drain.
  const bool on_worker = async_->OnWorker();
  // Releases still queued for the store go out before the workers end.
  auto busy = [&] { return !pending_.empty() || releasing_ > 0; };
  std::unique_lock lock(async_mu_);
  while (busy()) {
    if (!on_worker) {
      async_done_.wait(lock);
      continue;
    }
    lock.unlock();
    if (!async_->RunOne()) std::this_thread::yield();
    lock.lock();
  }
  lock.unlock();
  async_->Stop();
}

}  // namespace internal

void PendingAcquire::Cancel() {
  if (op_) op_->Cancel("PendingAcquire::Cancel was called");
}

bool PendingAcquire::done() const { return !op_ || op_->Done(); }

void Lease::ReleaseAsync(std::function<void(Status)> done) {
  if (!state_) {
    if (done) done(FailedPreconditionError("empty Lease"));
    return;
  }
  if (std::exchange(released_, true)) {
    if (done) done(Status::Ok());
    return;
  }
  core_->ReleaseAsync(state_, hold_, std::move(done));
}

PendingAcquire Client::AcquireAsync(std::string_view key, const AcquireOptions& options,
                                    AcquireCallback done) {
  PendingAcquire pending;
  pending.op_ = core_->AcquireAsync(key, options, std::move(done));
  return pending;
}

std::future<Result<Lease>> Client::AcquireFuture(std::string_view key,
                                                 const AcquireOptions& options) {
  auto promise = std::make_shared<std::promise<Result<Lease>>>();
  std::future<Result<Lease>> future = promise->get_future();
  (void)AcquireAsync(key, options,
                     [promise](Result<Lease> lease) { promise->set_value(std::move(lease)); });
  return future;
}

}  // namespace dlock
