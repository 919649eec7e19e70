// Status and Result<T>: how every dlock call reports its outcome.
//
// Contention and lease loss are normal outcomes, not exceptions: a call that
// can fail returns a Status (or a Result<T>, a value or a Status), and the code
// says what the caller should do next:
//
//   kLockHeld          someone else holds the lock; wait or try later
//   kDeadlineExceeded  the wait ran out before the lock became free
//   kLeaseLost         this lease is gone (expired, revoked, taken over); stop
//                      writing under it and acquire again
//   kNotOwner          the store says a different owner holds the key
//   kStaleToken        a fence rejected a write carrying an older token
//   kUnavailable       the store could not be reached or answered oddly; the
//                      same call may succeed if retried
//   kInvalidArgument   the input is wrong; retrying cannot help
//   kPermissionDenied  the store refused these credentials, or this user may
//                      not touch these keys; fix the credentials or the
//                      store's grants, retrying cannot help
//   kCancelled         the caller's stop_token asked to stop
//   kFailedPrecondition the object is in the wrong state (e.g. a moved-from
//                      Lease)
//   kDataLoss          state dlock keeps (a fence's record) is damaged; a
//                      person must look before anything is retried
//   kInternal          a bug in dlock
//   kNotFound          what was to be kept is gone (a waiter's place in a
//                      queue: Backend::KeepPlaces); attempt again
//
// Thread-safety: Status and Result are values; const use from many threads is
// safe.
#ifndef DLOCK_STATUS_H_
#define DLOCK_STATUS_H_

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "dlock/export.h"

namespace dlock {

enum class StatusCode {
  kOk = 0,
  kLockHeld,
  kDeadlineExceeded,
  kLeaseLost,
  kNotOwner,
  kStaleToken,
  kUnavailable,
  kInvalidArgument,
  kPermissionDenied,
  kCancelled,
  kFailedPrecondition,
  kDataLoss,
  kInternal,
  kNotFound,
};

// "LockHeld", "Unavailable", ...
DLOCK_EXPORT std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] DLOCK_EXPORT Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message)
      : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "LockHeld: key jobs/a is held by ..." (or "OK").
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>".
  Status WithContext(std::string_view context) const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status LockHeldError(std::string m) { return {StatusCode::kLockHeld, std::move(m)}; }
inline Status DeadlineExceededError(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }
inline Status LeaseLostError(std::string m) { return {StatusCode::kLeaseLost, std::move(m)}; }
inline Status NotOwnerError(std::string m) { return {StatusCode::kNotOwner, std::move(m)}; }
inline Status StaleTokenError(std::string m) { return {StatusCode::kStaleToken, std::move(m)}; }
inline Status UnavailableError(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status InvalidArgumentError(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status PermissionDeniedError(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }
inline Status CancelledError(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
inline Status FailedPreconditionError(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status DataLossError(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status InternalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status NotFoundError(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }

// A T or a non-OK Status, shaped like std::expected (C++23) so that code can
// move to it later without churn.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    assert(!std::get<Status>(v_).ok() && "Result needs a value or an error");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }

  // The error; OK when a value is present.
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }

  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace dlock

// Propagates a non-OK Status from an expression returning Status.
#define DLOCK_RETURN_IF_ERROR(expr)            \
  do {                                         \
    ::dlock::Status dlock_status_ = (expr);    \
    if (!dlock_status_.ok()) return dlock_status_; \
  } while (0)

// Evaluates `expr` (a Result<T>); returns its Status if it failed, else
// moves its value into `lhs`, which may declare a variable:
//   DLOCK_ASSIGN_OR_RETURN(auto rows, db.Query(sql));
#define DLOCK_ASSIGN_OR_RETURN(lhs, expr) \
  DLOCK_ASSIGN_OR_RETURN_IMPL_(DLOCK_STATUS_CONCAT_(dlock_result_, __LINE__), lhs, expr)
#define DLOCK_ASSIGN_OR_RETURN_IMPL_(result, lhs, expr) \
  auto result = (expr);                                 \
  if (!result.ok()) return result.status();             \
  lhs = std::move(*result)
#define DLOCK_STATUS_CONCAT_(a, b) DLOCK_STATUS_CONCAT_INNER_(a, b)
#define DLOCK_STATUS_CONCAT_INNER_(a, b) a##b

#endif  // DLOCK_STATUS_H_
