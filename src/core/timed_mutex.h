// A mutex whose lock can give up at a deadline, for a store's connection:
// a call must not wait for a busy connection past its own time limit.
// Not std::timed_mutex: its try_lock_until is pthread_mutex_clocklock,
// which ThreadSanitizer (GCC 12) does not see, so it reports every unlock.
// Meets the Lockable and TimedLockable requirements (std::unique_lock).
#ifndef DLOCK_SRC_CORE_TIMED_MUTEX_H_
#define DLOCK_SRC_CORE_TIMED_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace dlock::internal {

class TimedMutex {
 public:
  void lock() {
    std::unique_lock l(mu_);
    cv_.wait(l, [&] { return !locked_; });
    locked_ = true;
  }
  bool try_lock() {
    std::lock_guard l(mu_);
    if (locked_) return false;
    locked_ = true;
    return true;
  }
  template <typename Clock, typename Duration>
  bool try_lock_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    std::unique_lock l(mu_);
    if (!cv_.wait_until(l, deadline, [&] { return !locked_; })) return false;
    locked_ = true;
    return true;
  }
  void unlock() {
    {
      std::lock_guard l(mu_);
      locked_ = false;
    }
    cv_.notify_one();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool locked_ = false;
};

}  // namespace dlock::internal

#endif  // DLOCK_SRC_CORE_TIMED_MUTEX_H_
