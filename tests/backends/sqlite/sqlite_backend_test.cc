// Tests of the SQLite backend through the Backend interface, one fresh
// temporary directory per test. Expiry and reboots are played with a fake
// store clock; nothing sleeps.
#include "backends/sqlite/sqlite_backend.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/uri.h"

namespace dlock::sqlite {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base != nullptr && *base != '\0' ? base : "/tmp") +
                       "/dlock-sqlite-test-XXXXXX";
    if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    if (path_.empty()) return;
    std::error_code ec;
    // Restore permissions a test may have removed, so removal succeeds.
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, ec);
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void ExpectError(const Status& status, StatusCode code, std::string_view substring) {
  EXPECT_EQ(status.code(), code) << status.ToString();
  EXPECT_NE(status.message().find(substring), std::string::npos)
      << "message '" << status.message() << "' lacks '" << substring << "'";
}

void WriteFile(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
}

class SqliteBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty()) << "mkdtemp failed";
    db_path_ = dir_.path() + "/locks.db";
  }

  SqliteOptions Options() {
    SqliteOptions options;
    options.path = db_path_;
    options.store_clock = [this] {
      std::lock_guard lock(clock_mu_);
      return clock_;
    };
    return options;
  }

  std::unique_ptr<Backend> OpenBackend() {
    Result<std::unique_ptr<Backend>> backend = Open(Options());
    EXPECT_TRUE(backend.ok()) << backend.status().ToString();
    if (!backend.ok()) return nullptr;
    return std::move(*backend);
  }

  void Advance(milliseconds d) {
    std::lock_guard lock(clock_mu_);
    clock_.now_ms += d.count();
  }
  void Reboot(std::string boot_id) {
    std::lock_guard lock(clock_mu_);
    clock_ = BootTime{std::move(boot_id), 1000};
  }

  OwnerId NewOwner() { return OwnerId(0xabcdef, ++owners_); }

  static LeaseRequest Req(std::string key, OwnerId owner, milliseconds ttl = seconds(10)) {
    return LeaseRequest{std::move(key), owner, ttl};
  }

  // Acquire that must be granted; returns the token (0 on failure).
  static FencingToken MustAcquire(Backend& backend, const LeaseRequest& request) {
    Result<Attempt> attempt = backend.TryAcquire(request);
    EXPECT_TRUE(attempt.ok()) << attempt.status().ToString();
    if (!attempt.ok()) return 0;
    EXPECT_TRUE(attempt->granted) << "key " << request.key;
    return attempt->granted ? attempt->token : 0;
  }

  TempDir dir_;
  std::string db_path_;
  std::mutex clock_mu_;
  // Boot-time clocks start near zero; a large start shows no arithmetic
  // depends on it.
  BootTime clock_{"boot-a", 3'600'000};
  std::uint64_t owners_ = 0;
};

TEST_F(SqliteBackendTest, GrantsTokenOneThenTwoAfterReleaseAndReacquire) {
  auto backend = OpenBackend();
  ASSERT_NE(backend, nullptr);
  OwnerId a = NewOwner();
  EXPECT_EQ(MustAcquire(*backend, Req("jobs/a", a)), 1u);
  EXPECT_TRUE(backend->Release("jobs/a", a).ok());
  OwnerId b = NewOwner();
  EXPECT_EQ(MustAcquire(*backend, Req("jobs/a", b)), 2u);
  // One counter for the store: another key's first token follows.
  EXPECT_EQ(MustAcquire(*backend, Req("jobs/b", b)), 3u);
}

// The footprint: a released key leaves no row behind, however many keys
// came and went, and the next key's token is still above every earlier one.
TEST_F(SqliteBackendTest, ReleasedKeysLeaveNoRowBehind) {
  auto backend = OpenBackend();
  ASSERT_NE(backend, nullptr);
  FencingToken last = 0;
  for (int i = 0; i < 200; ++i) {
    const std::string key = "gone/" + std::to_string(i);
    const OwnerId owner = NewOwner();
    const FencingToken token = MustAcquire(*backend, Req(key, owner));
    EXPECT_GT(token, last);
    last = token;
    ASSERT_TRUE(backend->Release(key, owner).ok());
  }
  Result<std::uint64_t> stored = backend->StoredObjects("gone/");
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_EQ(*stored, 0u);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(db_path_.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT (SELECT count(*) FROM dlock_holders) + "
                                   "(SELECT count(*) FROM dlock_queue) + "
                                   "(SELECT count(*) FROM dlock_done), "
                                   "(SELECT count(*) FROM dlock_meta)",
                               -1, &stmt, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(stmt, 0), 0);
  EXPECT_EQ(sqlite3_column_int(stmt, 1), 2);  // schema_version, last_token
  sqlite3_finalize(stmt);
  sqlite3_close(db);
}

TEST_F(SqliteBackendTest, HeldKeyIsNotGrantedAndReportsHolderTtl) {
  auto backend = OpenBackend();
  ASSERT_NE(backend, nullptr);
  MustAcquire(*backend, Req("k", NewOwner(), seconds(10)));
  Advance(milliseconds(2500));
  Result<Attempt> attempt = backend->TryAcquire(Req("k", NewOwner(), seconds(30)));
  ASSERT_TRUE(attempt.ok()) << attempt.status().ToString();
  EXPECT_FALSE(attempt->granted);
  EXPECT_EQ(attempt->token, 0u);
  EXPECT_EQ(attempt->holder_ttl_remaining, milliseconds(7500));
}

TEST_F(SqliteBackendTest, SameOwnerRegrantReturnsSameTokenAndFreshExpiry) {
  auto backend = OpenBackend();
  ASSERT_NE(backend, nullptr);
  OwnerId a = NewOwner();
  FencingToken first = MustAcquire(*backend, Req("k", a, seconds(10)));
  EXPECT_EQ(first, 1u);
  Advance(seconds(8));
  // The retried request: same owner, same token, expiry now + 10s.
  EXPECT_EQ(MustAcquire(*backend, Req("k", a, seconds(10))), first);
  Advance(seconds(8));  // 16s after the first grant, 8s after the retry
  Result<Attempt> other = backend->TryAcquire(Req("k", NewOwner()));
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(other->granted);
  EXPECT_EQ(other->holder_ttl_remaining, seconds(2));
}

TEST_F(SqliteBackendTest, TakeoverAfterExpiryGetsLargerToken) {
  auto backend = OpenBackend();
  ASSERT_NE(backend, nullptr);
  OwnerId a = NewOwner();
  FencingToken ta = MustAcquire(*backend, Req("k", a, seconds(5)));
  Advance(milliseconds(4999));
  Result<Attempt> early = backend->TryAcquire(Req("k", NewOwner()));
  ASSERT_TRUE(early.ok());
  EXPECT_FALSE(early->granted);
  EXPECT_EQ(early->holder_ttl_remaining, milliseconds(1));
  Advance(milliseconds(1));  // exactly at expires_at: expired
  FencingToken tb = MustAcquire(*backend, Req("k", NewOwner()));
  EXPECT_GT(tb, ta);
  // The old owner's release now must not free the new owner's lock.
  EXPECT_TRUE(backend->Release("k", a).code() == StatusCode::kNotOwner);
}

TEST_F(SqliteBackendTest, RebootExpiresEveryOldLease) {
  auto backend = OpenBackend();
  ASSERT_NE(backend, nullptr);
  OwnerId a = NewOwner();
  FencingToken t1 = MustAcquire(*backend, Req("x", a, std::chrono::hours(24)));
  FencingToken t2 = MustAcquire(*backend, Req("y", a, std::chrono::hours(24)));
  // The new boot's clock is far behind the old one: only the boot id
  // changing can tell that the old leases are gone.
  Reboot("boot-b");
  Result<std::vector<HolderInfo>> held = backend->List("");
  ASSERT_TRUE(held.ok());
  EXPECT_TRUE(held->empty());
  std::vector<Status> renewed = backend->Renew(std::vector<LeaseRequest>{Req("x", a)});
  ASSERT_EQ(renewed.size(), 1u);
  EXPECT_EQ(renewed[0].code(), StatusCode::kNotOwner);
  // Nobody holds "y" any more, so a stranger's release is not refused.
  EXPECT_TRUE(backend->Release("y", NewOwner()).ok());
  EXPECT_GT(MustAcquire(*backend, Req("x", NewOwner())), t1);
  EXPECT_GT(MustAcquire(*backend, Req("y", NewOwner())), t2);
}

TEST_F(SqliteBackendTest, ReleaseByNonOwnerIsNotOwnerAndLockStaysHeld) {
  auto backend = OpenBackend();
  ASSERT_NE(backend, nullptr);
  OwnerId a = NewOwner();
  MustAcquire(*backend, Req("jobs/a", a));
  ExpectError(backend->Release("jobs/a", NewOwner()), StatusCode::kNotOwner, "jobs/a");
  Result<Attempt> attempt = backend->TryAcquire(Req("jobs/a", NewOwner()));
  ASSERT_TRUE(attempt.ok());
  EXPECT_FALSE(attempt->granted);
  Result<std::vector<HolderInfo>> held = backend->List("jobs/");
  ASSERT_TRUE(held.ok());
  ASSERT_EQ(held->size(), 1u);
  EXPECT_EQ((*held)[0].owner, a);
}

// Waiters are served in arrival order: the wait queue.
LeaseRequest Queued(std::string key, OwnerId owner, milliseconds queue_ttl = seconds(3)) {
  LeaseRequest r{std::move(key), owner, seconds(10)};
  r.queue_ttl = queue_ttl;
  return r;
}

TEST_F(SqliteBackendTest, WaitersAreGrantedInArrivalOrder) {
  auto backend = OpenBackend();
  ASSERT_NE(backend, nullptr);
  OwnerId holder = NewOwner(), first = NewOwner(), second = NewOwner();
  MustAcquire(*backend, Req("k", holder));
  ASSERT_FALSE(backend->TryAcquire(Queued("k", first))->granted);
  ASSERT_FALSE(backend->TryAcquire(Queued("k", second))->granted);
  ASSERT_TRUE(backend->Release("k", holder).ok());
  // The key is free, but the second waiter is not at the head; nor may a
  // single attempt barge in while others wait; nor the releaser come back.
  EXPECT_FALSE(backend->TryAcquire(Queued("k", second))->granted);
  EXPECT_FALSE(backend->TryAcquire(Req("k", NewOwner()))->granted);
  EXPECT_FALSE(backend->TryAcquire(Queued("k", holder))->granted);
  FencingToken t1 = MustAcquire(*backend, Queued("k", first));
  ASSERT_TRUE(backend->Release("k", first).ok());
  FencingToken t2 = MustAcquire(*backend, Queued("k", second));
  EXPECT_GT(t2, t1);
  ASSERT_TRUE(backend->Release("k", second).ok());
  // The releaser that re-queued is next, then the queue is empty.
  MustAcquire(*backend, Queued("k", holder));
  ASSERT_TRUE(backend->Release("k", holder).ok());
  MustAcquire(*backend, Req("k", NewOwner()));
}

TEST_F(SqliteBackendTest, AWaiterThatStopsAttemptingLeavesTheQueue) {
  auto backend = OpenBackend();
  ASSERT_NE(backend, nullptr);
  OwnerId holder = NewOwner(), dead = NewOwner(), alive = NewOwner();
  MustAcquire(*backend, Req("k", holder));
  ASSERT_FALSE(backend->TryAcquire(Queued("k", dead))->granted);
  ASSERT_FALSE(backend->TryAcquire(Queued("k", alive))->granted);
  ASSERT_TRUE(backend->Release("k", holder).ok());
  Advance(seconds(2));
  EXPECT_FALSE(backend->TryAcquire(Queued("k", alive))->granted);  // refreshes `alive`
  Advance(milliseconds(1001));  // `dead` last attempted 3.001 s ago
  MustAcquire(*backend, Queued("k", alive));
}

TEST_F(SqliteBackendTest, GivingUpLeavesTheQueueEvenWhileTheKeyIsHeld) {
  // Regression: Release by a waiter returned kNotOwner (another owner holds
  // the key) before committing, so its queue entry stayed and blocked every
  // single attempt for queue_ttl after the holder let go.
  auto backend = OpenBackend();
  ASSERT_NE(backend, nullptr);
  OwnerId holder = NewOwner(), quitter = NewOwner();
  MustAcquire(*backend, Req("k", holder));
  ASSERT_FALSE(backend->TryAcquire(Queued("k", quitter))->granted);
  EXPECT_EQ(backend->Release("k", quitter).code(), StatusCode::kNotOwner);
  ASSERT_TRUE(backend->Release("k", holder).ok());
  MustAcquire(*backend, Req("k", NewOwner()));
}

TEST_F(SqliteBackendTest, ReleaseIsIdempotent) {
  auto backend = OpenBackend();
  ASSERT_NE(backend, nullptr);
  OwnerId a = NewOwner();
  EXPECT_TRUE(backend->Release("never-acquired", a).ok());
  MustAcquire(*backend, Req("k", a));
  EXPECT_TRUE(backend->Release("k", a).ok());
  EXPECT_TRUE(backend->Release("k", a).ok());
  // Someone else's expired lease is not in the way either.
  MustAcquire(*backend, Req("k", NewOwner(), seconds(1)));
  Advance(seconds(1));
  EXPECT_TRUE(backend->Release("k", a).ok());
}

TEST_F(SqliteBackendTest, RenewBatchReportsEachLease) {
  auto backend = OpenBackend();
  ASSERT_NE(backend, nullptr);
  EXPECT_TRUE(backend->Renew(std::vector<LeaseRequest>{}).empty());
  OwnerId a = NewOwner();
  MustAcquire(*backend, Req("r/1", a, seconds(5)));
  MustAcquire(*backend, Req("r/2", a, seconds(1)));
  MustAcquire(*backend, Req("r/3", a, seconds(5)));
  // r/2 expires and is taken over; r/1 and r/3 are still held.
  Advance(seconds(1));
  OwnerId thief = NewOwner();
  MustAcquire(*backend, Req("r/2", thief, seconds(60)));
  std::vector<Status> statuses = backend->Renew(std::vector<LeaseRequest>{
      Req("r/1", a, seconds(20)), Req("r/2", a, seconds(20)), Req("r/3", a, seconds(20))});
  ASSERT_EQ(statuses.size(), 3u);
  EXPECT_TRUE(statuses[0].ok()) << statuses[0].ToString();
  ExpectError(statuses[1], StatusCode::kNotOwner,
              "lease on key r/2 is no longer held by this owner");
  EXPECT_TRUE(statuses[2].ok()) << statuses[2].ToString();
  Result<std::vector<HolderInfo>> held = backend->List("r/");
  ASSERT_TRUE(held.ok());
  ASSERT_EQ(held->size(), 3u);
  EXPECT_EQ((*held)[0].ttl_remaining, seconds(20));
  EXPECT_EQ((*held)[1].owner, thief);
  EXPECT_EQ((*held)[1].ttl_remaining, seconds(60));
  EXPECT_EQ((*held)[2].ttl_remaining, seconds(20));
}

TEST_F(SqliteBackendTest, RenewAfterExpiryIsNotOwner) {
  auto backend = OpenBackend();
  ASSERT_NE(backend, nullptr);
  OwnerId a = NewOwner();
  MustAcquire(*backend, Req("k", a, seconds(5)));
  Advance(seconds(5));
  // Nobody took it, but a lease that lapsed stays lost.
  std::vector<Status> statuses = backend->Renew(std::vector<LeaseRequest>{Req("k", a)});
  ASSERT_EQ(statuses.size(), 1u);
  ExpectError(statuses[0], StatusCode::kNotOwner, "lease on key k is no longer held");
}

TEST_F(SqliteBackendTest, RenewRejectsBadTtlButRenewsTheRest) {
  auto backend = OpenBackend();
  ASSERT_NE(backend, nullptr);
  OwnerId a = NewOwner();
  MustAcquire(*backend, Req("k", a));
  std::vector<Status> statuses = backend->Renew(
      std::vector<LeaseRequest>{Req("k", a, milliseconds(1)), Req("k", a, seconds(10))});
  ASSERT_EQ(statuses.size(), 2u);
  EXPECT_EQ(statuses[0].code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(statuses[1].ok()) << statuses[1].ToString();
}

TEST_F(SqliteBackendTest, RejectsBadKeyAndTtl) {
  auto backend = OpenBackend();
  ASSERT_NE(backend, nullptr);
  Result<Attempt> empty_key = backend->TryAcquire(Req("", NewOwner()));
  EXPECT_EQ(empty_key.status().code(), StatusCode::kInvalidArgument);
  Result<Attempt> short_ttl = backend->TryAcquire(Req("k", NewOwner(), milliseconds(1)));
  EXPECT_EQ(short_ttl.status().code(), StatusCode::kInvalidArgument);
  Result<Attempt> no_owner = backend->TryAcquire(Req("k", OwnerId()));
  EXPECT_EQ(no_owner.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(SqliteBackendTest, TokensSurviveReopen) {
  FencingToken before = 0;
  {
    auto backend = OpenBackend();
    ASSERT_NE(backend, nullptr);
    OwnerId a = NewOwner();
    MustAcquire(*backend, Req("k", a));
    ASSERT_TRUE(backend->Release("k", a).ok());
    before = MustAcquire(*backend, Req("k", NewOwner(), seconds(1)));
  }
  Advance(seconds(1));
  auto reopened = OpenBackend();
  ASSERT_NE(reopened, nullptr);
  EXPECT_GT(MustAcquire(*reopened, Req("k", NewOwner())), before);
}

TEST_F(SqliteBackendTest, ListMatchesPrefixLiterally) {
  auto backend = OpenBackend();
  ASSERT_NE(backend, nullptr);
  OwnerId a = NewOwner();
  const std::string high = "z\xff\xff";  // not UTF-8: compared as bytes
  const std::vector<std::string> all = {"a%b/1", "a_b/1", "axb/1", "a%bc", "A%b",
                                        "ab",    "b",     "z\xff", high + "1"};
  for (const std::string& key : all) {
    MustAcquire(*backend, Req(key, a, seconds(10)));
  }
  OwnerId b = NewOwner();
  MustAcquire(*backend, Req("a%b/released", b));
  ASSERT_TRUE(backend->Release("a%b/released", b).ok());
  MustAcquire(*backend, Req("a%b/expired", b, seconds(1)));
  Advance(seconds(1));

  auto keys = [&](std::string_view prefix) {
    std::vector<std::string> out;
    Result<std::vector<HolderInfo>> held = backend->List(prefix);
    EXPECT_TRUE(held.ok()) << held.status().ToString();
    if (held.ok()) {
      for (const HolderInfo& h : *held) out.push_back(h.key);
    }
    return out;
  };
  EXPECT_EQ(keys("a%b"), (std::vector<std::string>{"a%b/1", "a%bc"}));
  EXPECT_EQ(keys("a_b"), (std::vector<std::string>{"a_b/1"}));
  EXPECT_EQ(keys("a%"), (std::vector<std::string>{"a%b/1", "a%bc"}));
  EXPECT_EQ(keys("z\xff"), (std::vector<std::string>{"z\xff", high + "1"}));
  EXPECT_EQ(keys(high), (std::vector<std::string>{high + "1"}));
  EXPECT_EQ(keys("nothing"), std::vector<std::string>{});
  EXPECT_EQ(keys("").size(), 9u);

  Result<std::vector<HolderInfo>> held = backend->List("a%b/");
  ASSERT_TRUE(held.ok());
  ASSERT_EQ(held->size(), 1u);
  EXPECT_EQ((*held)[0].owner, a);
  EXPECT_EQ((*held)[0].token, 1u);
  EXPECT_EQ((*held)[0].ttl_remaining, seconds(9));
}

TEST_F(SqliteBackendTest, TwoConnectionsExcludeEachOther) {
  auto one = OpenBackend();
  auto two = OpenBackend();
  ASSERT_NE(one, nullptr);
  ASSERT_NE(two, nullptr);
  OwnerId a = NewOwner();
  OwnerId b = NewOwner();
  EXPECT_EQ(MustAcquire(*one, Req("k", a)), 1u);
  Result<Attempt> refused = two->TryAcquire(Req("k", b));
  ASSERT_TRUE(refused.ok());
  EXPECT_FALSE(refused->granted);
  ExpectError(two->Release("k", b), StatusCode::kNotOwner, "k");
  ASSERT_TRUE(one->Release("k", a).ok());
  EXPECT_EQ(MustAcquire(*two, Req("k", b)), 2u);
  Result<std::vector<HolderInfo>> held = one->List("");
  ASSERT_TRUE(held.ok());
  ASSERT_EQ(held->size(), 1u);
  EXPECT_EQ((*held)[0].owner, b);
}

TEST_F(SqliteBackendTest, DescribeNamesTheFile) {
  auto backend = OpenBackend();
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(backend->Describe(), "sqlite://" + db_path_);
}

TEST_F(SqliteBackendTest, DatabaseIsInWalModeWithSchemaVersion) {
  ASSERT_NE(OpenBackend(), nullptr);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(db_path_.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
  std::string mode;
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &stmt, nullptr), SQLITE_OK);
  if (sqlite3_step(stmt) == SQLITE_ROW) {
    mode = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
  }
  sqlite3_finalize(stmt);
  EXPECT_EQ(mode, "wal");
  // A newer schema is refused rather than misread.
  ASSERT_EQ(sqlite3_exec(db, "UPDATE dlock_meta SET value = 99 WHERE name = 'schema_version'",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  Result<std::unique_ptr<Backend>> newer = Open(Options());
  ExpectError(newer.status(), StatusCode::kFailedPrecondition, "schema version 99");
}

// A file written by the first dlock (schema version 1: the holder in the
// dlock_locks row) is migrated in place, through version 2 to 3: its live
// lease stays held by the same owner and token, a lapsed one is free, every
// key's next token is above its last, and queued waiters keep their places.
TEST_F(SqliteBackendTest, MigratesAVersionOneFileInPlace) {
  const OwnerId held_owner(0x11, 0x22), waiter(0x33, 0x44);
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open_v2(db_path_.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                              nullptr),
              SQLITE_OK);
    const std::string now = std::to_string(clock_.now_ms);
    const std::string sql = R"sql(
      PRAGMA journal_mode = WAL;
      CREATE TABLE dlock_meta (name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL) WITHOUT ROWID;
      INSERT INTO dlock_meta VALUES ('schema_version', 1);
      CREATE TABLE dlock_locks (key TEXT PRIMARY KEY NOT NULL, owner TEXT,
        token INTEGER NOT NULL CHECK (token > 0), boot_id TEXT, expires_at_ms INTEGER,
        acquired_at_ms INTEGER, lock_delay_ms INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;
      CREATE TABLE dlock_queue (key TEXT NOT NULL, owner TEXT NOT NULL, seq INTEGER NOT NULL,
        boot_id TEXT NOT NULL, expires_at_ms INTEGER NOT NULL, PRIMARY KEY (key, owner)) WITHOUT ROWID;
      CREATE INDEX dlock_queue_by_seq ON dlock_queue (key, seq);
      CREATE TABLE dlock_done (key TEXT PRIMARY KEY NOT NULL, owner TEXT NOT NULL,
        token INTEGER NOT NULL, done_at_ms INTEGER NOT NULL) WITHOUT ROWID;
      INSERT INTO dlock_locks VALUES ('held', ')sql" + held_owner.ToString() + R"sql(', 7,
        'boot-a', )sql" + now + R"sql( + 10000, )sql" + now + R"sql( - 500, 0);
      INSERT INTO dlock_locks VALUES ('lapsed', '00000000000000aa00000000000000bb', 4,
        'boot-a', )sql" + now + R"sql( - 1, )sql" + now + R"sql( - 9000, 0);
      INSERT INTO dlock_locks VALUES ('free', NULL, 9, NULL, NULL, NULL, 0);
      INSERT INTO dlock_queue VALUES ('held', ')sql" + waiter.ToString() + R"sql(', 1,
        'boot-a', )sql" + now + R"sql( + 3000);
    )sql";
    char* err = nullptr;
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << err;
    sqlite3_close(db);
  }
  auto backend = OpenBackend();
  ASSERT_NE(backend, nullptr);
  auto held = backend->List("");
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  ASSERT_EQ(held->size(), 1u);
  EXPECT_EQ((*held)[0].key, "held");
  EXPECT_EQ((*held)[0].owner, held_owner);
  EXPECT_EQ((*held)[0].token, 7u);
  EXPECT_EQ((*held)[0].limit, 1u);
  ASSERT_TRUE((*held)[0].held_for.has_value());
  EXPECT_EQ(*(*held)[0].held_for, milliseconds(500));
  auto waiters = backend->Waiters("");
  ASSERT_TRUE(waiters.ok()) << waiters.status().ToString();
  ASSERT_EQ(waiters->size(), 1u);
  EXPECT_EQ((*waiters)[0].owner, waiter);
  EXPECT_FALSE((*waiters)[0].waited_for.has_value()) << "version 1 kept no arrival time";
  // The holder still holds: its retry is its own grant, others are refused.
  EXPECT_EQ(MustAcquire(*backend, Req("held", held_owner)), 7u);
  Result<Attempt> other = backend->TryAcquire(Req("held", NewOwner()));
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(other->granted);
  // The store's one counter starts above the highest token of any key (9).
  EXPECT_EQ(MustAcquire(*backend, Req("lapsed", NewOwner())), 10u);
  EXPECT_EQ(MustAcquire(*backend, Req("free", NewOwner())), 11u);
  ASSERT_TRUE(backend->Release("held", held_owner).ok());
  // The queued waiter comes first.
  EXPECT_FALSE(backend->TryAcquire(Req("held", NewOwner()))->granted);
  LeaseRequest queued = Req("held", waiter);
  queued.queue_ttl = seconds(3);
  EXPECT_EQ(MustAcquire(*backend, queued), 12u);

  // A dlock of version 1 that still has the file open cannot grant beside
  // the holders it does not see: its table is gone, so its statements fail.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(db_path_.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
  EXPECT_NE(sqlite3_exec(db, "UPDATE dlock_locks SET owner = 'x', token = token + 1 "
                             "WHERE key = 'free'", nullptr, nullptr, nullptr), SQLITE_OK);
  EXPECT_NE(sqlite3_exec(db, "INSERT INTO dlock_locks (key, owner, token) VALUES ('n', 'x', 1)",
                         nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT value FROM dlock_meta WHERE name = 'schema_version'",
                               -1, &stmt, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(stmt, 0), 3);
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  // Opening again does not migrate twice.
  auto again = OpenBackend();
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->List("")->size(), 3u);  // held, lapsed, free: all re-granted
}

// A version-2 file (one counter row per key in dlock_tokens) becomes
// version 3: the store's counter starts above every token a key had (its
// counter, a holding, a run-once record), the counter rows go, the holder
// keeps its holding, and a version-2 dlock still running fails rather than
// granting from a counter that no longer moves.
TEST_F(SqliteBackendTest, MigratesAVersionTwoFileWithoutAnyTokenGoingDown) {
  const OwnerId holder(0x11, 0x22);
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open_v2(db_path_.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                              nullptr),
              SQLITE_OK);
    const std::string now = std::to_string(clock_.now_ms);
    const std::string sql = R"sql(
      PRAGMA journal_mode = WAL;
      CREATE TABLE dlock_meta (name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL) WITHOUT ROWID;
      INSERT INTO dlock_meta VALUES ('schema_version', 2);
      CREATE TABLE dlock_tokens (key TEXT PRIMARY KEY NOT NULL,
        token INTEGER NOT NULL CHECK (token > 0)) WITHOUT ROWID;
      CREATE TABLE dlock_holders (key TEXT NOT NULL, owner TEXT NOT NULL, token INTEGER NOT NULL,
        boot_id TEXT NOT NULL, expires_at_ms INTEGER NOT NULL, acquired_at_ms INTEGER NOT NULL,
        lock_delay_ms INTEGER NOT NULL DEFAULT 0, ttl_ms INTEGER NOT NULL DEFAULT 0,
        holder_limit INTEGER NOT NULL DEFAULT 1, label TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (key, owner)) WITHOUT ROWID;
      CREATE TABLE dlock_queue (key TEXT NOT NULL, owner TEXT NOT NULL, seq INTEGER NOT NULL,
        boot_id TEXT NOT NULL, expires_at_ms INTEGER NOT NULL, holder_limit INTEGER NOT NULL
        DEFAULT 1, label TEXT NOT NULL DEFAULT '', since_ms INTEGER,
        PRIMARY KEY (key, owner)) WITHOUT ROWID;
      CREATE TABLE dlock_done (key TEXT PRIMARY KEY NOT NULL, owner TEXT NOT NULL,
        token INTEGER NOT NULL, done_at_ms INTEGER NOT NULL) WITHOUT ROWID;
      INSERT INTO dlock_tokens VALUES ('busy', 41), ('quiet', 7), ('held', 12);
      INSERT INTO dlock_holders VALUES ('held', ')sql" + holder.ToString() + R"sql(', 12,
        'boot-a', )sql" + now + R"sql( + 10000, )sql" + now + R"sql(, 0, 10000, 1, '');
      INSERT INTO dlock_done VALUES ('ran', '00000000000000aa00000000000000bb', 50, 1);
    )sql";
    char* err = nullptr;
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << err;
    sqlite3_close(db);
  }
  auto backend = OpenBackend();
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(MustAcquire(*backend, Req("held", holder)), 12u) << "the holder keeps its token";
  EXPECT_FALSE(backend->TryAcquire(Req("held", NewOwner()))->granted);
  EXPECT_EQ(MustAcquire(*backend, Req("quiet", NewOwner())), 51u);
  EXPECT_EQ(MustAcquire(*backend, Req("busy", NewOwner())), 52u);
  EXPECT_TRUE(*backend->IsDone("ran")) << "a record written before retention is kept";

  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(db_path_.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
  EXPECT_NE(sqlite3_exec(db, "INSERT INTO dlock_tokens (key, token) VALUES ('n', 1) "
                             "ON CONFLICT (key) DO UPDATE SET token = token + 1",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT value FROM dlock_meta WHERE name = 'schema_version'",
                               -1, &stmt, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(stmt, 0), 3);
  sqlite3_finalize(stmt);
  sqlite3_close(db);
}

TEST_F(SqliteBackendTest, LockDelayKeepsAnExpiredKeyClosedButNotAReleasedOne) {
  auto backend = OpenBackend();
  ASSERT_NE(backend, nullptr);
  ASSERT_TRUE(backend->SupportsLockDelay());
  LeaseRequest first = Req("k", NewOwner(), seconds(1));
  first.lock_delay = seconds(5);
  const FencingToken t1 = MustAcquire(*backend, first);
  Advance(seconds(2));  // expired, inside its delay
  Result<Attempt> refused = backend->TryAcquire(Req("k", NewOwner()));
  ASSERT_TRUE(refused.ok());
  EXPECT_FALSE(refused->granted);
  EXPECT_EQ(refused->holder_ttl_remaining, seconds(4));
  // A late release by the expired holder does not open the key early.
  EXPECT_TRUE(backend->Release("k", first.owner).ok());
  EXPECT_FALSE(backend->TryAcquire(Req("k", NewOwner()))->granted);
  Advance(seconds(4));
  LeaseRequest second = Req("k", NewOwner(), seconds(1));
  second.lock_delay = seconds(5);
  const FencingToken t2 = MustAcquire(*backend, second);
  EXPECT_GT(t2, t1);
  // Released cleanly: no delay.
  ASSERT_TRUE(backend->Release("k", second.owner).ok());
  EXPECT_GT(MustAcquire(*backend, Req("k", NewOwner())), t2);
}

TEST_F(SqliteBackendTest, OnlyTheHolderMarksARunDone) {
  auto backend = OpenBackend();
  ASSERT_NE(backend, nullptr);
  EXPECT_FALSE(*backend->IsDone("job"));
  OwnerId a = NewOwner();
  MustAcquire(*backend, Req("job", a, seconds(1)));
  EXPECT_EQ(backend->MarkDone("job", NewOwner(), kDefaultDoneRetention).code(), StatusCode::kNotOwner);
  Advance(seconds(2));
  EXPECT_EQ(backend->MarkDone("job", a, kDefaultDoneRetention).code(), StatusCode::kNotOwner) << "expired";
  EXPECT_FALSE(*backend->IsDone("job"));
  OwnerId b = NewOwner();
  MustAcquire(*backend, Req("job", b));
  EXPECT_TRUE(backend->MarkDone("job", b, kDefaultDoneRetention).ok());
  backend.reset();
  EXPECT_TRUE(*OpenBackend()->IsDone("job")) << "durable";
}

TEST_F(SqliteBackendTest, SharedHoldersAndWaitersCarryLimitAndLabel) {
  auto backend = OpenBackend();
  ASSERT_NE(backend, nullptr);
  auto req = [&](OwnerId owner, std::uint32_t limit, std::string label, bool queue) {
    LeaseRequest r = Req("rw", owner);
    r.limit = limit;
    r.label = std::move(label);
    if (queue) r.queue_ttl = seconds(3);
    return r;
  };
  OwnerId r1 = NewOwner(), r2 = NewOwner(), w = NewOwner(), r3 = NewOwner();
  MustAcquire(*backend, req(r1, kSharedLimit, "reader-1", false));
  Advance(milliseconds(100));
  MustAcquire(*backend, req(r2, kSharedLimit, "reader-2", false));
  EXPECT_FALSE(backend->TryAcquire(req(w, 1, "writer", true))->granted);
  Advance(milliseconds(50));
  EXPECT_FALSE(backend->TryAcquire(req(r3, kSharedLimit, "reader-3", true))->granted);
  auto held = backend->List("rw");
  ASSERT_TRUE(held.ok());
  ASSERT_EQ(held->size(), 2u);
  EXPECT_EQ((*held)[0].label, "reader-1");
  EXPECT_EQ((*held)[0].limit, kSharedLimit);
  EXPECT_EQ((*held)[0].ttl, seconds(10));
  EXPECT_EQ((*held)[0].held_for, milliseconds(150));
  EXPECT_EQ((*held)[1].label, "reader-2");
  auto waiters = backend->Waiters("rw");
  ASSERT_TRUE(waiters.ok());
  ASSERT_EQ(waiters->size(), 2u);
  EXPECT_EQ((*waiters)[0].owner, w);
  EXPECT_EQ((*waiters)[0].limit, 1u);
  EXPECT_EQ((*waiters)[0].label, "writer");
  EXPECT_EQ((*waiters)[0].waited_for, milliseconds(50));
  EXPECT_EQ((*waiters)[1].owner, r3);
  // A waiter's place lapses with its queue ttl.
  Advance(seconds(4));
  EXPECT_TRUE(backend->Waiters("rw")->empty());
}

TEST_F(SqliteBackendTest, OpenFailsOnMissingDirectory) {
  SqliteOptions options = Options();
  options.path = dir_.path() + "/missing/locks.db";
  Result<std::unique_ptr<Backend>> backend = Open(options);
  ExpectError(backend.status(), StatusCode::kUnavailable,
              "cannot open lock database " + options.path + ": directory " + dir_.path() +
                  "/missing does not exist");
}

TEST_F(SqliteBackendTest, OpenCreatesDirectoryWhenAsked) {
  SqliteOptions options = Options();
  options.path = dir_.path() + "/state/dlock/locks.db";
  options.create_directory = true;
  Result<std::unique_ptr<Backend>> backend = Open(options);
  ASSERT_TRUE(backend.ok()) << backend.status().ToString();
  struct stat st;
  ASSERT_EQ(stat((dir_.path() + "/state/dlock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(MustAcquire(**backend, Req("k", NewOwner())), 1u);
}

TEST_F(SqliteBackendTest, OpenFailsWhenParentIsARegularFile) {
  WriteFile(dir_.path() + "/file", "x");
  SqliteOptions options = Options();
  options.path = dir_.path() + "/file/locks.db";
  ExpectError(Open(options).status(), StatusCode::kUnavailable,
              dir_.path() + "/file is not a directory");
  options.path = dir_.path() + "/file/sub/locks.db";
  options.create_directory = true;
  ExpectError(Open(options).status(), StatusCode::kUnavailable,
              "cannot open lock database " + options.path);
}

TEST_F(SqliteBackendTest, OpenFailsOnUnwritableDirectory) {
  if (geteuid() == 0) {
    GTEST_SKIP() << "running as root, which may write to a 0500 directory; "
                    "OpenFailsWhenParentIsARegularFile covers the root case";
  }
  const std::string ro = dir_.path() + "/ro";
  ASSERT_EQ(mkdir(ro.c_str(), 0500), 0);
  SqliteOptions options = Options();
  options.path = ro + "/locks.db";
  ExpectError(Open(options).status(), StatusCode::kUnavailable,
              "directory " + ro + " is not writable");
  chmod(ro.c_str(), 0700);
}

TEST_F(SqliteBackendTest, OpenFailsOnAFileThatIsNotADatabase) {
  std::string garbage;
  for (int i = 0; i < 4096; ++i) garbage += static_cast<char>((i * 7919) % 251);
  WriteFile(db_path_, garbage);
  ExpectError(Open(Options()).status(), StatusCode::kUnavailable,
              db_path_ + " is not a SQLite database");
}

TEST_F(SqliteBackendTest, OpenFailsOnADirectory) {
  ASSERT_EQ(mkdir(db_path_.c_str(), 0700), 0);
  ExpectError(Open(Options()).status(), StatusCode::kUnavailable,
              db_path_ + " is a directory");
}

TEST_F(SqliteBackendTest, OpenRejectsRelativePath) {
  SqliteOptions options = Options();
  options.path = "locks.db";
  EXPECT_EQ(Open(options).status().code(), StatusCode::kInvalidArgument);
}

// Four threads contend for one key, each with its own connection as four
// processes would have (or, with `shared`, all through one backend as the
// core's caller and renewal threads do). Every grant must carry a fresh,
// larger token, and no two holders may overlap.
void HammerOneKey(const std::string& db_path, bool shared) {
  constexpr int kThreads = 4;
  constexpr int kGrantsPerThread = 200;
  std::atomic<int> holders{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> errors{0};
  std::mutex tokens_mu;
  std::vector<FencingToken> tokens;  // in grant order

  auto open = [&]() -> std::unique_ptr<Backend> {
    SqliteOptions options;
    options.path = db_path;
    // The real store clock; NORMAL skips the per-commit fsync the test does
    // not need.
    options.synchronous = Synchronous::kNormal;
    Result<std::unique_ptr<Backend>> backend = Open(options);
    if (!backend.ok()) {
      ADD_FAILURE() << backend.status().ToString();
      return nullptr;
    }
    return std::move(*backend);
  };
  std::unique_ptr<Backend> shared_backend = shared ? open() : nullptr;
  if (shared) {
    ASSERT_NE(shared_backend, nullptr);
  }

  std::vector<std::jthread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::unique_ptr<Backend> own = shared ? nullptr : open();
      Backend* backend = shared ? shared_backend.get() : own.get();
      if (backend == nullptr) {
        errors.fetch_add(1);
        return;
      }
      std::uint64_t n = 0;
      for (int grants = 0; grants < kGrantsPerThread && errors.load() == 0;) {
        OwnerId owner(static_cast<std::uint64_t>(t + 1), ++n);
        Result<Attempt> attempt = backend->TryAcquire(LeaseRequest{"hot", owner, seconds(60)});
        if (!attempt.ok()) {
          ADD_FAILURE() << attempt.status().ToString();
          errors.fetch_add(1);
          return;
        }
        if (!attempt->granted) {
          std::this_thread::yield();
          continue;
        }
        if (holders.fetch_add(1) != 0) overlaps.fetch_add(1);
        {
          std::lock_guard lock(tokens_mu);
          tokens.push_back(attempt->token);
        }
        holders.fetch_sub(1);
        Status released = backend->Release("hot", owner);
        if (!released.ok()) {
          ADD_FAILURE() << released.ToString();
          errors.fetch_add(1);
          return;
        }
        ++grants;
      }
    });
  }
  for (std::jthread& thread : threads) thread.join();

  ASSERT_EQ(errors.load(), 0);
  EXPECT_EQ(overlaps.load(), 0);
  ASSERT_EQ(tokens.size(), static_cast<std::size_t>(kThreads * kGrantsPerThread));
  for (std::size_t i = 1; i < tokens.size(); ++i) {
    ASSERT_LT(tokens[i - 1], tokens[i]) << "grant " << i;
  }
  EXPECT_EQ(tokens.front(), 1u);
  EXPECT_EQ(tokens.back(), static_cast<FencingToken>(kThreads * kGrantsPerThread));
}

TEST_F(SqliteBackendTest, ConcurrentBackendsNeverOverlap) { HammerOneKey(db_path_, false); }

TEST_F(SqliteBackendTest, OneBackendSharedByThreadsNeverOverlaps) {
  HammerOneKey(db_path_, true);
}

// Many connections opening one new file at once must all succeed: schema
// creation and the switch to WAL are safe to race.
TEST_F(SqliteBackendTest, ConcurrentOpensOfANewFileSucceed) {
  constexpr int kThreads = 8;
  std::vector<Status> results(kThreads);
  std::vector<std::jthread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Result<std::unique_ptr<Backend>> backend = Open(Options());
      results[t] = backend.status();
    });
  }
  for (std::jthread& thread : threads) thread.join();
  for (const Status& s : results) EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(SqliteReadBootTimeTest, ReadsBootIdAndAMovingClock) {
  BootTime first = ReadBootTime();
  BootTime second = ReadBootTime();
  EXPECT_EQ(first.boot_id.size(), 36u) << first.boot_id;
  EXPECT_EQ(first.boot_id, second.boot_id);
  EXPECT_GT(first.now_ms, 0);
  EXPECT_LE(first.now_ms, second.now_ms);
}

Result<SqliteOptions> FromText(std::string_view text) {
  Result<internal::Uri> uri = internal::ParseUri(text);
  if (!uri.ok()) return uri.status();
  return OptionsFromUri(*uri);
}

TEST(SqliteOptionsFromUriTest, ReadsPathAndParameters) {
  Result<SqliteOptions> plain = FromText("sqlite:///var/lib/dlock/locks.db");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->path, "/var/lib/dlock/locks.db");
  EXPECT_EQ(plain->synchronous, Synchronous::kFull);
  EXPECT_EQ(plain->busy_timeout, milliseconds(5000));
  EXPECT_FALSE(plain->create_directory);

  Result<SqliteOptions> tuned =
      FromText("sqlite:///tmp/my%20locks.db?synchronous=NORMAL&busy_timeout=250ms");
  ASSERT_TRUE(tuned.ok()) << tuned.status().ToString();
  EXPECT_EQ(tuned->path, "/tmp/my locks.db");
  EXPECT_EQ(tuned->synchronous, Synchronous::kNormal);
  EXPECT_EQ(tuned->busy_timeout, milliseconds(250));

  Result<SqliteOptions> off = FromText("sqlite:///x.db?synchronous=off");
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->synchronous, Synchronous::kOff);
}

TEST(SqliteOptionsFromUriTest, RejectsBadUris) {
  const std::string expected = "expected sqlite:///absolute/path/locks.db";
  ExpectError(FromText("sqlite://locks.db").status(), StatusCode::kInvalidArgument, expected);
  ExpectError(FromText("sqlite://host/x.db").status(), StatusCode::kInvalidArgument,
              "'host' is read as a host name");
  ExpectError(FromText("sqlite://").status(), StatusCode::kInvalidArgument, expected);
  ExpectError(FromText("sqlite:///var/lib/").status(), StatusCode::kInvalidArgument,
              "names a directory");
  ExpectError(FromText("sqlite:///x.db?journal=wal").status(), StatusCode::kInvalidArgument,
              "unknown parameter 'journal'");
  ExpectError(FromText("sqlite:///x.db?synchronous=fast").status(),
              StatusCode::kInvalidArgument, "bad synchronous value 'fast'");
  ExpectError(FromText("sqlite:///x.db?busy_timeout=soon").status(),
              StatusCode::kInvalidArgument, "busy_timeout");
  ExpectError(FromText("sqlite:///x.db?busy_timeout=2h").status(),
              StatusCode::kInvalidArgument, "at most 1h");
}

}  // namespace
}  // namespace dlock::sqlite
