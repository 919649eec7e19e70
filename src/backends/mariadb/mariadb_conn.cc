#include "backends/mariadb/mariadb_conn.h"

#include <errmsg.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <mutex>

#include "backends/mariadb/mariadb_status.h"

namespace dlock::mariadb {
namespace {

using std::chrono::milliseconds;

// The bounds of the call in progress on this thread (CallBounds). Only
// read by IoWait, which libmariadb calls on the thread that made the call.
thread_local SteadyTime t_deadline = SteadyTime::max();
thread_local int t_cancel_fd = -1;

// What libmariadb is told its timeouts are. Never the bound that matters
// (IoWait applies the call's own deadline), but it must not be zero: with
// a zero timeout libmariadb fails a read that would block instead of
// waiting.
constexpr unsigned int kLibraryTimeoutSeconds = 600;
// How long closing a connection may take (its COM_QUIT).
constexpr milliseconds kCloseBudget{200};

// libmariadb's wait for its socket (MARIADB_OPT_IO_WAIT): until the socket
// is ready, the call's deadline (outside a call: libmariadb's own timeout),
// or the call's cancel descriptor, whichever comes first. 0 on a timeout or a cancel (the call
// then fails as a lost connection), >0 ready, <0 error.
int IoWait(my_socket fd, my_bool is_read, int timeout_ms) {
  pollfd fds[2] = {{fd, static_cast<short>(is_read ? POLLIN : POLLOUT), 0},
                   {t_cancel_fd, POLLIN, 0}};
  const nfds_t count = t_cancel_fd >= 0 ? 2 : 1;
  for (;;) {
    // Inside a call, only its deadline counts: libmariadb's TLS reads pass
    // their timeout in seconds where milliseconds are meant.
    long long wait_ms = timeout_ms < 0 ? LLONG_MAX : timeout_ms;
    if (t_deadline != SteadyTime::max()) {
      const auto left = std::chrono::ceil<milliseconds>(t_deadline - SteadyClock::now());
      wait_ms = std::max<long long>(0, left.count());
    }
    const int poll_ms = wait_ms == LLONG_MAX ? -1 : static_cast<int>(std::min<long long>(wait_ms, INT_MAX));
    const int ready = poll(fds, count, poll_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready > 0 && count == 2 && fds[1].revents != 0) return 0;  // cancelled
    if (ready == 0) errno = ETIMEDOUT;
    return ready;
  }
}

void InitLibraryOnce() {
  // mysql_init would do it on first use, but not safely from two threads.
  static std::once_flag once;
  std::call_once(once, [] { mysql_library_init(0, nullptr, nullptr); });
}

// Options on a fresh handle: timeouts and our wait, TCP or the socket, TLS.
Status SetOptions(MYSQL* mysql, const ConnectOptions& o) {
  const auto connect_s = static_cast<unsigned int>(std::max<long long>(
      1, std::chrono::ceil<std::chrono::seconds>(o.connect_timeout).count()));
  const unsigned int io_s = kLibraryTimeoutSeconds;
  const unsigned int protocol = o.socket.empty() ? MYSQL_PROTOCOL_TCP : MYSQL_PROTOCOL_SOCKET;
  const unsigned int no_local_infile = 0;
  bool failed = mysql_optionsv(mysql, MYSQL_OPT_CONNECT_TIMEOUT, &connect_s) != 0 ||
                mysql_optionsv(mysql, MYSQL_OPT_READ_TIMEOUT, &io_s) != 0 ||
                mysql_optionsv(mysql, MYSQL_OPT_WRITE_TIMEOUT, &io_s) != 0 ||
                mysql_optionsv(mysql, MARIADB_OPT_IO_WAIT, &IoWait) != 0 ||
                mysql_optionsv(mysql, MYSQL_OPT_PROTOCOL, &protocol) != 0 ||
                mysql_optionsv(mysql, MYSQL_OPT_LOCAL_INFILE, &no_local_infile) != 0 ||
                mysql_optionsv(mysql, MYSQL_SET_CHARSET_NAME, "utf8mb4") != 0;
  if (!failed && o.tls) {
    const my_bool on = 1;
    const internal::TlsFiles& f = o.tls_files;
    failed = mysql_optionsv(mysql, MYSQL_OPT_SSL_ENFORCE, &on) != 0 ||
             mysql_optionsv(mysql, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &on) != 0 ||
             (!f.ca_file.empty() && mysql_optionsv(mysql, MYSQL_OPT_SSL_CA, f.ca_file.c_str()) != 0) ||
             (!f.cert_file.empty() &&
              (mysql_optionsv(mysql, MYSQL_OPT_SSL_CERT, f.cert_file.c_str()) != 0 ||
               mysql_optionsv(mysql, MYSQL_OPT_SSL_KEY, f.key_file.c_str()) != 0));
  }
  if (failed) return FromMaria(mysql, "set the connection's options", o.describe);
  return Status::Ok();
}

// The TLS files the URI names, read now (each connect reads them again, so
// a rotated certificate is used from the next connection on): a missing or
// unreadable file is the caller's mistake, told in dlock's words rather than
// as a failed handshake.
Status CheckTlsFiles(const ConnectOptions& o) {
  if (!o.tls) return Status::Ok();
  const internal::TlsFiles& f = o.tls_files;
  for (auto [param, path] : {std::pair{"cacert", &f.ca_file}, std::pair{"cert", &f.cert_file},
                             std::pair{"key", &f.key_file}}) {
    if (path->empty()) continue;
    DLOCK_RETURN_IF_ERROR(internal::ReadTlsFile(param, *path).status());
  }
  return Status::Ok();
}

}  // namespace

CallBounds::CallBounds(SteadyTime deadline, int cancel_fd)
    : saved_deadline_(t_deadline), saved_cancel_fd_(t_cancel_fd) {
  t_deadline = std::min(deadline, saved_deadline_);
  t_cancel_fd = cancel_fd >= 0 ? cancel_fd : saved_cancel_fd_;
}

CallBounds::~CallBounds() {
  t_deadline = saved_deadline_;
  t_cancel_fd = saved_cancel_fd_;
}

void MysqlCloser::operator()(MYSQL* mysql) const {
  CallBounds bounds(SteadyClock::now() + kCloseBudget);
  mysql_close(mysql);
}

Connection::Connection(MysqlHandle mysql, std::string where)
    : mysql_(std::move(mysql)), where_(std::move(where)), id_(mysql_thread_id(mysql_.get())) {}

Result<std::unique_ptr<Connection>> Connection::Open(const ConnectOptions& o, SteadyTime deadline,
                                                     std::string_view session_sql) {
  InitLibraryOnce();
  DLOCK_RETURN_IF_ERROR(CheckTlsFiles(o));
  MysqlHandle mysql(mysql_init(nullptr));
  if (!mysql) return UnavailableError("connect (" + o.describe + "): out of memory");
  DLOCK_RETURN_IF_ERROR(SetOptions(mysql.get(), o));
  {
    CallBounds bounds(deadline);
    const bool tcp = o.socket.empty();
    if (mysql_real_connect(mysql.get(), tcp ? o.host.c_str() : "localhost", o.user.c_str(),
                           o.has_password ? o.password.c_str() : nullptr, o.database.c_str(),
                           tcp ? o.port : 0, tcp ? nullptr : o.socket.c_str(),
                           CLIENT_MULTI_RESULTS | CLIENT_MULTI_STATEMENTS) == nullptr) {
      if (mysql_errno(mysql.get()) == CR_SERVER_LOST && SteadyClock::now() >= deadline) {
        return UnavailableError("connect (" + o.describe + "): no answer within the connect timeout");
      }
      return FromMaria(mysql.get(), "connect", o.describe, !o.tls_files.cert_file.empty());
    }
  }
  std::unique_ptr<Connection> conn(new Connection(std::move(mysql), o.describe));
  if (!session_sql.empty()) {
    DLOCK_RETURN_IF_ERROR(conn->Query(session_sql, deadline, "set up the session").status());
  }
  return conn;
}

Status Connection::Fail(std::string_view what) {
  const unsigned int code = mysql_errno(mysql_.get());
  if (EndsSession(code)) broken_ = true;
  if (mysql_.get()->server_status & SERVER_STATUS_IN_TRANS) broken_ = true;  // a half-done call
  return FromMaria(mysql_.get(), what, where_);
}

Result<ResultSets> Connection::Query(std::string_view sql, SteadyTime deadline,
                                     std::string_view what, int cancel_fd,
                                     std::vector<std::uint64_t>* affected) {
  if (broken_) return UnavailableError(std::string(what) + " (" + where_ + "): the connection was lost");
  CallBounds bounds(deadline, cancel_fd);
  MYSQL* m = mysql_.get();
  if (mysql_real_query(m, sql.data(), static_cast<unsigned long>(sql.size())) != 0) return Fail(what);
  ResultSets sets;
  for (;;) {
    if (affected != nullptr) affected->push_back(mysql_affected_rows(m));
    if (mysql_field_count(m) > 0) {
      ResultHandle result(mysql_store_result(m));
      if (!result) return Fail(what);
      const unsigned int fields = mysql_num_fields(result.get());
      std::vector<Row>& rows = sets.emplace_back();
      while (MYSQL_ROW row = mysql_fetch_row(result.get())) {
        const unsigned long* lengths = mysql_fetch_lengths(result.get());
        Row& out = rows.emplace_back();
        for (unsigned int i = 0; i < fields; ++i) {
          if (row[i] == nullptr) {
            out.emplace_back();
          } else {
            out.emplace_back(std::string(row[i], lengths[i]));
          }
        }
      }
    }
    const int next = mysql_next_result(m);
    if (next == -1) return sets;
    if (next > 0) return Fail(what);
  }
}

bool Connection::Usable() {
  if (broken_) return false;
  // An idle session has nothing to read: anything there is the server's
  // farewell (a shutdown, a kill) or the socket's end.
  pollfd p{mysql_get_socket(mysql_.get()), POLLIN, 0};
  if (poll(&p, 1, 0) != 0) broken_ = true;
  return !broken_;
}

std::string HexLiteral(std::string_view bytes) {
  if (bytes.empty()) return "''";
  return "X'" + HexEncode(bytes) + "'";
}

std::string IntLiteral(std::int64_t value) { return std::to_string(value); }

std::string NullableInt(std::optional<std::int64_t> value) {
  return value ? std::to_string(*value) : "NULL";
}

bool CellInt(const std::optional<std::string>& cell, std::int64_t* out) {
  if (!cell || cell->empty()) return false;
  const char* end = cell->data() + cell->size();
  auto [p, ec] = std::from_chars(cell->data(), end, *out);
  return ec == std::errc() && p == end;
}

}  // namespace dlock::mariadb
