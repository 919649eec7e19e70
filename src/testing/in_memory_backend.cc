#include "dlock/testing/in_memory_backend.h"

#include <algorithm>
#include <utility>

#include "dlock/sharing.h"

namespace dlock::testing {
namespace {
std::chrono::milliseconds Ms(Duration d) {
  return std::chrono::ceil<std::chrono::milliseconds>(d);
}
}  // namespace

InMemoryStore::InMemoryStore(std::shared_ptr<Clock> clock) : clock_(std::move(clock)) {}

bool InMemoryStore::PruneLocked(Entry& e, TimePoint now) {
  const std::size_t before = e.holders.size() + e.queue.size();
  std::erase_if(e.holders, [&](const Holding& h) { return now >= h.expires_at + h.lock_delay; });
  std::erase_if(e.queue, [&](const Waiter& w) { return now >= w.expires_at; });
  return e.holders.size() + e.queue.size() != before;
}

std::vector<std::function<void()>> InMemoryStore::ChangedLocked(std::string_view key) {
  auto count = changes_.find(key);
  if (count == changes_.end()) count = changes_.emplace(std::string(key), 0).first;
  ++count->second;
  std::vector<std::function<void()>> wake;
  for (auto it = watches_.begin(); it != watches_.end();) {
    if (it->second.key != key) {
      ++it;
      continue;
    }
    wake.push_back(std::move(it->second.wake));
    it = watches_.erase(it);
  }
  return wake;
}

Result<Attempt> InMemoryStore::TryAcquire(const LeaseRequest& request) {
  std::vector<std::function<void()>> wake;  // called outside mu_
  Result<Attempt> attempt = Attempt{};
  {
    std::lock_guard lock(mu_);
    attempt = TryAcquireLocked(request, wake);
  }
  for (auto& w : wake) w();
  return attempt;
}

Status InMemoryStore::KeepPlace(const LeaseRequest& waiter) {
  std::vector<std::function<void()>> wake;  // called outside mu_
  Status kept = NotFoundError("'" + waiter.owner.ToString() + "' has no place in the queue of '" +
                              waiter.key + "'");
  {
    std::lock_guard lock(mu_);
    auto it = entries_.find(waiter.key);
    const TimePoint now = clock_->Now();
    if (it != entries_.end()) {
      if (PruneLocked(it->second, now)) wake = ChangedLocked(waiter.key);
      for (Waiter& w : it->second.queue) {
        if (w.owner != waiter.owner) continue;
        w.expires_at = now + waiter.queue_ttl;
        kept = Status::Ok();
      }
    }
  }
  for (auto& w : wake) w();
  return kept;
}

Result<Attempt> InMemoryStore::TryAcquireLocked(const LeaseRequest& request,
                                                std::vector<std::function<void()>>& wake) {
  Entry& e = entries_[request.key];
  const TimePoint now = clock_->Now();
  // What lapsed may let a waiter in: as a release would.
  if (PruneLocked(e, now)) wake = ChangedLocked(request.key);
  for (Holding& h : e.holders) {
    if (h.owner == request.owner && now < h.expires_at) {  // a retry: same grant
      h.expires_at = now + request.ttl;
      return Attempt{.granted = true, .token = h.token};
    }
  }
  std::uint32_t smallest = kSharedLimit;
  std::size_t ahead = e.holders.size();
  Duration wait_left{0};
  for (const Holding& h : e.holders) {
    smallest = std::min(smallest, h.limit);
    wait_left = std::max<Duration>(wait_left, h.expires_at + h.lock_delay - now);
  }
  auto me = std::find_if(e.queue.begin(), e.queue.end(),
                         [&](const Waiter& w) { return w.owner == request.owner; });
  for (auto it = e.queue.begin(); it != me; ++it) {
    smallest = std::min(smallest, it->limit);
    ++ahead;
  }
  if (!Admits(ahead, smallest, request.limit)) {
    if (request.queue_ttl > std::chrono::milliseconds(0)) {
      if (me == e.queue.end()) {
        e.queue.push_back({request.owner, request.limit, request.label, now, {}});
        me = e.queue.end() - 1;
      }
      me->expires_at = now + request.queue_ttl;
    }
    return Attempt{.granted = false, .holder_ttl_remaining = Ms(wait_left)};
  }
  if (me != e.queue.end()) e.queue.erase(me);
  e.holders.push_back({request.owner, ++e.token, now, now + request.ttl, request.ttl,
                       request.lock_delay, request.limit, request.label});
  return Attempt{.granted = true, .token = e.token};
}

Status InMemoryStore::Release(std::string_view key, const OwnerId& owner) {
  std::vector<std::function<void()>> wake;  // called outside mu_
  Status released;
  {
    std::lock_guard lock(mu_);
    released = ReleaseLocked(key, owner);
    wake = ChangedLocked(key);
  }
  for (auto& w : wake) w();
  return released;
}

Status InMemoryStore::ReleaseLocked(std::string_view key, const OwnerId& owner) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return Status::Ok();
  Entry& e = it->second;
  const TimePoint now = clock_->Now();
  PruneLocked(e, now);
  std::erase_if(e.queue, [&](const Waiter& w) { return w.owner == owner; });
  auto mine = std::find_if(e.holders.begin(), e.holders.end(), [&](const Holding& h) {
    return h.owner == owner && now < h.expires_at;
  });
  if (mine != e.holders.end()) {
    e.holders.erase(mine);
    return Status::Ok();
  }
  const bool others = std::any_of(e.holders.begin(), e.holders.end(),
                                  [&](const Holding& h) { return now < h.expires_at; });
  if (others) {
    return NotOwnerError("key '" + std::string(key) + "' is held by another owner");
  }
  return Status::Ok();
}

std::uint64_t InMemoryStore::Changes(std::string_view key) const {
  std::lock_guard lock(mu_);
  auto it = changes_.find(key);
  return it == changes_.end() ? 0 : it->second;
}

std::uint64_t InMemoryStore::Watch(std::string_view key, std::uint64_t seen,
                                   std::function<void()> wake) {
  std::lock_guard lock(mu_);
  auto count = changes_.find(key);
  if ((count == changes_.end() ? 0 : count->second) != seen) return 0;
  const std::uint64_t id = next_watch_++;
  watches_.emplace(id, Watcher{std::string(key), std::move(wake)});
  return id;
}

void InMemoryStore::Unwatch(std::uint64_t id) {
  std::function<void()> dropped;  // destroyed outside mu_
  std::lock_guard lock(mu_);
  auto it = watches_.find(id);
  if (it == watches_.end()) return;
  dropped = std::move(it->second.wake);
  watches_.erase(it);
}

std::size_t InMemoryStore::Watches() const {
  std::lock_guard lock(mu_);
  return watches_.size();
}

Status InMemoryStore::Renew(const LeaseRequest& lease) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(lease.key);
  const TimePoint now = clock_->Now();
  if (it != entries_.end()) {
    for (Holding& h : it->second.holders) {
      if (h.owner == lease.owner && now < h.expires_at) {
        h.expires_at = now + lease.ttl;
        h.ttl = lease.ttl;
        return Status::Ok();
      }
    }
  }
  return NotOwnerError("lease on key '" + lease.key + "' is no longer held by this owner");
}

std::vector<HolderInfo> InMemoryStore::List(std::string_view prefix) {
  std::lock_guard lock(mu_);
  std::vector<HolderInfo> out;
  const TimePoint now = clock_->Now();
  for (auto it = entries_.lower_bound(prefix);
       it != entries_.end() && it->first.starts_with(prefix); ++it) {
    for (const Holding& h : it->second.holders) {
      if (now >= h.expires_at) continue;
      out.push_back({it->first, h.owner, h.token, Ms(h.expires_at - now), h.ttl,
                     std::chrono::floor<std::chrono::milliseconds>(now - h.granted_at), h.limit,
                     h.label});
    }
  }
  return out;
}

std::vector<WaiterInfo> InMemoryStore::Waiters(std::string_view prefix) {
  std::lock_guard lock(mu_);
  std::vector<WaiterInfo> out;
  const TimePoint now = clock_->Now();
  for (auto it = entries_.lower_bound(prefix);
       it != entries_.end() && it->first.starts_with(prefix); ++it) {
    for (const Waiter& w : it->second.queue) {
      if (now >= w.expires_at) continue;
      out.push_back({it->first, w.owner, w.limit, w.label,
                     std::chrono::floor<std::chrono::milliseconds>(now - w.since)});
    }
  }
  return out;
}

bool InMemoryStore::IsDone(std::string_view key) {
  std::lock_guard lock(mu_);
  auto it = done_.find(key);
  if (it == done_.end()) return false;
  if (clock_->Now() < it->second) return true;
  done_.erase(it);  // past its retention
  return false;
}

Status InMemoryStore::MarkDone(std::string_view key, const OwnerId& owner,
                               std::chrono::milliseconds keep) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(key);
  const TimePoint now = clock_->Now();
  if (it != entries_.end()) {
    for (const Holding& h : it->second.holders) {
      if (h.owner == owner && now < h.expires_at) {
        done_[std::string(key)] =
            keep == kKeepDoneForever ? TimePoint::max() : now + keep;
        return Status::Ok();
      }
    }
  }
  return NotOwnerError("mark '" + std::string(key) + "' done: this owner no longer holds it");
}

void InMemoryStore::RecordBreak(const BreakRecord& record, std::chrono::milliseconds keep) {
  std::lock_guard lock(mu_);
  const TimePoint now = clock_->Now();
  breaks_[record.key].emplace_back(record, keep == kKeepDoneForever ? TimePoint::max() : now + keep);
}

std::vector<BreakRecord> InMemoryStore::Breaks(std::string_view prefix) {
  std::lock_guard lock(mu_);
  const TimePoint now = clock_->Now();
  std::vector<BreakRecord> out;
  for (auto it = breaks_.lower_bound(prefix); it != breaks_.end(); ++it) {
    if (!it->first.starts_with(prefix)) break;
    for (const auto& [record, keep_until] : it->second) {
      if (now < keep_until) out.push_back(record);
    }
  }
  return out;
}

namespace {

// As the default acquisition (each Try one TryAcquire, which keeps the
// queue place), plus Notify by the store's release watches.
class InMemoryAcquisition final : public Acquisition {
 public:
  InMemoryAcquisition(std::shared_ptr<InMemoryStore> store, LeaseRequest request)
      : store_(std::move(store)), request_(std::move(request)) {}
  ~InMemoryAcquisition() override { StopNotify(); }

  Result<Attempt> Try() override {
    seen_ = store_->Changes(request_.key);  // before: a release during Try counts
    return store_->TryAcquire(request_);
  }
  bool Wait(TimePoint /*until*/, std::stop_token /*stop*/) override { return false; }
  bool Notify(std::function<void()> wake) override {
    // A change since the attempt: no wake-up to wait for; the core polls.
    watch_ = store_->Watch(request_.key, seen_, std::move(wake));
    return watch_ != 0;
  }
  void StopNotify() override {
    if (watch_ != 0) store_->Unwatch(std::exchange(watch_, 0));
  }
  void Abandon() override {
    StopNotify();
    (void)store_->Release(request_.key, request_.owner);
  }

 private:
  std::shared_ptr<InMemoryStore> store_;
  const LeaseRequest request_;
  std::uint64_t seen_ = 0;  // the key's changes before the last Try
  std::uint64_t watch_ = 0;
};

}  // namespace

std::unique_ptr<Acquisition> InMemoryBackend::Begin(const LeaseRequest& request) {
  return std::make_unique<InMemoryAcquisition>(store_, request);
}

Result<Attempt> InMemoryBackend::TryAcquire(const LeaseRequest& request) {
  return store_->TryAcquire(request);
}

Status InMemoryBackend::Release(std::string_view key, const OwnerId& owner) {
  return store_->Release(key, owner);
}

std::vector<Status> InMemoryBackend::Renew(std::span<const LeaseRequest> leases) {
  std::vector<Status> out;
  out.reserve(leases.size());
  for (const auto& l : leases) out.push_back(store_->Renew(l));
  return out;
}

Result<std::vector<HolderInfo>> InMemoryBackend::List(std::string_view prefix) {
  return store_->List(prefix);
}

std::vector<Status> InMemoryBackend::KeepPlaces(std::span<const LeaseRequest> waiters) {
  if (!options_.keeps_places) return Backend::KeepPlaces(waiters);
  std::vector<Status> out;
  out.reserve(waiters.size());
  for (const LeaseRequest& w : waiters) out.push_back(store_->KeepPlace(w));
  return out;
}

}  // namespace dlock::testing
