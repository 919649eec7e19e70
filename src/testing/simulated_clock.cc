#include "dlock/testing/simulated_clock.h"

#include <algorithm>
#include <utility>

namespace dlock::testing {

struct SimulatedClock::LoopEntry {
  std::function<TimePoint(TimePoint)> run;
  TimePoint next;
  bool running = false;
  // Woken while it ran: the time its run returns may predate the wake
  // (another thread asked for a sooner run meanwhile), so it runs again now.
  bool woken_while_running = false;
  std::thread::id runner;
};

class SimulatedClock::SimLoop final : public Loop {
 public:
  SimLoop(SimulatedClock* clock, std::shared_ptr<LoopEntry> entry)
      : clock_(clock), entry_(std::move(entry)) {}

  ~SimLoop() override {
    std::unique_lock lock(clock_->mu_);
    std::erase(clock_->loops_, entry_);
    // A loop destroyed by its own run (a callback dropped the last Lease)
    // must not wait for itself; any other thread waits for the run to end.
    if (entry_->running && entry_->runner != std::this_thread::get_id()) {
      clock_->count_cv_.wait(lock, [&] { return !entry_->running; });
    }
  }

  void Wake() override {
    std::lock_guard lock(clock_->mu_);
    entry_->next = std::min(entry_->next, clock_->now_);
    if (entry_->running) entry_->woken_while_running = true;
  }

 private:
  SimulatedClock* clock_;
  std::shared_ptr<LoopEntry> entry_;
};

SimulatedClock::SimulatedClock() : SimulatedClock(TimePoint(std::chrono::hours(24))) {}
SimulatedClock::SimulatedClock(TimePoint start) : now_(start) {}
SimulatedClock::~SimulatedClock() = default;

TimePoint SimulatedClock::Now() const {
  std::lock_guard lock(mu_);
  return now_;
}

bool SimulatedClock::SleepUntil(TimePoint deadline, std::stop_token stop) {
  std::unique_lock lock(mu_);
  Sleeper me{deadline};
  sleepers_.push_back(&me);
  count_cv_.notify_all();
  bool reached = sleepers_cv_.wait(lock, stop, [&] { return now_ >= deadline; });
  std::erase(sleepers_, &me);
  return reached;
}

std::unique_ptr<Loop> SimulatedClock::StartLoop(std::function<TimePoint(TimePoint)> run) {
  auto entry = std::make_shared<LoopEntry>();
  entry->run = std::move(run);
  std::lock_guard lock(mu_);
  entry->next = now_;  // first run at the next Advance, like a thread's first run
  loops_.push_back(entry);
  return std::make_unique<SimLoop>(this, std::move(entry));
}

void SimulatedClock::Advance(Duration d) {
  TimePoint target;
  {
    std::lock_guard lock(mu_);
    target = now_ + d;
  }
  AdvanceTo(target);
}

void SimulatedClock::AdvanceTo(TimePoint target) {
  std::unique_lock lock(mu_);
  for (;;) {
    // Run the earliest loop that is due at the current time.
    std::shared_ptr<LoopEntry> due;
    for (const auto& e : loops_) {
      if (!e->running && e->next <= now_ && (!due || e->next < due->next)) due = e;
    }
    if (due) {
      due->running = true;
      due->runner = std::this_thread::get_id();
      const TimePoint at = now_;
      lock.unlock();
      TimePoint next = due->run(at);
      lock.lock();
      due->running = false;
      due->next = std::exchange(due->woken_while_running, false) ? std::min(next, now_) : next;
      count_cv_.notify_all();
      continue;
    }
    std::optional<TimePoint> step = NextDeadlineLocked();
    if (!step || *step > target) {
      now_ = std::max(now_, target);
      sleepers_cv_.notify_all();
      return;
    }
    now_ = *step;
    sleepers_cv_.notify_all();
  }
}

void SimulatedClock::AwaitSleepers(int n) {
  std::unique_lock lock(mu_);
  // Only sleepers whose deadline is still ahead count: one that Advance()
  // has released but that has not yet run is not asleep.
  count_cv_.wait(lock, [&] {
    return std::count_if(sleepers_.begin(), sleepers_.end(),
                         [&](const Sleeper* s) { return s->deadline > now_; }) >= n;
  });
}

std::optional<TimePoint> SimulatedClock::NextDeadline() const {
  std::lock_guard lock(mu_);
  return NextDeadlineLocked();
}

std::optional<TimePoint> SimulatedClock::NextDeadlineLocked() const {
  std::optional<TimePoint> next;
  auto consider = [&](TimePoint t) {
    if (t > now_ && (!next || t < *next)) next = t;
  };
  for (const auto& e : loops_) {
    if (!e->running) consider(e->next);
  }
  for (const Sleeper* s : sleepers_) consider(s->deadline);
  return next;
}

}  // namespace dlock::testing
