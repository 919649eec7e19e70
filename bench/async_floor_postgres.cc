// PostgreSQL's pipelined-write floor for dlock_bench_async's distinct mode:
// the cheapest durable single-row writes a user's own code could make with
// the pipelining and grouping dlock's batches have (PostgresBackend's
// TryAcquireMany / ReleaseMany through CallBatcher): up to
// CallBatcher::kMaxBatch statements in one libpq pipeline with one Sync,
// so one transaction and one WAL flush a batch, one batch at a time on one
// connection (dlock's operations connection is one, behind a mutex). Each
// write is a prepared UPDATE of one row of a two-column table of its own,
// by primary key, the changed column not indexed (a HOT update), every row
// of a batch a different one (as every key of a batch is).
#include <libpq-fe.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <string>

#include "async_floor.h"

namespace dlock::bench {
namespace {

// CallBatcher::kMaxBatch (src/core/call_batcher.h).
constexpr int kBatch = 256;

// `uri` without dlock's own parameter, which libpq would refuse.
std::string LibpqUri(std::string_view uri) {
  const std::size_t query = uri.find('?');
  if (query == std::string_view::npos) return std::string(uri);
  std::string out(uri.substr(0, query));
  std::string_view rest = uri.substr(query + 1);
  char sep = '?';
  while (!rest.empty()) {
    const std::size_t amp = rest.find('&');
    const std::string_view param = rest.substr(0, amp);
    if (!param.starts_with("table=")) {
      out += sep;
      out += param;
      sep = '&';
    }
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
  }
  return out;
}

// A user's connection and table; nullopt-like failures print and say false.
class Writer {
 public:
  explicit Writer(std::string_view uri)
      : conn_(PQconnectdb(LibpqUri(uri).c_str())),
        table_("dlock_async_floor_" + std::to_string(getpid())) {}
  ~Writer() {
    if (ok_) (void)Exec("DROP TABLE IF EXISTS " + table_);
    PQfinish(conn_);
  }
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  bool SetUp() {
    ok_ = PQstatus(conn_) == CONNECTION_OK;
    if (!ok_) return Fail("connect", PQerrorMessage(conn_));
    PQsetNoticeProcessor(conn_, [](void*, const char*) {}, nullptr);
    ok_ = Exec("CREATE TABLE " + table_ + " (k int PRIMARY KEY, v bigint NOT NULL)") &&
          Exec("INSERT INTO " + table_ + " SELECT k, 0 FROM generate_series(0, " +
               std::to_string(kBatch - 1) + ") AS k") &&
          Exec("ANALYZE " + table_);
    if (!ok_) return false;
    PGresult* r = PQprepare(conn_, "floor", ("UPDATE " + table_ + " SET v = v + 1 WHERE k = $1").c_str(),
                            1, nullptr);
    return Check(r, "prepare");
  }

  // `n` writes (n <= kBatch) in one pipeline and one transaction. The
  // replies to one batch (a few KB) fit in the socket's buffers, so the
  // connection may block while sending: the server never waits on us.
  bool Batch(int n) {
    if (PQenterPipelineMode(conn_) == 0) return Fail("pipeline", PQerrorMessage(conn_));
    for (int i = 0; i < n; ++i) {
      const std::string k = std::to_string(i);
      const char* values[1] = {k.c_str()};
      if (PQsendQueryPrepared(conn_, "floor", 1, values, nullptr, nullptr, 0) == 0) {
        return Fail("send", PQerrorMessage(conn_));
      }
    }
    if (PQpipelineSync(conn_) == 0) return Fail("sync", PQerrorMessage(conn_));
    for (;;) {
      PGresult* r = PQgetResult(conn_);
      if (r == nullptr) continue;  // between two statements' results
      const ExecStatusType s = PQresultStatus(r);
      if (s == PGRES_PIPELINE_SYNC) {
        PQclear(r);
        break;
      }
      if (!Check(r, "write")) return false;
    }
    return PQexitPipelineMode(conn_) != 0 || Fail("pipeline", PQerrorMessage(conn_));
  }

 private:
  bool Exec(const std::string& sql) { return Check(PQexec(conn_, sql.c_str()), sql); }
  bool Check(PGresult* r, const std::string& what) {
    const ExecStatusType s = PQresultStatus(r);
    const bool good = s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK;
    if (!good) Fail(what, PQresultErrorMessage(r));
    PQclear(r);
    return good;
  }
  static bool Fail(const std::string& what, const std::string& why) {
    std::cerr << "dlock_bench_async: postgres floor: " << what << ": " << why << "\n";
    return false;
  }

  PGconn* conn_;
  const std::string table_;
  bool ok_ = false;
};

}  // namespace

std::optional<WriteFloor> PostgresWriteFloor(std::string_view uri, int writes) {
  Writer writer(uri);
  if (!writer.SetUp() || !writer.Batch(kBatch)) return std::nullopt;  // warmed
  const auto start = std::chrono::steady_clock::now();
  for (int left = writes; left > 0; left -= kBatch) {
    if (!writer.Batch(std::min(left, kBatch))) return std::nullopt;
  }
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  return WriteFloor{writes / took.count(),
                    "prepared UPDATE of one row of a two-column table (HOT), 256 a libpq "
                    "pipeline with one Sync (one commit), one pipeline at a time on one "
                    "connection"};
}

}  // namespace dlock::bench
