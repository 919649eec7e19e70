// AsyncDriver: the few threads that run one client's asynchronous
// acquisitions, however many are pending.
//
// A fixed number of workers take jobs from one queue; a timer, a job of the
// client's SharedLoop (the thread that also renews its leases under
// RealClock; the test's thread under SimulatedClock), posts each timed job
// when its time comes. Nothing
// here blocks on a store: a job is one step of an acquisition (one Try),
// and waiting is a timer or a store's notification, which posts the next
// step.
//
// Thread-safety: every method may be called from any thread, including
// from a job.
#ifndef DLOCK_SRC_CORE_ASYNC_DRIVER_H_
#define DLOCK_SRC_CORE_ASYNC_DRIVER_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "core/shared_loop.h"
#include "dlock/clock.h"

namespace dlock::internal {

class AsyncDriver {
 public:
  using Job = std::function<void()>;

  AsyncDriver(SharedLoop& timers, unsigned workers);
  ~AsyncDriver();  // Stop()
  AsyncDriver(const AsyncDriver&) = delete;
  AsyncDriver& operator=(const AsyncDriver&) = delete;

  // Runs `job` on a worker, soon.
  void Post(Job job);
  // Runs `job` on a worker at `when` (on the clock), or soon after; the id
  // is for CancelTimer.
  std::uint64_t At(TimePoint when, Job job);
  // The job of timer `id` will not be posted (it may already have been).
  void CancelTimer(std::uint64_t id);
  // Runs one queued job on the calling thread, if there is one: lets a
  // thread that waits for jobs to finish help rather than deadlock when it
  // is itself a worker. False when the queue was empty.
  bool RunOne();
  // Whether the calling thread is one of the workers.
  bool OnWorker() const;
  // Runs no more jobs and ends the threads; a worker calling it (from a
  // job) ends once that job returns.
  void Stop();

 private:
  struct State;
  std::shared_ptr<State> state_;
  SharedLoop::Waker wake_timer_;
};

}  // namespace dlock::internal

#endif  // DLOCK_SRC_CORE_ASYNC_DRIVER_H_
