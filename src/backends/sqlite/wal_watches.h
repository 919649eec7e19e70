// WalWatches: the inotify descriptors a SQLite backend's waiters watch the
// -wal file with, kept for the next wait instead of closed.
//
// Closing an inotify descriptor waits until the kernel has freed its watches
// (an SRCU grace period: 5-20 ms on a busy 2-core host), and a waiter closed
// its own right after it was woken, before its grant. So a watch's end only
// removes it (the kernel frees it in the background) and gives the
// descriptor back; the idle descriptors are closed with the backend, long
// after their watches are gone, when closing them costs nothing.
//
// Thread-safety: Start may be called from any thread; each Watch belongs to
// the thread that waits on it.
#ifndef DLOCK_SRC_BACKENDS_SQLITE_WAL_WATCHES_H_
#define DLOCK_SRC_BACKENDS_SQLITE_WAL_WATCHES_H_

#include <mutex>
#include <string>
#include <vector>

#include "core/fd.h"

namespace dlock::sqlite {

class WalWatches {
 public:
  // Watches `path` (the -wal file) for IN_MODIFY.
  explicit WalWatches(std::string path) : path_(std::move(path)) {}
  WalWatches(const WalWatches&) = delete;
  WalWatches& operator=(const WalWatches&) = delete;

  // One wait's watch: fd() becomes readable when the file changes.
  class Watch {
   public:
    Watch() = default;
    Watch(Watch&& other) noexcept;
    Watch& operator=(Watch&&) = delete;
    ~Watch();
    bool valid() const { return fd_.valid(); }
    int fd() const { return fd_.get(); }
    // Reads every queued event.
    void Drain() const;

   private:
    friend class WalWatches;
    Watch(WalWatches* owner, internal::Fd fd, int wd)
        : owner_(owner), fd_(std::move(fd)), wd_(wd) {}
    WalWatches* owner_ = nullptr;
    internal::Fd fd_;
    int wd_ = -1;
  };

  // An armed watch, with no event from before it; invalid when inotify
  // cannot watch the file (the caller polls instead).
  Watch Start();

 private:
  void GiveBack(internal::Fd fd);

  const std::string path_;
  std::mutex mu_;
  std::vector<internal::Fd> idle_;
};

}  // namespace dlock::sqlite

#endif  // DLOCK_SRC_BACKENDS_SQLITE_WAL_WATCHES_H_
