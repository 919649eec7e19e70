#include "backends/sqlite/wal_watches.h"

#include <sys/inotify.h>
#include <unistd.h>

#include <utility>

namespace dlock::sqlite {

using internal::Fd;

WalWatches::Watch::Watch(Watch&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)),
      fd_(std::move(other.fd_)),
      wd_(std::exchange(other.wd_, -1)) {}

WalWatches::Watch::~Watch() {
  if (!fd_.valid()) return;
  // Removing a watch only queues it for the kernel to free; closing the
  // descriptor would wait for that.
  if (wd_ >= 0) (void)::inotify_rm_watch(fd_.get(), wd_);
  owner_->GiveBack(std::move(fd_));
}

void WalWatches::Watch::Drain() const {
  char buf[4096];
  while (::read(fd_.get(), buf, sizeof buf) > 0) {
  }
}

WalWatches::Watch WalWatches::Start() {
  Fd fd;
  {
    std::lock_guard lock(mu_);
    if (!idle_.empty()) {
      fd = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  if (!fd.valid()) fd = Fd(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  if (!fd.valid()) return Watch();
  Watch watch(this, std::move(fd), -1);
  watch.Drain();  // the last user's events (and its watch's IN_IGNORED)
  watch.wd_ = ::inotify_add_watch(watch.fd(), path_.c_str(), IN_MODIFY);
  if (watch.wd_ < 0) return Watch();  // `watch` gives its descriptor back
  return watch;
}

void WalWatches::GiveBack(Fd fd) {
  std::lock_guard lock(mu_);
  idle_.push_back(std::move(fd));
}

}  // namespace dlock::sqlite
