// Client metrics and the fences' tally in the Prometheus text format.
#include <string>

#include "core/prometheus_writer.h"
#include "dlock/metrics.h"

namespace dlock {
namespace {

using internal::PrometheusWriter;

void WriteByCode(PrometheusWriter& w, std::string_view name, std::string_view help,
                 const std::array<std::uint64_t, kStatusCodes>& counts, bool skip_answers) {
  w.Family(name, "counter", help);
  for (std::size_t i = 1; i < kStatusCodes; ++i) {
    const auto code = static_cast<StatusCode>(i);
    if (skip_answers && IsLockAnswer(code)) continue;
    w.Sample(name, {{"code", std::string(StatusCodeName(code))}}, std::to_string(counts[i]));
  }
}

void WriteHistograms(PrometheusWriter& w, const ClientMetrics& m) {
  w.Histogram("dlock_acquire_seconds", "From an acquire call to its grant.", m.acquire);
  w.Histogram("dlock_wait_seconds",
              "An acquire that found the key held: from then to its end, granted or not.",
              m.wait);
  w.Histogram("dlock_handoff_seconds",
              "A waiting acquire: from the end of its last wait to the grant.", m.handoff);
  w.Histogram("dlock_hold_seconds", "From a grant to its release or loss.", m.hold);
  w.Histogram("dlock_renewal_seconds", "One renewal round trip to the store.", m.renewal);
}

}  // namespace

std::string_view LossCauseName(LossCause cause) {
  switch (cause) {
    case LossCause::kExpired: return "expired";
    case LossCause::kNotOwner: return "not_owner";
    case LossCause::kLateRenewal: return "late_renewal";
    case LossCause::kMaxHold: return "max_hold";
  }
  return "unknown";
}

Result<std::string> PrometheusText(const ClientMetrics& m, const MetricLabels& labels) {
  DLOCK_ASSIGN_OR_RETURN(PrometheusWriter w, PrometheusWriter::Make(labels));
  WriteHistograms(w, m);
  w.Counter("dlock_grants_total", "Leases granted.", m.grants);
  w.Counter("dlock_releases_total", "Leases released by their holder.", m.releases);
  w.Counter("dlock_renewals_failed_total", "Lease renewals that failed.", m.renewals_failed);
  WriteByCode(w, "dlock_acquires_failed_total", "Acquires that ended without a grant.",
              m.acquires_failed, /*skip_answers=*/false);
  w.Family("dlock_leases_lost_total", "counter", "Leases lost, by cause.");
  for (std::size_t i = 0; i < kLossCauses; ++i) {
    w.Sample("dlock_leases_lost_total",
             {{"cause", std::string(LossCauseName(static_cast<LossCause>(i)))}},
             std::to_string(m.leases_lost[i]));
  }
  WriteByCode(w, "dlock_store_errors_total", "Errors the store's calls returned.",
              m.store_errors, /*skip_answers=*/true);
  return w.Take();
}

Result<std::string> PrometheusText(const std::vector<FenceCount>& fences,
                                   const MetricLabels& labels) {
  DLOCK_ASSIGN_OR_RETURN(PrometheusWriter w, PrometheusWriter::Make(labels));
  w.Family("dlock_fence_admitted_total", "counter", "Writes a fence admitted.");
  for (const auto& f : fences) {
    w.Sample("dlock_fence_admitted_total", {{"fence", f.fence}}, std::to_string(f.admitted));
  }
  w.Family("dlock_fence_rejected_total", "counter", "Writes a fence rejected: stale tokens.");
  for (const auto& f : fences) {
    w.Sample("dlock_fence_rejected_total", {{"fence", f.fence}}, std::to_string(f.rejected));
  }
  return w.Take();
}

}  // namespace dlock
