// Waker: how a MariaDB waiter sleeps until the one ahead of it lets go,
// without polling.
//
// Every holder and waiter of a key keeps a user lock named after its owner,
// "dlock/<owner>" (GET_LOCK), on the session that made its attempts; the
// lock is released after the holder's release commits (or with its
// session, when its process dies). A waiter blocks on a connection of its
// own in GET_LOCK of the name of the one it waits for: MariaDB wakes it the
// moment that name is let go of, and it lets go of it again at once, in the
// same statement (so the next one waiting on that name wakes too). The
// names decide nothing: who holds a key is in the tables alone; a name
// only says "try again now".
//
// Connections are kept for reuse (a few, idle); each wait uses one alone,
// since GET_LOCK blocks its session.
//
// Thread-safety: WaitFor may be called from many threads at once.
#ifndef DLOCK_SRC_BACKENDS_MARIADB_MARIADB_WAKER_H_
#define DLOCK_SRC_BACKENDS_MARIADB_MARIADB_WAKER_H_

#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <vector>

#include "backends/mariadb/mariadb_conn.h"

namespace dlock::mariadb {

// "dlock/<owner>", the user lock an owner keeps while it holds or waits.
std::string WakeName(const std::string& owner);

class Waker {
 public:
  explicit Waker(ConnectOptions options) : options_(std::move(options)) {}

  enum class Outcome {
    kReleased,     // the name was held, and was let go of during the wait
    kWasFree,      // nobody held the name when the wait began
    kTimedOut,     // `until` came
    kCancelled,    // `stop` was requested
    kUnavailable,  // no connection, or it broke
  };
  Outcome WaitFor(const std::string& name, SteadyTime until, std::stop_token stop);

  // For tests: how many connections wait or are kept.
  int Connections() const;

 private:
  std::unique_ptr<Connection> Take(SteadyTime deadline);
  void Give(std::unique_ptr<Connection> conn);

  const ConnectOptions options_;
  mutable std::mutex mu_;  // guards the two below
  std::vector<std::unique_ptr<Connection>> idle_;
  int busy_ = 0;
};

}  // namespace dlock::mariadb

#endif  // DLOCK_SRC_BACKENDS_MARIADB_MARIADB_WAKER_H_
