// Metrics: what one Client has done since it was made, for the monitoring an
// application already has.
//
//   dlock::ClientMetrics m = client->Metrics();   // read a snapshot
//   std::string page = dlock::PrometheusText(m);  // or serve it as it is
//
// or hook every event into another system (ClientOptions::on_metric). The
// durations are measured on the client's clock; docs/operations.md says what
// each one spans and which questions it answers.
//
// Fences are not part of a client (the resource runs them, often in another
// process): they count into one process-wide tally, FenceMetrics().
#ifndef DLOCK_METRICS_H_
#define DLOCK_METRICS_H_

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dlock/export.h"
#include "dlock/status.h"

namespace dlock {

// Upper bounds, in seconds, of every histogram's buckets: 100 µs (a local
// store's round trip) to 60 s (a long wait). Above the last: +Inf.
inline constexpr std::array<double, 16> kMetricBuckets = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05,   0.1,     0.25,   0.5,   1,     2.5,   10,   60};

struct Histogram {
  // counts[i]: observations in (bound i-1, bound i]; the last one is +Inf.
  // Not cumulative (PrometheusText adds them up).
  std::array<std::uint64_t, kMetricBuckets.size() + 1> counts{};
  std::uint64_t count = 0;
  double sum_seconds = 0;
};

// Why a lease was lost.
enum class LossCause {
  kExpired,      // valid_until passed without a successful renewal
  kNotOwner,     // the store answered that this owner no longer holds it
  kLateRenewal,  // a renewal was answered only after valid_until
  kMaxHold,      // AcquireOptions::max_hold ran out, so renewals stopped
};
inline constexpr std::size_t kLossCauses = 4;
// "expired", "not_owner", "late_renewal", "max_hold".
DLOCK_EXPORT std::string_view LossCauseName(LossCause cause);

// A lock's own answers (OK, held, not the owner, lease lost): counted as
// outcomes, never as store errors.
inline bool IsLockAnswer(StatusCode code) {
  return code == StatusCode::kOk || code == StatusCode::kLockHeld ||
         code == StatusCode::kNotOwner || code == StatusCode::kLeaseLost;
}

inline constexpr std::size_t kStatusCodes = static_cast<std::size_t>(StatusCode::kNotFound) + 1;

struct ClientMetrics {
  Histogram acquire;   // a call to Acquire or TryAcquire, to its grant
  Histogram wait;      // an acquire that found the key held: that moment to
                       // its end, granted or not
  Histogram handoff;   // an acquire that waited and was granted: from the
                       // end of its last wait (woken, or a poll) to the grant
  Histogram hold;      // a grant to its release or loss
  Histogram renewal;   // one renewal round trip (one per batch of leases)
  std::uint64_t grants = 0;
  std::uint64_t releases = 0;
  std::uint64_t renewals_failed = 0;  // per lease whose renewal failed
  // Acquires that ended without a grant, by code (kDeadlineExceeded: gave
  // up waiting; kLockHeld: TryAcquire found it held; kCancelled; errors).
  std::array<std::uint64_t, kStatusCodes> acquires_failed{};
  std::array<std::uint64_t, kLossCauses> leases_lost{};
  // Errors the store's calls returned, by code. Lock answers (held, not
  // the owner) are not errors.
  std::array<std::uint64_t, kStatusCodes> store_errors{};
};

// One event, as ClientOptions::on_metric receives it.
struct MetricEvent {
  enum class Kind {
    kGrant,          // duration: acquire; key
    kWait,           // duration: wait
    kHandoff,        // duration: handoff
    kAcquireFailed,  // code
    kRelease,        // duration: hold
    kRenewal,        // duration: one renewal round trip
    kRenewalFailed,  // code; key
    kLost,           // cause, duration: hold; key
    kStoreError,     // code
  };
  Kind kind;
  std::string_view key;  // empty where the event has no one key
  std::chrono::nanoseconds duration{0};
  StatusCode code = StatusCode::kOk;
  LossCause cause = LossCause::kExpired;
};

// Admissions and rejections of every fence in this process, by fence:
// "memory", "sqlite", "directory", "postgres", "redis" — and any name a fence
// of the application's own records under.
struct FenceCount {
  std::string fence;
  std::uint64_t admitted = 0;
  std::uint64_t rejected = 0;  // stale tokens
};
DLOCK_EXPORT std::vector<FenceCount> FenceMetrics();
// Counts one fence decision: kOk admitted, kStaleToken rejected; any other
// status (an error before the decision) is not counted.
DLOCK_EXPORT void RecordFenceDecision(std::string_view fence, const Status& decision);

// Labels added to every sample, e.g. {{"service", "billing"}}. Names must be
// Prometheus label names ([a-zA-Z_][a-zA-Z0-9_]*); values are escaped.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// The Prometheus text exposition format (version 0.0.4): a client's metrics,
// and the fences' tally. kInvalidArgument for a bad label name.
DLOCK_EXPORT Result<std::string> PrometheusText(const ClientMetrics& metrics,
                                                const MetricLabels& labels = {});
DLOCK_EXPORT Result<std::string> PrometheusText(const std::vector<FenceCount>& fences,
                                                const MetricLabels& labels = {});

}  // namespace dlock

#endif  // DLOCK_METRICS_H_
