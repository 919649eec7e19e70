// The HTML report of a chaos run: one self-contained file with an SVG
// timeline in the manner of the classic fencing diagram (a lane per worker,
// lease bars, pause shading, writes marked admitted or rejected with their
// token, violations in red) and the checker table.
#ifndef DLOCK_HARNESS_REPORT_H_
#define DLOCK_HARNESS_REPORT_H_

#include <string>

#include "dlock/status.h"
#include "harness/runner.h"

namespace dlock::harness {

struct ReportContext {
  std::string title;    // e.g. "dlock chaos: sqlite, fenced, seed 42"
  std::string backend;  // redacted URI
  std::uint64_t seed = 0;
};

std::string RenderReport(const RunResult& run, const ReportContext& context);
Status WriteReport(const std::string& path, const RunResult& run, const ReportContext& context);

}  // namespace dlock::harness

#endif  // DLOCK_HARNESS_REPORT_H_
