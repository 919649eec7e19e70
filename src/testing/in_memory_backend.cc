#include "dlock/testing/in_memory_backend.h"

namespace dlock::testing {
namespace {
std::chrono::milliseconds Ms(Duration d) {
  return std::chrono::ceil<std::chrono::milliseconds>(d);
}
}  // namespace

InMemoryStore::InMemoryStore(std::shared_ptr<Clock> clock) : clock_(std::move(clock)) {}

bool InMemoryStore::HeldLocked(const Entry& e) const {
  return !e.owner.empty() && clock_->Now() < e.expires_at;
}

Result<Attempt> InMemoryStore::TryAcquire(const LeaseRequest& request) {
  std::lock_guard lock(mu_);
  Entry& e = entries_[request.key];
  const TimePoint now = clock_->Now();
  // Held, or lapsed but inside its lock-delay (a released entry has no owner).
  const bool blocked = !e.owner.empty() && now < e.expires_at + e.lock_delay;
  if (blocked && e.owner != request.owner) {
    return Attempt{.granted = false,
                   .holder_ttl_remaining = Ms(e.expires_at + e.lock_delay - now)};
  }
  if (!HeldLocked(e) || e.owner != request.owner) ++e.token;  // a new grant
  e.owner = request.owner;
  e.expires_at = now + request.ttl;
  e.lock_delay = request.lock_delay;
  return Attempt{.granted = true, .token = e.token};
}

Status InMemoryStore::Release(std::string_view key, const OwnerId& owner) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() || !HeldLocked(it->second)) return Status::Ok();
  if (it->second.owner != owner) {
    return NotOwnerError("key '" + std::string(key) + "' is held by another owner");
  }
  it->second.owner = OwnerId();
  return Status::Ok();
}

Status InMemoryStore::Renew(const LeaseRequest& lease) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(lease.key);
  if (it == entries_.end() || !HeldLocked(it->second) || it->second.owner != lease.owner) {
    return NotOwnerError("lease on key '" + lease.key + "' is no longer held by this owner");
  }
  it->second.expires_at = clock_->Now() + lease.ttl;
  return Status::Ok();
}

std::vector<HolderInfo> InMemoryStore::List(std::string_view prefix) {
  std::lock_guard lock(mu_);
  std::vector<HolderInfo> out;
  for (auto it = entries_.lower_bound(prefix);
       it != entries_.end() && it->first.starts_with(prefix); ++it) {
    if (!HeldLocked(it->second)) continue;
    out.push_back({it->first, it->second.owner, it->second.token,
                   Ms(it->second.expires_at - clock_->Now())});
  }
  return out;
}

bool InMemoryStore::IsDone(std::string_view key) {
  std::lock_guard lock(mu_);
  return done_.find(key) != done_.end();
}

Status InMemoryStore::MarkDone(std::string_view key, const OwnerId& owner) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() || !HeldLocked(it->second) || it->second.owner != owner) {
    return NotOwnerError("mark '" + std::string(key) + "' done: this owner no longer holds it");
  }
  done_[std::string(key)] = it->second.token;
  return Status::Ok();
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

}  // namespace dlock::testing
