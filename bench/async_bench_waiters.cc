// dlock_bench_async's waiters mode: W asynchronous waiters on one key,
// spread over P processes, each taking the key, releasing it at once and
// queueing again, for MS ms. What one hand-off costs — the store's own
// count of commands ($DLOCK_WORK_CMD before and after), the attempts and
// notifications of the clients — must not grow with W: a release wakes the
// waiter whose turn it is, not all of them.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "async_bench.h"

namespace dlock::bench {
namespace {

struct ChildReport {
  std::vector<std::pair<std::int64_t, char>> events;  // (monotonic ns, 'g'rant / 'r'elease)
  long tries = 0, notifies = 0, blind = 0, errors = 0;
};

// One process's share of the waiters; writes its report to `fd`.
void RunChild(const std::string& key, int count, int ms, int fd) {
  auto plan = std::make_shared<FaultPlan>();
  auto client = Connect(plan);
  std::mutex mu;
  ChildReport report;
  std::atomic<bool> stop{false};
  std::function<void()> queue_again = [&] {
    client->AcquireAsync(key, Opts(milliseconds(600000)), [&](Result<Lease> lease) {
      if (lease.ok()) {
        const std::int64_t granted = MonotonicNs();
        (void)lease->Release();
        std::lock_guard lock(mu);
        report.events.emplace_back(granted, 'g');
        report.events.emplace_back(MonotonicNs(), 'r');
      } else if (lease.status().code() != StatusCode::kCancelled) {
        std::lock_guard lock(mu);
        ++report.errors;
      }
      if (!stop) queue_again();
    });
  };
  for (int i = 0; i < count; ++i) queue_again();
  std::this_thread::sleep_for(milliseconds(ms));
  stop = true;
  client.reset();  // cancels what still waits; no callback runs after
  std::ostringstream out;
  out << plan->Tries() << " " << plan->Notifies() << " " << plan->BlindNotifies() << " "
      << report.errors << "\n";
  for (const auto& [t, kind] : report.events) out << kind << " " << t << "\n";
  const std::string text = out.str();
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n <= 0) _exit(71);
    done += static_cast<std::size_t>(n);
  }
}

ChildReport ReadReport(int fd) {
  std::string text;
  char buf[65536];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
  std::istringstream in(text);
  ChildReport r;
  in >> r.tries >> r.notifies >> r.blind >> r.errors;
  char kind;
  std::int64_t t;
  while (in >> kind >> t) r.events.emplace_back(t, kind);
  return r;
}

// $DLOCK_WORK_CMD's number, or -1 without one.
double StoreWork() {
  const char* cmd = std::getenv("DLOCK_WORK_CMD");
  if (cmd == nullptr || *cmd == '\0') return -1;
  FILE* p = popen(cmd, "r");
  if (p == nullptr) return -1;
  double v = -1;
  if (std::fscanf(p, "%lf", &v) != 1) v = -1;
  pclose(p);
  return v;
}

// Hand-off latencies (µs): each grant after the release before it.
std::vector<double> Handoffs(std::vector<std::pair<std::int64_t, char>>& events) {
  std::sort(events.begin(), events.end());
  std::vector<double> us;
  std::int64_t released = -1;
  for (const auto& [t, kind] : events) {
    if (kind == 'r') released = t;
    if (kind == 'g' && released >= 0) us.push_back((t - released) / 1000.0);
  }
  return us;
}

}  // namespace

json Waiters(int waiters, int processes, int ms) {
  processes = std::clamp(processes, 1, waiters);
  const std::string key = "bench-async/" + std::to_string(getpid()) + "/waiters";
  std::vector<std::pair<pid_t, int>> children;
  for (int p = 0; p < processes; ++p) {
    int fds[2];
    if (pipe(fds) != 0) Fail("pipe", InternalError("pipe failed"));
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      RunChild(key, waiters / processes + (p < waiters % processes ? 1 : 0), ms, fds[1]);
      _exit(0);
    }
    close(fds[1]);
    children.emplace_back(pid, fds[0]);
  }
  // The store's work is read over the middle half of the run, away from
  // the waiters queueing at the start and leaving at the end.
  std::this_thread::sleep_for(milliseconds(ms / 4));
  const double work_before = StoreWork();
  const std::int64_t window_from = MonotonicNs();
  std::this_thread::sleep_for(milliseconds(ms / 2));
  const double work_after = StoreWork();
  const std::int64_t window_to = MonotonicNs();
  ChildReport all;
  for (auto [pid, fd] : children) {
    ChildReport r = ReadReport(fd);
    close(fd);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) Fail("a waiter process", InternalError("failed"));
    all.tries += r.tries, all.notifies += r.notifies, all.blind += r.blind, all.errors += r.errors;
    all.events.insert(all.events.end(), r.events.begin(), r.events.end());
  }
  const double in_window = static_cast<double>(
      std::count_if(all.events.begin(), all.events.end(), [&](const auto& e) {
        return e.second == 'g' && e.first >= window_from && e.first < window_to;
      }));
  const double grants = static_cast<double>(std::count_if(
      all.events.begin(), all.events.end(), [](const auto& e) { return e.second == 'g'; }));
  json out = {{"waiters", waiters},
              {"processes", processes},
              {"duration_ms", ms},
              {"handoffs", grants},
              {"handoffs_per_s", grants / (ms / 1000.0)},
              {"attempts_per_handoff", all.tries / std::max(1.0, grants)},
              {"notifications_per_handoff", all.notifies / std::max(1.0, grants)},
              {"blind_notifications", all.blind},
              {"errors", all.errors},
              {"handoff_us", SummaryJson(Handoffs(all.events))}};
  if (work_before >= 0) {
    out["store_work_per_handoff"] = (work_after - work_before) / std::max(1.0, in_window);
  }
  return out;
}

}  // namespace dlock::bench
