// Sample summaries for the benchmarks (`dlock bench`, bench/*.cc): one
// definition of p50/p99 for every figure dlock reports.
#ifndef DLOCK_SRC_CORE_STATS_H_
#define DLOCK_SRC_CORE_STATS_H_

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <vector>

namespace dlock::internal {

struct Summary {
  double p50_us = 0, p99_us = 0, mean_us = 0;
  std::size_t n = 0;
};

// The nearest-rank percentile: the smallest sample that at least p% of all
// samples are less than or equal to.
inline double NearestRank(const std::vector<double>& sorted, std::size_t p) {
  if (sorted.empty()) return 0;
  return sorted[std::max<std::size_t>((p * sorted.size() + 99) / 100, 1) - 1];
}

// p50, p99 (nearest rank) and mean of samples in µs.
inline Summary Summarize(std::vector<double> us) {
  Summary s;
  s.n = us.size();
  if (us.empty()) return s;
  std::sort(us.begin(), us.end());
  s.p50_us = NearestRank(us, 50);
  s.p99_us = NearestRank(us, 99);
  s.mean_us = std::accumulate(us.begin(), us.end(), 0.0) / static_cast<double>(us.size());
  return s;
}

}  // namespace dlock::internal

#endif  // DLOCK_SRC_CORE_STATS_H_
