#include "core/async_driver.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dlock::internal {

struct AsyncDriver::State {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Job> queue;
  bool stopping = false;
  std::vector<std::thread> workers;
  // Timers by due time; ids map back to their place for CancelTimer.
  std::multimap<TimePoint, std::pair<std::uint64_t, Job>> timers;
  std::unordered_map<std::uint64_t, std::multimap<TimePoint, std::pair<std::uint64_t, Job>>::iterator>
      timer_index;
  std::uint64_t next_timer = 1;

  void Work() {
    std::unique_lock lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stopping || !queue.empty(); });
      if (stopping) return;
      Job job = std::move(queue.front());
      queue.pop_front();
      lock.unlock();
      job();
      job = nullptr;  // what it holds goes outside the lock
      lock.lock();
    }
  }

  // The timer loop's run: posts the due jobs, returns the next due time.
  TimePoint Fire(TimePoint now) {
    std::lock_guard lock(mu);
    while (!timers.empty() && timers.begin()->first <= now && !stopping) {
      auto first = timers.begin();
      timer_index.erase(first->second.first);
      queue.push_back(std::move(first->second.second));
      timers.erase(first);
      cv.notify_one();
    }
    // With nothing due the loop still wakes now and then; harmless.
    return timers.empty() ? now + std::chrono::hours(1) : timers.begin()->first;
  }
};

AsyncDriver::AsyncDriver(SharedLoop& timers, unsigned workers) : state_(std::make_shared<State>()) {
  for (unsigned i = 0; i < std::max(1U, workers); ++i) {
    // Each worker holds the state, so a worker that ends the driver from a
    // job may finish that job after the driver is gone.
    state_->workers.emplace_back([s = state_] { s->Work(); });
  }
  wake_timer_ = timers.Add([s = state_](TimePoint now) { return s->Fire(now); });
}

AsyncDriver::~AsyncDriver() { Stop(); }

void AsyncDriver::Post(Job job) {
  std::lock_guard lock(state_->mu);
  if (state_->stopping) return;
  state_->queue.push_back(std::move(job));
  state_->cv.notify_one();
}

std::uint64_t AsyncDriver::At(TimePoint when, Job job) {
  std::uint64_t id = 0;
  {
    std::lock_guard lock(state_->mu);
    if (state_->stopping) return 0;
    id = state_->next_timer++;
    auto it = state_->timers.emplace(when, std::make_pair(id, std::move(job)));
    state_->timer_index.emplace(id, it);
  }
  wake_timer_(when);  // the loop knows whether it runs the timers by then
  return id;
}

void AsyncDriver::CancelTimer(std::uint64_t id) {
  Job dropped;  // destroyed outside the lock
  std::lock_guard lock(state_->mu);
  auto found = state_->timer_index.find(id);
  if (found == state_->timer_index.end()) return;
  dropped = std::move(found->second->second.second);
  state_->timers.erase(found->second);
  state_->timer_index.erase(found);
}

bool AsyncDriver::RunOne() {
  Job job;
  {
    std::lock_guard lock(state_->mu);
    if (state_->queue.empty()) return false;
    job = std::move(state_->queue.front());
    state_->queue.pop_front();
  }
  job();
  return true;
}

bool AsyncDriver::OnWorker() const {
  std::lock_guard lock(state_->mu);
  return std::any_of(state_->workers.begin(), state_->workers.end(),
                     [](const std::thread& t) { return t.get_id() == std::this_thread::get_id(); });
}

void AsyncDriver::Stop() {
  std::vector<std::thread> workers;
  std::deque<Job> left;
  std::multimap<TimePoint, std::pair<std::uint64_t, Job>> timers;
  {
    std::lock_guard lock(state_->mu);
    state_->stopping = true;  // the timer job stays on the SharedLoop, idle
    workers.swap(state_->workers);
    left.swap(state_->queue);
    timers.swap(state_->timers);
    state_->timer_index.clear();
    state_->cv.notify_all();
  }
  for (std::thread& t : workers) {
    if (t.get_id() == std::this_thread::get_id()) {
      t.detach();  // this job's own worker: it ends when the job returns
    } else {
      t.join();
    }
  }
}

}  // namespace dlock::internal
