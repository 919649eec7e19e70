// WalWatches: a wait's watch sees the -wal file change, and its descriptor
// is kept for the next wait (closing one waits for the kernel to free its
// watches: milliseconds that a woken waiter paid before its grant, issue 25).
#include "backends/sqlite/wal_watches.h"

#include <poll.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace dlock::sqlite {
namespace {

bool Readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN) != 0;
}

class WalWatchesTest : public ::testing::Test {
 protected:
  WalWatchesTest() {
    char tmpl[] = "/tmp/dlock-wal-watches.XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    path_ = dir_ + "/locks.db-wal";
    Append();
  }
  ~WalWatchesTest() override { std::filesystem::remove_all(dir_); }
  void Append() { std::ofstream(path_, std::ios::app) << "x"; }

  std::string dir_;
  std::string path_;
};

TEST_F(WalWatchesTest, AWatchSeesTheFileChange) {
  WalWatches watches(path_);
  WalWatches::Watch watch = watches.Start();
  ASSERT_TRUE(watch.valid());
  EXPECT_FALSE(Readable(watch.fd(), 0));
  Append();
  EXPECT_TRUE(Readable(watch.fd(), 1000));
  watch.Drain();
  EXPECT_FALSE(Readable(watch.fd(), 0));
}

TEST_F(WalWatchesTest, TheNextWaitReusesTheDescriptorWithoutOldEvents) {
  WalWatches watches(path_);
  int first_fd = -1;
  {
    WalWatches::Watch watch = watches.Start();
    ASSERT_TRUE(watch.valid());
    first_fd = watch.fd();
    Append();  // an event this wait never reads
  }
  Append();  // a change while nobody waits
  WalWatches::Watch again = watches.Start();
  ASSERT_TRUE(again.valid());
  EXPECT_EQ(again.fd(), first_fd);
  EXPECT_FALSE(Readable(again.fd(), 0));
  Append();
  EXPECT_TRUE(Readable(again.fd(), 1000));
}

TEST_F(WalWatchesTest, ConcurrentWaitsHaveDescriptorsOfTheirOwn) {
  WalWatches watches(path_);
  WalWatches::Watch a = watches.Start();
  WalWatches::Watch b = watches.Start();
  ASSERT_TRUE(a.valid() && b.valid());
  EXPECT_NE(a.fd(), b.fd());
  Append();
  a.Drain();
  EXPECT_TRUE(Readable(b.fd(), 1000));  // a's reading took nothing from b
}

TEST_F(WalWatchesTest, NoFileNoWatch) {
  WalWatches watches(dir_ + "/missing/locks.db-wal");
  EXPECT_FALSE(watches.Start().valid());
}

}  // namespace
}  // namespace dlock::sqlite
