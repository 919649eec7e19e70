#include "core/shared_loop.h"

#include <algorithm>
#include <deque>
#include <mutex>
#include <utility>

namespace dlock::internal {

struct SharedLoop::State {
  explicit State(std::shared_ptr<Clock> c) : clock(std::move(c)) {}

  struct Job {
    Run run;
    TimePoint next = TimePoint::min();
    bool woken = true;  // a new job runs at the next turn
    bool running = false;
  };

  // Held by the loop's thread too: a job may destroy the SharedLoop.
  const std::shared_ptr<Clock> clock;
  std::mutex mu;
  std::deque<Job> jobs;  // a deque: a running job's entry stays put as jobs are added
  Loop* loop = nullptr;  // null before the start and once stopped: no job runs

  // One turn: runs each job that is due or woken, each with the time of its
  // own start (an earlier job may have taken a round trip). Returns when
  // the next turn is due: now if a job was woken meanwhile, at most an
  // hour on (never TimePoint::max(): the wait adds it to the clock).
  TimePoint RunDue() {
    std::unique_lock lock(mu);
    for (std::size_t i = 0; i < jobs.size() && loop != nullptr; ++i) {
      Job& job = jobs[i];
      const TimePoint now = clock->Now();
      if (!job.woken && job.next > now) continue;
      job.woken = false;
      job.running = true;
      lock.unlock();
      const TimePoint next = job.run(now);
      lock.lock();
      job.next = next;
      job.running = false;
    }
    const TimePoint now = clock->Now();
    TimePoint next = now + std::chrono::hours(1);
    for (const Job& job : jobs) next = std::min(next, job.woken ? now : job.next);
    return next;
  }

  void Wake(std::size_t id, TimePoint by) {
    std::lock_guard lock(mu);
    if (loop == nullptr) return;
    Job& job = jobs[id];
    if (job.woken || (!job.running && job.next <= by)) return;
    job.woken = true;
    loop->Wake();  // never runs a turn inline, so safe under mu
  }
};

SharedLoop::SharedLoop(std::shared_ptr<Clock> clock)
    : state_(std::make_shared<State>(std::move(clock))) {
  loop_ = state_->clock->StartLoop([s = state_](TimePoint) { return s->RunDue(); });
  std::lock_guard lock(state_->mu);
  state_->loop = loop_.get();
}

SharedLoop::~SharedLoop() { Stop(); }

SharedLoop::Waker SharedLoop::Add(Run run) {
  std::size_t id = 0;
  {
    std::lock_guard lock(state_->mu);
    if (state_->loop == nullptr) return [](TimePoint) {};
    state_->jobs.push_back({std::move(run)});
    id = state_->jobs.size() - 1;
    state_->loop->Wake();
  }
  return [weak = std::weak_ptr<State>(state_), id](TimePoint by) {
    if (auto state = weak.lock()) state->Wake(id, by);
  };
}

void SharedLoop::Stop() {
  {
    std::lock_guard lock(state_->mu);
    state_->loop = nullptr;
  }
  // Outside mu: a turn in progress may be waiting for it, and the Loop's
  // destructor waits for that turn (unless this is it).
  loop_.reset();
}

}  // namespace dlock::internal
