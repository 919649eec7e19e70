// What the per-store benchmark programs share: the summary of samples (one
// percentile definition, src/core/stats.h) in the JSON shape every program
// writes, and the monotonic clock they time with.
#ifndef DLOCK_BENCH_BENCH_UTIL_H_
#define DLOCK_BENCH_BENCH_UTIL_H_

#include <chrono>
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/stats.h"

namespace dlock::bench {

using internal::Summarize;
using internal::Summary;

inline nlohmann::json ToJson(const Summary& s) {
  return {{"p50_us", s.p50_us}, {"p99_us", s.p99_us}, {"mean_us", s.mean_us}, {"n", s.n}};
}

// {"p50_us", "p99_us", "mean_us", "n"} of samples in µs.
inline nlohmann::json SummaryJson(std::vector<double> us) { return ToJson(Summarize(std::move(us))); }

inline std::int64_t MonotonicNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline double MicrosBetween(std::chrono::steady_clock::time_point from,
                            std::chrono::steady_clock::time_point to) {
  return std::chrono::duration<double, std::micro>(to - from).count();
}

}  // namespace dlock::bench

#endif  // DLOCK_BENCH_BENCH_UTIL_H_
