// C++20 coroutines over Client::AcquireAsync.
//
//   dlock::Task handle(dlock::Client& client) {      // any coroutine type
//     dlock::Result<dlock::Lease> lease =
//         co_await dlock::Acquiring(client, "orders/42", {.wait = 10s});
//     ...
//   }
//
// The coroutine is suspended while the acquisition waits (no thread is
// held) and resumes on one of the client's async threads with the answer.
// Cancel through AcquireOptions::cancel. dlock brings no task type of its
// own: use your framework's, or any type whose promise runs the body.
#ifndef DLOCK_ASYNC_H_
#define DLOCK_ASYNC_H_

#include <coroutine>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "dlock/client.h"

namespace dlock {

class AcquireAwaiter {
 public:
  AcquireAwaiter(Client& client, std::string_view key, AcquireOptions options)
      : client_(client), key_(key), options_(std::move(options)) {}

  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> waiting) {
    // AcquireAsync copies what it needs before any step can run, and the
    // callback may resume the coroutine (ending this awaiter) before
    // AcquireAsync has returned: nothing here touches `this` after it.
    (void)client_.AcquireAsync(key_, options_, [this, waiting](Result<Lease> lease) {
      result_.emplace(std::move(lease));
      waiting.resume();
    });
  }
  Result<Lease> await_resume() { return std::move(*result_); }

 private:
  Client& client_;
  std::string key_;
  AcquireOptions options_;
  std::optional<Result<Lease>> result_;
};

// co_await Acquiring(client, key, options): Result<Lease>, as Acquire.
inline AcquireAwaiter Acquiring(Client& client, std::string_view key,
                                AcquireOptions options = {}) {
  return AcquireAwaiter(client, key, std::move(options));
}

}  // namespace dlock

#endif  // DLOCK_ASYNC_H_
