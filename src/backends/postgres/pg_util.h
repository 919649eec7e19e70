// libpq plumbing shared by the PostgreSQL backend and fence::Postgres: RAII
// handles, the one function that turns libpq and SQLSTATE errors into dlock
// Statuses, and connect/query calls bounded by a deadline.
//
// libpq's own `connect_timeout` counts whole seconds (and at least 2), and a
// blocking PQexec waits for ever on a server that vanished without a reset.
// Everything here uses libpq's asynchronous calls and poll(2) against a
// steady_clock deadline instead, so a call returns within its bound.
//
// Thread-safety: a PGconn is used by one thread at a time (callers hold a
// mutex); the functions themselves keep no state.
#ifndef DLOCK_SRC_BACKENDS_POSTGRES_PG_UTIL_H_
#define DLOCK_SRC_BACKENDS_POSTGRES_PG_UTIL_H_

#include <libpq-fe.h>
#include <poll.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/hex.h"
#include "core/timed_mutex.h"
#include "dlock/status.h"

namespace dlock::postgres {

using SteadyTime = std::chrono::steady_clock::time_point;

struct PgConnCloser {
  void operator()(PGconn* conn) const { PQfinish(conn); }
};
using PgConnHandle = std::unique_ptr<PGconn, PgConnCloser>;

struct PgResultClearer {
  void operator()(PGresult* result) const { PQclear(result); }
};
using PgResultHandle = std::unique_ptr<PGresult, PgResultClearer>;

// A mutex whose lock can give up at a deadline (core/timed_mutex.h).
using TimedMutex = internal::TimedMutex;

// libpq connection keywords and values, in order (PQconnectStartParams).
using ConnInfo = std::vector<std::pair<std::string, std::string>>;

// THE mapping from libpq to dlock. `result` is the failed result, or null
// when the failure is the connection's (then PQerrorMessage(conn) says why);
// `what` names the operation ("acquire jobs/a"), `where` the server (a
// redacted URI). Codes:
//   connection lost or refused, timeouts, server shutting down or
//   starting, too many connections, out of disk, read-only server,
//   serialization failures and deadlocks (retry)          -> kUnavailable
//   login refused (password, pg_hba.conf, no such role),
//   a privilege the role lacks (42501)                    -> kPermissionDenied
//   missing table or column                               -> kFailedPrecondition
//   anything else (a bug in dlock's SQL)                  -> kInternal
Status FromPg(const PGconn* conn, const PGresult* result, std::string_view what,
              std::string_view where);

// OK when `r` has at least the `columns` columns and `min_rows` rows that
// its reader reads; kUnavailable otherwise (the outcome unknown), so that a
// reply of another shape, from a proxy or a server that answered something
// else, is an error and never a read out of bounds.
Status CheckShape(const PGresult* r, int columns, int min_rows, std::string_view what,
                  std::string_view where);

// Connects within `deadline` (non-blocking connect + poll). The connection is
// left in non-blocking mode with notices silenced.
Result<PgConnHandle> Connect(const ConnInfo& info, SteadyTime deadline,
                             std::string_view where);

// After PQsendQuery*/PQsendPrepare: flushes, waits for every result until
// the deadline, and returns the last one (PGRES_TUPLES_OK or
// PGRES_COMMAND_OK) or the first error through FromPg. A deadline that
// passes leaves the connection in an unknown state: the caller must drop it.
// `timed_out` (optional) tells that case apart.
Result<PgResultHandle> Await(PGconn* conn, SteadyTime deadline, std::string_view what,
                             std::string_view where, bool* timed_out = nullptr);

// Consumes whatever the server sent on an idle connection (notifications, or
// the FATAL message and EOF of a terminated session) without blocking.
// False when the connection turned out to be broken.
bool DrainIdle(PGconn* conn);

// A connection driven without blocking, for a caller with a poll loop of
// its own: StartConnect begins it (null: out of memory; CONNECTION_BAD:
// failed at once), the caller runs PQconnectPoll as libpq asks, and once
// it answers PGRES_POLLING_OK, FinishConnect gives it what every dlock
// connection has (non-blocking sends, no notices printed); false if that
// failed. Connect is the blocking form.
PgConnHandle StartConnect(const ConnInfo& info);
bool FinishConnect(PGconn* conn);

// Waits until `fd` is ready for `events` or the deadline passes: >0 ready,
// 0 timed out, <0 error. `extra_fd` (if >= 0) is also watched for POLLIN.
int PollFd(int fd, short events, SteadyTime deadline, int extra_fd = -1);
// The same for any number of descriptors (those < 0 are skipped).
int PollFds(std::span<pollfd> fds, SteadyTime deadline);

// Lower-case hex of arbitrary bytes, and back (core/hex.h).
using internal::HexDecode;
using internal::HexEncode;

}  // namespace dlock::postgres

#endif  // DLOCK_SRC_BACKENDS_POSTGRES_PG_UTIL_H_
