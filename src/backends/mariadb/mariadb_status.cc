#include "backends/mariadb/mariadb_status.h"

#include <errmsg.h>
#include <mysqld_error.h>

#include <algorithm>
#include <initializer_list>
#include <string>

#include "core/one_line.h"

namespace dlock::mariadb {
namespace {

bool IsOneOf(unsigned int code, std::initializer_list<unsigned int> codes) {
  return std::find(codes.begin(), codes.end(), code) != codes.end();
}

bool Contains(std::string_view text, std::initializer_list<std::string_view> parts) {
  return std::any_of(parts.begin(), parts.end(),
                     [&](std::string_view p) { return text.find(p) != std::string_view::npos; });
}

// A TLS handshake that failed: a file Connector/C could not use (the input
// is wrong), or a certificate one side refused (the set-up is wrong).
StatusCode TlsFailure(std::string_view text) {
  if (Contains(text, {"No such file", "Permission denied", "Error while reading file",
                      "no start line", "PEM lib", "Failed to set", "not found",
                      "key values mismatch"})) {
    return StatusCode::kInvalidArgument;
  }
  return StatusCode::kPermissionDenied;
}

// The server refused who we are, or what we asked for.
bool IsRefusal(unsigned int code) {
  return IsOneOf(code, {ER_ACCESS_DENIED_ERROR, ER_DBACCESS_DENIED_ERROR,
                        ER_ACCESS_DENIED_NO_PASSWORD_ERROR, ER_ACCESS_DENIED_CHANGE_USER_ERROR,
                        ER_HOST_NOT_PRIVILEGED, ER_TABLEACCESS_DENIED_ERROR,
                        ER_COLUMNACCESS_DENIED_ERROR, ER_PROCACCESS_DENIED_ERROR,
                        ER_SPECIFIC_ACCESS_DENIED_ERROR, ER_KILL_DENIED_ERROR,
                        ER_NOT_SUPPORTED_AUTH_MODE, ER_MUST_CHANGE_PASSWORD,
                        ER_MUST_CHANGE_PASSWORD_LOGIN, ER_ACCOUNT_HAS_BEEN_LOCKED,
                        CR_AUTH_PLUGIN_CANNOT_LOAD, CR_AUTH_PLUGIN_ERR});
}

// Worth retrying: the server is away, busy, full, or rolled us back.
bool IsTransient(unsigned int code) {
  if (code >= CR_MIN_ERROR && code <= CR_MAX_ERROR) return true;  // the connection's own
  return IsOneOf(code, {ER_CON_COUNT_ERROR, ER_TOO_MANY_USER_CONNECTIONS, ER_SERVER_SHUTDOWN,
                        ER_OUT_OF_RESOURCES, ER_DISK_FULL, ER_RECORD_FILE_FULL,
                        ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT, ER_USER_LOCK_DEADLOCK,
                        ER_QUERY_INTERRUPTED, ER_STATEMENT_TIMEOUT, ER_CONNECTION_KILLED,
                        ER_HOST_IS_BLOCKED, ER_OPTION_PREVENTS_STATEMENT, ER_READ_ONLY_MODE,
                        ER_CANT_LOCK, ER_BAD_DB_ERROR, CR_ERR_NET_READ, CR_ERR_NET_WRITE,
                        CR_EVENT_CREATE_FAILED});
}

// A TLS 1.3 server that refuses the client's certificate (expired, or from
// a CA it does not trust) says so in an alert after the handshake and hangs
// up; Connector/C often reads only the reset, as a connection lost while it
// sent its credentials. With a client certificate in play, that is taken
// for the refusal it almost always is.
bool IsClientCertificateRefused(unsigned int code, std::string_view text, bool client_certificate) {
  return client_certificate && code == CR_SERVER_LOST &&
         text.find("authentication information") != std::string_view::npos;
}

}  // namespace

bool EndsSession(unsigned int code) {
  return (code >= CR_MIN_ERROR && code <= CR_MAX_ERROR) ||
         IsOneOf(code, {ER_SERVER_SHUTDOWN, ER_CONNECTION_KILLED, CR_ERR_NET_READ,
                        CR_ERR_NET_WRITE});
}

Status FromMaria(MYSQL* mysql, std::string_view what, std::string_view where,
                 bool client_certificate) {
  const unsigned int code = mysql != nullptr ? mysql_errno(mysql) : CR_OUT_OF_MEMORY;
  std::string text = mysql != nullptr ? internal::OnOneLine(mysql_error(mysql)) : "";
  if (text.empty()) text = "Connector/C reported an error without a message";
  std::string message =
      std::string(what) + " (" + std::string(where) + "): " + text + " (error " +
      std::to_string(code) + ")";
  if (code == CR_SSL_CONNECTION_ERROR) return Status(TlsFailure(text), std::move(message));
  if (IsClientCertificateRefused(code, text, client_certificate)) {
    return PermissionDeniedError(message +
                                 ": the server hung up on the TLS connection, as it does when it "
                                 "refuses the client certificate (expired, or of a CA it does not "
                                 "trust)");
  }
  if (IsRefusal(code)) return PermissionDeniedError(std::move(message));
  if (code == ER_OPTION_PREVENTS_STATEMENT || code == ER_READ_ONLY_MODE) {
    return UnavailableError(message + ": the server is read-only (a replica?)");
  }
  if (IsTransient(code)) return UnavailableError(std::move(message));
  if (IsOneOf(code, {ER_NO_SUCH_TABLE, ER_BAD_FIELD_ERROR, ER_SP_DOES_NOT_EXIST,
                     ER_UNKNOWN_SEQUENCES, ER_NOT_SEQUENCE, ER_NOT_SEQUENCE2})) {
    return FailedPreconditionError(std::move(message));
  }
  return InternalError(std::string(what) + " (" + std::string(where) +
                       "): unexpected MariaDB error: " + text + " (error " +
                       std::to_string(code) + ")");
}

}  // namespace dlock::mariadb
