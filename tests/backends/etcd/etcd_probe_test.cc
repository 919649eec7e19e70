// The plaintext probe against small servers on loopback: each answers the
// probe's hello in one way, and only an HTTP/2 SETTINGS frame counts.
#include "backends/etcd/plaintext_probe.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "core/fd.h"

namespace dlock::etcd {
namespace {

using std::chrono::milliseconds;

// A listener on 127.0.0.1 that serves one connection: reads what comes,
// writes `reply` (unless `silent`), then closes.
class OneShotServer {
 public:
  explicit OneShotServer(std::string reply, bool silent = false)
      : listener_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof a;
    if (::bind(listener_.get(), reinterpret_cast<sockaddr*>(&a), size) != 0 ||
        ::listen(listener_.get(), 1) != 0 ||
        ::getsockname(listener_.get(), reinterpret_cast<sockaddr*>(&a), &size) != 0) {
      return;
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::jthread([this, reply = std::move(reply), silent] {
      const internal::Fd conn(::accept(listener_.get(), nullptr, nullptr));
      if (!conn.valid()) return;
      char buf[64];
      (void)::recv(conn.get(), buf, sizeof buf, 0);
      if (silent) {
        (void)::recv(conn.get(), buf, sizeof buf, 0);  // until the prober gives up
      } else if (!reply.empty()) {
        (void)::send(conn.get(), reply.data(), reply.size(), MSG_NOSIGNAL);
      }
    });
  }
  // Wakes an accept that nobody answered (a test that stopped early).
  ~OneShotServer() { ::shutdown(listener_.get(), SHUT_RDWR); }
  OneShotServer(const OneShotServer&) = delete;
  OneShotServer& operator=(const OneShotServer&) = delete;

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }

 private:
  internal::Fd listener_;
  int port_ = 0;
  std::jthread thread_;
};

const std::string kSettingsFrame("\0\0\0\4\0\0\0\0\0", 9);

TEST(EtcdPlaintextProbeTest, ASettingsFrameBackIsPlaintextHttp2) {
  OneShotServer server(kSettingsFrame);
  ASSERT_GT(server.port(), 0);
  EXPECT_TRUE(AnswersPlaintextHttp2(server.address(), milliseconds(5000)));
}

TEST(EtcdPlaintextProbeTest, AnyOtherAnswerIsNot) {
  OneShotServer http1("HTTP/1.0 400 Bad Request\r\n\r\n");
  OneShotServer alert(std::string("\x15\x03\x03\x00\x02\x02\x28", 7));  // a TLS alert
  OneShotServer short_frame(kSettingsFrame.substr(0, 5));
  OneShotServer closes("");
  for (const auto* s : {&http1, &alert, &short_frame, &closes}) {
    ASSERT_GT(s->port(), 0);
    EXPECT_FALSE(AnswersPlaintextHttp2(s->address(), milliseconds(5000))) << s->address();
  }
}

TEST(EtcdPlaintextProbeTest, SilenceIsNotAnAnswer) {
  OneShotServer silent("", /*silent=*/true);
  ASSERT_GT(silent.port(), 0);
  EXPECT_FALSE(AnswersPlaintextHttp2(silent.address(), milliseconds(200)));
}

TEST(EtcdPlaintextProbeTest, NoServerOrNoAddressIsNot) {
  int port = 0;
  {
    OneShotServer gone(kSettingsFrame);  // a port that was free, then closed
    port = gone.port();
    (void)AnswersPlaintextHttp2(gone.address(), milliseconds(5000));
  }
  EXPECT_FALSE(AnswersPlaintextHttp2("127.0.0.1:" + std::to_string(port), milliseconds(1000)));
  for (const char* bad : {"no-port", ":2379", "127.0.0.1:", "no.such.host.invalid:2379"}) {
    EXPECT_FALSE(AnswersPlaintextHttp2(bad, milliseconds(1000))) << bad;
  }
}

}  // namespace
}  // namespace dlock::etcd
