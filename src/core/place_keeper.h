// PlaceKeeper: keeps the queue places of one client's waiting asynchronous
// acquisitions, for a store that can keep many in one call
// (Backend::KeepsPlaces).
//
// Without it each waiter refreshes its own place with an attempt every
// third of kQueueTtl: a store call per waiter per second, which grows with
// the waiters whether or not anything happens. Here the places are kept the
// way the renewal loop renews leases: the acquisitions register while they
// wait, and every kTick one job sends one Backend::KeepPlaces call for all
// of them (in batches of kMaxBatch), so the cost follows the number of
// clients, not of waiters. A place the store answers kNotFound for (it
// lapsed, or its owner was granted meanwhile) runs that acquisition's
// `lost`, which makes an attempt at once if it still waits; kUnavailable
// changes nothing (if the place lapsed, the next tick says so).
//
// The tick is a timer on the client's AsyncDriver that posts a job: the
// store call runs on a worker, never on the timer's thread (which renews
// the client's leases too). It runs only
// while something is registered.
//
// Thread-safety: every method may be called from any thread. `lost` never
// runs inside Keep or Forget, nor under the keeper's lock; it may still run
// once for an entry whose Forget is in progress (the acquisition ignores a
// late one, as it ignores a late notification).
#ifndef DLOCK_SRC_CORE_PLACE_KEEPER_H_
#define DLOCK_SRC_CORE_PLACE_KEEPER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <span>

#include "core/acquire_step.h"
#include "core/metrics_recorder.h"
#include "dlock/backend.h"
#include "dlock/clock.h"

namespace dlock::internal {

class AsyncDriver;

class PlaceKeeper {
 public:
  static constexpr std::size_t kMaxBatch = 256;  // entries per KeepPlaces call
  // A third of the places' life, as an attempt would keep them.
  static constexpr Duration kTick = kQueueTtl / 3;

  PlaceKeeper(Backend& backend, AsyncDriver& driver, Clock& clock, MetricsRecorder& metrics);
  PlaceKeeper(const PlaceKeeper&) = delete;
  PlaceKeeper& operator=(const PlaceKeeper&) = delete;

  // Keeps `waiter`'s place (waiter.queue_ttl > 0) from the next tick on,
  // until Forget. Returns the id for Forget.
  std::uint64_t Keep(const LeaseRequest& waiter, std::function<void()> lost);
  // Keeps it no more. Unknown ids (0, or forgotten already) are ignored.
  void Forget(std::uint64_t id);

 private:
  struct Entry {
    LeaseRequest waiter;
    std::function<void()> lost;
  };

  // One tick, on a worker: arms the next, then keeps every place.
  void Tick();
  // Every registered place, in batches of kMaxBatch.
  void KeepAll();
  // One KeepPlaces call, and `lost` for each entry answered kNotFound.
  void Send(std::span<const std::uint64_t> ids, std::span<const LeaseRequest> waiters);
  void ArmTick();

  Backend& backend_;
  AsyncDriver& driver_;
  Clock& clock_;
  MetricsRecorder& metrics_;

  std::mutex mu_;
  std::map<std::uint64_t, Entry> entries_;
  std::uint64_t next_id_ = 1;
  bool ticking_ = false;  // a tick is armed or running
  bool sending_ = false;  // a tick's calls are at the store
  bool behind_ = false;   // ... and another tick came meanwhile
};

}  // namespace dlock::internal

#endif  // DLOCK_SRC_CORE_PLACE_KEEPER_H_
