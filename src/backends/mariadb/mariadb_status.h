// THE mapping from MariaDB's errors (Connector/C's client errors and the
// server's error numbers) to dlock's codes, used by the backend and by
// fence::MariaDb alike.
#ifndef DLOCK_SRC_BACKENDS_MARIADB_MARIADB_STATUS_H_
#define DLOCK_SRC_BACKENDS_MARIADB_MARIADB_STATUS_H_

#include <mysql.h>

#include <string_view>

#include "dlock/status.h"

namespace dlock::mariadb {

// The failure `mysql` reports (mysql_errno, mysql_error), as a Status whose
// message is "<what> (<where>): <text> (error N)". `where` is the redacted
// URI or "database D at H:P"; `client_certificate`: the connection presents
// one (a hang-up during the login is then taken for its refusal). Codes:
//   the connection refused, lost or timed out, the server shutting down,
//   too many connections, out of disk or memory, a deadlock or lock wait
//   timeout (the transaction was rolled back: retry), a read-only server,
//   a database that does not exist                          -> kUnavailable
//   a login refused (password, host, plugin), a TLS handshake refused
//   (the server's certificate or name; the client's certificate, also when
//   the server just hangs up after the handshake), a privilege the user
//   lacks                                                   -> kPermissionDenied
//   a TLS file Connector/C cannot use                       -> kInvalidArgument
//   a missing table, column or procedure                    -> kFailedPrecondition
//   anything else (a bug in dlock's SQL)                    -> kInternal
Status FromMaria(MYSQL* mysql, std::string_view what, std::string_view where,
                 bool client_certificate = false);

// Whether error `code` means the session is gone or in an unknown state
// (the connection must be replaced).
bool EndsSession(unsigned int code);

}  // namespace dlock::mariadb

#endif  // DLOCK_SRC_BACKENDS_MARIADB_MARIADB_STATUS_H_
