// Where and as whom the MariaDB backend connects: what a mysql:// URI says
// (mariadb_uri.cc). Kept apart from mariadb_conn.h so that the registry's
// table of stores can name the backend without Connector/C's headers.
#ifndef DLOCK_SRC_BACKENDS_MARIADB_MARIADB_OPTIONS_H_
#define DLOCK_SRC_BACKENDS_MARIADB_MARIADB_OPTIONS_H_

#include <chrono>
#include <memory>
#include <string>

#include "core/tls_files.h"
#include "dlock/clock.h"

namespace dlock::mariadb {

using SteadyClock = std::chrono::steady_clock;
using SteadyTime = SteadyClock::time_point;

inline constexpr const char* kDefaultTable = "dlock_locks";

// Where and as whom to connect (from the URI, mariadb_uri.cc).
struct ConnectOptions {
  std::string host = "127.0.0.1";  // ignored when `socket` is set
  unsigned port = 3306;
  std::string socket;  // a Unix socket path, instead of TCP
  std::string user;
  std::string password;  // never printed
  bool has_password = false;
  std::string database;
  // TLS: on whenever any file is named; the server's certificate is then
  // checked against `tls.ca_file` (or the system's store) and its name.
  bool tls = false;
  internal::TlsFiles tls_files;
  std::chrono::milliseconds connect_timeout{5000};
  // The URI without its password, for messages.
  std::string describe;
};

struct MariaDbOptions {
  ConnectOptions connect;
  std::string table = kDefaultTable;
  // The core's clock, to read Acquisition::Wait deadlines. Null: the real
  // one.
  std::shared_ptr<Clock> clock;
};

}  // namespace dlock::mariadb

#endif  // DLOCK_SRC_BACKENDS_MARIADB_MARIADB_OPTIONS_H_
