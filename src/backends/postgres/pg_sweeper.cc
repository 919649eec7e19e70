#include "backends/postgres/pg_sweeper.h"

#include <utility>

#include "backends/postgres/pg_values.h"

namespace dlock::postgres {
namespace {

using SteadyClock = std::chrono::steady_clock;

SteadyTime::rep Ticks(SteadyTime t) { return t.time_since_epoch().count(); }
SteadyTime FromTicks(SteadyTime::rep ticks) { return SteadyTime(SteadyTime::duration(ticks)); }

// The number a sweep's answer carries (its last result).
Result<std::int64_t> SweptRows(const PGresult* last, const std::string& what,
                               std::string_view where) {
  DLOCK_RETURN_IF_ERROR(CheckShape(last, 1, 1, what, where));
  return IntValue(last, 0, 0);
}

}  // namespace

Sweeper::Sweeper(ConnInfo info, std::string sql, std::string what,
                 std::chrono::milliseconds call_timeout, std::string where)
    : info_(std::move(info)),
      sql_(std::move(sql)),
      what_(std::move(what)),
      call_timeout_(call_timeout),
      where_(std::move(where)) {}

bool Sweeper::NoteRelease() {
  const SteadyTime now = SteadyClock::now();
  released_at_.store(Ticks(now), std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  if (planned_) return false;
  planned_ = true;
  next_round_ = now + kSweepEvery;
  return true;
}

Listener::Chore::Next Sweeper::Step() {
  const SteadyTime now = SteadyClock::now();
  if (in_flight_) return Collect(now);
  {
    std::lock_guard lock(mu_);
    if (!planned_) return {};
    if (now < next_round_) return {next_round_, -1};
  }
  // A row is swept once its key was last granted kSweepEvery ago: only a
  // round that began that long after the last release may be the last.
  round_released_ = released_at_.load();
  round_all_aged_ = now - FromTicks(round_released_) >= kSweepEvery;
  batches_ = 0;
  return SendBatch(now);
}

Listener::Chore::Next Sweeper::SendBatch(SteadyTime now) {
  const SteadyTime deadline = now + call_timeout_;
  if (!conn_) {
    auto opened = Connect(info_, deadline, where_);
    if (!opened.ok()) return EndRound(SteadyClock::now(), true);
    // Durable as every dlock session: the sweep raises the token sequence.
    if (!PQsendQuery(opened->get(), "SET synchronous_commit TO on") ||
        !Await(opened->get(), deadline, what_, where_).ok()) {
      return EndRound(SteadyClock::now(), true);
    }
    conn_ = std::move(*opened);
  }
  if (PQsendQuery(conn_.get(), sql_.c_str()) == 0) return Abandon(now);
  in_flight_ = true;
  failed_ = false;
  batch_deadline_ = deadline;
  ++batches_;
  return {batch_deadline_, PQsocket(conn_.get())};
}

Listener::Chore::Next Sweeper::Collect(SteadyTime now) {
  if (PQconsumeInput(conn_.get()) == 0) return Abandon(now);
  // The sweep is two statements (its DO block, then the count): their
  // results may come in different steps; all have come when PQgetResult
  // answers null.
  while (PQisBusy(conn_.get()) == 0) {
    PgResultHandle result(PQgetResult(conn_.get()));
    if (!result) return Collected(now);
    const ExecStatusType status = PQresultStatus(result.get());
    if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK) {
      last_ = std::move(result);
    } else {
      failed_ = true;
    }
  }
  if (now >= batch_deadline_) return Abandon(now);
  return {batch_deadline_, PQsocket(conn_.get())};
}

Listener::Chore::Next Sweeper::Collected(SteadyTime now) {
  in_flight_ = false;
  if (PQtransactionStatus(conn_.get()) != PQTRANS_IDLE) return Abandon(now);
  const Result<std::int64_t> swept = failed_ || !last_ ? Result<std::int64_t>(InternalError(what_))
                                                       : SweptRows(last_.get(), what_, where_);
  last_.reset();
  const bool more = swept.ok() && *swept == kSweepBatch;
  if (more && batches_ < kSweepBatchesPerRound) return SendBatch(now);
  // A sweep kept out (lock_timeout) or cut short is tried next round.
  return EndRound(now, !swept.ok() || more);
}

Listener::Chore::Next Sweeper::Abandon(SteadyTime now) {
  conn_.reset();  // cut off or timed out mid-sweep: the next round starts afresh
  last_.reset();
  in_flight_ = false;
  return EndRound(now, true);
}

Listener::Chore::Next Sweeper::EndRound(SteadyTime now, bool failed) {
  SteadyTime::rep released = round_released_;
  const bool done = round_all_aged_ && !failed && released_at_.compare_exchange_strong(released, 0);
  std::lock_guard lock(mu_);
  // A release since the swap keeps the rounds going: its NoteRelease saw
  // planned_ and told nobody.
  if (done && released_at_.load() == 0) {
    planned_ = false;
    return {};
  }
  next_round_ = now + kSweepEvery;
  return {next_round_, -1};
}

bool Sweeper::LastBatch(SteadyTime deadline) {
  if (!conn_) return false;
  if (in_flight_) {
    conn_.reset();  // the server abandons that batch; the backend sweeps instead
    last_.reset();
    in_flight_ = false;
    return false;
  }
  (void)BatchOn(conn_, deadline);
  return true;
}

Result<std::int64_t> Sweeper::BatchOn(PgConnHandle& conn, SteadyTime deadline) {
  auto swept = PQsendQuery(conn.get(), sql_.c_str()) == 0
                   ? Result<PgResultHandle>(FromPg(conn.get(), nullptr, what_, where_))
                   : Await(conn.get(), deadline, what_, where_);
  if (PQstatus(conn.get()) != CONNECTION_OK || PQtransactionStatus(conn.get()) != PQTRANS_IDLE) {
    conn.reset();  // cut off or timed out mid-sweep: start the next one afresh
  }
  if (!swept.ok()) return swept.status();
  return SweptRows(swept->get(), what_, where_);
}

}  // namespace dlock::postgres
