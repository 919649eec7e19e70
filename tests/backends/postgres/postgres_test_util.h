// Shared by the PostgreSQL tests: the fixture server's URI and small helpers.
#ifndef DLOCK_TESTS_BACKENDS_POSTGRES_POSTGRES_TEST_UTIL_H_
#define DLOCK_TESTS_BACKENDS_POSTGRES_POSTGRES_TEST_UTIL_H_

#include <libpq-fe.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "dlock/clock.h"

namespace dlock::testing_pg {

// The URI written by scripts/servers/postgres.sh (the CTest fixture), or
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

// `base` with one more query parameter.
inline std::string WithParam(const std::string& base, const std::string& param) {
  return base + (base.find('?') == std::string::npos ? "?" : "&") + param;
}

// A name no earlier run used (tables, keys, application names).
inline std::string Unique(const std::string& prefix) {
  static const std::string run = std::to_string(DefaultRandom()->Next() % 1'000'000'000);
  static int n = 0;
  return prefix + "_" + run + "_" + std::to_string(++n);
}

struct PgConnCloser {
  void operator()(PGconn* c) const { PQfinish(c); }
};
using PgConn = std::unique_ptr<PGconn, PgConnCloser>;

// A plain libpq connection to the fixture server, as its `dlock` role.
inline PgConn AdminConnect() {
  PgConn conn(PQconnectdb(ServerUri().c_str()));
  EXPECT_EQ(PQstatus(conn.get()), CONNECTION_OK) << PQerrorMessage(conn.get());
  return conn;
}

// Runs `sql`; returns the first column of the first row ("" if none).
inline std::string Query(PGconn* conn, const std::string& sql) {
  PGresult* r = PQexec(conn, sql.c_str());
  const ExecStatusType status = PQresultStatus(r);
  EXPECT_TRUE(status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK)
      << sql << ": " << PQresultErrorMessage(r);
  std::string value;
  if (status == PGRES_TUPLES_OK && PQntuples(r) > 0) value = PQgetvalue(r, 0, 0);
  PQclear(r);
  return value;
}

#define DLOCK_REQUIRE_SERVER()                                                        \
  do {                                                                                \
    if (::dlock::testing_pg::ServerUri().empty()) {                                   \
      GTEST_SKIP() << "no PostgreSQL server: run through ctest (fixture postgres) or " \
                      "set DLOCK_TEST_URI";                                           \
    }                                                                                 \
  } while (0)

}  // namespace dlock::testing_pg

#endif  // DLOCK_TESTS_BACKENDS_POSTGRES_POSTGRES_TEST_UTIL_H_
