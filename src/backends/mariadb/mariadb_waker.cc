#include "backends/mariadb/mariadb_waker.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "core/fd.h"

namespace dlock::mariadb {
namespace {

using std::chrono::milliseconds;

// Idle wait connections kept for the next wait (beyond, they are closed).
constexpr std::size_t kKeepIdle = 4;

// GET_LOCK's timeout, in seconds with millisecond precision.
std::string Seconds(SteadyTime until) {
  const auto left = std::chrono::ceil<milliseconds>(until - SteadyClock::now());
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", static_cast<double>(std::max<long long>(0, left.count())) / 1000);
  return text;
}

}  // namespace

std::string WakeName(const std::string& owner) { return "dlock/" + owner; }

int Waker::Connections() const {
  std::lock_guard lock(mu_);
  return static_cast<int>(idle_.size()) + busy_;
}

std::unique_ptr<Connection> Waker::Take(SteadyTime deadline) {
  {
    std::lock_guard lock(mu_);
    while (!idle_.empty()) {
      std::unique_ptr<Connection> conn = std::move(idle_.back());
      idle_.pop_back();
      if (conn->Usable()) {
        ++busy_;
        return conn;
      }
    }
    ++busy_;
  }
  auto conn = Connection::Open(options_, deadline, "");
  if (conn.ok()) return std::move(*conn);
  std::lock_guard lock(mu_);
  --busy_;
  return nullptr;
}

void Waker::Give(std::unique_ptr<Connection> conn) {
  std::lock_guard lock(mu_);
  --busy_;
  if (conn && conn->Usable() && idle_.size() < kKeepIdle) idle_.push_back(std::move(conn));
}

Waker::Outcome Waker::WaitFor(const std::string& name, SteadyTime until, std::stop_token stop) {
  std::unique_ptr<Connection> conn = Take(SteadyClock::now() + options_.connect_timeout);
  if (!conn) return Outcome::kUnavailable;
  internal::Fd cancel(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!cancel.valid()) {
    Give(std::move(conn));
    return Outcome::kUnavailable;
  }
  std::stop_callback on_stop(stop, [&] {
    const std::uint64_t one = 1;
    (void)!write(cancel.get(), &one, sizeof one);
  });
  // Left to right: was the name free, wait for it, and let go of it at once.
  const std::string literal = HexLiteral(name);
  const std::string sql = "SELECT IS_FREE_LOCK(" + literal + "), GET_LOCK(" + literal + ", " +
                          Seconds(until) + "), RELEASE_LOCK(" + literal + ")";
  auto answer = conn->Query(sql, until + options_.connect_timeout, "wait for " + name,
                            cancel.get());
  const bool cancelled = stop.stop_requested();
  Give(answer.ok() ? std::move(conn) : nullptr);
  if (cancelled) return Outcome::kCancelled;
  if (!answer.ok() || answer->empty() || answer->front().empty() ||
      answer->front().front().size() != 3) {
    return Outcome::kUnavailable;
  }
  const Row& row = answer->front().front();
  if (row[0] == "1") return Outcome::kWasFree;
  return row[1] == "1" ? Outcome::kReleased : Outcome::kTimedOut;
}

}  // namespace dlock::mariadb
