#include "backends/postgres/pg_util.h"

#include <poll.h>

#include <array>
#include <cerrno>
#include <climits>
#include <cstring>
#include <system_error>

#include "core/duration.h"
#include "core/one_line.h"

namespace dlock::postgres {
namespace {

bool IsOneOf(std::string_view code, std::initializer_list<std::string_view> codes) {
  for (std::string_view c : codes) {
    if (code == c) return true;
  }
  return false;
}

std::string ErrnoText(int err) { return std::error_code(err, std::generic_category()).message(); }

// Whether libpq's text for a failed connection says the server refused who
// we are: no SQLSTATE reaches the client then, only the server's message
// (in English unless the server's lc_messages says otherwise).
bool IsLoginRefused(std::string_view text) {
  if (text.find("role \"") != std::string_view::npos &&
      text.find("does not exist") != std::string_view::npos) {
    return true;
  }
  for (std::string_view refusal :
       {"password authentication failed", "no pg_hba.conf entry",
        "no password supplied", "password is required", "SASL authentication failed",
        "certificate authentication failed", "permission denied for database",
        "not permitted to log in", "pg_hba.conf rejects connection",
        "connection requires a valid client certificate"}) {
    if (text.find(refusal) != std::string_view::npos) return true;
  }
  return false;
}

// Whether libpq's text says the TLS handshake failed on a certificate, in
// either direction (libpq's own texts, and OpenSSL's reasons after "SSL
// error:"), or that TLS was required and the server offers none. A broken
// connection during the handshake ("SSL SYSCALL error") is not one.
bool IsTlsRefused(std::string_view text) {
  for (std::string_view refusal :
       {"SSL error:", "does not match host name", "server does not support SSL",
        "server certificate for"}) {
    if (text.find(refusal) != std::string_view::npos) return true;
  }
  return false;
}

// Whether libpq could not use a TLS file the URI names (cacert=/sslrootcert=,
// cert=/sslcert=, key=/sslkey=): the input is wrong, retrying cannot help.
bool IsTlsFileProblem(std::string_view text) {
  for (std::string_view problem :
       {"root certificate file", "could not open certificate file",
        "could not read certificate file", "could not load private key file",
        "certificate present, but not private key file", "has group or world access",
        "could not read root certificate file", "could not load SSL"}) {
    if (text.find(problem) != std::string_view::npos) return true;
  }
  return false;
}

}  // namespace

Status CheckShape(const PGresult* r, int columns, int min_rows, std::string_view what,
                  std::string_view where) {
  if (r != nullptr && PQnfields(r) >= columns && PQntuples(r) >= min_rows) return Status::Ok();
  const std::string got = r == nullptr ? "nothing"
                                       : std::to_string(PQntuples(r)) + " row(s) of " +
                                             std::to_string(PQnfields(r)) + " column(s)";
  return UnavailableError(std::string(what) + " (" + std::string(where) + "): the server answered " +
                          got + ", not the " + std::to_string(columns) +
                          " column(s) dlock reads (the outcome is unknown)");
}

Status FromPg(const PGconn* conn, const PGresult* result, std::string_view what,
              std::string_view where) {
  const std::string prefix = std::string(what) + " (" + std::string(where) + "): ";
  const char* state =
      result != nullptr ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
  if (state == nullptr || *state == '\0') {
    // No SQLSTATE: libpq's own failure (connection refused or lost, bad
    // authentication exchange, out of memory). Its text is in the result if
    // there is one, else on the connection.
    std::string text;
    if (result != nullptr) text = PQresultErrorMessage(result);
    if (text.empty() && conn != nullptr) text = PQerrorMessage(conn);
    if (text.empty()) text = "libpq reported an error without a message";
    if (IsTlsFileProblem(text)) return InvalidArgumentError(prefix + internal::OnOneLine(text));
    if (IsLoginRefused(text) || IsTlsRefused(text)) {
      return PermissionDeniedError(prefix + internal::OnOneLine(text));
    }
    return UnavailableError(prefix + internal::OnOneLine(text));
  }
  const std::string code = state;
  const char* primary = PQresultErrorField(result, PG_DIAG_MESSAGE_PRIMARY);
  const std::string text =
      internal::OnOneLine(primary != nullptr ? primary : PQresultErrorMessage(result)) +
      " (SQLSTATE " + code + ")";
  const std::string_view cls = std::string_view(code).substr(0, 2);
  if (code == "25006") {
    return UnavailableError(prefix + text + ": the server is read-only (a standby?)");
  }
  if (cls == "28" || code == "42501") {
    // Invalid authorization (wrong password, no such role) or a privilege
    // this role lacks: retrying cannot help, the operator must grant it.
    return PermissionDeniedError(prefix + text);
  }
  if (IsOneOf(cls, {"08",    // connection exception
                    "3D",    // database does not exist
                    "40",    // serialization failure, deadlock: retry
                    "53",    // insufficient resources: disk full, too many connections
                    "55",    // lock not available, object in use
                    "57",    // query cancelled, admin/crash shutdown, cannot connect now
                    "58"})) {  // system error (I/O)
    return UnavailableError(prefix + text);
  }
  if (IsOneOf(code, {"42P01", "42703", "42883", "3F000"})) {
    // Missing table/column/function/schema: a deployment
    // problem to fix before retrying.
    return FailedPreconditionError(prefix + text);
  }
  return InternalError(prefix + "unexpected PostgreSQL error: " + text);
}

int PollFd(int fd, short events, SteadyTime deadline, int extra_fd) {
  std::array<pollfd, 2> fds{{{fd, events, 0}, {extra_fd, POLLIN, 0}}};
  return PollFds(fds, deadline);
}

int PollFds(std::span<pollfd> fds, SteadyTime deadline) {
  for (;;) {
    const auto left = deadline - std::chrono::steady_clock::now();
    long long ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
    if (ms < 0) ms = 0;
    if (ms > INT_MAX) ms = INT_MAX;
    const int r = poll(fds.data(), fds.size(), static_cast<int>(ms));
    if (r < 0 && errno == EINTR) continue;
    return r;
  }
}

namespace {

std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (std::size_t comma; (comma = s.find(',', start)) != std::string::npos; start = comma + 1) {
    parts.push_back(s.substr(start, comma - start));
  }
  parts.push_back(s.substr(start));
  return parts;
}

const std::string* Find(const ConnInfo& info, std::string_view key) {
  for (const auto& [k, v] : info) {
    if (k == key) return &v;
  }
  return nullptr;
}

// `info` with its host list narrowed to host number i (libpq's rule: one
// port applies to every host).
ConnInfo OneHost(const ConnInfo& info, const std::vector<std::string>& hosts,
                 const std::vector<std::string>& ports, std::size_t i) {
  ConnInfo one = info;
  for (auto& [k, v] : one) {
    if (k == "host") v = hosts[i];
    if (k == "port") v = ports.size() == 1 ? ports[0] : ports[i];
  }
  return one;
}

Result<PgConnHandle> ConnectOne(const ConnInfo& info, SteadyTime deadline,
                                std::string_view where) {
  const auto budget = std::chrono::ceil<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  PgConnHandle conn = StartConnect(info);
  if (!conn) return UnavailableError("connect (" + std::string(where) + "): out of memory");
  if (PQstatus(conn.get()) == CONNECTION_BAD) return FromPg(conn.get(), nullptr, "connect", where);
  // As if PQconnectPoll had asked for writability (libpq's documented start).
  PostgresPollingStatusType poll_status = PGRES_POLLING_WRITING;
  while (poll_status != PGRES_POLLING_OK) {
    if (poll_status == PGRES_POLLING_FAILED) return FromPg(conn.get(), nullptr, "connect", where);
    const int fd = PQsocket(conn.get());
    if (fd >= 0) {
      const int r = PollFd(fd, poll_status == PGRES_POLLING_READING ? POLLIN : POLLOUT, deadline);
      if (r == 0) {
        return UnavailableError("connect (" + std::string(where) + "): no answer within " +
                                internal::FormatDuration(std::max(budget, std::chrono::milliseconds(0))) +
                                " (the connect timeout)");
      }
      if (r < 0) {
        return UnavailableError("connect (" + std::string(where) + "): poll: " + ErrnoText(errno));
      }
    }
    poll_status = PQconnectPoll(conn.get());
  }
  if (!FinishConnect(conn.get())) return FromPg(conn.get(), nullptr, "connect", where);
  return conn;
}

}  // namespace

PgConnHandle StartConnect(const ConnInfo& info) {
  std::vector<const char*> keys, values;
  for (const auto& [k, v] : info) {
    keys.push_back(k.c_str());
    values.push_back(v.c_str());
  }
  keys.push_back(nullptr);
  values.push_back(nullptr);
  return PgConnHandle(PQconnectStartParams(keys.data(), values.data(), 0));
}

bool FinishConnect(PGconn* conn) {
  if (PQsetnonblocking(conn, 1) != 0) return false;
  // dlock's own statements raise only harmless notices; never print them.
  PQsetNoticeProcessor(
      conn, [](void*, const char*) {}, nullptr);
  return true;
}

// libpq driven without blocking (PQconnectPoll) applies no connect_timeout
// per host: a host that takes the connection but never answers (a stopped
// old primary) would hold the whole attempt, and the hosts after it would
// never be tried. So several hosts are tried here one at a time, each with
// its share of the time left; a refused login ends the attempt, as in libpq.
Result<PgConnHandle> Connect(const ConnInfo& info, SteadyTime deadline,
                             std::string_view where) {
  const std::string* host = Find(info, "host");
  if (host == nullptr || host->find(',') == std::string::npos) {
    return ConnectOne(info, deadline, where);
  }
  const std::vector<std::string> hosts = SplitCommas(*host);
  const std::string* port = Find(info, "port");
  const std::vector<std::string> ports = port ? SplitCommas(*port) : std::vector<std::string>{};
  std::string errors;
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= SteadyTime::duration::zero()) break;
    const auto share = left / static_cast<int>(hosts.size() - i);
    auto conn = ConnectOne(OneHost(info, hosts, ports, i),
                           std::chrono::steady_clock::now() + share, where);
    if (conn.ok() || conn.status().code() == StatusCode::kPermissionDenied) return conn;
    errors += "; " + conn.status().message();
  }
  return UnavailableError("connect (" + std::string(where) + "): no host of " + *host +
                          " took the connection" + errors);
}


Result<PgResultHandle> Await(PGconn* conn, SteadyTime deadline, std::string_view what,
                             std::string_view where, bool* timed_out) {
  if (timed_out != nullptr) *timed_out = false;
  auto timeout = [&]() -> Status {
    if (timed_out != nullptr) *timed_out = true;
    return UnavailableError(std::string(what) + " (" + std::string(where) + ")" +
                            ": no reply within the time limit (the outcome is unknown)");
  };
  const int fd = PQsocket(conn);
  for (;;) {
    const int f = PQflush(conn);
    if (f == 0) break;
    if (f < 0) return FromPg(conn, nullptr, what, where);
    const int r = PollFd(fd, POLLOUT | POLLIN, deadline);
    if (r == 0) return timeout();
    // Reading while the send blocks keeps a server that is itself blocked
    // on sending to us from deadlocking the pair (libpq's advice).
    if (r > 0 && PQconsumeInput(conn) == 0) return FromPg(conn, nullptr, what, where);
  }
  PgResultHandle last, error;
  for (;;) {
    while (PQisBusy(conn) != 0) {
      const int r = PollFd(fd, POLLIN, deadline);
      if (r == 0) return timeout();
      if (r < 0) {
        return UnavailableError(std::string(what) + " (" + std::string(where) + ")" +
                                ": poll: " + ErrnoText(errno));
      }
      if (PQconsumeInput(conn) == 0) return FromPg(conn, nullptr, what, where);
    }
    PgResultHandle result(PQgetResult(conn));
    if (!result) break;
    const ExecStatusType status = PQresultStatus(result.get());
    if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK) {
      last = std::move(result);
    } else if (!error) {
      error = std::move(result);
    }
  }
  if (error) return FromPg(conn, error.get(), what, where);
  if (!last) return FromPg(conn, nullptr, what, where);
  return last;
}

bool DrainIdle(PGconn* conn) {
  if (PQstatus(conn) != CONNECTION_OK) return false;
  // A session the server ended left its last message and then EOF; one
  // read takes the message, and only a later one sees the EOF. A few reads
  // at most: notifications could keep the socket readable.
  for (int reads = 0; reads < 4; ++reads) {
    pollfd p{PQsocket(conn), POLLIN, 0};
    int r;
    do {
      r = poll(&p, 1, 0);
    } while (r < 0 && errno == EINTR);
    if (r <= 0) break;
    if (PQconsumeInput(conn) == 0) return false;
  }
  return PQstatus(conn) == CONNECTION_OK;
}

}  // namespace dlock::postgres
