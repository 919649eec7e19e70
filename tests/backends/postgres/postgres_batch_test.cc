// The PostgreSQL backend's calls many at a time (postgres_batch.cc):
// KeepPlaces in one statement, TryAcquireMany and ReleaseMany pipelined.
//
// Each batch is checked against the same calls made one at a time on a
// mirror of its keys (the answer each entry must get), and its rows'
// xmin, the transaction that last wrote them, shows how many transactions
// (commits, WAL flushes) the batch took. Every test has tables of its own.
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "backends/postgres/pg_util.h"
#include "core/registry.h"
#include "dlock/backend.h"
#include "eventually.h"
#include "postgres_test_util.h"

namespace dlock::postgres {
namespace {

using std::chrono::milliseconds;
using testing_pg::AdminConnect;
using testing_pg::Query;
using testing_pg::ServerUri;
using testing_pg::Unique;
using testing_pg::WithParam;
using testing_support::Eventually;

constexpr milliseconds kTtl{60'000};

class PostgresBatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DLOCK_REQUIRE_SERVER();
    admin_ = AdminConnect();
  }

  // A backend on this test's tables, its connections named `app_`.
  std::unique_ptr<Backend> Open() {
    internal::BackendParams params;
    params.clock = DefaultClock();
    params.connect_timeout = milliseconds(5000);
    auto b = internal::OpenBackend(
        WithParam(WithParam(ServerUri(), "table=" + table_), "application_name=" + app_), params);
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    return b.ok() ? std::move(*b) : nullptr;
  }

  // `sql` with {t} and {q} the locks and queue tables.
  std::string Sql(std::string sql) const {
    for (const auto& [name, value] :
         {std::pair<std::string, std::string>{"{t}", "\"" + table_ + "\""},
          {"{q}", "\"" + table_ + "_queue\""}}) {
      for (auto pos = sql.find(name); pos != std::string::npos; pos = sql.find(name)) {
        sql.replace(pos, name.size(), value);
      }
    }
    return sql;
  }
  std::string Ask(const std::string& sql) { return Query(admin_.get(), Sql(sql)); }

  // How many transactions last wrote the lock rows of `keys`.
  std::string WritersOf(const std::vector<std::string>& keys) {
    std::string list;
    for (const std::string& k : keys) {
      list += (list.empty() ? "'\\x" : ", '\\x") + HexEncode(k) + "'::bytea";
    }
    return Ask("SELECT count(DISTINCT xmin::text) FROM {t} WHERE key IN (" + list + ")");
  }

  const std::string table_ = Unique("batch");
  const std::string app_ = Unique("batch_app");
  testing_pg::PgConn admin_;
};

// Two answers alike: the same code, and when OK the same grant and whether
// a holder's time left was told.
void ExpectAlike(const Result<Attempt>& got, const Result<Attempt>& want, const std::string& what) {
  ASSERT_EQ(got.ok(), want.ok()) << what << ": " << got.status().ToString() << " against "
                                 << want.status().ToString();
  if (!got.ok()) {
    EXPECT_EQ(got.status().code(), want.status().code()) << what << ": " << got.status().ToString();
    return;
  }
  EXPECT_EQ(got->granted, want->granted) << what;
  EXPECT_EQ(got->holder_ttl_remaining > milliseconds(0),
            want->holder_ttl_remaining > milliseconds(0))
      << what;
}

TEST_F(PostgresBatchTest, KeepPlacesKeepsEveryLivePlaceInOneTransactionAndNoHolding) {
  auto holder = Open(), waiter = Open();
  ASSERT_TRUE(holder && waiter);
  constexpr int kPlaces = 20;
  std::vector<LeaseRequest> keep;
  std::vector<std::unique_ptr<Acquisition>> waiting;
  for (int i = 0; i < kPlaces; ++i) {
    const std::string key = "place/" + std::to_string(i);
    auto held = holder->TryAcquire({key, OwnerId(1, i + 1), kTtl});
    ASSERT_TRUE(held.ok() && held->granted) << held.status().ToString();
    LeaseRequest w{key, OwnerId(2, i + 1), kTtl};
    // Longer than these 20 attempts take on a loaded machine, shorter than
    // the keep's 30 s mark below.
    w.queue_ttl = milliseconds(20'000);
    waiting.push_back(waiter->Begin(w));
    auto refused = waiting.back()->Try();
    ASSERT_TRUE(refused.ok() && !refused->granted) << refused.status().ToString();
    w.queue_ttl = kTtl;  // kept for a minute from now
    keep.push_back(w);
  }
  // The first place has lapsed (its row not yet swept).
  Ask("UPDATE {q} SET expires_at = clock_timestamp() - interval '1 second' WHERE owner = '" +
      OwnerId(2, 1).ToString() + "'");
  // A holder, which has no place: granted while nobody waited.
  LeaseRequest mine{"place/mine", OwnerId(3, 1), kTtl};
  ASSERT_TRUE(waiter->TryAcquire(mine).value().granted);
  mine.queue_ttl = kTtl;
  keep.push_back(mine);
  const std::string holding =
      Ask("SELECT expires_at::text || ' ' || xmin::text FROM {t} WHERE key = 'place/mine'");
  keep.push_back({"place/nobody", OwnerId(4, 1), kTtl, kTtl});

  const std::vector<Status> kept = waiter->KeepPlaces(keep);

  ASSERT_EQ(kept.size(), keep.size());
  EXPECT_EQ(kept[0].code(), StatusCode::kNotFound) << kept[0].ToString();
  for (int i = 1; i < kPlaces; ++i) EXPECT_TRUE(kept[i].ok()) << i << ": " << kept[i].ToString();
  EXPECT_EQ(kept[kPlaces].code(), StatusCode::kNotFound) << "a holder has no place to keep";
  EXPECT_EQ(kept[kPlaces + 1].code(), StatusCode::kNotFound);
  // Each place kept lives a minute now (its attempt gave it 20 s), all
  // written by one transaction.
  const std::string kept_places = "FROM {q} WHERE expires_at > clock_timestamp() + interval '30 s'";
  EXPECT_EQ(Ask("SELECT count(*) " + kept_places), std::to_string(kPlaces - 1));
  EXPECT_EQ(Ask("SELECT count(DISTINCT xmin::text) " + kept_places), "1");
  EXPECT_EQ(Ask("SELECT count(*) FROM {q} WHERE expires_at <= clock_timestamp()"), "1")
      << "the lapsed place was revived";
  EXPECT_EQ(Ask("SELECT expires_at::text || ' ' || xmin::text FROM {t} WHERE key = 'place/mine'"),
            holding)
      << "the holding was touched";
  for (auto& w : waiting) w->Abandon();
}

// A place first in line on a key nothing holds is not kept: kNotFound makes
// its waiter attempt, and be granted. So a waiter learns, from its
// client's next tick, that the places ahead of it lapsed (their waiters
// died: no release, no NOTIFY).
TEST_F(PostgresBatchTest, KeepPlacesSendsTheFirstPlaceOnAFreeKeyToAttempt) {
  auto holder = Open(), waiter = Open();
  ASSERT_TRUE(holder && waiter);
  const LeaseRequest held{"first/free", OwnerId(1, 1), kTtl};
  ASSERT_TRUE(holder->TryAcquire(held).value().granted);
  std::vector<LeaseRequest> keep;
  std::vector<std::unique_ptr<Acquisition>> waiting;
  for (std::uint64_t i = 1; i <= 2; ++i) {
    LeaseRequest w{held.key, OwnerId(2, i), kTtl};
    w.queue_ttl = kTtl;
    waiting.push_back(waiter->Begin(w));
    auto refused = waiting.back()->Try();
    ASSERT_TRUE(refused.ok() && !refused->granted) << refused.status().ToString();
    keep.push_back(w);
  }
  std::vector<Status> kept = waiter->KeepPlaces(keep);
  ASSERT_EQ(kept.size(), 2U);
  EXPECT_TRUE(kept[0].ok() && kept[1].ok()) << "behind a holder, both places are kept";

  ASSERT_TRUE(holder->Release(held.key, held.owner).ok());
  const std::string first_until =
      Ask("SELECT expires_at::text FROM {q} WHERE owner = '" + keep[0].owner.ToString() + "'");
  kept = waiter->KeepPlaces(keep);
  ASSERT_EQ(kept.size(), 2U);
  EXPECT_EQ(kept[0].code(), StatusCode::kNotFound) << "the first place on a free key was kept";
  EXPECT_TRUE(kept[1].ok()) << "the place behind the first was not kept: " << kept[1].ToString();
  EXPECT_EQ(Ask("SELECT expires_at::text FROM {q} WHERE owner = '" + keep[0].owner.ToString() +
                "'"),
            first_until)
      << "the first place was extended";

  // The first waiter died: its place lapses, and the second is first.
  Ask("UPDATE {q} SET expires_at = clock_timestamp() - interval '1 second' WHERE owner = '" +
      keep[0].owner.ToString() + "'");
  kept = waiter->KeepPlaces(std::span(keep).subspan(1));
  ASSERT_EQ(kept.size(), 1U);
  EXPECT_EQ(kept[0].code(), StatusCode::kNotFound) << kept[0].ToString();
  auto turn = waiting[1]->Try();
  ASSERT_TRUE(turn.ok()) << turn.status().ToString();
  EXPECT_TRUE(turn->granted) << "the waiter behind a lapsed place was refused a free key";
  if (turn->granted) {
    EXPECT_TRUE(waiter->Release(held.key, keep[1].owner).ok());
  }
  for (auto& w : waiting) w->Abandon();
}

// Under prefix `p`, owner number `o`: a key whose row exists and is free,
// one held by another owner, one the batch's owner holds already (a retry
// gets its token back) and one a reader shares. Returns the batch: those,
// two new keys, one asked for by two owners, and two invalid requests.
std::vector<LeaseRequest> MixedAttempts(Backend& setup, const std::string& p, std::uint64_t o,
                                        FencingToken* mine) {
  EXPECT_TRUE(setup.TryAcquire({p + "old", OwnerId(9, o), kTtl}).value().granted);
  EXPECT_TRUE(setup.Release(p + "old", OwnerId(9, o)).ok());
  EXPECT_TRUE(setup.TryAcquire({p + "held", OwnerId(8, o), kTtl}).value().granted);
  *mine = setup.TryAcquire({p + "mine", OwnerId(1, o), kTtl}).value().token;
  LeaseRequest reader{p + "shared", OwnerId(7, o), kTtl};
  reader.limit = kSharedLimit;
  EXPECT_TRUE(setup.TryAcquire(reader).value().granted);
  reader.owner = OwnerId(1, o);
  return {{p + "new/1", OwnerId(1, o), kTtl},   {p + "held", OwnerId(1, o), kTtl},
          {"", OwnerId(1, o), kTtl},            {p + "old", OwnerId(1, o), kTtl},
          {p + "twice", OwnerId(1, o), kTtl},   {p + "twice", OwnerId(2, o), kTtl},
          {p + "mine", OwnerId(1, o), kTtl},    reader,
          {p + "new/2", OwnerId(1, o), milliseconds(0)}};
}

TEST_F(PostgresBatchTest, TryAcquireManyAnswersAsOneAtATimeInTwoTransactions) {
  auto setup = Open(), batched = Open(), single = Open();
  ASSERT_TRUE(setup && batched && single);
  FencingToken mine_batched = 0, mine_single = 0;
  const auto batch = MixedAttempts(*setup, "a/", 1, &mine_batched);
  const auto each = MixedAttempts(*setup, "b/", 2, &mine_single);

  const auto got = batched->TryAcquireMany(batch);
  std::vector<Result<Attempt>> want;
  for (const LeaseRequest& r : each) want.push_back(single->TryAcquire(r));

  ASSERT_EQ(got.size(), batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i) ExpectAlike(got[i], want[i], batch[i].key);
  EXPECT_EQ(got[6].value().token, mine_batched) << "a retry got another token";
  // The first round granted old and mine (lean forms), the second the new
  // key and twice (fresh forms) and shared (the template): two commits,
  // where one at a time took five.
  auto granted = [](const std::string& p) {
    return std::vector<std::string>{p + "old", p + "mine", p + "new/1", p + "twice", p + "shared"};
  };
  EXPECT_EQ(WritersOf(granted("a/")), "2");
  EXPECT_EQ(WritersOf(granted("b/")), "5");
}

TEST_F(PostgresBatchTest, ReleaseManyAnswersAsOneAtATimeInOneTransaction) {
  auto setup = Open(), batched = Open(), single = Open();
  ASSERT_TRUE(setup && batched && single);
  // Under `p`: two keys `o` holds, one another owner holds, one free, and
  // one where `o` only waits (its place goes); and an invalid key.
  std::vector<std::unique_ptr<Acquisition>> waiting;
  auto holdings = [&](const std::string& p, std::uint64_t o) {
    for (const char* k : {"held/1", "held/2"}) {
      EXPECT_TRUE(setup->TryAcquire({p + k, OwnerId(1, o), kTtl}).value().granted);
    }
    EXPECT_TRUE(setup->TryAcquire({p + "other", OwnerId(8, o), kTtl}).value().granted);
    EXPECT_TRUE(setup->TryAcquire({p + "place", OwnerId(8, o), kTtl}).value().granted);
    LeaseRequest w{p + "place", OwnerId(1, o), kTtl};
    w.queue_ttl = kTtl;
    waiting.push_back(setup->Begin(w));
    EXPECT_FALSE(waiting.back()->Try().value().granted);
    return std::vector<LeaseRequest>{{p + "held/1", OwnerId(1, o)}, {p + "other", OwnerId(1, o)},
                                     {"", OwnerId(1, o)},           {p + "free", OwnerId(1, o)},
                                     {p + "place", OwnerId(1, o)},  {p + "held/2", OwnerId(1, o)}};
  };
  const auto batch = holdings("a/", 1);
  const auto each = holdings("b/", 2);

  const auto got = batched->ReleaseMany(batch);
  std::vector<Status> want;
  for (const LeaseRequest& h : each) want.push_back(single->Release(h.key, h.owner));

  ASSERT_EQ(got.size(), batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i) {
    EXPECT_EQ(got[i].code(), want[i].code()) << batch[i].key << ": " << got[i].ToString();
  }
  EXPECT_EQ(got[1].code(), StatusCode::kNotOwner);
  EXPECT_TRUE(setup->Waiters("a/place").value().empty()) << "the waiter kept its place";
  EXPECT_EQ(WritersOf({"a/held/1", "a/held/2"}), "1");
  EXPECT_EQ(WritersOf({"b/held/1", "b/held/2"}), "2");
}

TEST_F(PostgresBatchTest, AConnectionKilledMidBatchLeavesOnlyTheUnknownsUnavailable) {
  auto setup = Open(), batched = Open();
  ASSERT_TRUE(setup && batched);
  ASSERT_TRUE(setup->TryAcquire({"k/old", OwnerId(9, 1), kTtl}).value().granted);
  ASSERT_TRUE(setup->Release("k/old", OwnerId(9, 1)).ok());
  ASSERT_TRUE(setup->TryAcquire({"k/held", OwnerId(8, 1), kTtl}).value().granted);
  // A row of k/blocked that is not committed: a grant of it waits.
  Ask("BEGIN");
  Ask("INSERT INTO {t} (key, token, layout) VALUES ('k/blocked', 1, 3)");
  const std::vector<LeaseRequest> batch = {{"k/old", OwnerId(1, 1), kTtl},
                                           {"k/held", OwnerId(1, 1), kTtl},
                                           {"", OwnerId(1, 1), kTtl},
                                           {"k/blocked", OwnerId(1, 1), kTtl},
                                           {"k/new", OwnerId(1, 1), kTtl}};
  std::vector<Result<Attempt>> got;
  {
    // Its deadline (the connect timeout) ends it on every path.
    std::jthread run([&] { got = batched->TryAcquireMany(batch); });
    // Another session: one transaction sees one snapshot of the activity.
    auto killer = AdminConnect();
    const std::string blocked = "SELECT pid FROM pg_stat_activity WHERE application_name = '" +
                                app_ + "' AND wait_event_type = 'Lock'";
    ASSERT_TRUE(Eventually([&] { return !Query(killer.get(), blocked).empty(); }))
        << "the batch never waited for k/blocked";
    Query(killer.get(), "SELECT pg_terminate_backend(pid) FROM (" + blocked + ") AS b");
  }
  Ask("ROLLBACK");

  ASSERT_EQ(got.size(), batch.size());
  // The lean round committed before the kill: its answers stand.
  ASSERT_TRUE(got[0].ok()) << got[0].status().ToString();
  EXPECT_TRUE(got[0]->granted);
  ASSERT_TRUE(got[1].ok()) << got[1].status().ToString();
  EXPECT_FALSE(got[1]->granted);
  EXPECT_EQ(got[2].status().code(), StatusCode::kInvalidArgument);
  // The second round (fresh forms) was cut off: both its entries are
  // unknown, though k/new's statement never ran.
  EXPECT_EQ(got[3].status().code(), StatusCode::kUnavailable) << got[3].status().ToString();
  EXPECT_EQ(got[4].status().code(), StatusCode::kUnavailable) << got[4].status().ToString();
  auto held = setup->List("k/");
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  std::vector<std::string> keys;
  for (const HolderInfo& h : *held) keys.push_back(h.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"k/held", "k/old"})) << "the cut round stood";
  EXPECT_TRUE(batched->TryAcquire(batch[4]).value().granted) << "the backend did not reconnect";
}

// The fresh form (a single attempt on a key without a row) grants only
// when nobody else waits for the key, as the template would: a place left
// by a waiter whose key's row was swept still counts.
TEST_F(PostgresBatchTest, ASingleAttemptOnAKeyWithoutARowDoesNotJumpItsQueue) {
  auto b = Open();
  ASSERT_TRUE(b);
  Ask("INSERT INTO {q} (key, owner, enqueued_at, expires_at) VALUES ('row/none', '" +
      OwnerId(8, 1).ToString() + "', clock_timestamp(), clock_timestamp() + interval '1 minute')");
  const std::vector<LeaseRequest> attempts = {{"row/none", OwnerId(1, 1), kTtl},
                                              {"row/free", OwnerId(1, 1), kTtl}};
  auto alone = b->TryAcquire(attempts[0]);
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  EXPECT_FALSE(alone->granted) << "granted over a waiter";
  const auto batch = b->TryAcquireMany(attempts);
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_FALSE(batch[0].value().granted) << "granted over a waiter in a batch";
  EXPECT_TRUE(batch[1].value().granted);
  EXPECT_EQ(Ask("SELECT count(*) FROM {t} WHERE key = 'row/none'"), "0");
}

TEST_F(PostgresBatchTest, AStatementThatFailsRollsItsRoundBackAndEachIsAnsweredOnItsOwn) {
  auto setup = Open(), batched = Open(), single = Open();
  ASSERT_TRUE(setup && batched && single);
  // The server refuses to write the rows of keys ending in "/bad".
  const std::string refuse = Unique("refuse");
  Ask("CREATE FUNCTION " + refuse + "() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
      "IF convert_from(NEW.key, 'UTF8') LIKE '%/bad' THEN RAISE EXCEPTION 'refused by the test'; "
      "END IF; RETURN NEW; END $$");
  Ask("CREATE TRIGGER " + refuse + " BEFORE INSERT OR UPDATE ON {t} FOR EACH ROW EXECUTE "
      "FUNCTION " + refuse + "()");
  auto requests = [&](const std::string& p, std::uint64_t o) {
    EXPECT_TRUE(setup->TryAcquire({p + "old", OwnerId(9, o), kTtl}).value().granted);
    EXPECT_TRUE(setup->Release(p + "old", OwnerId(9, o)).ok());
    return std::vector<LeaseRequest>{{p + "good/1", OwnerId(1, o), kTtl},
                                     {p + "bad", OwnerId(1, o), kTtl},
                                     {p + "old", OwnerId(1, o), kTtl},
                                     {p + "good/2", OwnerId(1, o), kTtl}};
  };
  const auto batch = requests("a/", 1);
  const auto each = requests("b/", 2);

  const auto got = batched->TryAcquireMany(batch);
  std::vector<Result<Attempt>> want;
  for (const LeaseRequest& r : each) want.push_back(single->TryAcquire(r));

  ASSERT_EQ(got.size(), batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i) ExpectAlike(got[i], want[i], batch[i].key);
  EXPECT_NE(got[1].status().message().find("refused by the test"), std::string::npos)
      << got[1].status().ToString();
  for (std::size_t i : {0, 2, 3}) EXPECT_TRUE(got[i].ok() && got[i]->granted) << batch[i].key;
}

}  // namespace
}  // namespace dlock::postgres
