#include "backends/etcd/plaintext_probe.h"

#include <poll.h>
#include <sys/socket.h>

#include <memory>
#include <string_view>

#include "core/connect.h"
#include "core/fd.h"

namespace dlock::etcd {
namespace {

using Clock = std::chrono::steady_clock;

// The client preface (RFC 9113, 3.4) and an empty SETTINGS frame: a 9-byte
// frame header, length 0, type 4, no flags, stream 0.
constexpr std::string_view kHello{"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\4\0\0\0\0\0", 33};
constexpr unsigned char kSettings = 4;

bool SplitAddress(const std::string& address, std::string& host, std::string& port) {
  const std::size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) return false;
  host = address.substr(0, colon);
  port = address.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return true;
}

// One address: the hello sent whole, and the first 9 bytes back a SETTINGS
// frame's header.
bool SettingsCameBack(const addrinfo& a, Clock::time_point deadline) {
  const internal::Fd socket(internal::ConnectBefore(&a, deadline));
  const int fd = socket.get();
  if (!socket.valid()) return false;
  if (::send(fd, kHello.data(), kHello.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(kHello.size())) {
    return false;
  }
  unsigned char header[9];
  std::size_t got = 0;
  while (got < sizeof header && internal::WaitFor(fd, POLLIN, deadline)) {
    const ssize_t n = ::recv(fd, header + got, sizeof header - got, 0);
    if (n <= 0) return false;
    got += static_cast<std::size_t>(n);
  }
  return got == sizeof header && header[3] == kSettings;
}

}  // namespace

bool AnswersPlaintextHttp2(const std::string& address, std::chrono::milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  std::string host, port;
  if (!SplitAddress(address, host, port)) return false;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0) return false;
  const std::unique_ptr<addrinfo, void (*)(addrinfo*)> list(found, ::freeaddrinfo);
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (SettingsCameBack(*a, deadline)) return true;
  }
  return false;
}

}  // namespace dlock::etcd
