// CallBatcher: the asynchronous API's first attempts and releases, sent to
// a store that pipelines (Backend::BatchesCalls) many at a time.
//
// When thousands of acquisitions start or end at once, each attempt or
// release on its own would cost a round trip on one of the few workers.
// Queued here instead, they go out in batches of up to kMaxBatch per store
// call (Backend::TryAcquireMany, ReleaseMany), one batch per worker at a
// time, and each answer is handed back on the worker that sent its batch.
//
// A batch's grants are counted from its start, and its releases must reach
// the store before their leases end; so a batch holds no more calls than
// the client was measured to get through in 1/kTtlShare of the shortest
// TTL among them (the time per call of the last batch; kFirstBatch before
// any was measured). On a slow client (a sanitizer build, a loaded
// machine) batches shrink rather than age the leases in them.
#ifndef DLOCK_SRC_CORE_CALL_BATCHER_H_
#define DLOCK_SRC_CORE_CALL_BATCHER_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <vector>

#include "dlock/backend.h"
#include "dlock/clock.h"

namespace dlock::internal {

class AsyncDriver;

class CallBatcher {
 public:
  // `sent`: when the attempt's batch was sent, on `clock`.
  using AttemptAnswer = std::function<void(Result<Attempt>, TimePoint sent)>;
  using ReleaseAnswer = std::function<void(Status)>;
  static constexpr std::size_t kMaxBatch = 256;
  static constexpr std::size_t kFirstBatch = 16;
  static constexpr int kTtlShare = 10;

  CallBatcher(Backend& backend, AsyncDriver& driver, Clock& clock, unsigned max_running);

  void QueueAttempt(LeaseRequest request, AttemptAnswer answer);
  void QueueRelease(LeaseRequest holding, ReleaseAnswer answer);

 private:
  // One job: sends what is queued, a batch of each kind, and hands the
  // answers back; posts another job while more is queued.
  void Drain();
  void SendAttempts(std::vector<LeaseRequest>& requests, std::vector<AttemptAnswer>& answers);
  void SendReleases(std::vector<LeaseRequest>& holdings, std::vector<ReleaseAnswer>& answers);
  void PostIfNeededLocked();
  // With mu_ held: how many of the queue's first calls make one batch.
  std::size_t FittingLocked(const std::deque<LeaseRequest>& queue) const;
  // A batch of `calls` took `took`.
  void Measured(std::size_t calls, Duration took);

  Backend& backend_;
  AsyncDriver& driver_;
  Clock& clock_;
  const unsigned max_running_;
  std::mutex mu_;
  // Queues, taken from the front kMaxBatch at a time: deques, so that a
  // burst of N calls costs O(N) to drain, not O(N^2 / kMaxBatch) moves.
  std::deque<LeaseRequest> attempts_;
  std::deque<AttemptAnswer> attempt_answers_;
  std::deque<LeaseRequest> releases_;
  std::deque<ReleaseAnswer> release_answers_;
  unsigned running_ = 0;  // Drain jobs posted or running
  Duration per_call_{0};  // in the last batch; 0 before any
};

}  // namespace dlock::internal

#endif  // DLOCK_SRC_CORE_CALL_BATCHER_H_
