// LoopbackSocket: a TCP socket on 127.0.0.1 and a port of its own, for
// tests that need a server which is not there. Bound but not listening it
// refuses connections; listening, the kernel completes the handshake and
// nothing ever answers (a stopped server). Closed by the destructor.
#ifndef DLOCK_TESTS_LOOPBACK_SOCKET_H_
#define DLOCK_TESTS_LOOPBACK_SOCKET_H_

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace dlock::testing_support {

class LoopbackSocket {
 public:
  enum class Start { kRefusing, kListening };

  explicit LoopbackSocket(Start start = Start::kRefusing) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd_ >= 0 && bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
        (start == Start::kRefusing || Listen()) &&
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port_ = ntohs(addr.sin_port);
    }
  }
  ~LoopbackSocket() {
    if (fd_ >= 0) close(fd_);
  }
  LoopbackSocket(const LoopbackSocket&) = delete;
  LoopbackSocket& operator=(const LoopbackSocket&) = delete;

  int port() const { return port_; }  // 0 if the socket could not be set up
  std::string host() const { return "127.0.0.1:" + std::to_string(port_); }
  // From now on the kernel takes connections (and nobody answers them).
  bool Listen() { return listen(fd_, 16) == 0; }

 private:
  int fd_;
  int port_ = 0;
};

}  // namespace dlock::testing_support

#endif  // DLOCK_TESTS_LOOPBACK_SOCKET_H_
