// The PostgreSQL backend's calls many at a time (postgres_batch.cc):
// KeepPlaces in one statement.
//
// The rows' xmin, the transaction that last wrote them, shows how many
// transactions (commits) a batch took. Every test has tables of its own.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/registry.h"
#include "dlock/backend.h"
#include "postgres_test_util.h"

namespace dlock::postgres {
namespace {

using std::chrono::milliseconds;
using testing_pg::AdminConnect;
using testing_pg::Query;
using testing_pg::ServerUri;
using testing_pg::Unique;
using testing_pg::WithParam;

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

  const std::string table_ = Unique("batch");
  const std::string app_ = Unique("batch_app");
  testing_pg::PgConn admin_;
};

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
    w.queue_ttl = milliseconds(3000);
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
  // Each place kept lives a minute now (its attempt gave it 3 s), all
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

}  // namespace
}  // namespace dlock::postgres
