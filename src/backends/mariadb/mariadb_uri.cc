// mysql:// and mariadb:// URIs into MariaDbOptions (mariadb_backend.h).
#include <algorithm>
#include <charconv>

#include "backends/mariadb/mariadb_backend.h"
#include "core/tls_files.h"

namespace dlock::mariadb {
namespace {

constexpr const char* kForm = "mysql://user@host:3306/database?table=NAME&cacert=FILE";
constexpr const char* kAccepted =
    "accepted: table, cacert, cert, key, tls=verify-full, socket, password_file, password_env";

Status BadUri(const internal::Uri& uri, const std::string& why) {
  return InvalidArgumentError("bad " + uri.scheme + " URI '" + uri.Redacted() + "': " + why +
                              "; expected " + kForm);
}

// [a-z_][a-z0-9_]{0,47}: a plain identifier, with room for dlock's longest
// suffix ("_record_break") within MariaDB's 64 characters.
bool IsTableName(std::string_view name) {
  if (name.empty() || name.size() > 48) return false;
  auto lower = [](char c) { return (c >= 'a' && c <= 'z') || c == '_'; };
  if (!lower(name.front())) return false;
  return std::all_of(name.begin(), name.end(),
                     [&](char c) { return lower(c) || (c >= '0' && c <= '9'); });
}

// "h", "h:3306", "[::1]" or "[::1]:3306".
Status ParseHost(const internal::Uri& uri, ConnectOptions* o) {
  std::string_view item = uri.hosts;
  if (item.find(',') != std::string_view::npos) {
    return BadUri(uri, "one host only (dlock does not move between MariaDB servers itself: "
                       "put a proxy or a virtual address in front of a cluster)");
  }
  std::string_view host = item, port;
  if (!item.empty() && item.front() == '[') {
    const std::size_t close = item.find(']');
    if (close == std::string_view::npos) return BadUri(uri, "unclosed '[' in the host");
    host = item.substr(1, close - 1);
    if (close + 1 < item.size()) {
      if (item[close + 1] != ':') return BadUri(uri, "junk after ']' in the host");
      port = item.substr(close + 2);
    }
  } else if (const std::size_t colon = item.rfind(':'); colon != std::string_view::npos) {
    host = item.substr(0, colon);
    port = item.substr(colon + 1);
  }
  if (!host.empty()) o->host = std::string(host);
  if (item.find(':') != std::string_view::npos && !item.starts_with("[") && port.empty()) {
    return BadUri(uri, "the port after ':' is empty");
  }
  if (!port.empty()) {
    unsigned value = 0;
    auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || p != port.data() + port.size() || value == 0 || value > 65535) {
      return BadUri(uri, "port '" + std::string(port) + "' is not a number from 1 to 65535");
    }
    o->port = value;
  }
  return Status::Ok();
}

Status ParseDatabase(const internal::Uri& uri, ConnectOptions* o) {
  const std::string db = uri.path.empty() ? "" : uri.path.substr(1);
  if (db.empty()) return BadUri(uri, "no database: name one after the host (/dlock)");
  if (db.size() > 64 || db.find('/') != std::string::npos || db.find('\0') != std::string::npos) {
    return BadUri(uri, "database '" + db + "' is not a MariaDB database name (at most 64 "
                       "characters, no '/')");
  }
  o->database = db;
  return Status::Ok();
}

// cacert=, cert=, key= and tls=: TLS is on when any is given, and then
// always checks the server's certificate and its host name.
Status ParseTls(const internal::Uri& uri, ConnectOptions* o) {
  DLOCK_ASSIGN_OR_RETURN(o->tls_files, internal::TlsFilesFromUri(uri, true, uri.scheme));
  const std::string* mode = uri.Param("tls");
  if (mode != nullptr && *mode != "verify-full") {
    return BadUri(uri, "tls=" + *mode + " is not accepted: tls=verify-full (the server's "
                       "certificate and host name checked), implied by cacert=");
  }
  o->tls = mode != nullptr || !o->tls_files.ca_file.empty() || !o->tls_files.cert_file.empty();
  return Status::Ok();
}

Status ParseParameters(const internal::Uri& uri, MariaDbOptions* options) {
  for (const auto& [k, v] : uri.query) {
    if (k == "table") {
      if (!IsTableName(v)) {
        return BadUri(uri, "table name '" + v + "' is not accepted: a lower-case letter or '_', "
                           "then up to 47 letters, digits or '_' (dlock adds '_queue' and "
                           "other suffixes to it)");
      }
      options->table = v;
    } else if (k == "socket") {
      if (v.empty() || v.front() != '/') {
        return BadUri(uri, "socket='" + v + "' is not an absolute path to a Unix socket");
      }
      options->connect.socket = v;
    } else if (k != "cacert" && k != "cert" && k != "key" && k != "tls") {
      return BadUri(uri, "unknown parameter '" + k + "' (" + kAccepted + ")");
    }
  }
  return ParseTls(uri, &options->connect);
}

}  // namespace

Result<MariaDbOptions> OptionsFromUri(const internal::Uri& uri) {
  if (uri.scheme != "mysql" && uri.scheme != "mariadb") {
    return BadUri(uri, "the scheme is not mysql or mariadb");
  }
  MariaDbOptions options;
  ConnectOptions& c = options.connect;
  c.describe = uri.Redacted();
  c.user = uri.user;
  c.password = uri.password;
  c.has_password = uri.has_password;
  DLOCK_RETURN_IF_ERROR(ParseParameters(uri, &options));
  if (uri.hosts.empty() && c.socket.empty()) {
    return BadUri(uri, "no host: name one (127.0.0.1:3306), or a Unix socket with socket=PATH");
  }
  DLOCK_RETURN_IF_ERROR(ParseHost(uri, &c));
  if (!c.socket.empty() && c.tls) {
    return BadUri(uri, "TLS over a Unix socket (socket= with cacert=, cert= or tls=) is not "
                       "supported: connect over TCP");
  }
  DLOCK_RETURN_IF_ERROR(ParseDatabase(uri, &c));
  return options;
}

}  // namespace dlock::mariadb
