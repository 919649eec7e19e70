#include "dlock/status.h"

namespace dlock {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kLockHeld: return "LockHeld";
    case StatusCode::kDeadlineExceeded: return "DeadlineExceeded";
    case StatusCode::kLeaseLost: return "LeaseLost";
    case StatusCode::kNotOwner: return "NotOwner";
    case StatusCode::kStaleToken: return "StaleToken";
    case StatusCode::kUnavailable: return "Unavailable";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kPermissionDenied: return "PermissionDenied";
    case StatusCode::kCancelled: return "Cancelled";
    case StatusCode::kFailedPrecondition: return "FailedPrecondition";
    case StatusCode::kDataLoss: return "DataLoss";
    case StatusCode::kInternal: return "Internal";
    case StatusCode::kNotFound: return "NotFound";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s(StatusCodeName(code_));
  if (!message_.empty()) {
    s += ": ";
    s += message_;
  }
  return s;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message_;
  return Status(code_, std::move(m));
}

}  // namespace dlock
