// One connection to a MariaDB server over libmariadb (Connector/C), with
// every call bounded by a deadline of dlock's own.
//
// Connector/C counts its connect, read and write timeouts in whole seconds,
// and a blocking call waits that long on a server that vanished. It lets a
// program supply the wait itself (MARIADB_OPT_IO_WAIT), and every connection
// made here does: the wait polls the socket until the deadline of the call
// in progress on this thread (CallBounds), and also wakes when the call's
// cancel descriptor becomes readable. A call that misses its deadline fails
// with "lost connection"; the connection is then broken (its state is
// unknown: kUnavailable) and must be replaced.
//
// Values go into SQL only through the literals below (hex for bytes,
// decimal for numbers), so no text from a caller is ever parsed as SQL;
// that is what makes it safe for a connection to take several statements
// in one round trip (CLIENT_MULTI_STATEMENTS), which the lean forms use.
//
// Thread-safety: a Connection is used by one thread at a time (callers hold
// a mutex); the functions keep no state between calls.
#ifndef DLOCK_SRC_BACKENDS_MARIADB_MARIADB_CONN_H_
#define DLOCK_SRC_BACKENDS_MARIADB_MARIADB_CONN_H_

#include <mysql.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/mariadb/mariadb_options.h"
#include "core/hex.h"
#include "dlock/status.h"

namespace dlock::mariadb {

// While it lives, libmariadb's waits on this thread end at `deadline`, or
// as soon as `cancel_fd` (if >= 0) is readable.
class CallBounds {
 public:
  explicit CallBounds(SteadyTime deadline, int cancel_fd = -1);
  ~CallBounds();
  CallBounds(const CallBounds&) = delete;
  CallBounds& operator=(const CallBounds&) = delete;

 private:
  SteadyTime saved_deadline_;
  int saved_cancel_fd_;
};

struct MysqlCloser {
  void operator()(MYSQL* mysql) const;  // bounded: never waits on a dead server
};
using MysqlHandle = std::unique_ptr<MYSQL, MysqlCloser>;

struct ResultFreer {
  void operator()(MYSQL_RES* result) const { mysql_free_result(result); }
};
using ResultHandle = std::unique_ptr<MYSQL_RES, ResultFreer>;

// One row of a result set; nullopt for SQL NULL.
using Row = std::vector<std::optional<std::string>>;
// Every result set a statement (or a CALL) returned, in order.
using ResultSets = std::vector<std::vector<Row>>;

class Connection {
 public:
  // Connects and runs `session_sql` (settings for the session), all before
  // `deadline`.
  static Result<std::unique_ptr<Connection>> Open(const ConnectOptions& options,
                                                  SteadyTime deadline,
                                                  std::string_view session_sql);

  // Runs `sql` (one statement, or several separated by ';') and reads every
  // result set it sends. Errors come from FromMaria; `what` names the
  // operation. `cancel_fd`: see CallBounds. `affected` (optional) gets each
  // statement's affected rows, in order.
  Result<ResultSets> Query(std::string_view sql, SteadyTime deadline, std::string_view what,
                           int cancel_fd = -1, std::vector<std::uint64_t>* affected = nullptr);

  // False once a call lost the connection or ran out of time, or the
  // server ended the session while it was idle (checked without blocking).
  bool Usable();
  // The server's id for this session (CONNECTION_ID()).
  unsigned long id() const { return id_; }
  MYSQL* get() const { return mysql_.get(); }

 private:
  Connection(MysqlHandle mysql, std::string where);
  Status Fail(std::string_view what);

  MysqlHandle mysql_;
  std::string where_;
  unsigned long id_ = 0;
  bool broken_ = false;
};

// SQL literals. Bytes as X'6b6579' (any byte, no escaping; '' for none),
// integers in decimal, a nullable integer as NULL.
std::string HexLiteral(std::string_view bytes);
std::string IntLiteral(std::int64_t value);
std::string NullableInt(std::optional<std::int64_t> value);

// Lower-case hex of arbitrary bytes, and back (core/hex.h).
using internal::HexDecode;
using internal::HexEncode;

// Reads a decimal integer from a result cell; false when it is NULL or not
// a number.
bool CellInt(const std::optional<std::string>& cell, std::int64_t* out);

}  // namespace dlock::mariadb

#endif  // DLOCK_SRC_BACKENDS_MARIADB_MARIADB_CONN_H_
