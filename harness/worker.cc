#include "harness/worker.h"

#include <poll.h>
#include <time.h>
#include <unistd.h>

#include <iostream>

#include "dlock/client.h"
#include "harness/history.h"
#include "harness/resource.h"

namespace dlock::harness {
namespace {

class Reporter {
 public:
  Reporter(int id, int incarnation) : id_(id), incarnation_(incarnation) {}

  void Emit(std::string op, EventType type, FencingToken token = 0, std::int64_t value = -1,
            std::string error = {}) {
    Event e;
    e.t_ns = MonotonicClock::now().time_since_epoch().count();
    timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    e.wall_ns = static_cast<std::int64_t>(wall.tv_sec) * 1'000'000'000 + wall.tv_nsec;
    e.worker = id_;
    e.incarnation = incarnation_;
    e.op = std::move(op);
    e.type = type;
    e.token = token;
    e.value = value;
    e.error = std::move(error);
    std::cout << ToJsonLine(e) << std::endl;  // flushed: the harness reads it live
  }

 private:
  int id_, incarnation_;
};

// True when the harness has closed our stdin (the run is over).
bool StdinClosed() {
  pollfd p{0, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  char c;
  return ::read(0, &c, 1) == 0;
}

// Waits for the harness's go-ahead; false when the run is over.
bool WaitForGo() {
  char c;
  for (;;) {
    ssize_t n = ::read(0, &c, 1);
    if (n == 1) return c == 'g';
    if (n == 0) return false;
    if (errno != EINTR) return false;
  }
}

EventType FailureType(const Status& s) {
  // An unavailable store may have done what we asked: the outcome is unknown.
  return s.code() == StatusCode::kUnavailable ? EventType::kUnknown : EventType::kFail;
}

}  // namespace

int RunWorker(const WorkerOptions& o) {
  Reporter report(o.id, o.incarnation);
  auto client = Client::Connect("");  // $DLOCK_BACKEND, set by the run
  if (!client.ok()) {
    report.Emit("connect", EventType::kFail, 0, -1, client.status().message());
    return 69;
  }
  auto resource = CounterResource::Open(o.resource, o.fenced);
  if (!resource.ok()) {
    report.Emit("connect", EventType::kFail, 0, -1, resource.status().message());
    return 69;
  }
  AcquireOptions options;
  options.ttl = o.ttl;
  options.wait = o.ttl * 5 + std::chrono::seconds(1);

  while (!StdinClosed()) {
    report.Emit("acquire", EventType::kInvoke);
    auto lease = (*client)->Acquire(o.key, options);
    if (!lease.ok()) {
      report.Emit("acquire", FailureType(lease.status()), 0, -1, lease.status().message());
      continue;
    }
    const FencingToken token = lease->token();
    report.Emit("acquire", EventType::kOk, token);

    report.Emit("read", EventType::kInvoke, token);
    auto value = (*resource)->Read(o.key, token, o.id);
    if (!value.ok()) {
      report.Emit("read", FailureType(value.status()), token, -1, value.status().message());
    } else {
      report.Emit("read", EventType::kOk, token, *value);
      if (!WaitForGo()) {
        (void)lease->Release();
        return 0;
      }
      report.Emit("write", EventType::kInvoke, token, *value + 1);
      Status written = (*resource)->Write(o.key, token, o.id, *value, *value + 1);
      report.Emit("write", written.ok() ? EventType::kOk : FailureType(written), token,
                  *value + 1, written.message());
    }
    report.Emit("release", EventType::kInvoke, token);
    Status released = lease->Release();
    report.Emit("release", released.ok() ? EventType::kOk : FailureType(released), token, -1,
                released.message());
  }
  return 0;
}

}  // namespace dlock::harness
