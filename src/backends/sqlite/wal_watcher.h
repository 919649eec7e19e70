// WalWatcher: the SQLite backend's one thread for asynchronous waiters
// (Acquisition::Notify, through Backend::NotifyOnRelease).
//
// Every commit to the database, from any process on the host, appends to
// its -wal file, so one inotify watch on that file says "something
// changed". The watcher then asks the backend, once per key however many
// wait on it, which of the registered waiters TryAcquire would grant now
// (a read-only check) and wakes those only. A commit becomes visible a
// little after its frames are written (after its fsync), so after each
// change it looks again a few times over ~25 ms, as WaitForRelease does;
// and it looks at the first instant something blocking a waiter lapses,
// since a holder that died writes nothing when its lease ends.
//
// The thread and the watch are made on the first Add and end with the
// watcher: none for a backend nobody waits on asynchronously.
//
// Thread-safety: Add and Remove may be called from any thread. The checks
// and every `wake` run on the watcher's thread, never inside Add and never
// under the watcher's lock.
#ifndef DLOCK_SRC_BACKENDS_SQLITE_WAL_WATCHER_H_
#define DLOCK_SRC_BACKENDS_SQLITE_WAL_WATCHER_H_

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/fd.h"
#include "dlock/clock.h"
#include "dlock/status.h"

namespace dlock::sqlite {

// One registered waiter, as the check sees it: its owner id (as stored)
// and the limit it asked for.
struct TurnWaiter {
  std::string owner;
  std::uint32_t limit = 1;
};

// What one check of a key found.
struct TurnVerdict {
  // Which of the waiters asked about (their indices) TryAcquire would
  // grant now.
  std::vector<std::size_t> admitted;
  // When the first holding or place that may block one of them lapses,
  // writing nothing; nullopt when only a write can change the answer.
  std::optional<std::chrono::milliseconds> lapse;
};

class WalWatcher {
 public:
  using Check = std::function<Result<TurnVerdict>(std::string_view key,
                                                  const std::vector<TurnWaiter>& waiters)>;
  // Whether anything was committed since its previous call: a look after
  // a change to the file checks no key while nothing became visible.
  using Committed = std::function<bool()>;

  WalWatcher(std::string wal_path, Check check, Committed committed);
  // Ends the thread; registrations left are dropped, their wakes not run.
  ~WalWatcher();
  WalWatcher(const WalWatcher&) = delete;
  WalWatcher& operator=(const WalWatcher&) = delete;

  // Calls `wake` once, on the watcher's thread, when `waiter` may be
  // granted `key` (or the check failed: the Try will say why). Returns the
  // handle for Remove, or 0 when the file cannot be watched.
  std::uint64_t Add(std::string_view key, TurnWaiter waiter, std::function<void()> wake);
  // Drops a registration. Once it returns, its `wake` is not running
  // (unless Remove is called from it) and will not run.
  void Remove(std::uint64_t id);
  // Registrations not yet woken or removed.
  std::size_t Registered() const;

 private:
  struct Registration {
    std::string key;
    TurnWaiter waiter;
    std::function<void()> wake;
  };
  struct KeyWaiters {
    std::set<std::uint64_t> ids;
    TimePoint due = TimePoint::max();  // a lapse to look at, if any
  };
  // One key's registrations, taken for a check.
  struct Batch {
    std::string key;
    std::vector<std::uint64_t> ids;
    std::vector<TurnWaiter> waiters;
  };

  bool StartLocked();
  void Run();
  // The keys to check now: all, or only those new or due. Under mu_.
  std::vector<Batch> TakeLocked(bool all, TimePoint now);
  TimePoint EarliestDueLocked() const;
  // Checks each batch's key and wakes the waiters it admits.
  void CheckAndWake(std::vector<Batch> batches);
  void Wake(const std::vector<std::uint64_t>& ids);
  void EraseLocked(std::uint64_t id);

  const std::string wal_path_;
  const Check check_;
  const Committed committed_;

  mutable std::mutex mu_;
  std::condition_variable woken_;  // waking_ changed
  bool started_ = false;
  bool broken_ = false;  // no inotify: Add says 0, the core polls
  bool stopping_ = false;
  std::uint64_t next_id_ = 1;
  std::uint64_t waking_ = 0;  // the registration whose wake runs now
  std::map<std::uint64_t, Registration> by_id_;
  std::map<std::string, KeyWaiters, std::less<>> by_key_;
  std::set<std::string, std::less<>> fresh_;  // keys with unchecked registrations
  internal::Fd inotify_, poke_;               // the -wal watch; an eventfd for Add and stop
  std::thread thread_;
};

}  // namespace dlock::sqlite

#endif  // DLOCK_SRC_BACKENDS_SQLITE_WAL_WATCHER_H_
