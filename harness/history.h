// The history of one chaos run: every operation of every worker and every
// fault, as JSON lines.
//
// Workers stamp their own events with MonotonicClock (CLOCK_BOOTTIME), which
// is one clock for every process on the host, so events from different
// workers and the fault injector ("nemesis", worker -1) are comparable.
#ifndef DLOCK_HARNESS_HISTORY_H_
#define DLOCK_HARNESS_HISTORY_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dlock/status.h"
#include "dlock/types.h"

namespace dlock::harness {

enum class EventType { kInvoke, kOk, kFail, kUnknown, kInfo };
std::string_view EventTypeName(EventType type);

struct Event {
  std::int64_t t_ns = 0;    // MonotonicClock
  std::int64_t wall_ns = 0; // CLOCK_REALTIME as the worker saw it (clock-step faults)
  int worker = -1;          // -1: the nemesis
  int incarnation = 0;      // a worker killed and restarted counts up
  // Worker ops: acquire, read, write, release.
  // Nemesis ops: pause (info, with duration_ns), resume, kill, restart,
  // clock-step (with offset in value), store-down, store-up.
  std::string op;
  EventType type = EventType::kInfo;
  FencingToken token = 0;
  std::int64_t value = -1;       // counter read or written; clock offset in s
  std::int64_t duration_ns = 0;  // pauses
  std::string error;             // fail / unknown: why
};

std::string ToJsonLine(const Event& event);
Result<Event> ParseJsonLine(std::string_view line);

// One accepted operation as the resource logged it, in commit order.
struct LoggedOp {
  std::int64_t seq = 0;
  bool is_write = false;
  int worker = -1;
  FencingToken token = 0;
  std::int64_t read_value = -1;  // writes: the value the worker had read
  std::int64_t value = 0;        // reads: value read; writes: value written
};

struct History {
  std::vector<Event> events;     // sorted by t_ns
  std::vector<LoggedOp> log;     // the resource's own log, by seq
  std::int64_t final_counter = 0;
  std::int64_t ttl_ms = 0;
  bool fenced = true;
};

}  // namespace dlock::harness

#endif  // DLOCK_HARNESS_HISTORY_H_
