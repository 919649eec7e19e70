// fence::Postgres on the fixture server: the token check inside the caller's
// own transaction, on the caller's own connection.
#include <chrono>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "dlock/fence_postgres.h"
#include "postgres_test_util.h"

namespace dlock::fence {
namespace {

using testing_pg::AdminConnect;
using testing_pg::PgConn;
using testing_pg::Query;
using testing_pg::Unique;

class PostgresFenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DLOCK_REQUIRE_SERVER();
    conn_ = AdminConnect();
    ASSERT_TRUE(Postgres::EnsureSchema(conn_.get()).ok());
    table_ = Unique("fenced");
    Query(conn_.get(), "CREATE TABLE " + table_ + " (id int PRIMARY KEY, value text)");
  }
  void TearDown() override {
    if (conn_) Query(conn_.get(), "DROP TABLE IF EXISTS " + table_);
  }

  // The caller's write, through the caller's connection.
  Status Insert(PGconn* conn, int id, const std::string& value) {
    const std::string sql = "INSERT INTO " + table_ + " VALUES (" + std::to_string(id) + ", '" +
                            value + "') ON CONFLICT (id) DO UPDATE SET value = excluded.value";
    PGresult* r = PQexec(conn, sql.c_str());
    const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    const std::string error = PQresultErrorMessage(r);
    PQclear(r);
    return ok ? Status::Ok() : UnavailableError(error);
  }

  std::string ValueOf(int id) {
    return Query(conn_.get(), "SELECT value FROM " + table_ + " WHERE id = " + std::to_string(id));
  }

  PgConn conn_;
  std::string table_;
};

TEST_F(PostgresFenceTest, AdmitsEqualOrHigherAndRejectsLower) {
  const std::string key = Unique("fence-key");
  PGconn* c = conn_.get();
  Query(c, "BEGIN");
  ASSERT_TRUE(Postgres::Admit(c, key, 33).ok());
  ASSERT_TRUE(Insert(c, 1, "from 33").ok());
  Query(c, "COMMIT");
  EXPECT_EQ(*Postgres::Highest(c, key), 33u);

  Query(c, "BEGIN");
  EXPECT_TRUE(Postgres::Admit(c, key, 33).ok()) << "the same holder writes twice";
  Query(c, "COMMIT");

  Query(c, "BEGIN");
  ASSERT_TRUE(Postgres::Admit(c, key, 34).ok());
  Query(c, "COMMIT");

  Query(c, "BEGIN");
  Status stale = Postgres::Admit(c, key, 33);
  EXPECT_EQ(stale.code(), StatusCode::kStaleToken);
  EXPECT_EQ(stale, StaleToken(33, 34, key));
  Query(c, "ROLLBACK");
  EXPECT_EQ(*Postgres::Highest(c, key), 34u);
  EXPECT_EQ(*Postgres::Highest(c, Unique("never")), 0u);
}

TEST_F(PostgresFenceTest, TheCheckAndTheWriteRollBackTogether) {
  const std::string key = Unique("fence-rollback");
  PGconn* c = conn_.get();
  Query(c, "BEGIN");
  ASSERT_TRUE(Postgres::Admit(c, key, 50).ok());
  ASSERT_TRUE(Insert(c, 2, "from 50").ok());
  Query(c, "ROLLBACK");
  EXPECT_EQ(*Postgres::Highest(c, key), 0u) << "a rolled-back admit left its token";
  EXPECT_EQ(ValueOf(2), "");
}

TEST_F(PostgresFenceTest, AdmitOutsideATransactionIsRefused) {
  Status s = Postgres::Admit(conn_.get(), Unique("fence-outside"), 5);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("BEGIN"), std::string::npos) << s.message();
  EXPECT_EQ(Postgres::Admit(conn_.get(), "k", 0).code(), StatusCode::kInvalidArgument);
}

TEST_F(PostgresFenceTest, WriteCommitsOnlyAdmittedWrites) {
  const std::string key = Unique("fence-write");
  PGconn* c = conn_.get();
  ASSERT_TRUE(Postgres::Write(c, key, 7, [&] { return Insert(c, 3, "seven"); }).ok());
  Status stale = Postgres::Write(c, key, 6, [&] { return Insert(c, 3, "six"); });
  EXPECT_EQ(stale.code(), StatusCode::kStaleToken);
  EXPECT_EQ(ValueOf(3), "seven");
  // A failing write rolls back the token too.
  Status failed = Postgres::Write(c, key, 9, [] { return UnavailableError("disk on fire"); });
  EXPECT_EQ(failed.code(), StatusCode::kUnavailable);
  EXPECT_EQ(*Postgres::Highest(c, key), 7u);
  EXPECT_EQ(PQtransactionStatus(c), PQTRANS_IDLE);
}

TEST_F(PostgresFenceTest, APausedStaleWriterCannotCommitAfterANewerOne) {
  // The stale holder admitted its token (33) and paused before COMMIT; the
  // newer holder (34) admits meanwhile. The newer admit waits for the older
  // transaction; whichever order they end in, the older write never lands
  // after the newer one.
  const std::string key = Unique("fence-race");
  PgConn old_conn = AdminConnect();
  PgConn new_conn = AdminConnect();
  Query(old_conn.get(), "BEGIN");
  ASSERT_TRUE(Postgres::Admit(old_conn.get(), key, 33).ok());
  ASSERT_TRUE(Insert(old_conn.get(), 4, "old").ok());
  Status newer;
  std::jthread t([&] {
    newer = Postgres::Write(new_conn.get(), key, 34, [&] { return Insert(new_conn.get(), 4, "new"); });
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  Query(old_conn.get(), "COMMIT");
  t.join();
  EXPECT_TRUE(newer.ok()) << newer.ToString();
  EXPECT_EQ(ValueOf(4), "new");
  Query(old_conn.get(), "BEGIN");
  EXPECT_EQ(Postgres::Admit(old_conn.get(), key, 33).code(), StatusCode::kStaleToken);
  Query(old_conn.get(), "ROLLBACK");
}

TEST_F(PostgresFenceTest, WriteCreatesTheTableWhenMissing) {
  // A fresh schema with nothing in it, searched first.
  const std::string schema = Unique("fence_schema");
  PGconn* c = conn_.get();
  Query(c, "CREATE SCHEMA " + schema);
  Query(c, "SET search_path = " + schema);
  EXPECT_EQ(*Postgres::Highest(c, "k"), 0u);
  Query(c, "BEGIN");
  Status missing = Postgres::Admit(c, "k", 1);
  EXPECT_EQ(missing.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(missing.message().find("EnsureSchema"), std::string::npos) << missing.message();
  Query(c, "ROLLBACK");
  ASSERT_TRUE(Postgres::Write(c, "k", 1, nullptr).ok());
  EXPECT_EQ(*Postgres::Highest(c, "k"), 1u);
  Query(c, "RESET search_path");
  Query(c, "SET client_min_messages = warning");
  Query(c, "DROP SCHEMA " + schema + " CASCADE");
}

}  // namespace
}  // namespace dlock::fence
