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
#include <map>
#include <optional>
#include <string>
#include <vector>

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
  // What the tagger said of the client's first bytes; none yet: nothing
  // goes to the server until it has decided.
  std::optional<std::string> tag;
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
                                                      int target_port, int listen_port,
                                                      Tagger tagger) {
  std::unique_ptr<FaultProxy> p(new FaultProxy());
  p->tagger_ = std::move(tagger);
  p->target_host_ = target_host == "localhost" ? "127.0.0.1" : target_host;
  p->target_port_ = target_port;
  p->listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int one = 1;
  ::setsockopt(p->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(listen_port));
  if (::bind(p->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(p->listen_fd_, 64) != 0) {
    return UnavailableError("fault proxy: cannot listen on 127.0.0.1:" +
                            std::to_string(listen_port) + ": " + std::strerror(errno));
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
  WaitForLoop();
}

void FaultProxy::SetTagMode(const std::string& tag, std::optional<Mode> mode) {
  {
    std::lock_guard lock(tag_mu_);
    if (mode) {
      tag_modes_[tag] = *mode;
    } else {
      tag_modes_.erase(tag);
    }
  }
  WaitForLoop();
}

void FaultProxy::WaitForLoop() {
  const std::uint64_t mine = ++modes_set_;
  std::uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
  // Returns once the loop works in the new mode: nothing the caller does
  // next is forwarded the old way.
  while (modes_seen_.load() < mine && !stop_) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

namespace {

// SO_LINGER 0 on every connection, then closes it: a reset, as a middlebox
// dropping the flow would cause.
void ResetAll(std::list<Conn>& conns) {
  for (auto& c : conns) {
    linger l{1, 0};
    if (c.up.from >= 0) ::setsockopt(c.up.from, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    CloseConn(c);
  }
  conns.clear();
}

// What one turn of the loop polls: the wake-up and listening sockets first,
// then two entries per Pipe (its `from`, its `to`), with pipes[i] the Pipe
// of fds[i + 2].
struct PollSet {
  std::vector<pollfd> fds;
  std::vector<Pipe*> pipes;
  std::int64_t next_due_ns = -1;  // the earliest chunk not yet due; -1: none
};

// Which way bytes move in `mode`.
struct Forwarding {
  bool up = false, down = false;
};

Forwarding ForwardingIn(FaultProxy::Mode mode) {
  using M = FaultProxy::Mode;
  const bool both = mode == M::kPass || mode == M::kDelay;
  return {both || mode == M::kHoldReplies, both};
}

// The mode each connection is in: its tag's, else the proxy's.
struct Modes {
  FaultProxy::Mode all = FaultProxy::Mode::kPass;
  std::map<std::string, FaultProxy::Mode> by_tag;

  Forwarding For(const Conn& c) const {
    // Undecided: read the client's first bytes, send nothing yet.
    if (!c.tag) return {};
    const auto it = by_tag.find(*c.tag);
    return ForwardingIn(it != by_tag.end() ? it->second : all);
  }
};

PollSet WatchPipes(int wake_fd, int listen_fd, std::list<Conn>& conns, const Modes& modes) {
  PollSet set;
  set.fds = {{wake_fd, POLLIN, 0}, {listen_fd, POLLIN, 0}};
  for (auto& c : conns) {
    const Forwarding way = modes.For(c);
    for (Pipe* p : {&c.up, &c.down}) {
      const bool forwarding = p == &c.up ? way.up : way.down;
      const bool reading = forwarding || (p == &c.up && !c.tag);
      short events = 0;
      // Stop reading while partitioned, so that the kernel's buffers fill
      // and the sender sees the stall it would see on a real partition.
      if (reading && !p->eof && p->queue.size() < 64) events |= POLLIN;
      if (forwarding && !p->queue.empty()) {
        if (p->queue.front().due_ns <= NowNs()) {
          events |= POLLOUT;
        } else if (set.next_due_ns < 0 || p->queue.front().due_ns < set.next_due_ns) {
          set.next_due_ns = p->queue.front().due_ns;
        }
      }
      set.fds.push_back({p->from, events, 0});
      set.pipes.push_back(p);
      set.fds.push_back({p->to, static_cast<short>(events & POLLOUT ? POLLOUT : 0), 0});
      set.pipes.push_back(p);
    }
  }
  return set;
}

// Queues what `p->from` has, to be written at now + delay_ns.
void ReadInto(Pipe& p, std::int64_t delay_ns) {
  char buf[16384];
  ssize_t n = ::read(p.from, buf, sizeof buf);
  if (n > 0) {
    p.queue.push_back({NowNs() + delay_ns, std::string(buf, static_cast<std::size_t>(n))});
  } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
    p.eof = true;
  }
}

// Writes the chunks that are due, as far as `p->to` takes them.
void WriteDue(Pipe& p) {
  while (!p.queue.empty() && p.queue.front().due_ns <= NowNs()) {
    std::string& b = p.queue.front().bytes;
    ssize_t n = ::write(p.to, b.data(), b.size());
    if (n <= 0) break;
    b.erase(0, static_cast<std::size_t>(n));
    if (b.empty()) p.queue.pop_front();
  }
}

// Asks `tagger` about an undecided connection's first bytes; past 16 KB
// without an answer it has no tag.
void Tag(Conn& c, const FaultProxy::Tagger& tagger) {
  std::string head;
  for (const Chunk& chunk : c.up.queue) head += chunk.bytes;
  c.tag = tagger(head);
  if (!c.tag && (head.size() > 16384 || c.up.eof)) c.tag = "";
}

// A side that closed, with nothing left to deliver: close the pair.
void CloseFinished(std::list<Conn>& conns) {
  for (auto& c : conns) {
    if ((c.up.eof && c.up.queue.empty()) || (c.down.eof && c.down.queue.empty())) CloseConn(c);
  }
  conns.remove_if([](const Conn& c) { return c.dead; });
}

// Accepts every pending client and connects it to the store; refuses them
// while `mode` is kDrop.
void AcceptAll(int listen_fd, const std::atomic<int>& mode, const std::string& host, int port,
               bool tagging, std::list<Conn>& conns) {
  int client;
  while ((client = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0) {
    if (static_cast<FaultProxy::Mode>(mode.load()) == FaultProxy::Mode::kDrop) {
      ::close(client);
      continue;
    }
    int server = ConnectTo(host, port);
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
    if (!tagging) c.tag = "";
    conns.push_back(std::move(c));
  }
}

}  // namespace

void FaultProxy::Loop() {
  std::list<Conn> conns;
  while (!stop_) {
    const std::uint64_t seen = modes_set_.load();  // before the mode: never newer than it
    const Mode mode = static_cast<Mode>(mode_.load());
    if (mode == Mode::kDrop) ResetAll(conns);
    Modes modes{mode, {}};
    {
      std::lock_guard lock(tag_mu_);
      modes.by_tag = tag_modes_;
    }
    PollSet set = WatchPipes(wake_fd_, listen_fd_, conns, modes);
    modes_seen_ = seen;
    int timeout = -1;
    if (set.next_due_ns >= 0) {
      timeout = static_cast<int>(
          std::max<std::int64_t>(0, (set.next_due_ns - NowNs()) / 1'000'000 + 1));
    }
    ::poll(set.fds.data(), set.fds.size(), timeout);
    if (set.fds[0].revents) {
      std::uint64_t n;
      (void)!::read(wake_fd_, &n, sizeof n);
    }
    if (set.fds[1].revents) {
      AcceptAll(listen_fd_, mode_, target_host_, target_port_, bool(tagger_), conns);
    }
    const std::int64_t delay = mode == Mode::kDelay ? delay_ns_.load() : 0;
    for (std::size_t i = 2; i < set.fds.size(); i += 2) {
      Pipe& p = *set.pipes[i - 2];
      if (set.fds[i].revents & (POLLIN | POLLHUP | POLLERR)) ReadInto(p, delay);
      if (set.fds[i + 1].revents & POLLOUT) WriteDue(p);
    }
    for (auto& c : conns) {
      if (!c.tag) Tag(c, tagger_);
    }
    CloseFinished(conns);
  }
  for (auto& c : conns) CloseConn(c);
}

}  // namespace dlock::harness
