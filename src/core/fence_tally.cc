// The process-wide tally of fence decisions (dlock/metrics.h). Fences run on
// the resource's side, often without any Client, so the tally is per
// process; a mutex is fine beside the write each decision guards.
#include <map>
#include <mutex>
#include <string>

#include "dlock/metrics.h"

namespace dlock {
namespace {

struct Tally {
  std::mutex mu;
  std::map<std::string, FenceCount, std::less<>> by_fence;
};

Tally& TheTally() {
  static Tally* tally = new Tally;  // never destroyed: fences may run at exit
  return *tally;
}

}  // namespace

void RecordFenceDecision(std::string_view fence, const Status& decision) {
  const bool admitted = decision.ok();
  if (!admitted && decision.code() != StatusCode::kStaleToken) return;
  Tally& t = TheTally();
  std::lock_guard lock(t.mu);
  auto it = t.by_fence.find(fence);
  if (it == t.by_fence.end()) {
    it = t.by_fence.emplace(std::string(fence), FenceCount{std::string(fence)}).first;
  }
  ++(admitted ? it->second.admitted : it->second.rejected);
}

std::vector<FenceCount> FenceMetrics() {
  Tally& t = TheTally();
  std::lock_guard lock(t.mu);
  std::vector<FenceCount> out;
  for (const auto& [name, count] : t.by_fence) out.push_back(count);
  return out;
}

}  // namespace dlock
