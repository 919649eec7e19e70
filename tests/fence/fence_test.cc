// Tests of the fences (include/dlock/fence.h): in-process (Memory), SQLite
// tables (Sqlite) and files in a directory (Directory). The property every
// fence must keep: once a token T is admitted for a key, no write with a
// lower token is ever admitted for that key, and a rejected or failed write
// leaves the resource exactly as it was.
//
// The races use real threads (and, for Directory, real processes), with
// randomness from a fixed, printed seed so that a failure can be replayed.
#include "dlock/fence.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace dlock::fence {
namespace {

// The seed of every race in this file; printed so a failure can be replayed.
constexpr std::uint64_t kSeed = 0x5eed'f3c3'2024'0001ULL;

void ExpectError(const Status& status, StatusCode code, std::string_view substring) {
  EXPECT_EQ(status.code(), code) << status.ToString();
  EXPECT_NE(status.message().find(substring), std::string::npos)
      << "message '" << status.message() << "' lacks '" << substring << "'";
}

class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl =
        std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/dlock-fence-test-XXXXXX";
    if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The whole file, or nullopt-like empty + false when it cannot be opened.
bool ReadWholeFile(const std::string& path, std::string* out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  out->clear();
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out->append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return true;
}

std::vector<std::string> ListDir(const std::string& path) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// One admitted write, as seen from inside the fence's write callback.
struct Admitted {
  std::uint64_t seq;
  FencingToken token;
};

// Tokens admitted in `log` order must never go down.
void ExpectNonDecreasing(const std::vector<Admitted>& log) {
  for (std::size_t i = 1; i < log.size(); ++i) {
    ASSERT_GE(log[i].token, log[i - 1].token)
        << "admitted token " << log[i].token << " (seq " << log[i].seq << ") after "
        << log[i - 1].token << " (seq " << log[i - 1].seq << "), seed " << kSeed;
  }
}

// ---- Memory -----------------------------------------------------------------

TEST(MemoryFenceTest, RacingThreadsNeverAdmitALowerToken) {
  constexpr int kThreads = 16;
  constexpr int kWritesPerThread = 2000;
  std::cout << "seed " << kSeed << std::endl;
  RecordProperty("seed", std::to_string(kSeed));

  Memory fence;
  std::atomic<std::uint64_t> next_seq{0};
  std::vector<std::vector<Admitted>> admitted(kThreads);
  std::vector<int> ok_count(kThreads, 0);
  std::vector<int> stale_count(kThreads, 0);
  std::vector<std::jthread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(kSeed + static_cast<std::uint64_t>(t));
      for (int i = 0; i < kWritesPerThread; ++i) {
        // Tokens creep upward with jitter, so threads overtake each other
        // and a good share of writes is stale.
        const FencingToken token = 1 + static_cast<FencingToken>(i) * 4 + rng() % 64;
        Status s = fence.Admit("orders/42", token, [&] {
          admitted[t].push_back({next_seq.fetch_add(1), token});
          return Status::Ok();
        });
        if (s.ok()) {
          ++ok_count[t];
        } else {
          EXPECT_EQ(s.code(), StatusCode::kStaleToken) << s.ToString();
          ++stale_count[t];
        }
      }
    });
  }
  for (auto& th : threads) th.join();

  std::vector<Admitted> log;
  int total_ok = 0, total_stale = 0;
  for (int t = 0; t < kThreads; ++t) {
    // The callback runs exactly once per admitted write, never for a stale one.
    EXPECT_EQ(static_cast<int>(admitted[t].size()), ok_count[t]);
    total_ok += ok_count[t];
    total_stale += stale_count[t];
    log.insert(log.end(), admitted[t].begin(), admitted[t].end());
  }
  std::sort(log.begin(), log.end(),
            [](const Admitted& a, const Admitted& b) { return a.seq < b.seq; });
  ASSERT_FALSE(log.empty());
  ExpectNonDecreasing(log);
  EXPECT_GT(total_stale, 0) << "the race never produced a stale write; it tests nothing";
  EXPECT_EQ(total_ok + total_stale, kThreads * kWritesPerThread);

  FencingToken max_admitted = 0;
  for (const auto& a : log) max_admitted = std::max(max_admitted, a.token);
  EXPECT_EQ(fence.Highest("orders/42"), max_admitted);
  EXPECT_EQ(fence.Highest("orders/42"), log.back().token);
}

TEST(MemoryFenceTest, TokenZeroIsRefusedEvenOnAFreshKey) {
  Memory fence;
  bool wrote = false;
  Status s = fence.Admit("k", 0, [&] {
    wrote = true;
    return Status::Ok();
  });
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_FALSE(wrote);
}

TEST(MemoryFenceTest, EqualTokenIsAdmitted) {
  Memory fence;
  int writes = 0;
  auto write = [&] {
    ++writes;
    return Status::Ok();
  };
  ASSERT_TRUE(fence.Admit("k", 7, write).ok());
  Status again = fence.Admit("k", 7, write);
  EXPECT_TRUE(again.ok()) << again.ToString();
  EXPECT_EQ(writes, 2);
  EXPECT_EQ(fence.Highest("k"), 7u);
}

TEST(MemoryFenceTest, NullWriteJustRecords) {
  Memory fence;
  EXPECT_EQ(fence.Highest("k"), 0u);
  ASSERT_TRUE(fence.Admit("k", 5).ok());
  EXPECT_EQ(fence.Highest("k"), 5u);
  EXPECT_EQ(fence.Admit("k", 4).code(), StatusCode::kStaleToken);
  EXPECT_EQ(fence.Highest("k"), 5u);
}

TEST(MemoryFenceTest, FailingWriteDoesNotRaiseHighest) {
  Memory fence;
  auto failing = [] { return UnavailableError("disk full"); };
  // On a key never written: nothing recorded.
  Status first = fence.Admit("k", 3, failing);
  EXPECT_EQ(first, UnavailableError("disk full"));
  EXPECT_EQ(fence.Highest("k"), 0u);
  // On a key with a highest: unchanged, and a lower token still fits.
  ASSERT_TRUE(fence.Admit("k", 10).ok());
  EXPECT_EQ(fence.Admit("k", 20, failing), UnavailableError("disk full"));
  EXPECT_EQ(fence.Highest("k"), 10u);
  EXPECT_TRUE(fence.Admit("k", 15).ok());
  EXPECT_EQ(fence.Highest("k"), 15u);
}

TEST(MemoryFenceTest, StaleMessageIsExact) {
  Memory fence;
  ASSERT_TRUE(fence.Admit("orders/42", 34).ok());
  bool wrote = false;
  Status s = fence.Admit("orders/42", 33, [&] {
    wrote = true;
    return Status::Ok();
  });
  EXPECT_EQ(s.code(), StatusCode::kStaleToken);
  EXPECT_EQ(s.message(), "stale token 33 < 34 for key orders/42");
  EXPECT_FALSE(wrote) << "a stale write's callback ran";
  EXPECT_EQ(StaleToken(33, 34, "orders/42"), s);
}

TEST(MemoryFenceTest, KeysAreIndependent) {
  Memory fence;
  ASSERT_TRUE(fence.Admit("orders/42", 100).ok());
  EXPECT_TRUE(fence.Admit("orders/43", 1).ok());
  EXPECT_TRUE(fence.Admit("orders/4", 2).ok());
  EXPECT_EQ(fence.Highest("orders/42"), 100u);
  EXPECT_EQ(fence.Highest("orders/43"), 1u);
  EXPECT_EQ(fence.Highest("orders/4"), 2u);
  EXPECT_EQ(fence.Highest("orders/44"), 0u);
  EXPECT_EQ(fence.Admit("orders/43", 0).code(), StatusCode::kInvalidArgument);
}

// ---- Sqlite -----------------------------------------------------------------

struct DbCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
using Db = std::unique_ptr<sqlite3, DbCloser>;

Db Open(const std::string& path) {
  sqlite3* raw = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &raw,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  Db db(raw);
  EXPECT_EQ(rc, SQLITE_OK) << (raw ? sqlite3_errmsg(raw) : "out of memory");
  if (rc != SQLITE_OK) return nullptr;
  sqlite3_busy_timeout(raw, 30000);
  return db;
}

Status Exec(sqlite3* db, const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string m = err ? err : sqlite3_errmsg(db);
    sqlite3_free(err);
    return UnavailableError(sql + ": " + m);
  }
  return Status::Ok();
}

// Every row of `table`, in `order`, as text: the byte-for-byte comparison.
std::string Dump(sqlite3* db, const std::string& table, const std::string& order) {
  std::string out;
  sqlite3_stmt* stmt = nullptr;
  const std::string sql = "SELECT * FROM " + table + " ORDER BY " + order;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
    ADD_FAILURE() << sql << ": " << sqlite3_errmsg(db);
    return out;
  }
  while (sqlite3_step(stmt) == SQLITE_ROW) {
    for (int c = 0; c < sqlite3_column_count(stmt); ++c) {
      out += std::to_string(sqlite3_column_type(stmt, c)) + ":";
      const unsigned char* text = sqlite3_column_text(stmt, c);
      out += text ? reinterpret_cast<const char*>(text) : "NULL";
      out += '|';
    }
    out += '\n';
  }
  sqlite3_finalize(stmt);
  return out;
}

FencingToken HighestOf(sqlite3* db, std::string_view key) {
  auto h = Sqlite::Highest(db, key);
  EXPECT_TRUE(h.ok()) << h.status().ToString();
  return h.ok() ? *h : 0;
}

class SqliteFenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty()) << "mkdtemp failed";
    path_ = dir_.path() + "/app.db";
    db_ = Open(path_);
    ASSERT_NE(db_, nullptr);
    ASSERT_TRUE(Exec(db(), "PRAGMA journal_mode=WAL").ok());
    ASSERT_TRUE(Sqlite::EnsureSchema(db()).ok());
    ASSERT_TRUE(Exec(db(),
                     "CREATE TABLE accounts(id INTEGER PRIMARY KEY, balance INTEGER NOT NULL);"
                     "INSERT INTO accounts VALUES (1, 100), (2, 250), (3, -7);")
                    .ok());
  }

  sqlite3* db() { return db_.get(); }

  // UPDATE accounts SET balance = balance + `add` WHERE id = `id`.
  std::function<Status()> Deposit(sqlite3* db, int id, int add) {
    return [db, id, add] {
      return Exec(db, "UPDATE accounts SET balance = balance + " + std::to_string(add) +
                          " WHERE id = " + std::to_string(id));
    };
  }

  TempDir dir_;
  std::string path_;
  Db db_;
};

TEST_F(SqliteFenceTest, AdmittedWriteCommitsWithToken) {
  Status s = Sqlite::Write(db(), "accounts/1", 5, Deposit(db(), 1, 20));
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(Dump(db(), "accounts", "id"), "1:1|1:120|\n1:2|1:250|\n1:3|1:-7|\n");
  EXPECT_EQ(HighestOf(db(), "accounts/1"), 5u);
  EXPECT_TRUE(sqlite3_get_autocommit(db())) << "Write left a transaction open";
}

TEST_F(SqliteFenceTest, StaleWriteLeavesTableUntouched) {
  ASSERT_TRUE(Sqlite::Write(db(), "accounts/1", 34, Deposit(db(), 1, 20)).ok());
  const std::string before = Dump(db(), "accounts", "id");
  bool ran = false;
  Status s = Sqlite::Write(db(), "accounts/1", 33, [&] {
    ran = true;
    return Deposit(db(), 1, 1000)();
  });
  EXPECT_EQ(s.code(), StatusCode::kStaleToken) << s.ToString();
  EXPECT_EQ(s.message(), "stale token 33 < 34 for key accounts/1");
  EXPECT_FALSE(ran) << "the caller's write ran for a stale token";
  EXPECT_EQ(Dump(db(), "accounts", "id"), before);
  EXPECT_EQ(HighestOf(db(), "accounts/1"), 34u);
  EXPECT_TRUE(sqlite3_get_autocommit(db())) << "Write left a transaction open";
}

TEST_F(SqliteFenceTest, EqualTokenIsAdmitted) {
  ASSERT_TRUE(Sqlite::Write(db(), "accounts/1", 9, Deposit(db(), 1, 1)).ok());
  Status s = Sqlite::Write(db(), "accounts/1", 9, Deposit(db(), 1, 1));
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(Dump(db(), "accounts", "id"), "1:1|1:102|\n1:2|1:250|\n1:3|1:-7|\n");
  EXPECT_EQ(HighestOf(db(), "accounts/1"), 9u);
}

TEST_F(SqliteFenceTest, FailingWriteRollsBackWriteAndToken) {
  ASSERT_TRUE(Sqlite::Write(db(), "accounts/1", 10, Deposit(db(), 1, 1)).ok());
  const std::string before = Dump(db(), "accounts", "id");
  // The callback changes a row, then fails: both that change and the token
  // (20 would otherwise be recorded) must roll back.
  Status s = Sqlite::Write(db(), "accounts/1", 20, [&] {
    Status d = Deposit(db(), 1, 500)();
    if (!d.ok()) return d;
    return UnavailableError("downstream refused");
  });
  EXPECT_EQ(s, UnavailableError("downstream refused"));
  EXPECT_EQ(Dump(db(), "accounts", "id"), before);
  EXPECT_EQ(HighestOf(db(), "accounts/1"), 10u);
  EXPECT_TRUE(sqlite3_get_autocommit(db())) << "Write left a transaction open";
  // A callback that fails in SQL (a constraint) rolls back the same way.
  s = Sqlite::Write(db(), "accounts/1", 30,
                    [&] { return Exec(db(), "INSERT INTO accounts VALUES (1, 0)"); });
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_EQ(Dump(db(), "accounts", "id"), before);
  EXPECT_EQ(HighestOf(db(), "accounts/1"), 10u);
  // A token between the two still fits: 20 was never recorded.
  EXPECT_TRUE(Sqlite::Write(db(), "accounts/1", 15, Deposit(db(), 1, 0)).ok());
}

TEST_F(SqliteFenceTest, AdmitOutsideTransactionIsFailedPrecondition) {
  ExpectError(Sqlite::Admit(db(), "accounts/1", 5), StatusCode::kFailedPrecondition,
              "BEGIN IMMEDIATE");
  EXPECT_EQ(HighestOf(db(), "accounts/1"), 0u);
}

TEST_F(SqliteFenceTest, AdmitInsideCallersTransaction) {
  ASSERT_TRUE(Exec(db(), "BEGIN IMMEDIATE").ok());
  EXPECT_TRUE(Sqlite::Admit(db(), "accounts/1", 8).ok());
  ASSERT_TRUE(Deposit(db(), 1, 5)().ok());
  ASSERT_TRUE(Exec(db(), "COMMIT").ok());
  EXPECT_EQ(HighestOf(db(), "accounts/1"), 8u);

  ASSERT_TRUE(Exec(db(), "BEGIN IMMEDIATE").ok());
  Status s = Sqlite::Admit(db(), "accounts/1", 7);
  EXPECT_EQ(s.code(), StatusCode::kStaleToken);
  EXPECT_EQ(s.message(), "stale token 7 < 8 for key accounts/1");
  ASSERT_TRUE(Exec(db(), "ROLLBACK").ok());
  EXPECT_EQ(HighestOf(db(), "accounts/1"), 8u);
}

TEST_F(SqliteFenceTest, HighestSurvivesReopen) {
  ASSERT_TRUE(Sqlite::Write(db(), "accounts/1", 41, Deposit(db(), 1, 1)).ok());
  db_.reset();
  db_ = Open(path_);
  ASSERT_NE(db_, nullptr);
  ASSERT_TRUE(Sqlite::EnsureSchema(db()).ok()) << "EnsureSchema on an existing table";
  EXPECT_EQ(HighestOf(db(), "accounts/1"), 41u);
  const std::string before = Dump(db(), "accounts", "id");
  EXPECT_EQ(Sqlite::Write(db(), "accounts/1", 40, Deposit(db(), 1, 1)).code(),
            StatusCode::kStaleToken);
  EXPECT_EQ(Dump(db(), "accounts", "id"), before);
}

TEST_F(SqliteFenceTest, KeysAreIndependent) {
  ASSERT_TRUE(Sqlite::Write(db(), "accounts/1", 100, Deposit(db(), 1, 1)).ok());
  EXPECT_TRUE(Sqlite::Write(db(), "accounts/2", 1, Deposit(db(), 2, 1)).ok());
  EXPECT_EQ(HighestOf(db(), "accounts/1"), 100u);
  EXPECT_EQ(HighestOf(db(), "accounts/2"), 1u);
  EXPECT_EQ(HighestOf(db(), "accounts/3"), 0u);
}

TEST_F(SqliteFenceTest, OutOfRangeTokensAreInvalidArgument) {
  const FencingToken too_big =
      static_cast<FencingToken>(std::numeric_limits<std::int64_t>::max()) + 1;
  const std::string before = Dump(db(), "accounts", "id");
  for (FencingToken token : {FencingToken{0}, too_big, std::numeric_limits<FencingToken>::max()}) {
    SCOPED_TRACE(token);
    bool ran = false;
    Status s = Sqlite::Write(db(), "accounts/1", token, [&] {
      ran = true;
      return Deposit(db(), 1, 1)();
    });
    ExpectError(s, StatusCode::kInvalidArgument, "out of range");
    EXPECT_FALSE(ran);
    ASSERT_TRUE(Exec(db(), "BEGIN IMMEDIATE").ok());
    ExpectError(Sqlite::Admit(db(), "accounts/1", token), StatusCode::kInvalidArgument,
                "out of range");
    ASSERT_TRUE(Exec(db(), "ROLLBACK").ok());
  }
  EXPECT_EQ(Dump(db(), "accounts", "id"), before);
  EXPECT_EQ(HighestOf(db(), "accounts/1"), 0u);
  // The largest token SQLite can hold is fine.
  const FencingToken max = static_cast<FencingToken>(std::numeric_limits<std::int64_t>::max());
  EXPECT_TRUE(Sqlite::Write(db(), "accounts/1", max, Deposit(db(), 1, 1)).ok());
  EXPECT_EQ(HighestOf(db(), "accounts/1"), max);
}

// Two connections on one file, in two threads. Each admitted write appends
// its token to a log table inside the fenced transaction, so the log's rowid
// order is the commit order.
TEST_F(SqliteFenceTest, TwoConnectionsRacingNeverAdmitALowerToken) {
  constexpr int kConnections = 2;
  constexpr int kWritesPerConnection = 300;
  std::cout << "seed " << kSeed << std::endl;
  RecordProperty("seed", std::to_string(kSeed));
  ASSERT_TRUE(Exec(db(),
                   "CREATE TABLE admitted(seq INTEGER PRIMARY KEY AUTOINCREMENT, "
                   "conn INTEGER NOT NULL, token INTEGER NOT NULL)")
                  .ok());

  std::vector<int> ok_count(kConnections, 0), stale_count(kConnections, 0);
  std::vector<std::jthread> threads;
  for (int c = 0; c < kConnections; ++c) {
    threads.emplace_back([&, c] {
      Db conn = Open(path_);
      if (conn == nullptr) return;
      std::mt19937_64 rng(kSeed + 100 + static_cast<std::uint64_t>(c));
      for (int i = 0; i < kWritesPerConnection; ++i) {
        const FencingToken token = 1 + static_cast<FencingToken>(i) * 2 + rng() % 32;
        Status s = Sqlite::Write(conn.get(), "accounts/1", token, [&] {
          Status d = Deposit(conn.get(), 1, 1)();
          if (!d.ok()) return d;
          return Exec(conn.get(), "INSERT INTO admitted(conn, token) VALUES (" + std::to_string(c) +
                                      ", " + std::to_string(token) + ")");
        });
        if (s.ok()) {
          ++ok_count[c];
        } else {
          EXPECT_EQ(s.code(), StatusCode::kStaleToken) << s.ToString();
          ++stale_count[c];
        }
      }
    });
  }
  for (auto& th : threads) th.join();

  std::vector<Admitted> log;
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(
      sqlite3_prepare_v2(db(), "SELECT seq, token FROM admitted ORDER BY seq", -1, &stmt, nullptr),
      SQLITE_OK);
  while (sqlite3_step(stmt) == SQLITE_ROW) {
    log.push_back({static_cast<std::uint64_t>(sqlite3_column_int64(stmt, 0)),
                   static_cast<FencingToken>(sqlite3_column_int64(stmt, 1))});
  }
  sqlite3_finalize(stmt);

  int total_ok = 0, total_stale = 0;
  for (int c = 0; c < kConnections; ++c) {
    total_ok += ok_count[c];
    total_stale += stale_count[c];
  }
  // Which connection wins how often is up to the scheduler (one may run ahead
  // and only see stale rejections); what must hold is the order below.
  EXPECT_GT(total_ok, 0);
  ASSERT_EQ(static_cast<int>(log.size()), total_ok);
  EXPECT_GT(total_stale, 0) << "the race never produced a stale write; it tests nothing";
  ExpectNonDecreasing(log);
  FencingToken max_admitted = 0;
  for (const auto& a : log) max_admitted = std::max(max_admitted, a.token);
  EXPECT_EQ(HighestOf(db(), "accounts/1"), max_admitted);
  std::cout << "admitted " << total_ok << ", stale " << total_stale << std::endl;
  // Every admitted write's deposit landed; no rejected one did.
  EXPECT_EQ(Dump(db(), "accounts", "id"),
            "1:1|1:" + std::to_string(100 + total_ok) + "|\n1:2|1:250|\n1:3|1:-7|\n");
}

// ---- Directory ----------------------------------------------------------------

class DirectoryFenceTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.path().empty()) << "mkdtemp failed"; }

  std::string Read(const std::string& name) {
    std::string content;
    EXPECT_TRUE(ReadWholeFile(dir_.path() + "/" + name, &content)) << name;
    return content;
  }

  // Only NAMEs in DIR, only *.lock / *.token records in DIR/.dlock-fence.
  void ExpectNoTempFiles(const std::set<std::string>& names) {
    for (const auto& f : ListDir(dir_.path())) {
      EXPECT_TRUE(f == ".dlock-fence" || names.count(f) == 1) << "stray file in DIR: " << f;
    }
    for (const auto& f : ListDir(dir_.path() + "/.dlock-fence")) {
      EXPECT_TRUE(f.ends_with(".lock") || f.ends_with(".token"))
          << "stray file in DIR/.dlock-fence: " << f;
    }
  }

  TempDir dir_;
};

TEST_F(DirectoryFenceTest, AdmittedWriteReplacesFile) {
  Directory fence(dir_.path());
  ASSERT_TRUE(fence.Write("job", 3, "out.csv", "report-1").ok());
  EXPECT_EQ(Read("out.csv"), "report-1");
  ASSERT_TRUE(fence.Write("job", 4, "out.csv", "r2").ok());
  EXPECT_EQ(Read("out.csv"), "r2");
  auto h = fence.Highest("job");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(*h, 4u);
  // Empty content is a write like any other.
  ASSERT_TRUE(fence.Write("job", 4, "empty", "").ok());
  EXPECT_EQ(Read("empty"), "");
  ExpectNoTempFiles({"out.csv", "empty"});
}

TEST_F(DirectoryFenceTest, StaleWriteLeavesFileUntouched) {
  Directory fence(dir_.path());
  ASSERT_TRUE(fence.Write("orders/42", 34, "ledger", "balance=120\n").ok());
  struct stat before_st;
  ASSERT_EQ(::stat((dir_.path() + "/ledger").c_str(), &before_st), 0);
  Status s = fence.Write("orders/42", 33, "ledger", "balance=110\n");
  EXPECT_EQ(s.code(), StatusCode::kStaleToken);
  EXPECT_EQ(s.message(), "stale token 33 < 34 for key orders/42");
  EXPECT_EQ(Read("ledger"), "balance=120\n");
  struct stat after_st;
  ASSERT_EQ(::stat((dir_.path() + "/ledger").c_str(), &after_st), 0);
  EXPECT_EQ(before_st.st_ino, after_st.st_ino) << "the file was replaced";
  // A stale write to a file that does not exist yet does not create it.
  EXPECT_EQ(fence.Write("orders/42", 1, "other", "x").code(), StatusCode::kStaleToken);
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/other"));
  auto h = fence.Highest("orders/42");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(*h, 34u);
  ExpectNoTempFiles({"ledger"});
}

TEST_F(DirectoryFenceTest, EqualTokenIsAdmitted) {
  Directory fence(dir_.path());
  ASSERT_TRUE(fence.Write("job", 5, "f", "one").ok());
  EXPECT_TRUE(fence.Write("job", 5, "f", "two").ok());
  EXPECT_EQ(Read("f"), "two");
}

TEST_F(DirectoryFenceTest, HighestSurvivesRestart) {
  {
    Directory fence(dir_.path());
    ASSERT_TRUE(fence.Write("job", 77, "f", "v77").ok());
  }
  Directory restarted(dir_.path());
  auto h = restarted.Highest("job");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(*h, 77u);
  EXPECT_EQ(restarted.Write("job", 76, "f", "v76").code(), StatusCode::kStaleToken);
  EXPECT_EQ(Read("f"), "v77");
  EXPECT_TRUE(restarted.Write("job", 78, "f", "v78").ok());
  EXPECT_EQ(Read("f"), "v78");
}

TEST_F(DirectoryFenceTest, BadNamesAreInvalidArgument) {
  Directory fence(dir_.path());
  for (std::string_view name : {std::string_view(""), std::string_view("."), std::string_view(".."),
                                std::string_view("a/b"), std::string_view(".dlock-fence"),
                                std::string_view("/etc"), std::string_view("a\0b", 3)}) {
    SCOPED_TRACE(std::string(name));
    ExpectError(fence.Write("job", 1, name, "x"), StatusCode::kInvalidArgument, "not a plain name");
  }
  ExpectError(fence.Write("job", 1, std::string(256, 'n'), "x"), StatusCode::kInvalidArgument,
              "not a plain name");
  EXPECT_TRUE(fence.Write("job", 1, std::string(255, 'n'), "x").ok());
  // Nothing was recorded by the rejected calls beyond the one good write.
  auto h = fence.Highest("job");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(*h, 1u);
}

TEST_F(DirectoryFenceTest, BadKeyAndTokenAreInvalidArgument) {
  Directory fence(dir_.path());
  EXPECT_EQ(fence.Write("", 1, "f", "x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fence.Write(std::string(1025, 'k'), 1, "f", "x").code(), StatusCode::kInvalidArgument);
  ExpectError(fence.Write("job", 0, "f", "x"), StatusCode::kInvalidArgument, "0");
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/f"));
}

TEST_F(DirectoryFenceTest, MissingDirectoryIsUnavailable) {
  const std::string missing = dir_.path() + "/no/such/dir";
  Directory fence(missing);
  Status s = fence.Write("job", 1, "f", "x");
  ExpectError(s, StatusCode::kUnavailable, missing);
  ExpectError(s, StatusCode::kUnavailable, "does not exist");
  EXPECT_FALSE(std::filesystem::exists(missing));
}

TEST_F(DirectoryFenceTest, RegularFileAsDirectoryIsUnavailable) {
  const std::string file = dir_.path() + "/plain";
  { std::ofstream(file) << "not a dir"; }
  Directory fence(file);
  Status s = fence.Write("job", 1, "f", "x");
  ExpectError(s, StatusCode::kUnavailable, file);
  ExpectError(s, StatusCode::kUnavailable, "not a directory");
}

TEST_F(DirectoryFenceTest, OddKeysWorkAndDoNotCollide) {
  Directory fence(dir_.path());
  // Keys that a naive escaping would map to one record file.
  const std::vector<std::string> keys = {
      "a/b",
      "a b",
      "a%2Fb",
      "a_b",
      "a%20b",
      ".",
      "..",
      ".dlock-fence",
      "x.lock",
      "x",
      std::string(1024, 'k'),
      std::string(1023, 'k') + "j",
      std::string(1024, '/'),
      std::string(1024, '/').replace(1023, 1, " "),
      "line\nbreak",
      "line%0Abreak",
  };
  for (std::size_t i = 0; i < keys.size(); ++i) {
    SCOPED_TRACE("key #" + std::to_string(i));
    // Ascending tokens from one key would make a collision show as a stale
    // write; descending ones make it show as a wrong Highest.
    const FencingToken token = 1000 - i;
    Status s = fence.Write(keys[i], token, "f" + std::to_string(i), "v");
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  for (std::size_t i = 0; i < keys.size(); ++i) {
    SCOPED_TRACE("key #" + std::to_string(i));
    auto h = fence.Highest(keys[i]);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    EXPECT_EQ(*h, 1000 - i);
    // Each key still rejects its own stale token and admits its own.
    EXPECT_EQ(fence.Write(keys[i], 1000 - i - 1, "f", "x").code(), StatusCode::kStaleToken);
    EXPECT_TRUE(fence.Write(keys[i], 1000 - i, "f", "x").ok());
  }
  std::set<std::string> names = {"f"};
  for (std::size_t i = 0; i < keys.size(); ++i) names.insert("f" + std::to_string(i));
  ExpectNoTempFiles(names);
}

// 8 threads and 4 child processes write 1 MiB files through one key, each
// with its own tokens; the byte a file is filled with is its token. A reader
// thread reads the file over and over: every read must be one writer's whole
// file, and the tokens it sees must never go down.
TEST_F(DirectoryFenceTest, ConcurrentWritersNeverTearOrGoBack) {
  constexpr int kThreads = 8;
  constexpr int kProcesses = 4;
  constexpr int kWriters = kThreads + kProcesses;
  constexpr int kRounds = 4;  // tokens 1..48, each a distinct byte
  constexpr std::size_t kSize = 1 << 20;
  const std::string key = "reports/daily";
  const std::string name = "big.bin";
  const std::string path = dir_.path() + "/" + name;
  // Writer w writes tokens w+1, w+1+kWriters, ...: interleaved, so writers
  // overtake one another and some writes are stale.
  auto token_of = [&](int writer, int round) {
    return static_cast<FencingToken>(round * kWriters + writer + 1);
  };

  // The children are forked first, while this process has no other thread;
  // they wait on a pipe until every writer is ready.
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const int writer = kThreads + p;
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0) << std::strerror(errno);
    if (pid == 0) {
      ::close(go[1]);
      char c;
      while (::read(go[0], &c, 1) < 0 && errno == EINTR) {
      }
      Directory fence(dir_.path());
      int stale = 0;
      for (int r = 0; r < kRounds; ++r) {
        const FencingToken token = token_of(writer, r);
        Status s = fence.Write(key, token, name, std::string(kSize, static_cast<char>(token)));
        if (s.code() == StatusCode::kStaleToken) {
          ++stale;
        } else if (!s.ok()) {
          _exit(100);
        }
      }
      _exit(stale);  // 0..kRounds
    }
    children.push_back(pid);
  }
  ::close(go[0]);

  std::atomic<bool> start{false};
  std::atomic<bool> done{false};
  std::atomic<int> stale_total{0};
  std::atomic<int> errors{0};
  std::vector<std::string> bad_reads;
  std::vector<FencingToken> seen;
  std::jthread reader([&] {
    std::string content;
    while (!done.load()) {
      if (!ReadWholeFile(path, &content)) continue;  // not written yet
      const FencingToken token = content.empty() ? 0 : static_cast<unsigned char>(content[0]);
      if (content.size() != kSize || content.find_first_not_of(content[0]) != std::string::npos) {
        if (bad_reads.size() < 5) {
          bad_reads.push_back("size " + std::to_string(content.size()) + ", first byte " +
                              std::to_string(token));
        }
        continue;
      }
      if (seen.empty() || seen.back() != token) seen.push_back(token);
    }
  });
  std::vector<std::jthread> writers;
  for (int w = 0; w < kThreads; ++w) {
    writers.emplace_back([&, w] {
      while (!start.load()) std::this_thread::yield();
      Directory fence(dir_.path());
      for (int r = 0; r < kRounds; ++r) {
        const FencingToken token = token_of(w, r);
        Status s = fence.Write(key, token, name, std::string(kSize, static_cast<char>(token)));
        if (s.code() == StatusCode::kStaleToken) {
          stale_total.fetch_add(1);
        } else if (!s.ok()) {
          ADD_FAILURE() << "writer " << w << ": " << s.ToString();
          errors.fetch_add(1);
        }
      }
    });
  }
  // Threads and processes start together.
  start.store(true);
  ::close(go[1]);
  for (auto& th : writers) th.join();
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << "child " << pid << " died: " << status;
    ASSERT_LE(WEXITSTATUS(status), kRounds) << "child " << pid << " failed a write";
    stale_total.fetch_add(WEXITSTATUS(status));
  }
  done.store(true);
  reader.join();

  EXPECT_EQ(errors.load(), 0);
  EXPECT_TRUE(bad_reads.empty()) << "torn or mixed reads, e.g.: " << bad_reads[0];
  ASSERT_FALSE(seen.empty()) << "the reader never saw the file";
  for (std::size_t i = 1; i < seen.size(); ++i) {
    EXPECT_GT(seen[i], seen[i - 1])
        << "the file went back from token " << seen[i - 1] << " to " << seen[i];
  }
  // The largest token is never stale, so it is what is left.
  const FencingToken max_token = token_of(kWriters - 1, kRounds - 1);
  std::string final_content;
  ASSERT_TRUE(ReadWholeFile(path, &final_content));
  EXPECT_EQ(final_content, std::string(kSize, static_cast<char>(max_token)));
  auto h = Directory(dir_.path()).Highest(key);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(*h, max_token);
  std::cout << "stale writes: " << stale_total.load() << " of " << kWriters * kRounds
            << "; reader saw " << seen.size() << " distinct versions" << std::endl;
  ExpectNoTempFiles({name});
}

}  // namespace
}  // namespace dlock::fence
