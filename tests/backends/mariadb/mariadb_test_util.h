// Shared by the MariaDB tests: the fixture server's URI, a plain Connector/C
// connection to it (to look at tables and kill sessions behind the
// backend's back), and the fixture's server script.
#ifndef DLOCK_TESTS_BACKENDS_MARIADB_MARIADB_TEST_UTIL_H_
#define DLOCK_TESTS_BACKENDS_MARIADB_MARIADB_TEST_UTIL_H_

#include <mysql.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "backends/mariadb/mariadb_backend.h"
#include "core/credentials.h"
#include "core/uri.h"
#include "dlock/clock.h"

namespace dlock::testing_mariadb {

// The URI written by scripts/servers/mariadb.sh (the CTest fixture), or
// $DLOCK_TEST_URI; empty when neither is set (the test is skipped).
inline std::string ServerUri() {
  if (const char* uri = std::getenv("DLOCK_TEST_URI"); uri && *uri) return uri;
  if (const char* file = std::getenv("DLOCK_TEST_URI_FILE"); file && *file) {
    std::ifstream in(file);
    std::string uri;
    std::getline(in, uri);
    return uri;
  }
  return "";
}

// A file of the fixture's directory ("" without one).
inline std::string ServerFile(const std::string& name) {
  const char* dir = std::getenv("DLOCK_TEST_SERVER_DIR");
  if (dir == nullptr) return "";
  std::ifstream in(std::string(dir) + "/" + name);
  std::string line;
  std::getline(in, line);
  return line;
}

// `base` with one more query parameter.
inline std::string WithParam(const std::string& base, const std::string& param) {
  return base + (base.find('?') == std::string::npos ? "?" : "&") + param;
}

// A name no earlier run used (tables, keys).
inline std::string Unique(const std::string& prefix) {
  static const std::string run = std::to_string(DefaultRandom()->Next() % 1'000'000'000);
  static int n = 0;
  return prefix + "_" + run + "_" + std::to_string(++n);
}

struct MysqlCloser {
  void operator()(MYSQL* m) const { mysql_close(m); }
};
using Mysql = std::unique_ptr<MYSQL, MysqlCloser>;

// A plain connection to the fixture server as the URI's user (TLS files
// and password file as the URI names them).
inline Mysql AdminConnect(const std::string& text = ServerUri()) {
  auto uri = internal::ParseUri(text);
  EXPECT_TRUE(uri.ok()) << uri.status().ToString();
  if (!uri.ok() || !internal::ResolveCredentials(*uri).ok()) return nullptr;
  auto options = mariadb::OptionsFromUri(*uri);
  EXPECT_TRUE(options.ok()) << options.status().ToString();
  if (!options.ok()) return nullptr;
  const mariadb::ConnectOptions& o = options->connect;
  Mysql m(mysql_init(nullptr));
  const unsigned int tcp = MYSQL_PROTOCOL_TCP;
  mysql_optionsv(m.get(), MYSQL_OPT_PROTOCOL, &tcp);
  if (o.tls) {
    const my_bool on = 1;
    mysql_optionsv(m.get(), MYSQL_OPT_SSL_ENFORCE, &on);
    if (!o.tls_files.ca_file.empty()) mysql_optionsv(m.get(), MYSQL_OPT_SSL_CA, o.tls_files.ca_file.c_str());
    if (!o.tls_files.cert_file.empty()) {
      mysql_optionsv(m.get(), MYSQL_OPT_SSL_CERT, o.tls_files.cert_file.c_str());
      mysql_optionsv(m.get(), MYSQL_OPT_SSL_KEY, o.tls_files.key_file.c_str());
    }
  }
  if (mysql_real_connect(m.get(), o.host.c_str(), o.user.c_str(),
                         o.has_password ? o.password.c_str() : nullptr, o.database.c_str(),
                         o.port, nullptr, CLIENT_MULTI_RESULTS) == nullptr) {
    ADD_FAILURE() << "connect: " << mysql_error(m.get());
    return nullptr;
  }
  return m;
}

// Runs `sql`; the first column of the first row ("" if none).
inline std::string Query(MYSQL* m, const std::string& sql) {
  if (m == nullptr) return "";
  if (mysql_real_query(m, sql.data(), sql.size()) != 0) {
    ADD_FAILURE() << sql << ": " << mysql_error(m);
    return "";
  }
  std::string value;
  do {
    if (MYSQL_RES* r = mysql_store_result(m)) {
      if (MYSQL_ROW row = mysql_fetch_row(r); row != nullptr && value.empty() && row[0] != nullptr) {
        value = row[0];
      }
      mysql_free_result(r);
    }
  } while (mysql_next_result(m) == 0);
  return value;
}

// Runs the fixture's server script with `verb`; false if it failed.
inline bool Server(const std::string& verb) {
  const char* script = std::getenv("DLOCK_TEST_SERVER_SCRIPT");
  const char* dir = std::getenv("DLOCK_TEST_SERVER_DIR");
  if (script == nullptr || dir == nullptr) return false;
  const std::string command = "bash '" + std::string(script) + "' " + verb + " '" + dir + "'";
  return std::system(command.c_str()) == 0;
}

#define DLOCK_REQUIRE_MARIADB()                                                     \
  do {                                                                              \
    if (::dlock::testing_mariadb::ServerUri().empty()) {                            \
      GTEST_SKIP() << "no MariaDB server: run through ctest (fixture mariadb) or " \
                      "set DLOCK_TEST_URI";                                         \
    }                                                                               \
  } while (0)

}  // namespace dlock::testing_mariadb

#endif  // DLOCK_TESTS_BACKENDS_MARIADB_MARIADB_TEST_UTIL_H_
