#include "core/metrics_recorder.h"

#include <algorithm>

namespace dlock::internal {
namespace {

using std::chrono::nanoseconds;

// The bucket bounds in whole nanoseconds, so that placing an observation
// compares integers.
constexpr std::array<std::int64_t, kMetricBuckets.size()> BoundsNs() {
  std::array<std::int64_t, kMetricBuckets.size()> ns{};
  for (std::size_t i = 0; i < ns.size(); ++i) {
    ns[i] = static_cast<std::int64_t>(kMetricBuckets[i] * 1e9 + 0.5);
  }
  return ns;
}
constexpr auto kBoundsNs = BoundsNs();

std::size_t Index(StatusCode code) { return static_cast<std::size_t>(code); }

}  // namespace

void AtomicHistogram::Observe(Duration d) {
  const std::int64_t ns = std::max<std::int64_t>(
      std::chrono::duration_cast<nanoseconds>(d).count(), 0);
  const auto bucket = static_cast<std::size_t>(
      std::lower_bound(kBoundsNs.begin(), kBoundsNs.end(), ns) - kBoundsNs.begin());
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<std::uint64_t>(ns), std::memory_order_relaxed);
}

Histogram AtomicHistogram::Read() const {
  Histogram h;
  for (std::size_t i = 0; i < counts_.size(); ++i) {
    h.counts[i] = counts_[i].load(std::memory_order_relaxed);
    h.count += h.counts[i];
  }
  h.sum_seconds = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9;
  return h;
}

void MetricsRecorder::Grant(std::string_view key, Duration acquire) {
  if (!enabled_) return;
  Add(grants_);
  acquire_.Observe(acquire);
  Emit({.kind = MetricEvent::Kind::kGrant, .key = key, .duration = acquire});
}

void MetricsRecorder::Waited(Duration wait) {
  if (!enabled_) return;
  wait_.Observe(wait);
  Emit({.kind = MetricEvent::Kind::kWait, .duration = wait});
}

void MetricsRecorder::Handoff(Duration handoff) {
  if (!enabled_) return;
  handoff_.Observe(handoff);
  Emit({.kind = MetricEvent::Kind::kHandoff, .duration = handoff});
}

void MetricsRecorder::AcquireFailed(StatusCode code) {
  if (!enabled_) return;
  Add(acquires_failed_[Index(code)]);
  Emit({.kind = MetricEvent::Kind::kAcquireFailed, .code = code});
}

void MetricsRecorder::Released(std::string_view key, Duration hold) {
  if (!enabled_) return;
  Add(releases_);
  hold_.Observe(hold);
  Emit({.kind = MetricEvent::Kind::kRelease, .key = key, .duration = hold});
}

void MetricsRecorder::Renewal(Duration round_trip) {
  if (!enabled_) return;
  renewal_.Observe(round_trip);
  Emit({.kind = MetricEvent::Kind::kRenewal, .duration = round_trip});
}

void MetricsRecorder::RenewalFailed(std::string_view key, StatusCode code) {
  if (!enabled_) return;
  Add(renewals_failed_);
  Emit({.kind = MetricEvent::Kind::kRenewalFailed, .key = key, .code = code});
}

void MetricsRecorder::Lost(std::string_view key, LossCause cause, Duration hold) {
  if (!enabled_) return;
  Add(leases_lost_[static_cast<std::size_t>(cause)]);
  hold_.Observe(hold);
  Emit({.kind = MetricEvent::Kind::kLost, .key = key, .duration = hold, .cause = cause});
}

void MetricsRecorder::StoreCall(const Status& status) {
  if (!enabled_ || IsLockAnswer(status.code())) return;
  Add(store_errors_[Index(status.code())]);
  Emit({.kind = MetricEvent::Kind::kStoreError, .code = status.code()});
}

ClientMetrics MetricsRecorder::Read() const {
  ClientMetrics m;
  m.acquire = acquire_.Read();
  m.wait = wait_.Read();
  m.handoff = handoff_.Read();
  m.hold = hold_.Read();
  m.renewal = renewal_.Read();
  m.grants = grants_.load(std::memory_order_relaxed);
  m.releases = releases_.load(std::memory_order_relaxed);
  m.renewals_failed = renewals_failed_.load(std::memory_order_relaxed);
  for (std::size_t i = 0; i < kStatusCodes; ++i) {
    m.acquires_failed[i] = acquires_failed_[i].load(std::memory_order_relaxed);
    m.store_errors[i] = store_errors_[i].load(std::memory_order_relaxed);
  }
  for (std::size_t i = 0; i < kLossCauses; ++i) {
    m.leases_lost[i] = leases_lost_[i].load(std::memory_order_relaxed);
  }
  return m;
}

}  // namespace dlock::internal
