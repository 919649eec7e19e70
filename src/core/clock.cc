#include "dlock/clock.h"

#include <sys/random.h>
#include <time.h>

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

namespace dlock {

MonotonicClock::time_point MonotonicClock::now() noexcept {
  timespec ts;
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return time_point(std::chrono::seconds(ts.tv_sec) +
                    std::chrono::nanoseconds(ts.tv_nsec));
}

namespace {

// Waits on a steady_clock-based condition for the span until `deadline` on
// the boot-time clock. The two clocks advance at the same rate while the
// machine runs; across a suspend the wait is re-checked against Now().
template <typename Pred>
bool WaitUntilBoot(std::condition_variable_any& cv, std::unique_lock<std::mutex>& lock,
                   std::stop_token stop, TimePoint deadline, Pred pred) {
  while (!pred() && !stop.stop_requested()) {
    auto left = deadline - MonotonicClock::now();
    if (left <= Duration::zero()) return pred();
    cv.wait_for(lock, stop, left, pred);
  }
  return pred();
}

class RealLoop final : public Loop {
 public:
  explicit RealLoop(std::function<TimePoint(TimePoint)> run)
      : state_(std::make_shared<State>()) {
    state_->run = std::move(run);
    // The thread holds the state, so it stays valid even if the handle is
    // destroyed from inside run() (see ~RealLoop).
    thread_ = std::jthread([s = state_](std::stop_token stop) {
      std::unique_lock lock(s->mu);
      while (!stop.stop_requested()) {
        s->woken = false;
        lock.unlock();
        TimePoint next = s->run(MonotonicClock::now());
        lock.lock();
        WaitUntilBoot(s->cv, lock, stop, next, [&] { return s->woken; });
      }
    });
  }

  ~RealLoop() override {
    thread_.request_stop();
    if (thread_.get_id() == std::this_thread::get_id()) {
      thread_.detach();  // destroyed by its own run(); it exits after it
    } else {
      thread_.join();
    }
  }

  void Wake() override {
    std::lock_guard lock(state_->mu);
    state_->woken = true;
    state_->cv.notify_all();
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable_any cv;
    bool woken = false;
    std::function<TimePoint(TimePoint)> run;
  };
  std::shared_ptr<State> state_;
  std::jthread thread_;
};

class KernelRandom final : public Random {
 public:
  std::uint64_t Next() override {
    std::uint64_t v = 0;
    unsigned char* p = reinterpret_cast<unsigned char*>(&v);
    std::size_t got = 0;
    while (got < sizeof v) {
      ssize_t n = getrandom(p + got, sizeof v - got, 0);
      if (n > 0) got += static_cast<std::size_t>(n);
    }
    return v;
  }
};

}  // namespace

bool RealClock::SleepUntil(TimePoint deadline, std::stop_token stop) {
  std::mutex mu;
  std::condition_variable_any cv;
  std::unique_lock lock(mu);
  WaitUntilBoot(cv, lock, stop, deadline, [] { return false; });
  return !stop.stop_requested();
}

std::unique_ptr<Loop> RealClock::StartLoop(std::function<TimePoint(TimePoint)> run) {
  return std::make_unique<RealLoop>(std::move(run));
}

std::shared_ptr<Clock> DefaultClock() {
  static const auto clock = std::make_shared<RealClock>();
  return clock;
}

std::shared_ptr<Random> DefaultRandom() {
  static const auto random = std::make_shared<KernelRandom>();
  return random;
}

}  // namespace dlock
