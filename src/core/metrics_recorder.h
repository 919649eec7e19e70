// MetricsRecorder: a client's metrics as it records them — relaxed atomics,
// so recording never takes a lock or allocates on the acquire path — and the
// application's hook, called after each event.
#ifndef DLOCK_SRC_CORE_METRICS_RECORDER_H_
#define DLOCK_SRC_CORE_METRICS_RECORDER_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>

#include "dlock/clock.h"
#include "dlock/metrics.h"

namespace dlock::internal {

class AtomicHistogram {
 public:
  void Observe(Duration d);
  Histogram Read() const;

 private:
  std::array<std::atomic<std::uint64_t>, kMetricBuckets.size() + 1> counts_{};
  std::atomic<std::uint64_t> sum_ns_{0};
};

class MetricsRecorder {
 public:
  using Hook = std::function<void(const MetricEvent&)>;
  // `enabled` false records nothing (the benchmark's "before").
  MetricsRecorder(bool enabled, Hook hook) : enabled_(enabled), hook_(std::move(hook)) {}

  void Grant(std::string_view key, Duration acquire);
  void Waited(Duration wait);
  void Handoff(Duration handoff);
  void AcquireFailed(StatusCode code);
  void Released(std::string_view key, Duration hold);
  void Renewal(Duration round_trip);
  void RenewalFailed(std::string_view key, StatusCode code);
  void Lost(std::string_view key, LossCause cause, Duration hold);
  // Counts `status` when it is a store error (not OK, not a lock answer).
  void StoreCall(const Status& status);

  ClientMetrics Read() const;

 private:
  static void Add(std::atomic<std::uint64_t>& counter) {
    counter.fetch_add(1, std::memory_order_relaxed);
  }
  void Emit(const MetricEvent& event) const {
    if (hook_) hook_(event);
  }

  const bool enabled_;
  const Hook hook_;
  AtomicHistogram acquire_, wait_, handoff_, hold_, renewal_;
  std::atomic<std::uint64_t> grants_{0}, releases_{0}, renewals_failed_{0};
  std::array<std::atomic<std::uint64_t>, kStatusCodes> acquires_failed_{};
  std::array<std::atomic<std::uint64_t>, kLossCauses> leases_lost_{};
  std::array<std::atomic<std::uint64_t>, kStatusCodes> store_errors_{};
};

}  // namespace dlock::internal

#endif  // DLOCK_SRC_CORE_METRICS_RECORDER_H_
