#include "dlock/fence.h"
#include "dlock/metrics.h"

#include <limits>

namespace dlock::fence {

Status StaleToken(FencingToken token, FencingToken highest, std::string_view key) {
  return StaleTokenError("stale token " + std::to_string(token) + " < " +
                         std::to_string(highest) + " for key " + std::string(key));
}

Status CheckToken(FencingToken token) {
  if (token == 0) {
    return InvalidArgumentError("fencing token 0 is never granted (an unordered Redlock "
                                "grant?): nothing to fence with");
  }
  if (token == std::numeric_limits<FencingToken>::max()) {
    return InvalidArgumentError("fencing token " + std::to_string(token) +
                                " is never granted: a fence that accepted it could never "
                                "accept a newer one");
  }
  return Status::Ok();
}

Status Memory::Admit(std::string_view key, FencingToken token,
                     const std::function<Status()>& write) {
  DLOCK_RETURN_IF_ERROR(CheckToken(token));
  std::lock_guard lock(mu_);
  auto it = highest_.find(key);
  const FencingToken highest = it == highest_.end() ? 0 : it->second;
  if (token < highest) {
    Status stale = StaleToken(token, highest, key);
    RecordFenceDecision("memory", stale);
    return stale;
  }
  if (write) DLOCK_RETURN_IF_ERROR(write());
  if (it == highest_.end()) {
    highest_.emplace(std::string(key), token);
  } else {
    it->second = token;
  }
  RecordFenceDecision("memory", Status::Ok());
  return Status::Ok();
}

FencingToken Memory::Highest(std::string_view key) const {
  std::lock_guard lock(mu_);
  auto it = highest_.find(key);
  return it == highest_.end() ? 0 : it->second;
}

}  // namespace dlock::fence
