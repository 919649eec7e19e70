// The fault proxy in front of a tiny echo server on loopback. Only lower
// bounds on time are asserted (a delayed byte cannot arrive early; a
// partitioned one not at all), never upper bounds.
#include "harness/proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include <gtest/gtest.h>

#include "dlock/clock.h"

namespace dlock::harness {
namespace {

using std::chrono::milliseconds;

class EchoServer {
 public:
  EchoServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd_, 8);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::jthread([this] {
      for (;;) {
        int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        std::jthread([this, c] {
          char buf[256];
          ssize_t n;
          while ((n = ::read(c, buf, sizeof buf)) > 0) {
            received_ += static_cast<int>(n);
            (void)!::write(c, buf, static_cast<size_t>(n));
          }
          ::close(c);
        }).detach();
      }
    });
  }
  ~EchoServer() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  int port() const { return port_; }
  int received() const { return received_; }

 private:
  std::atomic<int> received_{0};
  int fd_;
  int port_;
  std::jthread thread_;
};

int Connect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

// Reads one byte within `timeout`; -1 if none, -2 on reset/close.
int ReadByte(int fd, milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return -1;
  char c;
  ssize_t n = ::read(fd, &c, 1);
  return n == 1 ? static_cast<unsigned char>(c) : -2;
}

TEST(FaultProxyTest, PassesPartitionsDelaysAndDrops) {
  EchoServer echo;
  auto proxy = FaultProxy::Start("127.0.0.1", echo.port());
  ASSERT_TRUE(proxy.ok()) << proxy.status().ToString();
  int fd = Connect((*proxy)->port());

  ASSERT_EQ(::write(fd, "a", 1), 1);
  EXPECT_EQ(ReadByte(fd, milliseconds(5000)), 'a');

  (*proxy)->SetMode(FaultProxy::Mode::kPartition);
  ASSERT_EQ(::write(fd, "b", 1), 1);
  EXPECT_EQ(ReadByte(fd, milliseconds(300)), -1) << "a partitioned byte got through";
  (*proxy)->SetMode(FaultProxy::Mode::kPass);
  EXPECT_EQ(ReadByte(fd, milliseconds(5000)), 'b') << "the byte was lost, not held";

  (*proxy)->SetMode(FaultProxy::Mode::kDelay, milliseconds(150));
  const auto sent = MonotonicClock::now();
  ASSERT_EQ(::write(fd, "c", 1), 1);
  EXPECT_EQ(ReadByte(fd, milliseconds(5000)), 'c');
  // Through the proxy twice (there and back): at least one delay.
  EXPECT_GE(MonotonicClock::now() - sent, milliseconds(150));

  (*proxy)->SetMode(FaultProxy::Mode::kDrop);
  EXPECT_EQ(ReadByte(fd, milliseconds(5000)), -2) << "connection was not reset";
  ::close(fd);
  (*proxy)->SetMode(FaultProxy::Mode::kPass);
  int again = Connect((*proxy)->port());
  ASSERT_EQ(::write(again, "d", 1), 1);
  EXPECT_EQ(ReadByte(again, milliseconds(5000)), 'd');
  ::close(again);
}

TEST(FaultProxyTest, HeldRepliesLetRequestsThroughAndKeepTheAnswers) {
  EchoServer echo;
  auto proxy = FaultProxy::Start("127.0.0.1", echo.port());
  ASSERT_TRUE(proxy.ok()) << proxy.status().ToString();
  int fd = Connect((*proxy)->port());
  (*proxy)->SetMode(FaultProxy::Mode::kHoldReplies);
  ASSERT_EQ(::write(fd, "e", 1), 1);
  for (int i = 0; i < 500 && echo.received() == 0; ++i) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_EQ(echo.received(), 1) << "the request did not reach the server";
  EXPECT_EQ(ReadByte(fd, milliseconds(300)), -1) << "a held reply got through";
  (*proxy)->SetMode(FaultProxy::Mode::kPass);
  EXPECT_EQ(ReadByte(fd, milliseconds(5000)), 'e') << "the reply was lost, not held";
  ::close(fd);
}

// Tags "from:NAME\n" at the start of a connection.
std::optional<std::string> FromLine(std::string_view head) {
  const std::size_t nl = head.find('\n');
  if (nl == std::string_view::npos) return std::nullopt;
  return head.starts_with("from:") ? std::string(head.substr(5, nl - 5)) : std::string();
}

TEST(FaultProxyTest, ATaggedConnectionFollowsItsTagsMode) {
  EchoServer echo;
  auto proxy = FaultProxy::Start("127.0.0.1", echo.port(), 0, FromLine);
  ASSERT_TRUE(proxy.ok()) << proxy.status().ToString();
  (*proxy)->SetTagMode("a", FaultProxy::Mode::kPartition);
  int a = Connect((*proxy)->port()), b = Connect((*proxy)->port());
  ASSERT_EQ(::write(b, "fro", 3), 3);
  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_EQ(echo.received(), 0) << "bytes went out before the tagger named the connection";
  ASSERT_EQ(::write(b, "m:b\nx", 5), 5);
  std::string got;
  for (int i = 0; i < 8; ++i) got += static_cast<char>(ReadByte(b, milliseconds(5000)));
  EXPECT_EQ(got, "from:b\nx") << "an untouched tag does as the proxy does";
  ASSERT_EQ(::write(a, "from:a\ny", 8), 8);
  EXPECT_EQ(ReadByte(a, milliseconds(300)), -1) << "a partitioned tag's byte got through";
  (*proxy)->SetTagMode("a", std::nullopt);
  EXPECT_EQ(ReadByte(a, milliseconds(5000)), 'f') << "held, not lost";
  ::close(a);
  ::close(b);
}

}  // namespace
}  // namespace dlock::harness
