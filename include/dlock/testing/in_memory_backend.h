// An in-memory store and backend, for core unit tests.
//
// InMemoryStore plays the store: it keeps leases, per-key token counters and
// a FIFO wait queue per key, implements the sharing rule of backend.h (the
// reference for the real stores), and judges expiry by its own Clock (usually the test's SimulatedClock), as
// a real store judges it by its own. Several InMemoryBackends may share one
// store to play several clients on different machines.
//
// Not for production: state lives in this process only.
//
// Thread-safety: all methods are thread-safe.
#ifndef DLOCK_TESTING_IN_MEMORY_BACKEND_H_
#define DLOCK_TESTING_IN_MEMORY_BACKEND_H_

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dlock/backend.h"
#include "dlock/clock.h"

namespace dlock::testing {

class InMemoryStore {
 public:
  explicit InMemoryStore(std::shared_ptr<Clock> clock);

  Result<Attempt> TryAcquire(const LeaseRequest& request);
  Status Release(std::string_view key, const OwnerId& owner);
  // Backend::KeepPlaces for one waiter: its live place lives another
  // queue_ttl; kNotFound when it has none (never queued, lapsed, left, or
  // granted). Holdings are not touched.
  Status KeepPlace(const LeaseRequest& waiter);
  Status Renew(const LeaseRequest& lease);
  std::vector<HolderInfo> List(std::string_view prefix);
  std::vector<WaiterInfo> Waiters(std::string_view prefix);
  bool IsDone(std::string_view key);
  Status MarkDone(std::string_view key, const OwnerId& owner, std::chrono::milliseconds keep);
  void RecordBreak(const BreakRecord& record, std::chrono::milliseconds keep);
  std::vector<BreakRecord> Breaks(std::string_view prefix);

  // Calls `wake` once, on the releasing thread, when a holder or waiter of
  // `key` leaves by Release, or when a call on `key` finds a holding or a
  // place of it lapsed (a waiter that died: its place lapses unseen until
  // then, a KeepPlaces tick at the latest; a holder's expiry is timed by
  // the waiters from the holder's ttl). Returns an id for Unwatch, or 0
  // without watching when
  // the key's Changes() is no longer `seen`: one came in between.
  // What the asynchronous API's Acquisition::Notify is tested with.
  std::uint64_t Watch(std::string_view key, std::uint64_t seen, std::function<void()> wake);
  // How many times `key` changed as Watch sees it (a Release, or a lapse
  // found), which woke its watches.
  std::uint64_t Changes(std::string_view key) const;
  void Unwatch(std::uint64_t id);
  // Watches not yet woken or dropped (tests check none leak).
  std::size_t Watches() const;

 private:
  struct Holding {
    OwnerId owner;
    FencingToken token = 0;
    TimePoint granted_at{};
    TimePoint expires_at{};
    std::chrono::milliseconds ttl{0};
    std::chrono::milliseconds lock_delay{0};
    std::uint32_t limit = 1;
    std::string label;
  };
  struct Waiter {
    OwnerId owner;
    std::uint32_t limit = 1;
    std::string label;
    TimePoint since{};
    TimePoint expires_at{};
  };
  struct Entry {
    FencingToken token = 0;          // the key's counter, never reset
    std::vector<Holding> holders;    // in grant order
    std::vector<Waiter> queue;       // in arrival order
  };
  Status ReleaseLocked(std::string_view key, const OwnerId& owner);
  // TryAcquire under mu_, collecting the wakes of watches its pruning ends.
  Result<Attempt> TryAcquireLocked(const LeaseRequest& request,
                                   std::vector<std::function<void()>>& wake);
  // Drops holdings past expiry + lock-delay and queue places past expiry;
  // true if it dropped any.
  bool PruneLocked(Entry& e, TimePoint now);
  // `key` changed (Changes): its watches end, and their wakes are returned,
  // to be called outside mu_.
  std::vector<std::function<void()>> ChangedLocked(std::string_view key);

  std::shared_ptr<Clock> clock_;
  mutable std::mutex mu_;
  std::map<std::string, Entry, std::less<>> entries_;
  std::map<std::string, TimePoint, std::less<>> done_;  // key -> end of its retention
  // Break records by key, oldest first, each with the end of its retention.
  std::map<std::string, std::vector<std::pair<BreakRecord, TimePoint>>, std::less<>> breaks_;
  struct Watcher {
    std::string key;
    std::function<void()> wake;
  };
  std::map<std::uint64_t, Watcher> watches_;
  std::map<std::string, std::uint64_t, std::less<>> changes_;
  std::uint64_t next_watch_ = 1;
};

// What an InMemoryBackend claims to do, as a real store would.
struct InMemoryOptions {
  // BatchesCalls: the asynchronous API sends its first attempts and
  // releases in batches (answered one by one here).
  bool batches = false;
  // KeepsPlaces: the asynchronous API keeps its waiters' places with
  // KeepPlaces instead of an attempt each. False plays a store without it.
  bool keeps_places = true;
  // NoticesLapsedPlaces, claimed for the core's tests: its waiters then get
  // no look behind a place. (Its watches wake when a call finds a place
  // lapsed, not at the lapse itself.)
  bool notices_lapsed_places = false;
};

class InMemoryBackend final : public Backend {
 public:
  explicit InMemoryBackend(std::shared_ptr<InMemoryStore> store, InMemoryOptions options = {})
      : store_(std::move(store)), options_(options) {}

  Result<Attempt> TryAcquire(const LeaseRequest& request) override;
  // An acquisition that can Notify (by InMemoryStore::Watch).
  std::unique_ptr<Acquisition> Begin(const LeaseRequest& request) override;
  Status Release(std::string_view key, const OwnerId& owner) override;
  std::vector<Status> Renew(std::span<const LeaseRequest> leases) override;
  Result<std::vector<HolderInfo>> List(std::string_view prefix) override;
  std::string Describe() const override { return "memory://"; }
  bool SupportsLockDelay() const override { return true; }
  bool SupportsSharing() const override { return true; }
  bool BatchesCalls() const override { return options_.batches; }
  std::vector<Status> KeepPlaces(std::span<const LeaseRequest> waiters) override;
  bool KeepsPlaces() const override { return options_.keeps_places; }
  bool NoticesLapsedPlaces() const override { return options_.notices_lapsed_places; }
  std::vector<Result<Attempt>> TryAcquireMany(std::span<const LeaseRequest> requests) override {
    largest_batch_ = std::max(largest_batch_.load(), requests.size());
    return Backend::TryAcquireMany(requests);
  }
  std::vector<Status> ReleaseMany(std::span<const LeaseRequest> holdings) override {
    largest_batch_ = std::max(largest_batch_.load(), holdings.size());
    return Backend::ReleaseMany(holdings);
  }
  // The most calls one TryAcquireMany or ReleaseMany carried.
  std::size_t LargestBatch() const { return largest_batch_; }
  Result<std::vector<WaiterInfo>> Waiters(std::string_view prefix) override {
    return store_->Waiters(prefix);
  }
  Result<bool> IsDone(std::string_view key) override { return store_->IsDone(key); }
  Status MarkDone(std::string_view key, const OwnerId& owner,
                  std::chrono::milliseconds keep) override {
    return store_->MarkDone(key, owner, keep);
  }
  Status RecordBreak(const BreakRecord& record, std::chrono::milliseconds keep) override {
    store_->RecordBreak(record, keep);
    return Status::Ok();
  }
  Result<std::vector<BreakRecord>> Breaks(std::string_view prefix) override {
    return store_->Breaks(prefix);
  }

 private:
  std::shared_ptr<InMemoryStore> store_;
  const InMemoryOptions options_;
  std::atomic<std::size_t> largest_batch_{0};  // a test's high-water mark: races only lower it
};

}  // namespace dlock::testing

#endif  // DLOCK_TESTING_IN_MEMORY_BACKEND_H_
