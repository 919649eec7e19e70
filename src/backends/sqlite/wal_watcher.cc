#include "backends/sqlite/wal_watcher.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

namespace dlock::sqlite {
namespace {

using std::chrono::microseconds;

// The look-again schedule after a change to the file (a commit is visible
// a little after its frames are written): 0.2, 0.4, ... 12.8 ms apart.
constexpr microseconds kFirstRecheck{200};
constexpr microseconds kLastRecheck{12'800};

// Waits until `fds` has something to read or `until` passes.
void PollUntil(pollfd (&fds)[2], TimePoint until) {
  timespec timeout{};
  timespec* bound = nullptr;
  if (until != TimePoint::max()) {
    const auto left = std::max(Duration::zero(), until - MonotonicClock::now());
    const auto us = std::chrono::duration_cast<microseconds>(left).count() + 1;
    timeout = {static_cast<time_t>(us / 1'000'000), static_cast<long>(us % 1'000'000) * 1000};
    bound = &timeout;
  }
  (void)::ppoll(fds, 2, bound, nullptr);
}

// Empties a non-blocking descriptor; true if it had anything.
bool Drain(int fd) {
  char buf[4096];
  bool any = false;
  while (::read(fd, buf, sizeof buf) > 0) any = true;
  return any;
}

}  // namespace

WalWatcher::WalWatcher(std::string wal_path, Check check, Committed committed)
    : wal_path_(std::move(wal_path)), check_(std::move(check)), committed_(std::move(committed)) {}

WalWatcher::~WalWatcher() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  if (poke_.valid()) {
    const std::uint64_t one = 1;
    (void)!::write(poke_.get(), &one, sizeof one);
  }
  // Never destroyed from a wake: an acquisition's StopNotify (Remove) waits
  // for its wake to return, so no wake holds the last hold on the backend.
  if (thread_.joinable()) thread_.join();
}

bool WalWatcher::StartLocked() {
  started_ = true;
  internal::Fd notify(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  internal::Fd poke(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!notify.valid() || !poke.valid() ||
      ::inotify_add_watch(notify.get(), wal_path_.c_str(), IN_MODIFY) < 0) {
    broken_ = true;
    return false;
  }
  inotify_ = std::move(notify);
  poke_ = std::move(poke);
  thread_ = std::thread([this] { Run(); });
  return true;
}

std::uint64_t WalWatcher::Add(std::string_view key, TurnWaiter waiter, std::function<void()> wake) {
  std::uint64_t id = 0;
  {
    std::lock_guard lock(mu_);
    if (!started_) StartLocked();
    if (broken_ || stopping_) return 0;
    id = next_id_++;
    by_id_.emplace(id, Registration{std::string(key), std::move(waiter), std::move(wake)});
    auto it = by_key_.find(key);
    if (it == by_key_.end()) it = by_key_.emplace(std::string(key), KeyWaiters{}).first;
    it->second.ids.insert(id);
    // Checked on the thread after the watch exists: a release before this
    // call is read there, one after it is a change to the file.
    fresh_.insert(std::string(key));
  }
  const std::uint64_t one = 1;
  (void)!::write(poke_.get(), &one, sizeof one);
  return id;
}

void WalWatcher::EraseLocked(std::uint64_t id) {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return;
  auto key = by_key_.find(it->second.key);
  if (key != by_key_.end()) {
    key->second.ids.erase(id);
    if (key->second.ids.empty()) by_key_.erase(key);
  }
  by_id_.erase(it);
}

void WalWatcher::Remove(std::uint64_t id) {
  std::unique_lock lock(mu_);
  EraseLocked(id);
  if (std::this_thread::get_id() == thread_.get_id()) return;
  woken_.wait(lock, [&] { return waking_ != id; });
}

std::size_t WalWatcher::Registered() const {
  std::lock_guard lock(mu_);
  return by_id_.size();
}

TimePoint WalWatcher::EarliestDueLocked() const {
  TimePoint due = TimePoint::max();
  for (const auto& [key, waiters] : by_key_) due = std::min(due, waiters.due);
  return due;
}

std::vector<WalWatcher::Batch> WalWatcher::TakeLocked(bool all, TimePoint now) {
  std::vector<Batch> batches;
  for (const auto& [key, waiters] : by_key_) {
    if (!all && waiters.due > now && !fresh_.contains(key)) continue;
    Batch batch{key, {}, {}};
    for (const std::uint64_t id : waiters.ids) {
      batch.ids.push_back(id);
      batch.waiters.push_back(by_id_.at(id).waiter);
    }
    batches.push_back(std::move(batch));
  }
  fresh_.clear();  // every key still registered was taken above
  return batches;
}

void WalWatcher::Run() {
  Duration recheck{0};
  TimePoint recheck_at = TimePoint::max();
  for (;;) {
    TimePoint until;
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      until = std::min(recheck_at, EarliestDueLocked());
    }
    pollfd fds[2] = {{inotify_.get(), POLLIN, 0}, {poke_.get(), POLLIN, 0}};
    PollUntil(fds, until);
    const bool changed = Drain(inotify_.get());
    (void)Drain(poke_.get());
    const TimePoint now = MonotonicClock::now();
    bool look = false;
    if (changed) {
      look = true;
      recheck = kFirstRecheck;
      recheck_at = now + recheck;
    } else if (now >= recheck_at) {
      look = true;
      recheck = recheck >= kLastRecheck ? Duration::zero() : recheck * 2;
      recheck_at = recheck > Duration::zero() ? now + recheck : TimePoint::max();
    }
    bool any = false;
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      any = !by_key_.empty();
    }
    // Every key only once a commit is visible; new and due keys always.
    const bool all = look && any && committed_();
    std::vector<Batch> batches;
    {
      std::lock_guard lock(mu_);
      batches = TakeLocked(all, now);
    }
    CheckAndWake(std::move(batches));
  }
}

void WalWatcher::CheckAndWake(std::vector<Batch> batches) {
  for (Batch& batch : batches) {
    Result<TurnVerdict> verdict = check_(batch.key, batch.waiters);
    std::vector<std::uint64_t> wake;
    if (!verdict.ok()) {
      wake = batch.ids;  // each Try meets the error itself
    } else {
      for (const std::size_t i : verdict->admitted) wake.push_back(batch.ids.at(i));
      const TimePoint now = MonotonicClock::now();
      std::lock_guard lock(mu_);
      if (auto it = by_key_.find(batch.key); it != by_key_.end()) {
        // A millisecond late: the store counts whole milliseconds.
        it->second.due = verdict->lapse ? now + *verdict->lapse + std::chrono::milliseconds(1)
                                        : TimePoint::max();
      }
    }
    Wake(wake);
  }
}

void WalWatcher::Wake(const std::vector<std::uint64_t>& ids) {
  for (const std::uint64_t id : ids) {
    {
      std::function<void()> wake;
      {
        std::lock_guard lock(mu_);
        auto it = by_id_.find(id);
        if (it == by_id_.end()) continue;  // removed meanwhile
        wake = std::move(it->second.wake);
        EraseLocked(id);
        waking_ = id;
      }
      wake();
    }  // its captures are gone too before Remove may return
    {
      std::lock_guard lock(mu_);
      waking_ = 0;
    }
    woken_.notify_all();
  }
}

}  // namespace dlock::sqlite
