#include "harness/proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <list>

#include "dlock/clock.h"

namespace dlock::harness {
namespace {

std::int64_t NowNs() { return MonotonicClock::now().time_since_epoch().count(); }

struct Chunk {
  std::int64_t due_ns;
  std::string bytes;
};

// One direction of one connection.
struct Pipe {
  int from = -1, to = -1;
  std::deque<Chunk> queue;  // read from `from`, not yet written to `to`
  bool eof = false;
};

struct Conn {
  Pipe up, down;  // client -> server, server -> client
  bool dead = false;
};

void CloseConn(Conn& c) {
  if (c.up.from >= 0) ::close(c.up.from);
  if (c.down.from >= 0) ::close(c.down.from);
  c.up.from = c.up.to = c.down.from = c.down.to = -1;
  c.dead = true;
}

int ConnectTo(const std::string& host, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::fcntl(fd, F_SETFL, O_NONBLOCK);
  return fd;
}

}  // namespace

Result<std::unique_ptr<FaultProxy>> FaultProxy::Start(const std::string& target_host,
                                                      int target_port) {
  std::unique_ptr<FaultProxy> p(new FaultProxy());
  p->target_host_ = target_host == "localhost" ? "127.0.0.1" : target_host;
  p->target_port_ = target_port;
  p->listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int one = 1;
  ::setsockopt(p->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(p->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(p->listen_fd_, 64) != 0) {
    return UnavailableError(std::string("fault proxy: cannot listen: ") + std::strerror(errno));
  }
  socklen_t len = sizeof addr;
  ::getsockname(p->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  p->port_ = ntohs(addr.sin_port);
  p->wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  p->thread_ = std::thread([raw = p.get()] { raw->Loop(); });
  return p;
}

FaultProxy::~FaultProxy() {
  stop_ = true;
  std::uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
  ::close(wake_fd_);
}

void FaultProxy::SetMode(Mode mode, std::chrono::milliseconds delay) {
  delay_ns_ = std::chrono::nanoseconds(delay).count();
  mode_ = static_cast<int>(mode);
  std::uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
}

void FaultProxy::Loop() {
  std::list<Conn> conns;
  while (!stop_) {
    const Mode mode = static_cast<Mode>(mode_.load());
    if (mode == Mode::kDrop) {
      for (auto& c : conns) {
        // SO_LINGER 0: a reset, as a middlebox dropping the flow would cause.
        linger l{1, 0};
        if (c.up.from >= 0) ::setsockopt(c.up.from, SOL_SOCKET, SO_LINGER, &l, sizeof l);
        CloseConn(c);
      }
      conns.clear();
    }
    std::vector<pollfd> fds = {{wake_fd_, POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    std::vector<Pipe*> pipes;
    std::int64_t next_due = -1;
    const bool forwarding = mode == Mode::kPass || mode == Mode::kDelay;
    for (auto& c : conns) {
      for (Pipe* p : {&c.up, &c.down}) {
        short events = 0;
        // Stop reading while partitioned, so that the kernel's buffers fill
        // and the sender sees the stall it would see on a real partition.
        if (forwarding && !p->eof && p->queue.size() < 64) events |= POLLIN;
        if (forwarding && !p->queue.empty()) {
          if (p->queue.front().due_ns <= NowNs()) {
            events |= POLLOUT;
          } else if (next_due < 0 || p->queue.front().due_ns < next_due) {
            next_due = p->queue.front().due_ns;
          }
        }
        fds.push_back({p->from, events, 0});
        pipes.push_back(p);
        fds.push_back({p->to, static_cast<short>(events & POLLOUT ? POLLOUT : 0), 0});
        pipes.push_back(p);
      }
    }
    int timeout = -1;
    if (next_due >= 0) timeout = static_cast<int>(std::max<std::int64_t>(0, (next_due - NowNs()) / 1'000'000 + 1));
    ::poll(fds.data(), fds.size(), timeout);
    if (fds[0].revents) {
      std::uint64_t n;
      (void)!::read(wake_fd_, &n, sizeof n);
    }
    if (fds[1].revents) {
      int client;
      while ((client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0) {
        if (static_cast<Mode>(mode_.load()) == Mode::kDrop) {
          ::close(client);
          continue;
        }
        int server = ConnectTo(target_host_, target_port_);
        if (server < 0) {
          ::close(client);
          continue;
        }
        int one = 1;
        ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        Conn c;
        c.up.from = client;
        c.up.to = server;
        c.down.from = server;
        c.down.to = client;
        conns.push_back(std::move(c));
      }
    }
    const std::int64_t delay = mode == Mode::kDelay ? delay_ns_.load() : 0;
    for (std::size_t i = 2; i < fds.size(); i += 2) {
      Pipe* p = pipes[i - 2];
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        char buf[16384];
        ssize_t n = ::read(p->from, buf, sizeof buf);
        if (n > 0) {
          p->queue.push_back({NowNs() + delay, std::string(buf, static_cast<std::size_t>(n))});
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          p->eof = true;
        }
      }
      if (fds[i + 1].revents & POLLOUT) {
        while (!p->queue.empty() && p->queue.front().due_ns <= NowNs()) {
          std::string& b = p->queue.front().bytes;
          ssize_t n = ::write(p->to, b.data(), b.size());
          if (n <= 0) break;
          b.erase(0, static_cast<std::size_t>(n));
          if (b.empty()) p->queue.pop_front();
        }
      }
    }
    // A side that closed, with nothing left to deliver: close the pair.
    for (auto& c : conns) {
      if ((c.up.eof && c.up.queue.empty()) || (c.down.eof && c.down.queue.empty())) CloseConn(c);
    }
    conns.remove_if([](const Conn& c) { return c.dead; });
  }
  for (auto& c : conns) CloseConn(c);
}

}  // namespace dlock::harness
