// fence::MariaDb on the fixture server: the token check inside the caller's
// own transaction, on the caller's own connection.
#include <chrono>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "dlock/fence_mariadb.h"
#include "mariadb_test_util.h"

namespace dlock::fence {
namespace {

using std::chrono::milliseconds;
using testing_mariadb::AdminConnect;
using testing_mariadb::Mysql;
using testing_mariadb::Query;
using testing_mariadb::Unique;

class MariaDbFenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DLOCK_REQUIRE_MARIADB();
    conn_ = AdminConnect();
    ASSERT_NE(conn_, nullptr);
    ASSERT_TRUE(MariaDb::EnsureSchema(conn_.get()).ok());
    table_ = Unique("fenced");
    Query(conn_.get(), "CREATE TABLE " + table_ + " (id INT PRIMARY KEY, value TEXT) ENGINE=InnoDB");
  }
  void TearDown() override {
    if (conn_) Query(conn_.get(), "DROP TABLE IF EXISTS " + table_);
  }

  // The caller's write, through the caller's connection.
  Status Insert(MYSQL* conn, int id, const std::string& value) {
    const std::string sql = "INSERT INTO " + table_ + " VALUES (" + std::to_string(id) + ", '" +
                            value + "') ON DUPLICATE KEY UPDATE value = VALUES(value)";
    if (mysql_query(conn, sql.c_str()) != 0) return UnavailableError(mysql_error(conn));
    return Status::Ok();
  }

  std::string ValueOf(int id) {
    return Query(conn_.get(), "SELECT value FROM " + table_ + " WHERE id = " + std::to_string(id));
  }

  Mysql conn_;
  std::string table_;
};

TEST_F(MariaDbFenceTest, AdmitsEqualOrHigherAndRejectsLower) {
  const std::string key = Unique("fence-key");
  MYSQL* c = conn_.get();
  Query(c, "START TRANSACTION");
  ASSERT_TRUE(MariaDb::Admit(c, key, 33).ok());
  ASSERT_TRUE(Insert(c, 1, "from 33").ok());
  Query(c, "COMMIT");
  EXPECT_EQ(*MariaDb::Highest(c, key), 33u);

  Query(c, "START TRANSACTION");
  EXPECT_TRUE(MariaDb::Admit(c, key, 33).ok()) << "the same holder writes twice";
  Query(c, "COMMIT");

  Query(c, "START TRANSACTION");
  ASSERT_TRUE(MariaDb::Admit(c, key, 34).ok());
  Query(c, "COMMIT");

  Query(c, "START TRANSACTION");
  Status stale = MariaDb::Admit(c, key, 33);
  EXPECT_EQ(stale.code(), StatusCode::kStaleToken);
  EXPECT_EQ(stale, StaleToken(33, 34, key));
  Query(c, "ROLLBACK");
  EXPECT_EQ(*MariaDb::Highest(c, key), 34u);
  EXPECT_EQ(*MariaDb::Highest(c, Unique("never")), 0u);
  // Tokens use all 64 bits (a BIGINT UNSIGNED column).
  Query(c, "START TRANSACTION");
  EXPECT_TRUE(MariaDb::Admit(c, key, 0xFFFFFFFFFFFFFFF0ull).ok());
  Query(c, "COMMIT");
  EXPECT_EQ(*MariaDb::Highest(c, key), 0xFFFFFFFFFFFFFFF0ull);
}

TEST_F(MariaDbFenceTest, TheCheckAndTheWriteRollBackTogether) {
  const std::string key = Unique("fence-rollback");
  MYSQL* c = conn_.get();
  Query(c, "START TRANSACTION");
  ASSERT_TRUE(MariaDb::Admit(c, key, 50).ok());
  ASSERT_TRUE(Insert(c, 2, "from 50").ok());
  Query(c, "ROLLBACK");
  EXPECT_EQ(*MariaDb::Highest(c, key), 0u) << "a rolled-back admit left its token";
  EXPECT_EQ(ValueOf(2), "");
}

TEST_F(MariaDbFenceTest, AdmitOutsideATransactionIsRefused) {
  Status s = MariaDb::Admit(conn_.get(), Unique("fence-outside"), 5);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("START TRANSACTION"), std::string::npos) << s.message();
  EXPECT_EQ(MariaDb::Admit(conn_.get(), "k", 0).code(), StatusCode::kInvalidArgument);
  Query(conn_.get(), "START TRANSACTION");
  EXPECT_EQ(MariaDb::EnsureSchema(conn_.get()).code(), StatusCode::kFailedPrecondition)
      << "DDL would commit the caller's transaction";
  Query(conn_.get(), "ROLLBACK");
}

TEST_F(MariaDbFenceTest, WriteCommitsOnlyAdmittedWrites) {
  const std::string key = Unique("fence-write");
  MYSQL* c = conn_.get();
  ASSERT_TRUE(MariaDb::Write(c, key, 7, [&] { return Insert(c, 3, "seven"); }).ok());
  Status stale = MariaDb::Write(c, key, 6, [&] { return Insert(c, 3, "six"); });
  EXPECT_EQ(stale.code(), StatusCode::kStaleToken) << stale.ToString();
  EXPECT_EQ(ValueOf(3), "seven");
  Status failed = MariaDb::Write(c, key, 8, [&] { return UnavailableError("the write failed"); });
  EXPECT_EQ(failed.code(), StatusCode::kUnavailable);
  EXPECT_EQ(*MariaDb::Highest(c, key), 7u) << "a failed write left its token";
}

// A stale writer paused between Admit and COMMIT cannot land after a newer
// one: the newer Admit waits for the key's row, then finds the older token
// and is admitted after it; the older one commits first.
TEST_F(MariaDbFenceTest, WritersUnderOneKeyAreSerialised) {
  const std::string key = Unique("fence-order");
  Mysql other = AdminConnect();
  ASSERT_NE(other, nullptr);
  MYSQL* old_writer = conn_.get();
  Query(old_writer, "START TRANSACTION");
  ASSERT_TRUE(MariaDb::Admit(old_writer, key, 10).ok());
  ASSERT_TRUE(Insert(old_writer, 4, "old").ok());
  Status newer;
  std::jthread t([&] {
    newer = MariaDb::Write(other.get(), key, 11, [&] { return Insert(other.get(), 4, "new"); });
  });
  std::this_thread::sleep_for(milliseconds(300));  // the newer one waits for the row
  Query(old_writer, "COMMIT");
  t.join();
  EXPECT_TRUE(newer.ok()) << newer.ToString();
  EXPECT_EQ(ValueOf(4), "new") << "the older write landed last";
  EXPECT_EQ(*MariaDb::Highest(old_writer, key), 11u);
}

// Without the table, Admit says what to do and Write creates it.
TEST_F(MariaDbFenceTest, AMissingTableIsNamedAndWriteCreatesIt) {
  MYSQL* c = conn_.get();
  Query(c, "DROP TABLE dlock_fence");
  EXPECT_EQ(*MariaDb::Highest(c, "k"), 0u);
  Query(c, "START TRANSACTION");
  Status s = MariaDb::Admit(c, "k", 3);
  Query(c, "ROLLBACK");
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("EnsureSchema"), std::string::npos) << s.message();
  EXPECT_TRUE(MariaDb::Write(c, "k", 3, [&] { return Insert(c, 5, "three"); }).ok());
  EXPECT_EQ(*MariaDb::Highest(c, "k"), 3u);
}

}  // namespace
}  // namespace dlock::fence
